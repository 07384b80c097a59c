"""Temp files a writer killed mid-write leaves in a store, found and removed.

A file the store replaces whole is written beside its name first and renamed over it once
whole: a forget's redacted segment (`log/.<segment>.redact.tmp`) and its scrubbed torn tails
(`log/torn/.<name>.<pid>.tmp`), the forget's pending record (`.forget.pending.<pid>.tmp`),
snapshots (`cache/snapshot/.<name>.<pid>.tmp`) and a vector cache's coverage
(`cache/vectors/<fingerprint>/manifest.tmp`). A process killed between the two leaves the temp
file, which nothing reads and which would stay for good, copied by every `cp -a` backup.

Each of these is written only by a process holding the appenders' lock (`EventLog.lock`), so
one found while holding that lock is nobody's write under way: a store's open removes them
then, and so does a store left open each time it saves a snapshot (rare, and under that lock).
Two folders are written under locks of their own, so one is a leftover only while its own lock
is free (a killed process's `flock` is released with it): `import.partial/`, where
`keytrail import` writes a log before it takes the appenders' lock (it holds a `flock` on the
folder itself from making it to removing it, `import_staging`), and the text index's
`index/text.new/` and `text.old/` (a rebuild writes them holding `index/text.lock`); a whole
`text.new/` with no `text/` beside it, a swap killed between its renames, is renamed into place
instead (`text.finish_swap`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from keytrail.events.redact import TEMP_SUFFIX as REDACT_SUFFIX
from keytrail.projections import snapshot as snapshots
from keytrail.projections.text import finish_swap, swap_to_finish
from keytrail.projections.vectors import MANIFEST_TEMP, VECTORS_DIR

from .forgetting import PENDING_FILE

#: (folder under the store, glob) of each kind; `write_atomic` names `.<name>.<pid>.tmp`
_KINDS = (
    ("log", f".*{REDACT_SUFFIX}"),
    ("log/torn", f".*.*{snapshots.TEMP_SUFFIX}"),
    (".", f".{PENDING_FILE}.*{snapshots.TEMP_SUFFIX}"),
    ("cache/snapshot", f".*.*{snapshots.TEMP_SUFFIX}"),
    (f"{VECTORS_DIR}/*", MANIFEST_TEMP),
)
#: Where `keytrail import` writes a log before it is moved into the store (server/care.py).
IMPORT_STAGING = "import.partial"
#: Where the text index lives, under the store.
TEXT_INDEX = "index/text"
#: (the lock its writer holds, the folders it writes) of each folder kind, under the store
_LOCKED = (
    (IMPORT_STAGING, (IMPORT_STAGING,)),
    (f"{TEXT_INDEX}.lock", (f"{TEXT_INDEX}.new", f"{TEXT_INDEX}.old")),
)


def leftovers(home: Path) -> list[Path]:
    """The store's temp files and folders under `home`, by path. Without the appenders' lock
    held, a file may be a write under way (a folder is named only while its lock is free)."""
    found = (p for folder, glob in _KINDS for p in home.glob(str(Path(folder) / glob)))
    return sorted([*(p for p in found if p.is_file()), *_unlocked(home, remove=False)])


def remove_leftovers(home: Path) -> list[Path]:
    """Remove the store's temp files and folders. Hold the appenders' lock. Returns those
    removed."""
    removed = []
    for path in leftovers(home):
        if path.is_dir():
            continue  # removed below, holding its own lock
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
    return sorted([*removed, *_unlocked(home, remove=True)])


def _unlocked(home: Path, remove: bool) -> list[Path]:
    """The folders of `_LOCKED` whose lock no process holds; with `remove`, removed while
    holding it, so no writer starts on them meanwhile."""
    found = []
    for lock, folders in _LOCKED:
        there = [home / f for f in folders if (home / f).is_dir()]
        if not there:
            continue
        try:
            fd = os.open(home / lock, os.O_RDONLY)
        except FileNotFoundError:
            continue  # no lock, no writer ever: its writers make it before they write
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if remove else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # a live process is writing them
        try:
            if remove and lock == f"{TEXT_INDEX}.lock" and finish_swap(home / TEXT_INDEX):
                # A swap killed between its renames left a whole index, now in place rather
                # than built again from scratch: not a leftover.
                there = [f for f in there if f.exists()]
            for folder in there:
                if remove:
                    shutil.rmtree(folder, ignore_errors=True)
                if not remove or not folder.exists():
                    found.append(folder)
        finally:
            os.close(fd)  # closing releases the lock
    return found


def described(home: Path, left: str) -> str:
    """What `left` (a leftover under `home`, as `verify` names it: a folder ends in /) is and
    what the next open does with it."""
    if left == f"{TEXT_INDEX}.new/" and swap_to_finish(home / TEXT_INDEX):
        return (
            "text index a rebuild finished, not yet in place (the next open renames it to "
            f"{TEXT_INDEX})"
        )
    kind = "temp folder" if left.endswith("/") else "temp file"
    return f"{kind} left by a write cut short (the next open removes it)"


@contextmanager
def import_staging(home: Path, waiting: Callable[[], None] | None = None) -> Iterator[Path]:
    """`home/import.partial/`, empty, for this process alone until it is removed on the way
    out: it holds a `flock` on the folder meanwhile, so a store's open (`remove_leftovers`)
    removes it only once its writer is gone, however that went. Another import holding it is
    waited for (`waiting` is told first)."""
    staging = home / IMPORT_STAGING
    while True:
        staging.mkdir(exist_ok=True)
        fd = os.open(staging, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if waiting is not None:
                    waiting()
                fcntl.flock(fd, fcntl.LOCK_EX)
            # Removed as a leftover between making and locking it: make it again.
            now = os.stat(staging, follow_symlinks=False)
            held = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                break
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        for leftover in staging.iterdir():  # what a killed import left
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(fd)
