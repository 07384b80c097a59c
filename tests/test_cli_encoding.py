"""The `keytrail` command under a locale that is not UTF-8 (a legacy Linux locale, or Windows,
where output redirected to a file is in the ANSI code page): what it writes as JSON or an
export is UTF-8 all the same, what it reads as an export is read as UTF-8, and text it cannot
show in the terminal's encoding is escaped, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_cli import REPO, env_for, kt

FACT = "Zoë drinks café ☕ in Zürich"


def kt_latin1(
    home: Path, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """A verb run where the locale's encoding is Latin-1 (stdin, stdout and stderr)."""
    env = env_for(home)
    env["PYTHONIOENCODING"] = "latin-1"
    env.pop("PYTHONUTF8", None)
    return subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        input=stdin,
        timeout=60,
    )


def test_export_to_stdout_is_utf8_and_imports_whole(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", FACT, "-n", "Zoë")
    proc = kt_latin1(home, "export")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    events = [json.loads(line) for line in proc.stdout.decode("utf-8").splitlines()]
    told = [m["content"] for e in events for m in e.get("memories", [])]
    assert told == [FACT]  # UTF-8, whatever the locale
    # ... and `keytrail import` takes it back, from stdin as from a file.
    copy = tmp_path / "copy"
    back = kt_latin1(copy, "import", stdin=proc.stdout)
    assert back.returncode == 0, back.stderr.decode(errors="replace")
    listed = json.loads(kt(copy, "list", "--json").stdout)
    assert [m["preview"] for m in listed["memories"]] == [FACT]


def test_json_output_is_utf8(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", FACT)
    proc = kt_latin1(home, "list", "--json")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert json.loads(proc.stdout.decode("utf-8"))["memories"][0]["preview"] == FACT


def test_text_the_terminal_cannot_show_is_escaped_not_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "store"
    memory_id = json.loads(kt(home, "remember", FACT, "--json").stdout)["memory_id"]
    for verb in (["list"], ["read", memory_id], ["log"], ["keys"]):
        proc = kt_latin1(home, *verb)
        assert proc.returncode == 0, (verb, proc.stderr.decode(errors="replace"))
        assert b"Traceback" not in proc.stderr
        shown = proc.stdout.decode("latin-1")
        assert "Zoë" in shown  # what Latin-1 has is shown as it is
