"""A progress bar on stderr for long command-line work (verify, rebuild, import, export)."""

import sys
import time
from typing import ClassVar, TextIO


class ProgressBar:
    """`bar(done, total)` redraws `label [#####.....]  42%` at most ten times a second.

    On a terminal it redraws in place; otherwise (a pipe, a log file) it prints a line at each
    tenth of the way, so captured stderr stays short. A stream that can no longer be written
    (its reader gone: `keytrail import F 2>&1 | head -1`) ends the bar, never the work it
    reports on: a broken pipe raised from here stopped an import or a rebuild half done.
    """

    #: The terminal whose line a bar drawn in place left open (no newline after it yet).
    open_line: ClassVar[TextIO | None] = None

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self._last_draw = 0.0
        self._last_tenth = -1
        self._finished = False
        self._gone = False

    def _write(self, text: str) -> None:
        if self._gone:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except OSError:
            self._gone = True
            return
        if self.tty:
            ProgressBar.open_line = None if text.endswith("\n") else self.stream

    def __call__(self, done: int, total: int) -> None:
        fraction = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
        if self.tty:
            now = time.monotonic()
            if fraction < 1.0 and now - self._last_draw < 0.1:
                return
            self._last_draw = now
            filled = int(self.width * fraction)
            bar = "#" * filled + "." * (self.width - filled)
            # Rounded down, as below: 99.96% done is not shown as 100.0%.
            shown = int(round(fraction * 1000, 6)) / 10
            done_now = fraction >= 1.0
            self._write(f"\r{self.label} [{bar}] {shown:5.1f}%" + ("\n" if done_now else ""))
            self._finished = self._finished or done_now
            return
        tenth = int(fraction * 10)
        if tenth > self._last_tenth:
            self._last_tenth = tenth
            # Rounded down (after the float's own error: 0.29 * 100 is 28.999...): a step at
            # 99.6% said "100%", and finish() said it again.
            self._write(f"{self.label}: {int(round(fraction * 100, 6))}%\n")
            self._finished = fraction >= 1.0

    def finish(self) -> None:
        if not self._finished:
            self(1, 1)


def end_open_line(stream: TextIO) -> None:
    """End the line a bar drawn in place on `stream` left open, so what is said next there (the
    error that stopped the work) starts a line of its own rather than after `42.0%`."""
    if ProgressBar.open_line is stream:
        ProgressBar.open_line = None
        stream.write("\n")
