"""Where a serving process's memory goes: RSS, anonymous and file-backed, and the top consumers.

    .venv/bin/python tools/bench_rss.py /tmp/scale-store/built-100000 > rss.json

Copies the store given (never written) to a temporary folder, opens it once, builds its vector
projection (`reembed.build`: it records the cache's coverage, as a server's start does) and
closes it, so that it opens from a snapshot of this code's layout, as a server's usually does.
Then, in a fresh process, it opens the copy as `keytrail serve` does (the hashing embedder,
`warm_up()` to its end) and makes one `recall`, `read_key` (of the biggest key, with a query),
`read_memory` and `remember`, so every structure a server builds lazily exists. With
`--direct-recall` it also warms up the memory vectors and makes one `recall_memories` (the text
index and those vectors), as a server started with `--direct-recall` does.

Prints one JSON object:
- `phases`: RSS and anonymous MiB after import, open, warm-up and the calls;
- `rss_mib`, `anonymous_mib`, `file_backed_mib` (RSS less anonymous: mapped files, shared
  with every process that maps them, such as the vector cache) from /proc/self/smaps_rollup,
  and `mappings`, the biggest mappings by RSS;
- `arrays`: numpy arrays the store holds, in MiB (their buffers' whole capacity);
- `nodes_mib`: the key graph's Python objects by field (each object counted once);
- `python_top`: the biggest allocation sites by file:line, from a second run under
  tracemalloc (which inflates that run's RSS, so its RSS is not reported), and `python_mib`,
  their total.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def rollup() -> dict[str, float]:
    """RSS and anonymous MiB of this process."""
    found: dict[str, float] = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if parts[0] in ("Rss:", "Anonymous:"):
                found[parts[0][:-1].lower()] = round(int(parts[1]) / 1024, 1)
    return found


def mappings(top: int = 8) -> list[dict[str, Any]]:
    """The biggest mappings by RSS (anonymous ones summed as "[anon]")."""
    by_name: dict[str, list[int]] = {}
    current: list[int] = [0, 0]
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if not parts[0].endswith(":") and "-" in parts[0]:
                name = parts[5] if len(parts) > 5 else "[anon]"
                current = by_name.setdefault(name, [0, 0])
            elif parts[0] == "Rss:":
                current[0] += int(parts[1])
            elif parts[0] == "Anonymous:":
                current[1] += int(parts[1])
    ranked = sorted(by_name.items(), key=lambda item: -item[1][0])[:top]
    return [
        {"mapping": name, "rss_mib": round(rss / 1024, 1), "anonymous_mib": round(anon / 1024, 1)}
        for name, (rss, anon) in ranked
    ]


def array_sizes(store: Any) -> dict[str, float]:
    """MiB of the numpy arrays a store holds (whole buffers, spare capacity included)."""
    import numpy as np

    def mib(array: Any) -> float:
        return round(array.nbytes / MIB, 2)

    sizes: dict[str, float] = {}
    cache = store._vector_cache
    if cache is not None:
        sizes["vector cache: mapped rows (file-backed)"] = mib(cache._disk)
        sizes["vector cache: rows held in memory"] = mib(cache._mem)
    for name, vectors in (("key", store._key_vectors), ("memory", store._memory_vectors)):
        if vectors is not None:
            sizes[f"{name} vectors matrix"] = mib(vectors._matrix)
    columns = store._key_columns or {}
    sizes["read_key columns"] = round(
        sum(
            value.nbytes
            for kept in columns.values()
            for value in vars(kept).values()
            if isinstance(value, np.ndarray)
        )
        / MIB,
        2,
    )
    sizes["read_key columns: keys kept"] = len(columns)
    return sizes


def node_objects(state: Any) -> dict[str, float]:
    """MiB of the key graph's nodes by field, each object counted once however many nodes hold
    it (an id shared with another node counts where it is first met)."""
    seen: set[int] = set()
    sizes: dict[str, int] = {}

    def count(name: str, *objects: object) -> None:
        total = 0
        for obj in objects:
            if obj is not None and id(obj) not in seen:
                seen.add(id(obj))
                total += sys.getsizeof(obj)
        sizes[name] = sizes.get(name, 0) + total

    for key_id, key in dict.items(state.keys):
        count("keys: dict ids", key_id)
        count("keys: nodes", key)
        count("keys: own fields", key.id, key.label, key.type, key.aliases, key.query_reads)
        count("keys: own fields", key.learned, *key.aliases)
        count("keys: links dicts", key.links)
        count("keys: link memory ids", *key.links)
        count("keys: link weights", *key.links.values())
    for memory_id, memory in dict.items(state.memories):
        count("memories: dict ids", memory_id)
        count("memories: nodes", memory)
        count("memories: id", memory.id)
        count("memories: content", memory.content)
        count("memories: content_hash", memory.content_hash)
        count("memories: datetimes", memory.created_at, memory.last_read_at, memory.expires_at)
        count("memories: datetimes", memory.valid_from)
        count("memories: keys lists", memory.keys)
        count("memories: key ids", *memory.keys)
        count("memories: related lists", memory.related_to, memory.related_from)
        count("memories: other fields", memory.namespace, memory.depth, memory.session_id)
        count("memories: other fields", memory.source, memory.status, memory.supersedes)
        count("memories: other fields", memory.superseded_by, memory.supersede_reason)
    ranked = sorted(sizes.items(), key=lambda item: -item[1])
    return {name: round(size / MIB, 1) for name, size in ranked}


def serve(home: Path, direct_recall: bool, trace: bool) -> dict[str, Any]:
    """Open `home` as a server does, make one call of each kind, report (in this process)."""
    if trace:
        import tracemalloc

        tracemalloc.start(1)
    phases: dict[str, dict[str, float]] = {}
    from keytrail.server.entry import one_blas_thread

    one_blas_thread()
    from keytrail.core import HashEmbedder, Settings, Store

    phases["import"] = rollup()
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    phases["open"] = rollup()
    store.warm_up(memory_vectors=direct_recall).join()
    phases["warm_up"] = rollup()
    rng = random.Random(7)
    labels = list(store.state.labels)
    biggest = store.biggest_keys()
    key_id = biggest[0] if biggest else next(iter(store.state.keys))
    for _ in range(3):
        store.recall(f"w{rng.randrange(5000)} w{rng.randrange(5000)} {rng.choice(labels)}")
    page = store.read_key(key_id, query=f"w{rng.randrange(5000)}")
    store.read_memory(page.memories[0].memory_id, key_id)
    store.remember("a memory told while measuring w1 w2 w3", keys=[rng.choice(labels), "rss probe"])
    if direct_recall:
        store.recall_memories(f"w{rng.randrange(5000)} {rng.choice(labels)}", learn=False)
    phases["calls"] = rollup()
    report: dict[str, Any] = {}
    if trace:
        import tracemalloc

        stats = tracemalloc.take_snapshot().statistics("lineno")
        report["python_mib"] = round(sum(s.size for s in stats) / MIB, 1)
        report["python_top"] = [
            {
                "at": f"{s.traceback[0].filename.split('keytrail/')[-1]}:{s.traceback[0].lineno}",
                "mib": round(s.size / MIB, 1),
                "blocks": s.count,
            }
            for s in stats[:15]
        ]
        return report
    memories, keys = len(store.state.memories), len(store.state.keys)
    report.update(
        memories=memories,
        keys=keys,
        links=sum(len(k.links) for k in store.state.keys.values()),
        phases=phases,
        rss_mib=phases["calls"]["rss"],
        anonymous_mib=phases["calls"]["anonymous"],
        file_backed_mib=round(phases["calls"]["rss"] - phases["calls"]["anonymous"], 1),
        mappings=mappings(),
        arrays=array_sizes(store),
        text_index_open=getattr(store.text, "_index", None) is not None,
        nodes_mib=node_objects(store.state),
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("store", type=Path, help="a store to measure (copied, never written)")
    parser.add_argument("--direct-recall", action="store_true")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--settle", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["KEYTRAIL_EMBEDDER"] = "hash"
    if args.settle:
        from keytrail.core import HashEmbedder, Settings, Store, reembed

        store = Store(Settings(home=args.store, embedder="hash"), embedder=HashEmbedder())
        reembed.build(store)  # records the vectors' coverage, as a server's start does
        store.close()
        return
    if args.serve:
        print(json.dumps(serve(args.store, args.direct_recall, args.trace)))
        return
    with tempfile.TemporaryDirectory(prefix="rss-", dir="/tmp") as tmp:
        home = Path(tmp) / "store"
        shutil.copytree(args.store, home, symlinks=True)
        me = [sys.executable, os.path.abspath(__file__), str(home)]
        extra = ["--direct-recall"] if args.direct_recall else []
        subprocess.run([*me, "--settle"], check=True)
        # Each measuring run on a fresh copy of the settled store: a run's remember changes it.
        settled = Path(tmp) / "settled"
        home.rename(settled)
        found: dict[str, Any] = {}
        for flags in ([], ["--trace"]):
            shutil.rmtree(home, ignore_errors=True)
            shutil.copytree(settled, home, symlinks=True)
            run = subprocess.run(
                [*me, "--serve", *extra, *flags], check=True, capture_output=True, text=True
            )
            found.update(json.loads(run.stdout))
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
