"""The text index of a long-lived process against one rebuilt from the log: scores and costs.

    KEYTRAIL_EMBEDDER=hash .venv/bin/python tools/bench_text_stats.py --home COPY --rounds 50
    KEYTRAIL_EMBEDDER=hash .venv/bin/python tools/bench_text_stats.py --memories 20000

`--home` is a store to work in (it is written: give a copy); without it a fresh store of
`--memories` memories is made (hashing embedder). The store indexes its text, then does
`--rounds` times what a long-lived server does: remember one memory, then catch the text index
up (one commit each), timed; then reads it (an event the index holds nothing of) and catches
up again, timed (no commit). Then a copy of the store without its index is indexed afresh, and
the BM25 scores of a few queries are compared (`max_score_diff`, `order_differs`). Last, the
cost of forcing every segment to merge, which the Python binding can only do by writing the
index anew (`TextIndex.purge` of nothing): the price of the other fix. Prints one JSON object.
Run it from a checkout of an older commit for "before".
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from keytrail.core import HashEmbedder, RememberItem, Settings, Store

WORDS = [
    "harbour",
    "crane",
    "lifts",
    "containers",
    "night",
    "ship",
    "lighthouse",
    "keeper",
    "oranges",
    "marmalade",
    "river",
    "bridge",
    "garden",
    "winter",
    "market",
    "letter",
    "engine",
    "violin",
    "doctor",
    "island",
]
QUERIES = ["crane containers night", "lighthouse keeper letter", "winter market oranges"]


def say(i: int) -> str:
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 7, 11, 13)) + f" note {i}"


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path)
    parser.add_argument("--memories", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    home = args.home or work / "store"
    store = open_store(home)
    if args.home is None:
        for start in range(0, args.memories, 500):
            end = min(args.memories, start + 500)
            store.remember_batch(
                [RememberItem(say(i), [WORDS[i % len(WORDS)]]) for i in range(start, end)]
            )
    began = time.perf_counter()
    store.catch_up_text_index()
    first_index = time.perf_counter() - began
    catch_ups, unchanged = [], []
    for r in range(args.rounds):
        told = store.remember(say(10_000_000 + r), [WORDS[r % len(WORDS)]])
        began = time.perf_counter()
        store.catch_up_text_index()
        catch_ups.append(time.perf_counter() - began)
        store.read_memory(told.memory_id)  # an event the index holds nothing of
        began = time.perf_counter()
        store.catch_up_text_index()
        unchanged.append(time.perf_counter() - began)
    live = [store.text_index().search(q, 10) for q in QUERIES]
    copy = work / "rebuilt"
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("index"))
    fresh = open_store(copy)
    rebuilt = [fresh.text_index().search(q, 10) for q in QUERIES]
    fresh.close()
    diff = max(
        abs(a.score - b.score)
        for hits, again in zip(live, rebuilt, strict=True)
        for a, b in zip(hits, again, strict=True)
    )
    # Ties in any order: tantivy breaks them by where a document lies in its segments.
    order = any(
        sorted((-h.score, h.memory_id) for h in a) != sorted((-h.score, h.memory_id) for h in b)
        for a, b in zip(live, rebuilt, strict=True)
    )
    index = store.text_index()
    with index.exclusive():
        began = time.perf_counter()
        index.purge([])
        rewrite = time.perf_counter() - began
    print(
        json.dumps(
            {
                "memories": len(store.state.memories),
                "first_index_s": round(first_index, 3),
                "rounds": args.rounds,
                "catch_up_p50_ms": round(statistics.median(catch_ups) * 1000, 2),
                "catch_up_max_ms": round(max(catch_ups) * 1000, 2),
                "catch_up_nothing_to_add_p50_ms": round(statistics.median(unchanged) * 1000, 2),
                "max_score_diff": diff,
                "order_differs": order,
                "forced_merge_rewrite_s": round(rewrite, 3),
            }
        )
    )
    store.close()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
