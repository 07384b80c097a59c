"""Building the text index from scratch: its time, peak memory, and a digest of what it holds.

    KEYTRAIL_EMBEDDER=hash .venv/bin/python tools/bench_text_build.py --home COPY --repeats 3
    KEYTRAIL_EMBEDDER=hash .venv/bin/python tools/bench_text_build.py --memories 20000

`--home` is a store to build in (it is written: give a copy); without it a fresh store of
`--memories` memories is made (hashing embedder; every tenth says words of other scripts).
Each repeat is a fresh process that opens the store, reads its memories (`state_s`: decoding a
lazily loaded state's), removes the text index and catches it up (`build_s`): what the first
`recall_memories` after a forget does, and `keytrail rebuild`'s `index text` step. Then it
builds it again with `TextIndex.rebuild` (`swap_s`: a log cut back under the index, or a
restored store). `rss_mib` is the process's peak before the builds, after the first and after
both.
`digest` hashes every stored document and the ids and scores of a few queries taken from the
store's memories, after the build and after the swap: two trees that build the same index from
one `--home` print the same (a store made afresh has other ids and times each run). Run it from a
checkout of an older commit (`git archive COMMIT | tar -x -C DIR`, `PYTHONPATH=DIR`) for
"before". Prints one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tantivy

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.projections.text import TextIndex

WORDS = ["harbour", "crane", "lifts", "containers", "night", "ship", "lighthouse", "keeper"]
ELSEWHERE = ["Zürich café", "東京に住んでいる", "naïve résumé", "Ελλάδα", "กรุงเทพ"]


def say(i: int) -> str:
    words = " ".join(WORDS[(i * k + k) % len(WORDS)] for k in (1, 3, 5))
    return f"note {i}: the {words}" + (f", {ELSEWHERE[i // 10 % 5]}" if i % 10 == 0 else "")


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def peak_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def digest(index: TextIndex, queries: list[str]) -> str:
    searcher = index._open().searcher()
    everything = searcher.search(tantivy.Query.all_query(), max(1, searcher.num_docs))
    docs = sorted(
        json.dumps(searcher.doc(a).to_dict(), sort_keys=True, ensure_ascii=False)
        for _, a in everything.hits
    )
    found = [[(h.memory_id, h.score) for h in index.search(q, 20)] for q in queries]
    return hashlib.sha256(json.dumps([docs, found]).encode()).hexdigest()[:16]


def one(home: Path, with_digest: bool) -> dict[str, object]:
    store = open_store(home)
    began = time.perf_counter()
    nodes = [m for m in store.state.memories.values() if m.status != "forgotten"]
    state_s = time.perf_counter() - began
    before = peak_mib()
    store.text.remove()
    began = time.perf_counter()
    store.catch_up_text_index()
    build_s = time.perf_counter() - began
    built = peak_mib()
    picked = [nodes[0], nodes[len(nodes) // 2], nodes[-1]]
    queries = [" ".join(m.content.split()[2:5]) for m in picked]
    queries += [store.state.keys[k].label for m in picked for k in m.keys[:1]]
    digests = [digest(store.text_index(), queries)] if with_digest else []
    began = time.perf_counter()
    store.text.rebuild(store.state)
    swap_s = time.perf_counter() - began
    answer: dict[str, object] = {
        "memories": len(nodes),
        "state_s": round(state_s, 3),
        "build_s": round(build_s, 3),
        "swap_s": round(swap_s, 3),
        "rss_mib": [before, built, peak_mib()],
    }
    if with_digest:
        answer["queries"] = queries
        answer["digest"] = [*digests, digest(store.text_index(), queries)]  # build, swap
    store.close()
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path)
    parser.add_argument("--memories", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-digest", action="store_true", help="skip hashing the documents")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.home, not args.no_digest)))
        return
    work = Path(tempfile.mkdtemp())
    home = args.home or work / "store"
    if args.home is None:
        store = open_store(home)
        for start in range(0, args.memories, 500):
            store.remember_batch(
                [
                    RememberItem(say(i), [f"topic {i % 997}", WORDS[i % len(WORDS)]])
                    for i in range(start, min(args.memories, start + 500))
                ]
            )
        store.close()
    runs = []
    for repeat in range(args.repeats):
        command = [sys.executable, __file__, "--one", "--home", str(home)]
        if repeat < args.repeats - 1 or args.no_digest:
            command.append("--no-digest")
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
        if done.returncode:
            sys.exit(done.stderr)
        runs.append(json.loads(done.stdout))
    last = runs[-1]
    print(
        json.dumps(
            {
                "memories": last["memories"],
                "state_s": [r["state_s"] for r in runs],
                "build_s": [r["build_s"] for r in runs],
                "build_p50_s": statistics.median(r["build_s"] for r in runs),
                "swap_s": [r["swap_s"] for r in runs],
                "rss_mib": [r["rss_mib"] for r in runs],
                **{k: last[k] for k in ("queries", "digest") if k in last},
            },
            ensure_ascii=False,
        )
    )
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
