"""read_key of a hub, the plain loop against kept columns, alternated on one existing store.

    .venv/bin/python tools/bench_read_key.py --dir DIR   # DIR as given to bench_core.py --hub

Opens DIR/store (built by `bench_core.py --hub --dir DIR`), then times `read_key` of the hub
key "user" in rounds that alternate the plain loop (every link scored in Python) and the kept
columns (keyrank.py), each round `--calls` calls at random offsets, with a `read_memory` through
the hub between calls so the columns have a change to catch up with. Also times `read_key` of
ordinary keys (below the columns' threshold: the plain loop either way). Prints JSON: p50 ms of
each, over all rounds, and the first (columns-building) call. Appends `memory.read` events to
the store. With `--query`, every read_key of the hub passes a query (one of a few, in turn),
so each shown memory's score is multiplied by its content similarity.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store, keyrank

#: What an agent might ask of its "user" hub (taken in turn with --query).
QUERIES = [
    "what does the user like to eat",
    "where did the user travel last year",
    "the user's favourite book",
    "meetings the user has next week",
]


def p50(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--query", action="store_true", help="read the hub with a query")
    args = parser.parse_args()
    rng = random.Random(11)
    settings = Settings(home=Path(args.dir) / "store", embedder="hash", snapshot_every=10**12)
    store = Store(settings, embedder=HashEmbedder())
    hub = store.state.key_for_label("user")
    assert hub is not None, "not a --hub store"
    ids = list(hub.links)
    small = [k.id for k in store.state.keys.values() if len(k.links) < 100]
    columns_min = keyrank.COLUMNS_MIN_LINKS
    queries = QUERIES if args.query else [None]
    t = time.perf_counter()
    store.read_key(hub.id, query=queries[0])
    first_s = time.perf_counter() - t
    # The answers must be the plain loop's, here at full size too (pages at two offsets), at
    # one instant: a score moves in its sixth digit within a second.
    same, clock = True, store.clock
    now = clock()
    store.clock = lambda: now
    for offset in (0, 37):
        by_columns = store.read_key(hub.id, offset=offset, query=queries[-1])
        keyrank.COLUMNS_MIN_LINKS = 10**12
        same &= by_columns == store.read_key(hub.id, offset=offset, query=queries[-1])
        keyrank.COLUMNS_MIN_LINKS = columns_min
    store.clock = clock
    timed: dict[str, list[float]] = {"plain": [], "columns": [], "ordinary": []}
    calls = 0
    for i in range(2 * args.rounds):
        mode = "plain" if i % 2 == 0 else "columns"
        keyrank.COLUMNS_MIN_LINKS = 10**12 if mode == "plain" else columns_min
        for _ in range(args.calls):
            store.read_memory(rng.choice(ids), via_key_id=hub.id)
            offset = rng.randrange(100)
            t = time.perf_counter()
            query = queries[calls % len(queries)]
            calls += 1
            page = store.read_key(hub.id, offset=offset, query=query)
            timed[mode].append(time.perf_counter() - t)
            assert page.memories
            kid = rng.choice(small)
            t = time.perf_counter()
            store.read_key(kid)
            timed["ordinary"].append(time.perf_counter() - t)
    keyrank.COLUMNS_MIN_LINKS = columns_min
    plain, columns = p50(timed["plain"]), p50(timed["columns"])
    print(
        json.dumps(
            {
                "hub_links": len(hub.links),
                "query": args.query,
                "same_answers_as_plain": same,
                "calls_each": args.rounds * args.calls,
                "hub_read_key_plain_p50_ms": plain,
                "hub_read_key_columns_p50_ms": columns,
                "plain_over_columns": round(plain / columns, 1),
                "first_read_key_building_columns_ms": round(first_s * 1000, 1),
                "ordinary_read_key_p50_ms": p50(timed["ordinary"]),
                "load_average": os.getloadavg(),
            },
            indent=2,
        )
    )
    store.close()


if __name__ == "__main__":
    main()
