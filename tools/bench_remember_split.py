"""Where a `remember`'s own time goes, on a copy of a store built by tools/bench_core.py.

    cp -a BUILT /tmp/copy    # it writes: a fresh copy per run
    .venv/bin/python tools/bench_remember_split.py /tmp/copy --phases > split.json

Opens the store with the hashing embedder, remembers `--warm` memories, then times `--count`
more (~18 words of content, three of 20,000 "topic N" keys and "user", as `bench_core.py
--hub` builds). Prints one JSON object: p50 of each remember's wall time, of that time less its
fsync (keytrail's own work) and of its thread's CPU time. `--phases` also times the calls a
remember makes (inclusive microseconds per remember: nested calls count in their callers too;
the wrappers add a little to every number), `--cprofile N` prints cProfile's top N by own time
to stderr instead.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store  # noqa: E402
from keytrail.core.decide import Batch, LinksByNamespace, SameTexts  # noqa: E402
from keytrail.events.log import Appender  # noqa: E402
from keytrail.projections.vectors import VectorCache  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]

PHASES: list[tuple[type, str]] = [
    (Store, "_check_item"),
    (Store, "wait_for_vectors"),
    (Store, "embed"),
    (Store, "_decide_remember"),
    (Batch, "match_labels"),
    (Batch, "resolve_keys"),
    (Batch, "compare"),
    (Batch, "_walk_order"),
    (Store, "embed_contents"),
    (VectorCache, "rows_if_all"),
    (HashEmbedder, "embed"),
    (LinksByNamespace, "of"),
    (SameTexts, "holders"),
    (Batch, "add_memory"),
    (Appender, "append"),
    (Store, "_fold"),
    (Store, "_persist_vectors"),
]


def timed(spent: dict[str, int], cls: type, name: str) -> None:
    """Wrap `cls.name` to add its inclusive time to `spent`."""
    fn: Callable[..., Any] = getattr(cls, name)
    label = f"{cls.__name__}.{name}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0) + time.perf_counter_ns() - start

    setattr(cls, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("home", help="a copy of a store directory (written to)")
    parser.add_argument("--count", type=int, default=300, help="timed remembers")
    parser.add_argument("--warm", type=int, default=400, help="remembers before timing")
    parser.add_argument("--keys", type=int, default=20_000, help='"topic N" labels drawn from')
    parser.add_argument("--phases", action="store_true", help="time the calls a remember makes")
    parser.add_argument("--cprofile", type=int, default=0, help="print cProfile's top N")
    args = parser.parse_args()
    rng = random.Random(11)
    labels = [f"topic {i}" for i in range(args.keys)]
    settings = Settings(home=args.home, embedder="hash", snapshot_every=10**12)
    store = Store(settings, embedder=HashEmbedder())

    def item(i: int) -> tuple[str, list[str]]:
        text = f"memory x{i}: " + " ".join(rng.choice(WORDS) for _ in range(18))
        return text, [*rng.sample(labels, 3), "user"]

    for i in range(args.warm):
        store.remember(*item(i))
    items = [item(args.warm + i) for i in range(args.count)]

    spent: dict[str, int] = {}
    real_fsync = os.fsync

    def counted_fsync(fd: Any) -> None:
        start = time.perf_counter_ns()
        try:
            real_fsync(fd)
        finally:
            spent["os.fsync"] = spent.get("os.fsync", 0) + time.perf_counter_ns() - start

    os.fsync = counted_fsync
    if args.phases:
        for cls, name in PHASES:
            timed(spent, cls, name)
    wall, own, cpu, fsync = [], [], [], []
    profile = cProfile.Profile() if args.cprofile else None
    if profile is not None:
        profile.enable()
    for text, keys in items:
        synced = spent.get("os.fsync", 0)
        cpu_start, start = time.thread_time_ns(), time.perf_counter_ns()
        store.remember(text, keys)
        took = time.perf_counter_ns() - start
        cpu.append(time.thread_time_ns() - cpu_start)
        fsync.append(spent["os.fsync"] - synced)
        wall.append(took)
        own.append(took - fsync[-1])
    if profile is not None:
        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(args.cprofile)
    os.fsync = real_fsync
    store.close()

    def ms(samples: list[int]) -> float:
        return round(statistics.median(samples) / 1e6, 3)

    result: dict[str, Any] = {
        "memories": len(store.state.memories),
        "remembers": args.count,
        "remember_p50_ms": ms(wall),
        "remember_without_fsync_p50_ms": ms(own),
        "remember_cpu_p50_ms": ms(cpu),
        "fsync_p50_ms": ms(fsync),
    }
    if args.phases:
        result["phases_us_per_remember"] = {
            name: round(total / args.count / 1e3, 1)
            for name, total in sorted(spent.items(), key=lambda kv: -kv[1])
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
