"""`keytrail serve --toolsets` with a value it cannot serve is refused naming the flag.

`--toolsets ""` was taken as no flag at all and served the default tool set without a word
(an empty `--namespace` or `--kg-namespace` is refused), and `--toolsets foo` was refused as
"toolsets: ...", naming no flag."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import REPO, env_for


@pytest.mark.parametrize("value", ["", " , ", "foo", "keygraph,foo"])
def test_serve_refuses_a_toolsets_flag_it_cannot_serve(tmp_path: Path, value: str) -> None:
    home = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "serve", "--toolsets", value],
        env=env_for(home),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("keytrail: error: --toolsets: ")
    assert proc.stderr.count("\n") == 1  # one line, no traceback
    assert not home.exists()
