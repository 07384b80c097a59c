"""The local embedding model's ONNX threads: one (what every verb but the bulk ones runs)
against more, in wall and CPU time per embed call.

    KEYTRAIL_EMBED_MODEL_PATH=../shared/models/all-MiniLM-L6-v2-onnx \\
        .venv/bin/python tools/bench_embed_threads.py --threads 1 0 --rounds 2 > threads.json

Each round runs every thread count once, in a fresh process each (the runtime fixes its
threads when it loads the model); 0 is the runtime's own choice, a thread per core. Measures,
through keytrail's FastEmbedder:

- `query`: one short question, as `recall` and `recall_memories` embed it;
- `remember`: a memory's content and three new key labels, as one `remember` embeds them;
- `bulk`: 256 memory-length texts in batches of 64, as a rebuild or a re-embed does.

Times are p50 wall and CPU (user + system, every thread) per call, in ms; `bulk` also gives
texts per second. The machine's load average is printed beside each round: compare rounds
taken at about the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

QUERY = ["What did Dana say about the school her daughter starts in September?"]
REMEMBER = [
    "Dana's daughter Mia starts school in September 2025, a short walk from their flat",
    "school",
    "children",
    "neighbourhood",
]
BULK = [
    f"memory {i}: the user walked by the river with a friend from work, talked about the "
    f"garden they are planting this spring and a book on bees, number {i}"
    for i in range(256)
]


def timed(work: Callable[[], object], calls: int) -> dict[str, float]:
    work()
    walls = []
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(calls):
        start = time.perf_counter()
        work()
        walls.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "wall_ms": round(statistics.median(walls) * 1e3, 2),
        "cpu_ms": round(cpu / calls * 1e3, 2),
    }


def measure(threads: int, calls: int) -> dict[str, object]:
    """One process's measures, on `threads` ONNX threads."""
    from keytrail.core.embedders import DEFAULT_MODEL, FastEmbedder

    embedder = FastEmbedder(
        DEFAULT_MODEL, os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or None, threads=threads
    )
    out: dict[str, object] = {
        "query": timed(lambda: embedder.embed(QUERY), calls),
        "remember": timed(lambda: embedder.embed(REMEMBER), calls),
    }
    bulk = timed(lambda: embedder.embed(BULK), max(2, calls // 20))
    bulk["texts_per_s"] = round(len(BULK) / bulk["wall_ms"] * 1e3)
    out["bulk"] = bulk
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=100, help="calls per measure")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure, print
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one, args.calls)))
        return
    rounds = []
    for _ in range(args.rounds):
        row: dict[str, object] = {"load_average": round(os.getloadavg()[0], 2)}
        for threads in args.threads:
            child = subprocess.run(
                [sys.executable, __file__, "--one", str(threads), "--calls", str(args.calls)],
                capture_output=True,
                text=True,
                check=True,
            )
            row[f"threads_{threads}"] = json.loads(child.stdout)
        rounds.append(row)
    print(json.dumps({"cpus": os.cpu_count(), "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
