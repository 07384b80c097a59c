"""What a knowledge-graph delete that cuts keys from memories costs the text index's catch-up.

    KEYTRAIL_EMBEDDER=hash .venv/bin/python tools/bench_text_unlink.py --memories 20000

A fresh store of `--memories` memories (hashing embedder) plus two entities, each with a memory
it shares with a key that stays: one whose content lacks the entity's name (its keys field
loses the label, so the index is written anew) and one whose content says it (nothing to
write). The index is caught up, each entity deleted in turn and the catch-up after it timed in
this process; then another process's view: a store opened after a third delete, with the index
still before it, times its first catch-up (which compares every memory changed since the
index's seq). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph

WORDS = ["harbour", "crane", "lifts", "containers", "night", "ship", "lighthouse", "keeper"]


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def timed_catch_up(store: Store) -> float:
    began = time.perf_counter()
    store.catch_up_text_index()
    return round(time.perf_counter() - began, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    store = open_store(work / "store")
    for start in range(0, args.memories, 500):
        end = min(args.memories, start + 500)
        store.remember_batch(
            [
                RememberItem(f"{WORDS[i % 8]} {WORDS[i * 3 % 8]} note {i}", [WORDS[i % 8]])
                for i in range(start, end)
            ]
        )
    kg = KnowledgeGraph(store)
    names = ["Zanzibar", "Quimper", "Tromso"]
    kg.create_entities([EntityInput(name, "place", [f"{name} is far"]) for name in names])
    store.remember("met at the pier at dawn", ["Zanzibar", "harbour"])
    store.remember("the Quimper ferry leaves at noon", ["Quimper", "harbour"])
    store.remember("cold nights up north", ["Tromso", "harbour"])
    store.catch_up_text_index()
    kg.delete_entities(["Zanzibar"])
    label_cut = timed_catch_up(store)
    kg.delete_entities(["Quimper"])
    label_said = timed_catch_up(store)
    store.remember("one more note", ["crane"])
    plain = timed_catch_up(store)
    kg.delete_entities(["Tromso"])
    store.close()
    later = open_store(work / "store")
    opened_after = timed_catch_up(later)
    later.close()
    print(
        json.dumps(
            {
                "memories": args.memories,
                "catch_up_label_cut_s": label_cut,
                "catch_up_label_in_content_s": label_said,
                "catch_up_one_memory_s": plain,
                "first_catch_up_opened_after_label_cut_s": opened_after,
            }
        )
    )
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
