"""Remember N memories into a store, one command at a time: a fixed workload for profilers.

Builds nothing and times nothing; run it under a profiler or an instruction counter, e.g. the
difference between two counts is the cost of the extra remembers:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python tools/remember_loop.py STORE_DIR 400

Keys are drawn from the labels already in the store (so no alias check runs), content is ~18
words from a 5,000-word vocabulary, as in tools/bench_core.py.
"""

from __future__ import annotations

import argparse
import random

from keytrail.core import HashEmbedder, Settings, Store

WORDS = [f"w{i}" for i in range(5000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("home", help="store directory (e.g. one tools/bench_core.py --dir left)")
    parser.add_argument("count", type=int)
    args = parser.parse_args()
    rng = random.Random(3)
    settings = Settings(home=args.home, embedder="hash", snapshot_every=10**12)
    store = Store(settings, embedder=HashEmbedder())
    labels = [k.label for k in store.state.keys.values()] or ["topic"]
    for i in range(args.count):
        text = f"memory loop {i}: " + " ".join(rng.choice(WORDS) for _ in range(18))
        store.remember(text, rng.sample(labels, min(3, len(labels))))


if __name__ == "__main__":
    main()
