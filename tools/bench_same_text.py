"""What finding the same text told again (dedup's `SameTexts`) costs a remember.

On a copy of a built store (`cp -a` into a temp dir, e.g. `bench_calls.py`'s `built-100000`),
one process: `first_ms`, the first remember after the open (it builds the index of texts);
then `--calls` remembers (three of the store's keys and the hub "user" each, new text), p50.
Where the code has the same-text lookup, the calls alternate with and without it
(`with_p50_ms`, `without_p50_ms`: one process, one store, so the machine's swings hit both),
and `index_build_ms` / `index_mib` time and size a fresh build of the index. Run it with
PYTHONPATH set to each version to compare them (`p50_ms` is over all calls):

    PYTHONPATH=. .venv/bin/python tools/bench_same_text.py --store BUILT_100000

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store, decide  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, required=True, help="a built store (copied)")
    parser.add_argument("--calls", type=int, default=600)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench-same-text-") as tmp:
        home = Path(tmp) / "store"
        shutil.copytree(args.store, home)
        store = Store(
            Settings(home=home, embedder="hash", snapshot_every=10**12), embedder=HashEmbedder()
        )
        store.refresh()
        labels = [k.label for k in store.state.keys.values()]
        out: dict[str, Any] = {"memories": len(store.state.memories), "calls": args.calls}
        start = time.perf_counter()
        store.remember("first " + " ".join(rng.choice(WORDS) for _ in range(18)), ["user"])
        out["first_ms"] = round((time.perf_counter() - start) * 1000, 1)
        lookup = getattr(decide.Batch, "_same_text", None)

        def off(self: Any, namespace: str, content: str) -> Iterator[str]:
            return iter(())

        times: tuple[list[float], list[float]] = ([], [])
        for i in range(args.calls):
            text = f"told {i}: " + " ".join(rng.choice(WORDS) for _ in range(18))
            keys = [*rng.sample(labels, 3), "user"]
            if lookup is not None:
                decide.Batch._same_text = lookup if i % 2 else off  # type: ignore[method-assign]
            start = time.perf_counter()
            store.remember(text, keys)
            times[i % 2].append(time.perf_counter() - start)
        ms = lambda values: round(statistics.median(values) * 1000, 3)  # noqa: E731
        out["p50_ms"] = ms(times[0] + times[1])
        if lookup is not None:
            decide.Batch._same_text = lookup  # type: ignore[method-assign]
            out["with_p50_ms"], out["without_p50_ms"] = ms(times[1]), ms(times[0])
            start = time.perf_counter()
            index = decide.SameTexts()
            index.holders(store.state, "default", "")
            out["index_build_ms"] = round((time.perf_counter() - start) * 1000, 1)
            held = index._ids
            size = sys.getsizeof(held) + sum(map(sys.getsizeof, held))
            size += sum(sys.getsizeof(v) for v in held.values() if isinstance(v, list))
            out["index_mib"] = round(size / 2**20, 1)
        store.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
