"""`keytrail export -o FILE` over a backup already there: it is written whole and renamed over
FILE, and FILE stays what it was to its owner: its permissions, and a symlink still a symlink
to where the backups go."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from keytrail.server.cli import main


@pytest.fixture
def home(tmp_path: Path, hash_cli: None) -> Path:
    home = tmp_path / "store"
    assert main(["remember", "my bank PIN is 7391", "-k", "bank", "--home", str(home)]) == 0
    return home


def export(home: Path, output: Path) -> None:
    assert main(["export", "-o", str(output), "--home", str(home)]) == 0


def test_export_over_a_private_backup_keeps_it_private(home: Path, tmp_path: Path) -> None:
    backup = tmp_path / "backup.jsonl"
    backup.write_text("an older backup\n")
    backup.chmod(0o600)
    export(home, backup)
    assert "7391" in backup.read_text()
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # not the umask's 0644 for anyone


def test_export_through_a_symlink_writes_where_it_points(home: Path, tmp_path: Path) -> None:
    (tmp_path / "nas").mkdir()
    real = tmp_path / "nas" / "keytrail.jsonl"
    real.write_text("an older backup\n")
    latest = tmp_path / "latest.jsonl"
    latest.symlink_to(real)
    export(home, latest)
    assert latest.is_symlink() and os.readlink(latest) == str(real)
    assert "7391" in real.read_text()
    assert list((tmp_path / "nas").iterdir()) == [real]  # no partial file left beside it


def test_export_to_dev_stdout_a_pipe_writes_to_the_pipe(home: Path) -> None:
    """A device or a pipe is written directly, never resolved to where its link points."""
    from test_cli import kt

    proc = kt(home, "export", "-o", "/dev/stdout")  # stdout: a pipe
    assert "7391" in proc.stdout and proc.stderr.endswith("exported 2 events\n")
