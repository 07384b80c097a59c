"""Speed of recall_memories at scale, against a bare numpy top-k over the same content matrix.

Builds (or reuses, under --work) a store of --memories memories with the hashing embedder at
384 dimensions (MiniLM's width, so the matrices have the real shape without an hour of model
time), three keys each from 20,000 labels, ~18 words of content. Then, in the same run, times
for the same queries:

- `numpy_topk`: `matrix @ q` over the content matrix and an argpartition top-10, the query
  vector given (the floor for any dense search);
- `recall_memories`: the whole call (embed the query, BM25, key path, dense path, fusion, one
  hop, and the links.adjusted append with fsync), and with learn=False (no append);
- `text_search`: the Tantivy BM25 search alone.

The first three are measured interleaved, query by query, so other load on the machine falls
on each alike.

    .venv/bin/python tools/bench_hybrid.py --memories 100000 --queries 300

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from keytrail.core import HashEmbedder, RememberItem, Settings, Store

WORDS = [f"w{i}" for i in range(5000)]
LABELS = [f"topic{i}" for i in range(20000)]
DIM = 384


def ms(samples: list[float], q: float = 0.5) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


def build(home: Path, count: int) -> Store:
    settings = Settings(home=home, embedder="hash")
    store = Store(settings, embedder=HashEmbedder(DIM))
    have = len(store.state.memories)
    rng = random.Random(7)
    started = time.perf_counter()
    while have < count:
        n = min(500, count - have)
        store.remember_batch(
            [
                RememberItem(
                    f"memory {have + i}: " + " ".join(rng.choice(WORDS) for _ in range(18)),
                    rng.sample(LABELS, 3),
                )
                for i in range(n)
            ]
        )
        have += n
        if have % 10000 == 0:
            print(f"{have} memories ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--work", type=Path, default=Path("/tmp/keytrail-bench-hybrid"))
    args = parser.parse_args()

    home = args.work / f"m{args.memories}"
    store = build(home, args.memories)
    rng = random.Random(11)
    queries = [" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(args.queries)]

    started = time.perf_counter()
    with store._mutex:
        store.text_index()
        matrix = store.memory_vectors().matrix
    first_use = time.perf_counter() - started

    vectors = store.embedder.embed(queries)

    def numpy_topk(q: np.ndarray) -> float:
        t = time.perf_counter()
        scores = matrix @ q
        top = np.argpartition(-scores, 10)[:10]
        top[np.argsort(-scores[top])]
        return time.perf_counter() - t

    def recall(query: str, learn: bool) -> float:
        t = time.perf_counter()
        store.recall_memories(query, top_k=10, learn=learn)
        return time.perf_counter() - t

    for query in queries[:5]:  # warm caches
        store.recall_memories(query, learn=False)
    # Interleaved, query by query, so load from other work on the machine falls on every
    # measure alike (the ratio is what matters; the absolute numbers move with the load).
    numpy_times: list[float] = []
    no_learn: list[float] = []
    learn: list[float] = []
    for query, q in zip(queries, vectors, strict=True):
        numpy_times.append(numpy_topk(q))
        no_learn.append(recall(query, False))
        learn.append(recall(query, True))
    per_query_ratio = sorted(r / n for r, n in zip(learn, numpy_times, strict=True))
    text_times = []
    for query in queries:
        t = time.perf_counter()
        store.text.search(query, 100)
        text_times.append(time.perf_counter() - t)
    mean_results = statistics.mean(
        len(store.recall_memories(q, learn=False).memories) for q in queries[:20]
    )
    store.close()

    numpy_p50 = ms(numpy_times)
    report = {
        "memories": args.memories,
        "dim": DIM,
        "queries": len(queries),
        "embedder": "hash (384 dimensions)",
        "first_use_seconds": round(first_use, 2),
        "numpy_topk_p50_ms": numpy_p50,
        "recall_memories_p50_ms": ms(learn),
        "recall_memories_p90_ms": ms(learn, 0.9),
        "recall_memories_no_learn_p50_ms": ms(no_learn),
        "text_search_p50_ms": ms(text_times),
        "ratio_p50": round(ms(learn) / numpy_p50, 2),
        "ratio_no_learn_p50": round(ms(no_learn) / numpy_p50, 2),
        "per_query_ratio_median": round(per_query_ratio[len(per_query_ratio) // 2], 2),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "mean_results": mean_results,
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
