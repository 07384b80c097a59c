"""The `keytrail` command: Ctrl-C while it is still loading ends it like Ctrl-C later does.

Loading the command line takes about a quarter of a second (numpy, tantivy, the MCP SDK), and
a Ctrl-C in that time raised KeyboardInterrupt out of the import, before `cli.main` could catch
it: a traceback instead of one line and status 130. Nothing has been opened or written then.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

#: What Ctrl-C exits with (128 + SIGINT): `shell.EXIT_INTERRUPTED`, which cannot be imported
#: here without loading all that this waits out.
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        start = "\n" if sys.stderr.isatty() else ""
        print(f"{start}keytrail: interrupted while starting: nothing was done", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)
