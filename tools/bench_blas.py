"""numpy's BLAS on one thread (what the `keytrail` command runs) against its default (a thread
per core): wall and CPU time of keytrail's matrix products and of the commands that make them.

    .venv/bin/python tools/bench_blas.py --memories 5000 --rounds 2 > blas.json

Each round runs every measure twice, in a fresh process each: `OPENBLAS_NUM_THREADS=1` and
nothing set (numpy's default). Products are the shapes keytrail multiplies: a remember's
dedup candidates (50 rows) against its content, the alias check of three new labels against
every key label (3,000 / 20,000 / 100,000 labels), and a recall's query against every label.
The commands run on copies of one store (hashing embedder, three keys each from a pool of a
fifth as many labels): `recall`, and `remember` with known labels or with three new ones
(the alias check). Times are p50 wall and CPU (user + system, all threads) per call, in µs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DIM = 384
WORDS = [f"w{i}" for i in range(5000)]


def timed(work: Callable[[int], object], calls: int) -> dict[str, float]:
    work(0)
    walls = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(calls):
        start = time.perf_counter()
        work(i)
        walls.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "wall_us": round(statistics.median(walls) * 1e6, 1),
        "cpu_us": round(cpu / calls * 1e6, 1),
    }


def measure(store_dir: Path, memories: int, calls: int) -> dict[str, dict[str, float]]:
    """One process's measures, with whatever BLAS threads its environment gives it."""
    import numpy as np

    from keytrail.core import HashEmbedder, Settings, Store

    rng = np.random.default_rng(0)
    out: dict[str, dict[str, float]] = {}
    for name, rows, cols in (
        ("dedup 50 x 384 @ 1", 50, 1),
        ("alias check 3,000 x 384 @ 3", 3_000, 3),
        ("alias check 20,000 x 384 @ 3", 20_000, 3),
        ("alias check 100,000 x 384 @ 3", 100_000, 3),
        ("recall 100,000 x 384 @ 1", 100_000, 1),
    ):
        matrix = rng.standard_normal((rows, DIM), dtype=np.float32)
        other = rng.standard_normal((DIM, cols) if cols > 1 else DIM, dtype=np.float32)
        out[name] = timed(lambda _, m=matrix, o=other: m @ o, max(20, 2_000_000 // rows))

    home = Path(tempfile.mkdtemp()) / "store"
    shutil.copytree(store_dir, home)
    try:
        store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
        store.warm_up()
        labels = [f"label {i}" for i in range(memories // 5)]
        pick = random.Random(7)

        def text() -> str:
            return "memory " + " ".join(pick.choice(WORDS) for _ in range(18))

        out["recall"] = timed(lambda i: store.recall(f"{labels[i % len(labels)]} w{i}"), calls)
        out["remember, known labels"] = timed(
            lambda i: store.remember(text(), keys=pick.sample(labels, 3)), calls
        )
        out["remember, three new labels"] = timed(
            lambda i: store.remember(text(), keys=[f"new {i} {j}" for j in range(3)]), calls
        )
        store.close()
    finally:
        shutil.rmtree(home.parent)
    return out


def build(store_dir: Path, memories: int) -> None:
    from keytrail.core import HashEmbedder, Settings, Store

    store = Store(Settings(home=store_dir, embedder="hash"), embedder=HashEmbedder())
    pick = random.Random(1)
    labels = [f"label {i}" for i in range(memories // 5)]
    for i in range(memories):
        text = f"memory {i}: " + " ".join(pick.choice(WORDS) for _ in range(18))
        store.remember(text, keys=pick.sample(labels, 3))
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a child: the store to measure
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure), args.memories, args.calls)))
        return

    work = Path(tempfile.mkdtemp(prefix="keytrail-blas-"))
    try:
        store_dir = work / "store"
        build(store_dir, args.memories)
        base = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
        rounds = []
        for _ in range(args.rounds):
            row = {}
            for mode, env in (("one thread", {"OPENBLAS_NUM_THREADS": "1"}), ("default", {})):
                child = [sys.executable, __file__, "--measure", str(store_dir)]
                child += ["--memories", str(args.memories), "--calls", str(args.calls)]
                done = subprocess.run(
                    child, env={**base, **env}, capture_output=True, text=True, check=True
                )
                row[mode] = json.loads(done.stdout)
            rounds.append(row)
        print(
            json.dumps(
                {
                    "memories": args.memories,
                    "cpus": os.cpu_count(),
                    "load_average": [round(x, 2) for x in os.getloadavg()],
                    "rounds": rounds,
                },
                indent=1,
            )
        )
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
