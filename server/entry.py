"""The `keytrail` command: Ctrl-C while it is still loading ends it like Ctrl-C later does.

Loading the command line takes a quarter to half a second (numpy, msgspec, the dataclasses
keytrail makes at import; the MCP SDK only for `serve`), and a Ctrl-C in that time raised
KeyboardInterrupt out of the import, before `cli.main` could catch it: a traceback instead of
one line and status 130. Nothing has been opened or written then.

It is also the one place that runs before numpy loads, so it chooses numpy's BLAS threads,
and before `fcntl` is imported, so it can say in one line that a system without it (Windows)
is not supported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

#: What a command-line usage error exits with (argparse's, `shell.EXIT_USAGE`).
EXIT_UNSUPPORTED = 2

#: Said instead of a traceback from `import fcntl` where there is none (Windows).
UNSUPPORTED = (
    "keytrail: this system is not supported: keytrail needs POSIX file locks (flock) and "
    "positioned writes to share one store between processes; it runs on Linux and macOS "
    "(on Windows, run it inside WSL)"
)

#: What Ctrl-C exits with (128 + SIGINT): `shell.EXIT_INTERRUPTED`, which cannot be imported
#: here without loading all that this waits out.
EXIT_INTERRUPTED = 130

#: What numpy's BLAS (OpenBLAS in the wheels, MKL in some builds) reads its thread count from.
BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread() -> None:
    """Run numpy's matrix products on one thread, unless the environment says otherwise.

    By default BLAS splits a product over every core and its threads then spin for a while
    waiting for the next: a `remember` used twice its own time in CPU, and a bulk remember on
    a 16-core server 7 cores for nothing. keytrail's products are matrix-vector ones, bound
    by memory rather than arithmetic, and it shares its machine with the agent and the user:
    on a busy machine one thread was the faster too (BENCHMARKS, "BLAS threads"). A variable
    already set (these or OMP_NUM_THREADS) wins. Only before numpy loads does it take effect.
    """
    if "numpy" in sys.modules or any(
        name in os.environ for name in (*BLAS_THREADS, "OMP_NUM_THREADS")
    ):
        return
    for name in BLAS_THREADS:
        os.environ[name] = "1"


def main(argv: Sequence[str] | None = None) -> int:
    if os.name != "posix":
        print(UNSUPPORTED, file=sys.stderr)
        return EXIT_UNSUPPORTED
    one_blas_thread()
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        start = "\n" if sys.stderr.isatty() else ""
        print(f"{start}keytrail: interrupted while starting: nothing was done", file=sys.stderr)
        return EXIT_INTERRUPTED
    return run(argv)


if __name__ == "__main__":  # `python -m keytrail.server.entry`, as the console script runs it
    sys.exit(main())
