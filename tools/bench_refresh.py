"""What a call costs in catching up with the store when little or nothing changed since the last.

Every query first folds what other processes appended (`Store.refresh`); every write first
loads the vector rows other processes saved (`VectorCache.refresh`, in its flush). This times,
on a copy of a built store (`cp -a`, e.g. `bench_calls.py`'s `built-100000`), p50 over `--calls`:

- `quiet_*` (`--calls` each): a refresh and two small queries when no process wrote since the
  last call (the log last changed seconds ago, as between an agent's calls);
- `shared_*` (`--rounds` each): a remember, and a vector refresh alone, right after a second
  Store on the same home remembered one memory (two servers on one store).

    .venv/bin/python tools/bench_refresh.py --store /tmp/scale-store/built-100000

Prints one JSON object of p50 milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store  # noqa: E402


def settings(home: Path) -> Settings:
    return Settings(home=home, embedder="hash", snapshot_every=10**12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", required=True, help="a built store, copied, never written")
    parser.add_argument("--dir", default="/tmp/bench-refresh", help="where the copy goes")
    parser.add_argument("--calls", type=int, default=2000, help="timed quiet calls of each")
    parser.add_argument("--rounds", type=int, default=50, help="timed shared calls of each")
    args = parser.parse_args()
    home = Path(args.dir) / "store"
    shutil.rmtree(home, ignore_errors=True)
    home.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-a", args.store, str(home)], check=True)
    Store(settings(home), embedder=HashEmbedder()).close()  # a snapshot this tree reads

    rng = random.Random(5)
    a = Store(settings(home), embedder=HashEmbedder())
    a.warm_up().join()
    key_ids = list(a.state.keys)
    a.embed(["warm the vector cache"])
    timed: dict[str, list[float]] = {}

    def time_it(name: str, call: Callable[..., object], *args: object, **kwargs: object) -> None:
        t = time.perf_counter()
        call(*args, **kwargs)
        timed.setdefault(name, []).append(time.perf_counter() - t)

    # As between an agent's calls: the log last changed more than a moment ago.
    last = max((home / "log").glob("*.jsonl"))
    st = last.stat()
    time.sleep(max(0.0, max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 + 2.5 - time.time()))
    for _ in range(args.calls):
        time_it("quiet_refresh", a.refresh)
    for _ in range(args.calls):
        time_it("quiet_read_key", a.read_key, rng.choice(key_ids), limit=10)
    for _ in range(args.calls):
        time_it("quiet_list_memories_limit10", a.list_memories, limit=10)

    b = Store(settings(home), embedder=HashEmbedder())
    for i in range(args.rounds):
        b.remember(f"b's memory {i} {rng.random()}", [f"topic {rng.randrange(20_000)}"])
        time_it("shared_remember", a.remember, f"a's memory {i} {rng.random()}", ["a topic"])
        b.remember(f"b's other memory {i} {rng.random()}", [f"topic {rng.randrange(20_000)}"])
        time_it("shared_vector_refresh", a.vectors.refresh)
    b.close()
    a.close()
    shutil.rmtree(home, ignore_errors=True)
    print(
        json.dumps(
            {
                "memories": len(a.state.memories),
                "calls": args.calls,
                "rounds": args.rounds,
                **{
                    f"{name}_p50_ms": round(statistics.median(s) * 1000, 3)
                    for name, s in timed.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
