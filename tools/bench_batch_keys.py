"""A `remember_batch` whose items bring many new keys: how long it decides and writes.

    .venv/bin/python tools/bench_batch_keys.py --items 500 --keys 24 > bench-batch-keys.json

Each of `--items` memories brings `--keys` labels no other memory has (the hashing embedder,
an empty store), so the batch makes items x keys new concept keys. Every new concept label is
compared with the keys made by the items before it in the same command, to be merged as an
alias if close enough. Times the whole `remember_batch` and, separately, the time it holds the
store's write lock (deciding and appending) and the part of it spent comparing items with their
dedup and contradiction candidates (`compare_s`), best of `--runs`. numpy's products run on one
thread, as in the `keytrail` command. Prints one JSON object.

With `--content-chars N` each content is N characters: its own number, then the same long run
of numbered words for all, so every item is near-identical to the earlier ones (the hashing
embedder) and is compared with the newest 200 of them (`COMPARE_LIMIT`, as remembers one by
one) for dedup and contradictions (their numbers differ). One key, "shared", is on every item
to make them candidates of each other:

    .venv/bin/python tools/bench_batch_keys.py --items 500 --keys 24 --content-chars 20000

With `--stored-keys N` the store first holds about N concept keys (24 per memory, told in
batches of 50 items), with which every new label of the timed batch is compared: the
`peak_rss_mb` of the process then is mostly what that comparison holds.

    .venv/bin/python tools/bench_batch_keys.py --items 500 --keys 24 --stored-keys 50000
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, RememberItem, Settings, Store  # noqa: E402
from keytrail.core.decide import Batch  # noqa: E402
from keytrail.events import log as event_log  # noqa: E402


def content(i: int, chars: int) -> str:
    if not chars:
        return f"memory {i}: a fact of its own, number {i}"
    tail = " ".join(f"w{k}" for k in range(chars // 4))
    return f"memory {i}: a long fact, number {i}, {tail}"[:chars]


def fill(store: Store, keys: int) -> None:
    memories = keys // 24
    for start in range(0, memories, 50):
        store.remember_batch(
            [
                RememberItem(f"stored {i}", [f"stored label {i} {j}" for j in range(24)])
                for i in range(start, min(start + 50, memories))
            ]
        )
    store.key_vectors()  # the graph's rows, as a server has them before the batch


def run_once(
    home: Path, items: int, keys: int, chars: int, stored_keys: int
) -> tuple[float, float, float, int, int]:
    shared = ["shared"] if chars else []
    batch = [
        RememberItem(
            content(i, chars),
            shared + [f"label {i} {j} {'x' * (j % 5)}" for j in range(keys - len(shared))],
        )
        for i in range(items)
    ]
    held: list[float] = []
    real_lock = event_log.EventLog.lock

    @contextmanager
    def timed(self: event_log.EventLog, **kwargs: bool) -> Iterator[event_log.Appender]:
        with real_lock(self, **kwargs) as app:
            start = time.perf_counter()
            try:
                yield app
            finally:
                held.append(time.perf_counter() - start)

    compared: list[float] = []  # each item's dedup and contradiction comparison
    real_compare = Batch.compare

    def timed_compare(self: Batch, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return real_compare(self, *args)
        finally:
            compared.append(time.perf_counter() - start)

    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        fill(store, stored_keys)
        event_log.EventLog.lock = timed  # type: ignore[method-assign,assignment]
        Batch.compare = timed_compare  # type: ignore[method-assign]
        try:
            start = time.perf_counter()
            done = store.remember_batch(batch)
            total = time.perf_counter() - start
        finally:
            event_log.EventLog.lock = real_lock  # type: ignore[method-assign]
            Batch.compare = real_compare  # type: ignore[method-assign]
        made = len(store.state.keys)
    assert len(done) == items
    flagged = sum(len(r.possible_contradictions) for r in done)
    return total, max(held, default=0.0), sum(compared), made, flagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--keys", type=int, default=24, help="new labels per item")
    parser.add_argument(
        "--content-chars", type=int, default=0, help="long near-identical contents (0: short)"
    )
    parser.add_argument("--stored-keys", type=int, default=0, help="keys stored before")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    results = []
    for run in range(args.runs):
        home = Path(tempfile.mkdtemp(prefix="keytrail-batch-keys-")) / f"store{run}"
        results.append(run_once(home, args.items, args.keys, args.content_chars, args.stored_keys))
    total, held, compare_s, made, flagged = min(results)
    print(
        json.dumps(
            {
                "items": args.items,
                "new_labels_per_item": args.keys,
                "content_chars": args.content_chars or None,
                "stored_keys": args.stored_keys // 24 * 24,
                "keys_made": made,
                "contradictions_flagged": flagged,
                "remember_batch_s": round(total, 3),
                "write_lock_held_s": round(held, 3),
                "compare_s": round(compare_s, 3),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                "runs": args.runs,
            }
        )
    )


if __name__ == "__main__":
    main()
