"""`keytrail import` with no file reads the export from stdin."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from test_cli import REPO, env_for


def test_import_with_no_file_at_a_terminal_says_what_it_wants(tmp_path: Path) -> None:
    """`keytrail import` with no file reads stdin; at a terminal it sat waiting, without a word,
    for an export to be typed. It says what to give instead, and makes no store."""
    home = tmp_path / "store"
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", "import"],
            env=env_for(home),
            cwd=str(REPO),
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=15,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert proc.returncode == 2
    assert proc.stderr.startswith("keytrail: error: input: ") and proc.stderr.count("\n") == 1
    assert not home.exists()
