"""Fold of a synthetic log in memory, best of N runs; prints one JSON object.

Measures the key-graph fold alone (no decode, no disk): 60% remembers (each linked to a hub,
one of 500 topics and one of 37 groups), 30% reads through the hub and 10% Hebbian link
adjustments, the two kinds the fold notes in its change journal. To compare two versions of
the fold, run it alternately with each tree first on the path:

    PYTHONPATH=/path/to/other/worktree .venv/bin/python tools/bench_fold.py --runs 5
    PYTHONPATH=. .venv/bin/python tools/bench_fold.py --runs 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from datetime import UTC, datetime, timedelta

from keytrail.events.types import (
    AnyEvent,
    FoldRules,
    KeyLink,
    LinkDelta,
    LinksAdjusted,
    MemoryRead,
    MemoryRemembered,
    NewMemory,
    StoreCreated,
)
from keytrail.projections import keygraph


def synthetic_events(count: int) -> list[AnyEvent]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    events: list[AnyEvent] = [StoreCreated(seq=1, at=t0, store_id="s", rules=FoldRules())]
    ids: list[str] = []
    for i in range(count - 1):
        seq = i + 2
        at = t0 + timedelta(seconds=seq)
        kind = i % 10
        if kind < 6 or len(ids) < 10:
            memory_id = f"m{i}"
            ids.append(memory_id)
            keys = [
                KeyLink(key_id="k_user", label="user"),
                KeyLink(key_id=f"k{i % 500}", label=f"topic {i % 500}"),
                KeyLink(key_id=f"g{i % 37}", label=f"group {i % 37}"),
            ]
            new = NewMemory(
                memory_id=memory_id,
                namespace="default",
                content=f"fact {i}",
                content_hash=hashlib.sha256(str(i).encode()).hexdigest(),
                keys=keys,
            )
            events.append(MemoryRemembered(seq=seq, at=at, memories=[new]))
        elif kind < 9:
            memory_id = ids[(i * 7919) % len(ids)]
            events.append(MemoryRead(seq=seq, at=at, memory_id=memory_id, via_key_id="k_user"))
        else:
            memory_id = ids[(i * 104729) % len(ids)]
            delta = LinkDelta(key_id="k_user", memory_id=memory_id, delta=-0.005)
            events.append(LinksAdjusted(seq=seq, at=at, adjustments=[delta]))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    events = synthetic_events(args.events)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        keygraph.fold(events)
        times.append(time.perf_counter() - start)
    print(
        json.dumps(
            {
                "fold_module": keygraph.__file__,
                "events": len(events),
                "best_s": round(min(times), 4),
                "runs_s": [round(t, 4) for t in times],
            }
        )
    )


if __name__ == "__main__":
    main()
