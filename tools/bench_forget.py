"""Forget and follow benchmark: the cost of forgetting for good, and how soon a follower sees
another process's append.

    .venv/bin/python tools/bench_forget.py --memories 100000 > bench-forget.json

Runs with the hashing embedder. Prints one JSON object:

- `forget_ms`: p50/max of `forget` (append the audit event, rewrite the segment holding the
  memory's line, blank the snapshot, erase the vector row), next to `remember_ms` on the same
  store; `segment_mb` is the size of the segments rewritten.
- `chain_forget_ms` (with `--chain N`): one `forget(all_versions=True)` of a fact corrected
  N - 1 times (N versions), and the fsyncs it made (`chain_forget_fsyncs`).
- `hub_forget_ms` (with `--referrers N`): one `forget` of a memory N others relate to, told
  in batches of 500 items of `--content-chars` characters (one long log line per batch).
  `--memories 0 --probes 0` leaves out the rest:

      .venv/bin/python tools/bench_forget.py --memories 0 --probes 0 --referrers 1500
- `batch_forget_ms` (with `--batch N`): p50/max of `forget` of one item of a `remember_batch`
  of N items of `--content-chars` characters (one long log line), `--sample` items of it:

      .venv/bin/python tools/bench_forget.py --memories 0 --probes 0 --batch 500 --sample 20

- `old_key_forget` (with `--store PATH --work DIR`): on a copy of a built store (copied to
  DIR afresh for each case; PATH is never written), the forget of an old memory (in the first
  segment) whose key leads to it alone, so the forget erases that key's label (`erasing`),
  and of one beside it whose keys all lead to other memories too (`plain`): wall time, the
  time the appenders' lock was held (`lock_ms`), the labels erased, and the first `recall`
  after it (`recall_after_ms`, next to the same recall before the forget, warm):

      PYTHONPATH=. .venv/bin/python tools/bench_forget.py --memories 0 --probes 0 \
          --store BUILT_100000 --work WORK   # a store bench_core.py filled; WORK: copies

- `purge_ms` (with `--purge-rows N --erased M`): p50/max of `VectorCache.purge` of one text's
  row (what each forget does to every model's cache, under the lock) in a cache of N rows of
  `--dim` dimensions, M of them erased by earlier forgets:

      .venv/bin/python tools/bench_forget.py --memories 0 --probes 0 --purge-rows 60000 \
          --erased 30000 --dim 384

- `follow_latency_ms`: from just before another process calls `remember` to the moment a
  `follow()` loop in this process has decoded the event (includes the writer's fsync), with the
  safety poll off, so only file-system notifications wake it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from keytrail.core import HashEmbedder, RememberItem, Settings, Store, forgetting
from keytrail.core.timetravel import view
from keytrail.events import EventLog, MemoryRemembered
from keytrail.projections import VectorCache, text_hash
from keytrail.server.care import follow

WRITER = r"""
import sys, time
from keytrail.core import HashEmbedder, Settings, Store
store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
print("ready", flush=True)
sys.stdin.readline()
for i in range(int(sys.argv[2])):
    time.sleep(0.05)
    store.remember(f"{time.time()!r} follow probe {i}", ["probe"])
"""


def ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": round(statistics.median(ordered) * 1000, 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 2),
        "max": round(ordered[-1] * 1000, 2),
    }


def bench_forget(home: Path, memories: int, sample: int, rng: random.Random) -> dict[str, Any]:
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    ids: list[str] = []
    for start in range(0, memories, 100):
        batch = store.remember_batch(
            [
                RememberItem(
                    f"memory {i}: " + " ".join(f"w{rng.randrange(5000)}" for _ in range(18)),
                    [f"k{rng.randrange(20000)}"],
                )
                for i in range(start, min(memories, start + 100))
            ]
        )
        ids += [r.memory_id for r in batch]
    store.close()
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    remember = []
    for i in range(sample):
        t = time.perf_counter()
        store.remember(f"timed remember {i} " + "x" * 100, ["timed"])
        remember.append(time.perf_counter() - t)
    forget = []
    for memory_id in rng.sample(ids, sample):
        t = time.perf_counter()
        store.forget(memory_id)
        forget.append(time.perf_counter() - t)
    sizes = [p.stat().st_size for p in (home / "log").glob("*.jsonl")]
    store.close()
    return {
        "memories": memories,
        "events": store.state.seq,
        "segments": len(sizes),
        "segment_mb": round(max(sizes) / 2**20, 1),
        "remember_ms": ms(remember),
        "forget_ms": ms(forget),
    }


def bench_chain(home: Path, versions: int) -> dict[str, Any]:
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    memory_id = store.remember("the fact, version 0", ["fact"]).memory_id
    for i in range(1, versions):
        memory_id = store.correct(memory_id, f"the fact, version {i}").memory_id
    fsyncs = 0
    real = os.fsync

    def counted(fd: int) -> None:
        nonlocal fsyncs
        fsyncs += 1
        real(fd)

    os.fsync = counted  # every durable write ends in os.fsync on Linux
    try:
        t = time.perf_counter()
        gone = store.forget(memory_id, all_versions=True)
        took = time.perf_counter() - t
    finally:
        os.fsync = real
    store.close()
    return {
        "chain_versions": len(gone.other_versions) + 1,
        "chain_forget_ms": round(took * 1000, 1),
        "chain_forget_fsyncs": fsyncs,
    }


def bench_hub(home: Path, referrers: int, chars: int) -> dict[str, Any]:
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    hub = store.remember("the fact all others relate to", ["hub"]).memory_id
    filler = " ".join(f"w{k}" for k in range(chars // 4))
    for start in range(0, referrers, 500):
        store.remember_batch(
            [
                RememberItem(f"memory {i}: {filler}"[:chars], [f"topic {i}"], related_to=[hub])
                for i in range(start, min(start + 500, referrers))
            ]
        )
    t = time.perf_counter()
    store.forget(hub)
    took = time.perf_counter() - t
    store.close()
    return {"referrers": referrers, "content_chars": chars, "hub_forget_ms": round(took * 1000, 1)}


def bench_batch(home: Path, items: int, chars: int, sample: int) -> dict[str, Any]:
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    filler = " ".join(f"w{k}" for k in range(chars // 4))
    batch = store.remember_batch(
        [RememberItem(f"memory {i}: {filler}"[:chars], [f"topic {i}"]) for i in range(items)]
    )
    took = []
    for made in batch[:: max(1, items // sample)][:sample]:
        t = time.perf_counter()
        store.forget(made.memory_id)
        took.append(time.perf_counter() - t)
    sizes = [p.stat().st_size for p in (home / "log").glob("*.jsonl")]
    store.close()
    return {
        "batch_items": items,
        "content_chars": chars,
        "segment_mb": round(max(sizes) / 2**20, 1),
        "batch_forget_ms": ms(took),
    }


def old_key_cases(home: Path) -> dict[str, str]:
    """The memories `bench_old_key` forgets: the oldest one with a key leading to it alone
    (`erasing`), and the first one created after it whose keys all lead to others too."""
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    keys, memories = store.state.keys, store.state.memories
    ordered = sorted(memories.values(), key=lambda m: m.created_seq)
    erasing = next(m for m in ordered if any(len(keys[k].links) == 1 for k in m.keys))
    plain = next(
        m
        for m in ordered
        if m.created_seq > erasing.created_seq and all(len(keys[k].links) > 1 for k in m.keys)
    )
    store.close()
    return {"erasing": erasing.id, "plain": plain.id}


def bench_old_key(source: Path, work: Path, case: str, memory_id: str) -> dict[str, Any]:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(source, work, symlinks=True)
    store = Store(Settings(home=work, embedder="hash"), embedder=HashEmbedder())
    node = store.state.memories[memory_id]
    query = store.state.keys[node.keys[0]].label
    past = store.state.seq // 2  # an as_of read: a past state, its label rows cut from ours
    store.recall(query)  # builds the label rows
    view(store, past).recall(query)
    t = time.perf_counter()
    store.recall(query)
    recall_before = time.perf_counter() - t
    t = time.perf_counter()
    view(store, past).recall(query)
    past_before = time.perf_counter() - t
    deciding: list[float] = []
    erasable = getattr(forgetting, "erasable_labels", None)
    if erasable is not None:  # which labels go (absent before labels were erased)

        def timed_erasable(*args: Any) -> Any:
            t = time.perf_counter()
            try:
                return erasable(*args)
            finally:
                deciding.append(time.perf_counter() - t)

        forgetting.erasable_labels = timed_erasable
    held: list[float] = []
    lock = store.log.lock

    @contextlib.contextmanager
    def timed(*, wait: bool = True) -> Iterator[Any]:
        start = time.perf_counter()
        try:
            with lock(wait=wait) as app:
                yield app
        finally:
            held.append(time.perf_counter() - start)

    store.log.lock = timed  # type: ignore[method-assign]
    t = time.perf_counter()
    gone = store.forget(memory_id)
    took = time.perf_counter() - t
    store.log.lock = lock  # type: ignore[method-assign]
    if erasable is not None:
        forgetting.erasable_labels = erasable
    t = time.perf_counter()
    store.recall(query)
    recall_after = time.perf_counter() - t
    after = []
    for _ in range(2):
        t = time.perf_counter()
        view(store, past).recall(query)
        after.append(time.perf_counter() - t)
    store.close()
    return {
        "case": case,
        "memory_id": memory_id,
        "created_seq": node.created_seq,
        "events": store.state.seq,
        "labels_erased": len(getattr(gone, "labels_erased", [])),
        "forget_ms": round(took * 1000, 1),
        "lock_ms": round(sum(held) * 1000, 1),
        "lock_holds": len(held),
        "recall_before_ms": round(recall_before * 1000, 1),
        "recall_after_ms": round(recall_after * 1000, 1),
        "erasable_labels_ms": round(sum(deciding) * 1000, 1) if deciding else None,
        "as_of_recall_before_ms": round(past_before * 1000, 1),
        "as_of_recall_after_ms": [round(a * 1000, 1) for a in after],
    }


def bench_follow(home: Path, probes: int) -> dict[str, Any]:
    Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()).close()
    latencies: list[float] = []
    stop = threading.Event()

    def show(events: Any) -> None:
        now = time.time()
        for event in events:
            if isinstance(event, MemoryRemembered):
                sent = float(event.memories[0].content.split()[0])
                latencies.append(now - sent)

    thread = threading.Thread(
        target=follow, args=(EventLog(home), show, stop), kwargs={"safety_poll_ms": 600_000}
    )
    thread.start()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(home), str(probes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert writer.stdout is not None and writer.stdin is not None
    assert writer.stdout.readline() == b"ready\n"
    writer.stdin.write(b"go\n")
    writer.stdin.flush()
    writer.wait(timeout=120)
    deadline = time.monotonic() + 10
    while len(latencies) < probes and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=10)
    return {"probes": probes, "seen": len(latencies), "follow_latency_ms": ms(latencies)}


def bench_purge(folder: Path, rows: int, erased: int, dim: int, sample: int) -> dict[str, Any]:
    """`VectorCache.purge` of one row at a time, in a cache of `rows` rows, `erased` of them
    erased first (in one purge, not timed)."""
    cache = VectorCache(folder, "bench", dim)
    digests = [text_hash(f"text {i}") for i in range(rows)]
    for start in range(0, rows, 10_000):
        part = digests[start : start + 10_000]
        vectors = np.random.default_rng(start).standard_normal((len(part), dim))
        cache.put_many(part, vectors.astype(np.float32))
    cache.flush()
    order = random.Random(7).sample(digests, erased + sample)
    cache.purge(set(order[:erased]))
    times = []
    for digest in order[erased:]:
        t = time.perf_counter()
        cache.purge({digest})
        times.append(time.perf_counter() - t)
    return {"purge_rows": rows, "erased": erased, "dim": dim, "purge_ms": ms(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--sample", type=int, default=20, help="timed forgets")
    parser.add_argument("--probes", type=int, default=100, help="appends the follower times")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--chain", type=int, default=0, help="also forget a fact of this many versions at once"
    )
    parser.add_argument(
        "--referrers", type=int, default=0, help="also forget a memory this many relate to"
    )
    parser.add_argument(
        "--batch", type=int, default=0, help="also forget one item of batches this large"
    )
    parser.add_argument(
        "--content-chars", type=int, default=20_000, help="of the referrers and batch items"
    )
    parser.add_argument("--store", type=Path, help="a built store: forget old memories of a copy")
    parser.add_argument("--work", type=Path, help="where --store is copied (removed first)")
    parser.add_argument("--purge-rows", type=int, default=0, help="also purge rows of a cache")
    parser.add_argument("--erased", type=int, default=0, help="of --purge-rows, erased first")
    parser.add_argument("--dim", type=int, default=384, help="of --purge-rows")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {}
        if args.memories:
            result.update(bench_forget(Path(tmp) / "forget", args.memories, args.sample, rng))
        if args.chain:
            result.update(bench_chain(Path(tmp) / "chain", args.chain))
        if args.referrers:
            result.update(bench_hub(Path(tmp) / "hub", args.referrers, args.content_chars))
        if args.batch:
            result.update(
                bench_batch(Path(tmp) / "batch", args.batch, args.content_chars, args.sample)
            )
        if args.store:
            if args.work is None or args.work.resolve() == args.store.resolve():
                parser.error("--store needs --work, a folder other than the store")
            shutil.rmtree(args.work, ignore_errors=True)
            shutil.copytree(args.store, args.work, symlinks=True)
            cases = old_key_cases(args.work)
            result["old_key_forget"] = [
                bench_old_key(args.store, args.work, case, memory_id)
                for case, memory_id in cases.items()
            ]
        if args.purge_rows:
            folder = Path(tmp) / "purge"
            result.update(bench_purge(folder, args.purge_rows, args.erased, args.dim, args.sample))
        if args.probes:
            result.update(bench_follow(Path(tmp) / "follow", args.probes))
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
