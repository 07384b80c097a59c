"""Memory held by the past states `as_of` reads keep: RSS before and after reads at 8 points.

    .venv/bin/python tools/bench_asof_rss.py /tmp/kt-asof-rss

Builds (once, into the given directory) a store of 10,500 memories in 105 `remember_batch`
events, two keys each out of 9,000 labels, with the hashing embedder; then opens it, lists its
memories, and reads `list_memories` as of 8 seqs spread over the log. Prints the RSS before and
after those reads, and after `malloc_trim` (what the kept states still hold, without the pages
the allocator kept).
"""

from __future__ import annotations

import ctypes
import random
import sys
from pathlib import Path

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core.timetravel import view


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def build(home: Path) -> None:
    rng = random.Random(7)
    with open_store(home) as store:
        for b in range(105):
            words = lambda: " ".join(f"w{rng.randrange(4000)}" for _ in range(12))  # noqa: E731
            store.remember_batch(
                [
                    RememberItem(
                        f"fact {b}-{i}: {words()}",
                        keys=[f"topic {rng.randrange(6000)}", f"person {rng.randrange(3000)}"],
                    )
                    for i in range(100)
                ]
            )


def main() -> None:
    home = Path(sys.argv[1])
    if not home.exists():
        build(home)
    with open_store(home) as store:
        head = store.state.seq
        store.list_memories()
        before = rss_mb()
        for i in range(1, 9):
            view(store, head * i // 9).list_memories()
        after = rss_mb()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        print(
            f"{len(store.state.memories)} memories, {len(store.state.keys)} keys, seq {head}; "
            f"{len(store.past._cache)} past states kept; RSS {before:.0f} MB before the reads, "
            f"{after:.0f} MB after, {rss_mb():.0f} MB after malloc_trim"
        )


if __name__ == "__main__":
    main()
