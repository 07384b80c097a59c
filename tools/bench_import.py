"""Import benchmark: `keytrail import` of a keytrail export into an empty store.

    .venv/bin/python tools/bench_import.py --memories 20000 > bench-import.json

Builds a store with the hashing embedder (one `remember` per memory, three of 2,000 topic keys
each), exports it, then times `keytrail import` of the export into a fresh
home, best of `--runs`. Prints one JSON object: `events`, `export_mb`, `import_seconds`,
`events_per_s`, and `fsyncs` (the calls of os.fsync one import made: the staged log is synced
whole before it goes live, not once per line).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.server.cli import main as cli


def build(home: Path, memories: int) -> None:
    """One `remember` per memory, so the export holds one line per memory."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(5000)]
    labels = [f"topic {i}" for i in range(2000)]
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        for i in range(memories):
            text = f"memory {i}: " + " ".join(rng.choice(words) for _ in range(18))
            store.remember(text, rng.sample(labels, 3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ["KEYTRAIL_EMBEDDER"] = "hash"
    root = Path(tempfile.mkdtemp(prefix="keytrail-import-"))
    build(root / "store", args.memories)
    export = root / "export.jsonl"
    assert cli(["export", "--home", str(root / "store"), "-o", str(export)]) == 0
    events = sum(1 for _ in export.open("rb"))
    real_fsync, calls = os.fsync, [0]

    def counted(fd: int) -> None:
        calls[0] += 1
        real_fsync(fd)

    times = []
    for run in range(args.runs):
        calls[0] = 0
        os.fsync = counted
        start = time.perf_counter()
        try:
            assert cli(["import", "--home", str(root / f"copy{run}"), str(export)]) == 0
        finally:
            os.fsync = real_fsync
        times.append(time.perf_counter() - start)
    best = min(times)
    print(
        json.dumps(
            {
                "events": events,
                "export_mb": round(export.stat().st_size / 2**20, 1),
                "import_seconds": round(best, 3),
                "events_per_s": round(events / best),
                "fsyncs": calls[0],
            }
        )
    )


if __name__ == "__main__":
    main()
