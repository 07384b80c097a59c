"""Making a write durable before anyone is told it happened.

On Linux fsync(2) is enough. On macOS it only hands the data to the drive, whose cache can still
lose it at a power cut; `F_FULLFSYNC` asks the drive to write it down (Go's `File.Sync` and
Rust's `sync_all` do the same there). Each call then waits for the drive itself, so the log
(the one source of truth), what erases from it and atomic file replacement (forget's pending
record, snapshots) use these, while the vector cache, rebuilt from the log if lost, keeps plain
fsync.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path


def sync_file(fd: int) -> None:
    """Flush what was written to `fd` to stable storage."""
    full = getattr(fcntl, "F_FULLFSYNC", None)
    if full is not None:
        try:
            fcntl.fcntl(fd, full)
            return
        except OSError:
            pass  # a filesystem without it (some network mounts): fsync is the most there is
    os.fsync(fd)


def sync_path(path: Path | str, flags: int = 0) -> None:
    """Flush what was written to the file at `path`, through any descriptor, to stable storage."""
    fd = os.open(path, os.O_RDONLY | flags)
    try:
        sync_file(fd)
    finally:
        os.close(fd)


def sync_dir(path: Path | str) -> None:
    """Make the entries of directory `path` (a file created or renamed in it) durable."""
    sync_path(path, os.O_DIRECTORY)


def outdate(fd: int, replaced_mtime_ns: int) -> None:
    """Give the file at `fd`, written to replace one of the same size whose mtime was
    `replaced_mtime_ns`, an mtime in a later whole second (ahead of the clock if need be).

    `rsync -a` onto an earlier copy (and `cp -u`) skips a file whose size and mtime in whole
    seconds are what it copied: a redaction made in the second of that copy would never reach
    it, and the backup would keep the content erased here.
    """
    now = time.time_ns()
    later = max(now, (replaced_mtime_ns // 1_000_000_000 + 1) * 1_000_000_000)
    os.utime(fd, ns=(now, later))
