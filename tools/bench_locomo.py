"""Retrieval quality on LoCoMo: BM25 alone, dense alone and recall_memories, in one run.

recall_memories runs twice per question: as configured ("recall_memories", score fusion unless
KEYTRAIL_HYBRID_FUSION says otherwise) and with rank fusion ("recall_memories_rrf": the same
settings with fusion "rrf", k = KEYTRAIL_HYBRID_RRF_K, default 60).

Every turn of every conversation is remembered (one store per conversation, one
remember_batch per session) at its session's date, with no keys given, so keys are extracted.
Content is "<speaker>: <text>". Every category 1-4 question is a query; its evidence turn ids
are the relevant memories. Reported per category and overall, for the conversations used to
choose parameters (dev) and the others (held-out):

- recall_any@5 / @10: some evidence turn is in the top 5 / 10;
- recall_all@10: every evidence turn is in the top 10;
- mrr: 1 / rank of the first evidence turn in the top 10 (0 if none);
- session_recall@5: a turn of an evidence session is in the top 5.

Stores are kept under --work (default /tmp/keytrail-locomo) and reused, so a second run embeds
nothing (the vector cache) and only re-runs the queries. recall_memories runs with learn=False,
so every query sees the same store.

`key_walk` is what an agent gets without `recall_memories`: `recall`, then `read_key` of the
first three keys with the question as `query`, merged rank by rank (no reads recorded).

    KEYTRAIL_EMBED_MODEL_PATH=../shared/models/all-MiniLM-L6-v2-onnx \
        .venv/bin/python tools/bench_locomo.py > locomo.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from keytrail.core import RememberItem, Settings, Store
from keytrail.core.queries import visible

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"
DEV = (0, 1)  # parameters were chosen looking at these; the others are held out
METHODS = ("bm25", "dense", "recall_memories", "recall_memories_rrf", "key_walk")
#: Keys of a recall the key walk reads, as an agent reads the first few
WALK_KEYS = 3
CATEGORIES = (1, 2, 3, 4)
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def session_time(text: str) -> datetime:
    """LoCoMo's '1:56 pm on 8 May, 2023' as an aware UTC datetime."""
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


class BenchClock:
    """A clock the benchmark sets: each session is remembered at its own date."""

    def __init__(self) -> None:
        self.now = datetime(2000, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def evidence_ids(raw: list[str]) -> set[str]:
    found: set[str] = set()
    for item in raw:
        found.update(f"D{s}:{t}" for s, t in _EVIDENCE.findall(item))
    return found


def sessions_of(conversation: dict[str, Any]) -> list[tuple[int, datetime, list[dict[str, Any]]]]:
    out = []
    for key, turns in conversation.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(turns, list) and turns:
            n = int(m.group(1))
            out.append((n, session_time(conversation[f"session_{n}_date_time"]), turns))
    return sorted(out)


def build(
    conv: dict[str, Any], home: Path, clock: BenchClock, settings: Settings
) -> tuple[Store, dict[str, set[str]]]:
    """The conversation's store (reused if built before) and memory id -> turn ids."""
    mapping_file = home / "turns.json"
    store = Store(settings, home=home, clock=clock)
    if mapping_file.exists():
        raw = json.loads(mapping_file.read_text())
        return store, {k: set(v) for k, v in raw.items()}
    turns_of: dict[str, set[str]] = {}
    for n, at, turns in sessions_of(conv["conversation"]):
        clock.now = at
        items = [
            RememberItem(
                content=f"{t['speaker']}: {t['text']}",
                session_id=f"session_{n}",
                source=t["dia_id"],
            )
            for t in turns
        ]
        for turn, outcome in zip(turns, store.remember_batch(items), strict=True):
            ids = {turn["dia_id"]}
            if outcome.deduplicated is not None:  # a repeated turn replaced an earlier one
                ids |= turns_of.pop(outcome.deduplicated.memory_id, set())
            turns_of[outcome.memory_id] = ids
    mapping_file.write_text(json.dumps({k: sorted(v) for k, v in turns_of.items()}))
    return store, turns_of


def bm25(store: Store, query: str, k: int) -> list[str]:
    with store._mutex:
        now = store.clock()
        hits = store.text_index().search(query, 4 * k)
        return [
            h.memory_id
            for h in hits
            if (node := store.state.memories.get(h.memory_id)) and visible(node, now)
        ][:k]


def dense(store: Store, query: str, k: int) -> list[str]:
    vector = store.embedder.embed([query])[0]
    rows = store.memory_vectors()
    scores = rows.matrix @ vector
    now = store.clock()
    out: list[str] = []
    for row in np.argsort(-scores):
        node = store.state.memories[rows.ids[row]]
        if visible(node, now):
            out.append(node.id)
            if len(out) == k:
                break
    return out


def hybrid(store: Store, query: str, k: int) -> list[str]:
    result = store.recall_memories(query, top_k=k, learn=False)
    return [m.memory_id for m in result.memories]


def hybrid_rrf(store: Store, query: str, k: int) -> list[str]:
    """recall_memories with the store's settings but fusion "rrf" (put back afterwards)."""
    configured = store.settings
    rrf = dataclasses.replace(configured.hybrid, fusion="rrf")
    store.settings = dataclasses.replace(configured, hybrid=rrf)
    try:
        return hybrid(store, query, k)
    finally:
        store.settings = configured


def key_walk(store: Store, query: str, k: int) -> list[str]:
    """An agent's walk without direct recall: `recall` the question's keys, `read_key` each of
    the first WALK_KEYS with the question as `query`, and take their memories rank by rank (the
    first of each key, then the second, ...). Reads nothing, so every question sees the same
    store."""
    keys = [found.key_id for found in store.recall(query).keys[:WALK_KEYS]]
    pages = [
        [m.memory_id for m in store.read_key(key_id, query=query, limit=k).memories]
        for key_id in keys
    ]
    out: list[str] = []
    for rank in range(k):
        for page in pages:
            if rank < len(page) and page[rank] not in out:
                out.append(page[rank])
    return out[:k]


def score(ranked: list[str], turns_of: dict[str, set[str]], evidence: set[str]) -> dict[str, float]:
    turn_lists = [turns_of.get(mid, set()) for mid in ranked]
    sessions = [{t.split(":")[0] for t in ts} for ts in turn_lists]
    wanted_sessions = {e.split(":")[0] for e in evidence}

    def hit_at(k: int) -> bool:
        return any(ts & evidence for ts in turn_lists[:k])

    first = next((i for i, ts in enumerate(turn_lists[:10], 1) if ts & evidence), None)
    covered = set().union(*turn_lists[:10]) if turn_lists else set()
    return {
        "recall_any@5": float(hit_at(5)),
        "recall_any@10": float(hit_at(10)),
        "recall_all@10": float(evidence <= covered),
        "mrr": 1.0 / first if first else 0.0,
        "session_recall@5": float(any(s & wanted_sessions for s in sessions[:5])),
    }


def summarise(rows: list[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    out = {m: round(100 * sum(r[m] for r in rows) / len(rows), 1) for m in rows[0]}
    out["questions"] = len(rows)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA / "locomo-dev.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/keytrail-locomo"))
    parser.add_argument("--conversations", type=int, nargs="*", help="only these (0-based)")
    parser.add_argument("--methods", nargs="*", choices=METHODS, help="only these methods")
    args = parser.parse_args()

    data = json.loads(args.data.read_text())
    chosen = args.conversations if args.conversations else list(range(len(data)))
    settings = Settings.from_env()
    results: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    build_seconds = query_seconds = 0.0
    methods: dict[str, Callable[[Store, str, int], list[str]]] = {
        "bm25": bm25,
        "dense": dense,
        "recall_memories": hybrid,
        "recall_memories_rrf": hybrid_rrf,
        "key_walk": key_walk,
    }
    assert tuple(methods) == METHODS
    if args.methods:
        methods = {name: methods[name] for name in args.methods}
    for index in chosen:
        conv = data[index]
        clock = BenchClock()
        started = time.perf_counter()
        store, turns_of = build(conv, args.work / f"conv{index}", clock, settings)
        build_seconds += time.perf_counter() - started
        last = sessions_of(conv["conversation"])[-1][1]
        clock.now = last + timedelta(days=1)
        split = "dev" if index in DEV else "heldout"
        started = time.perf_counter()
        for qa in conv["qa"]:
            if qa["category"] not in CATEGORIES:
                continue
            evidence = evidence_ids(qa["evidence"])
            if not evidence:
                continue
            for name, method in methods.items():
                row = score(method(store, qa["question"], 10), turns_of, evidence)
                for group in ("all", split):
                    results[name][f"{group}/overall"].append(row)
                    results[name][f"{group}/category_{qa['category']}"].append(row)
        query_seconds += time.perf_counter() - started
        store.close()
        print(f"conversation {index} done", file=sys.stderr, flush=True)

    report = {
        "data": str(args.data),
        "model": settings.model or "sentence-transformers/all-MiniLM-L6-v2",
        "embedder": settings.embedder,
        "dev_conversations": [i for i in chosen if i in DEV],
        "heldout_conversations": [i for i in chosen if i not in DEV],
        "hybrid_params": dataclasses.asdict(settings.hybrid),
        "build_seconds": round(build_seconds, 1),
        "query_seconds": round(query_seconds, 1),
        "results": {
            name: {group: summarise(rows) for group, rows in sorted(groups.items())}
            for name, groups in results.items()
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
