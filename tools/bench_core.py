"""Core benchmark: remember/recall/read latency, replay and snapshot-open speed, peak memory.

Runs with the hashing embedder (no model) so it measures keytrail, not the embedding model.

    .venv/bin/python tools/bench_core.py --memories 100000 > bench.json

Prints one JSON object. `remember` is compared with a bare write+fsync of the same line bytes
to a file on the same disk, measured in the same run: all lines at the end
(`bare_write_fsync_p50_ms`) and, because a shared disk's fsync latency swings, also one right
after each timed remember (`..._between`). `remember_without_fsync_p50_ms` is the time a
remember spends outside fsync: keytrail's own work.

With `--hub` every memory also carries the key "user", as an agent's memories often do, and
the reads through that hub (recall, read_key, related, recall_memories) are timed as well.

numpy's products run on one thread, as in the `keytrail` command, unless OPENBLAS_NUM_THREADS
(or MKL_NUM_THREADS, OMP_NUM_THREADS) says otherwise (`tools/bench_blas.py` compares).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store  # noqa: E402
from keytrail.events import EventLog  # noqa: E402
from keytrail.events.log import LogPosition  # noqa: E402
from keytrail.projections import fold  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def content(rng: random.Random, i: int) -> str:
    return f"memory {i}: " + " ".join(rng.choice(WORDS) for _ in range(18))


def bare_fsync(path: Path, lines: list[bytes]) -> float:
    """p50 ms of write+fsync of each line, appended to one file: the floor for a durable append."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    samples = []
    try:
        for line in lines:
            t = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            samples.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return p50(samples)


def bare_fsync_once(fd: int, line: bytes) -> float:
    t = time.perf_counter()
    os.write(fd, line)
    os.fsync(fd)
    return time.perf_counter() - t


def written_line(store: Store, before: LogPosition) -> bytes:
    """The bytes the last command appended (the log's cursor moved past them)."""
    after = store.log.position
    assert after.segment is not None
    start = before.offset if before.segment == after.segment else 0
    with open(store.home / "log" / after.segment, "rb") as f:
        f.seek(start)
        return f.read(after.offset - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=20_000, help="distinct key labels")
    parser.add_argument("--sample", type=int, default=500, help="timed operations per point")
    parser.add_argument(
        "--hub",
        action="store_true",
        help='every memory also carries the key "user", as an agent\'s memories often do; '
        "times reads through that hub too",
    )
    parser.add_argument(
        "--dir", default=None, help="where to build the store (default: a temp dir)"
    )
    args = parser.parse_args()
    rng = random.Random(7)
    root = Path(args.dir or tempfile.mkdtemp(prefix="keytrail-bench-"))
    home = root / "store"
    settings = Settings(home=home, embedder="hash", snapshot_every=10**12)
    store = Store(settings, embedder=HashEmbedder())
    labels = [f"topic {i}" for i in range(args.keys)]

    def keys() -> list[str]:
        return rng.sample(labels, 3) + (["user"] if args.hub else [])

    # Time spent in fsync inside each remember, and a bare write+fsync after each one: the disk's
    # fsync latency on a shared machine swings by 50x within minutes, so only pairs taken
    # together compare.
    real_fsync = os.fsync
    fsync_seconds = [0.0]

    def counted_fsync(fd: int) -> None:
        t = time.perf_counter()
        try:
            real_fsync(fd)
        finally:
            fsync_seconds[0] += time.perf_counter() - t

    bare_fd = os.open(root / "bare-between.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    growth: list[dict[str, float]] = []
    checkpoints = sorted({c for c in (1_000, 10_000, args.memories) if c <= args.memories})
    fill_start = time.perf_counter()
    done = 0
    for checkpoint in checkpoints:
        untimed = checkpoint - done - args.sample
        for i in range(max(0, untimed)):
            store.remember(content(rng, done + i), keys())
        done += max(0, untimed)
        samples, own, bare_between = [], [], []
        os.fsync = counted_fsync
        try:
            for _ in range(checkpoint - done):
                text, ks = content(rng, done), keys()
                before = store.log.position
                fsync_seconds[0] = 0.0
                t = time.perf_counter()
                store.remember(text, ks)
                samples.append(time.perf_counter() - t)
                own.append(samples[-1] - fsync_seconds[0])
                # Right after it, on the same disk: a bare write+fsync of the line it wrote.
                bare_between.append(bare_fsync_once(bare_fd, written_line(store, before)))
                done += 1
        finally:
            os.fsync = real_fsync
        growth.append(
            {
                "memories": checkpoint,
                "remember_p50_ms": p50(samples),
                "remember_without_fsync_p50_ms": p50(own),
                "bare_write_fsync_between_p50_ms": p50(bare_between),
                "remember_over_bare_between": round(p50(samples) / p50(bare_between), 2),
            }
        )
        print(f"# {checkpoint} memories, remember p50 {p50(samples):.3f} ms", file=sys.stderr)
    fill_s = time.perf_counter() - fill_start
    os.close(bare_fd)

    # The same bytes, appended and fsynced with nothing else around them.
    segment = sorted((home / "log").glob("*.jsonl"))[-1]
    last_lines = segment.read_bytes().splitlines(keepends=True)[-args.sample :]
    bare = bare_fsync(root / "bare.jsonl", last_lines)

    ids = list(store.state.memories)
    key_ids = list(store.state.keys)
    recall_s, read_key_s, read_memory_s = [], [], []
    for _ in range(args.sample):
        q = " ".join(rng.choice(WORDS) for _ in range(4)) + " " + rng.choice(labels)
        t = time.perf_counter()
        store.recall(q)
        recall_s.append(time.perf_counter() - t)
        kid = rng.choice(key_ids)
        t = time.perf_counter()
        page = store.read_key(kid)
        read_key_s.append(time.perf_counter() - t)
        mid = page.memories[0].memory_id if page.memories else rng.choice(ids)
        t = time.perf_counter()
        store.read_memory(mid, kid if page.memories else None)
        read_memory_s.append(time.perf_counter() - t)

    hub_reads: dict[str, float] = {}
    if args.hub:
        hub = store.state.key_for_label("user")
        assert hub is not None
        timed: dict[str, list[float]] = {
            "recall": [],
            "read_key": [],
            "related": [],
            "recall_memories": [],
        }
        for _ in range(min(args.sample, 100)):
            t = time.perf_counter()
            store.recall_memories(
                " ".join(rng.choice(WORDS) for _ in range(3)) + " " + rng.choice(labels),
                learn=False,
            )
            timed["recall_memories"].append(time.perf_counter() - t)
            t = time.perf_counter()
            store.recall("user " + rng.choice(WORDS))
            timed["recall"].append(time.perf_counter() - t)
            t = time.perf_counter()
            store.read_key(hub.id, offset=rng.randrange(100))
            timed["read_key"].append(time.perf_counter() - t)
            t = time.perf_counter()
            store.related(rng.choice(ids))
            timed["related"].append(time.perf_counter() - t)
        hub_reads = {f"hub_{name}_p50_ms": round(p50(s), 3) for name, s in timed.items()}

    # What one process serving the store (filled, then queried) holds at most. The phases
    # below each hold a second state beside it (a replay, reopened stores), so they are
    # measured apart and their states let go in turn.
    serving_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    events = store.state.seq
    t = time.perf_counter()
    replayed = fold(EventLog(home).iter_new())
    replay_s = time.perf_counter() - t
    assert replayed.seq == events
    del replayed
    gc.collect()  # let go now: a later phase's peak must not hold this one's garbage

    store.close()  # writes the snapshot
    del store
    gc.collect()
    t = time.perf_counter()
    reopened = Store(settings, embedder=HashEmbedder())
    open_s = time.perf_counter() - t
    assert reopened.state.seq == events
    # The open leaves nodes and the vector cache for first use: the first query pays for them.
    q = " ".join(rng.choice(WORDS) for _ in range(4)) + " " + rng.choice(labels)
    t = time.perf_counter()
    reopened.recall(q)
    first_recall_s = time.perf_counter() - t
    reopened.close()
    del reopened
    gc.collect()
    # What a server does after opening (`keytrail serve`): build those in the background.
    warmed = Store(settings, embedder=HashEmbedder())
    t = time.perf_counter()
    warmed.warm_up().join()  # as a server without direct recall (the default) does
    warm_up_s = time.perf_counter() - t
    q = " ".join(rng.choice(WORDS) for _ in range(4)) + " " + rng.choice(labels)
    t = time.perf_counter()
    warmed.recall(q)
    recall_after_warm_up_s = time.perf_counter() - t

    last = growth[-1]
    log_bytes = sum(p.stat().st_size for p in (home / "log").glob("*.jsonl"))
    print(
        json.dumps(
            {
                "memories": args.memories,
                "events": events,
                "log_bytes": log_bytes,
                "fill_seconds": round(fill_s, 2),
                "remember_p50_ms_by_size": growth,
                "bare_write_fsync_p50_ms": round(bare, 4),
                "remember_over_bare": round(growth[-1]["remember_p50_ms"] / bare, 2),
                "remember_without_fsync_p50_ms": round(last["remember_without_fsync_p50_ms"], 3),
                "remember_over_bare_between": last["remember_over_bare_between"],
                "recall_p50_ms": round(p50(recall_s), 3),
                "read_key_p50_ms": round(p50(read_key_s), 3),
                "read_memory_p50_ms": round(p50(read_memory_s), 3),
                **hub_reads,
                "replay_seconds": round(replay_s, 3),
                "replay_events_per_s": round(events / replay_s),
                "open_from_snapshot_seconds": round(open_s, 3),
                "open_over_replay": round(open_s / replay_s, 3),
                "first_recall_after_open_seconds": round(first_recall_s, 3),
                "warm_up_seconds": round(warm_up_s, 3),
                "first_recall_after_warm_up_ms": round(recall_after_warm_up_s * 1000, 3),
                "peak_rss_mib_serving": round(serving_rss_mib, 1),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
