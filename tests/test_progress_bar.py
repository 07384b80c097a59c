"""The command line's progress bar (server/progress.py): it says 100% once, when the work is
done, never for work still going on."""

from __future__ import annotations

import io

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
