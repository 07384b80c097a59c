"""The command line's progress bar (server/progress.py): it says 100% once, when the work is
done, never for work still going on."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from keytrail.server.cli import main
from keytrail.server.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_says_100_percent_once_and_only_when_done() -> None:
    out = io.StringIO()
    bar = ProgressBar("export", out)
    for done in (0, 250, 500, 750, 996):  # the last call a little short of the end
        bar(done, 1000)
    assert "100%" not in out.getvalue()  # 99.6% is not done
    bar.finish()
    lines = out.getvalue().splitlines()
    assert lines[-1] == "export: 100%"
    assert sum(line.endswith(" 100%") for line in lines) == 1
    assert lines[-2] == "export: 99%"


def test_a_terminal_shows_100_percent_only_when_done() -> None:
    out = Terminal()
    bar = ProgressBar("replay", out)
    bar(9996, 10000)
    assert "100.0%" not in out.getvalue()
    bar.finish()
    assert out.getvalue().endswith("100.0%\n")


def test_an_error_after_a_bar_drawn_in_place_starts_a_line_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a terminal a bar is redrawn in place, its line left open: an error that stops the
    work (`keytrail export` of a damaged log) was printed on the bar's line,
    `export [#####.....]  19.8%keytrail: error: corrupt event log: ...`."""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    ProgressBar("export")(198, 1000)
    with pytest.raises(SystemExit):
        main(["stats", "--home", str(tmp_path / "missing")])
    bar, error = terminal.getvalue().split("\n")[:2]
    assert bar.endswith("19.8%") and error.startswith("keytrail: error: no keytrail store")
