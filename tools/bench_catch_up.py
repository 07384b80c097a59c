"""A long-lived store after another process wrote a backlog: how its next call catches up.

    KEYTRAIL_EMBED_MODEL_PATH=... .venv/bin/python tools/bench_catch_up.py --memories 2000

Store B (the real model, all-MiniLM-L6-v2) remembers one memory and recalls, so its projection
is current; with `--server` it is brought up to the log the way `keytrail serve` does at its
start (`build_while_serving`). Then another store (another process's, with the hashing
embedder, whose vectors B's cache does not have) remembers `--memories` memories of two keys
each. B then does what the MCP server does for the next `--call` (remember or recall): wait
for the vectors it needs (`wait_for_vectors`, hearing progress), then the call. Prints one JSON
object: the seconds the wait and the call took, the progress reports heard, and every hold of
the store's log lock in B's process (the longest is what other processes' writes waited).
Run it from a checkout of an older commit for "before" (its wait hears nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core.embedders import DEFAULT_MODEL, FastEmbedder
from keytrail.events import log as log_module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--call", choices=("remember", "recall"), default="remember")
    parser.add_argument("--server", action="store_true", help="as `keytrail serve` started")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp()) / "store"
    model = FastEmbedder(DEFAULT_MODEL, os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or None)
    b = Store(Settings(home=home, embedder="fastembed"), embedder=model)
    b.remember("Dana keeps bees on the roof", ["bees", "roof"])
    b.recall("bees")
    if args.server:
        from keytrail.server.embed_cli import build_while_serving

        build_while_serving(b)
        b.wait_for_vectors()
    other = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    for start in range(0, args.memories, 500):
        other.remember_batch(
            [
                RememberItem(
                    f"imported fact {i}: the project codenamed item{i} ships in week {i % 52}",
                    [f"item{i}", f"week {i % 52}"],
                )
                for i in range(start, min(args.memories, start + 500))
            ]
        )
    other.close()

    holds: list[float] = []
    plain_lock = log_module.EventLog.lock

    @contextlib.contextmanager
    def timed_lock(self: log_module.EventLog, **kwargs: Any) -> Iterator[Any]:
        with plain_lock(self, **kwargs) as app:
            started = time.perf_counter()
            try:
                yield app
            finally:
                holds.append(time.perf_counter() - started)

    log_module.EventLog.lock = timed_lock  # type: ignore[method-assign]
    heard: list[tuple[int, int]] = []
    started = time.perf_counter()
    b.wait_for_vectors("all" if args.call == "remember" else "keys", lambda *p: heard.append(p))
    waited = time.perf_counter() - started
    started = time.perf_counter()
    if args.call == "remember":
        b.remember("Dana read about item7 by the hives", ["item7", "hives"])
    else:
        b.recall("item7")
    called = time.perf_counter() - started
    print(
        json.dumps(
            {
                "memories": args.memories,
                "call": args.call,
                "server": args.server,
                "wait_s": round(waited, 2),
                "call_s": round(called, 2),
                "progress_reports": len(heard),
                "progress_first_last": [heard[0], heard[-1]] if heard else [],
                "lock_holds": len(holds),
                "longest_lock_hold_s": round(max(holds, default=0.0), 3),
            }
        )
    )
    # Not closed: a server's build may still be embedding contents (a recall waits only for
    # the labels), and a process exiting under a model call in another thread may abort.
    os._exit(0)


if __name__ == "__main__":
    main()
