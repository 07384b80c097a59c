"""Progress on stderr is for a person watching; a reader of it that goes away (`keytrail import
backup.jsonl 2>&1 | head -1`) must not stop the work half done and exit 0 as if it were done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_cli import REPO, env_for, kt, kt_json


def kt_closed_stderr(home: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """A verb run with stderr a pipe whose reader has gone (every write to it fails, EPIPE)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", *args],
            env=env_for(home),
            cwd=str(REPO),
            stdout=subprocess.PIPE,
            stderr=write_end,
            timeout=60,
        )
    finally:
        os.close(write_end)


def test_import_finishes_when_no_one_reads_its_progress(tmp_path: Path) -> None:
    home = tmp_path / "store"
    for fact in ("Dana lives in Lyon", "Mia likes drawing"):
        kt(home, "remember", fact)
    export = tmp_path / "backup.jsonl"
    kt(home, "export", "-o", str(export))
    copy = tmp_path / "copy"
    proc = kt_closed_stderr(copy, "import", str(export))
    assert proc.returncode == 0
    assert kt_json(copy, "stats")["memories"] == 2  # the whole import, not none of it


def test_rebuild_finishes_when_no_one_reads_its_progress(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Dana lives in Lyon", "-n", "Dana")
    proc = kt_closed_stderr(home, "rebuild")
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith(f"rebuilt {home}: ")
    checked = kt_json(home, "verify")["caches_checked"]
    assert any("snapshot" in c for c in checked) and any("vectors" in c for c in checked)


def test_a_read_answers_when_no_one_reads_its_note(tmp_path: Path) -> None:
    """The note that a namespace was never told goes to stderr before the answer is printed:
    a gone stderr must not take the answer with it."""
    home = tmp_path / "store"
    kt(home, "remember", "Dana lives in Lyon", "-n", "Dana")
    proc = kt_closed_stderr(home, "list", "--namespace", "wrok")
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith("0 memories, newest first")
