"""Knowledge-graph benchmark: create_entities, read_graph and search_nodes at scale, imports.

Runs with the hashing embedder (the knowledge-graph tools never embed on write).

    .venv/bin/python tools/bench_kg.py --entities 10000 > bench.json

Prints one JSON object: create_entities throughput (batches of --batch), read_graph page and
full walk, search_nodes and open_nodes p50 at that size, importing a memory.jsonl of the same
graph into an empty store (one event) and exporting it back.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store, to_dict
from keytrail.core.exporters import memory_jsonl_lines
from keytrail.core.importers import import_text
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, RelationInput


def p50(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def timed(call: object, n: int) -> float:
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        call()  # type: ignore[operator]
        samples.append(time.perf_counter() - t)
    return p50(samples)


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entities", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--sample", type=int, default=50)
    args = parser.parse_args()
    n = args.entities
    out: dict[str, object] = {"entities": n, "batch": args.batch}
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "a")
        kg = KnowledgeGraph(store)
        t = time.perf_counter()
        for start in range(0, n, args.batch):
            kg.create_entities(
                [
                    EntityInput(f"entity {i}", "thing", [f"observation {i} a", f"note {i} b"])
                    for i in range(start, min(n, start + args.batch))
                ]
            )
        elapsed = time.perf_counter() - t
        out["create_entities_per_s"] = round(n / elapsed)
        t = time.perf_counter()
        for start in range(0, n - 1, args.batch):
            kg.create_relations(
                [
                    RelationInput(f"entity {i}", f"entity {i + 1}", "precedes")
                    for i in range(start, min(n - 1, start + args.batch))
                ]
            )
        out["create_relations_per_s"] = round((n - 1) / (time.perf_counter() - t))
        out["read_graph_page50_p50_ms"] = timed(lambda: kg.read_graph(50, n // 2), args.sample)
        page = kg.read_graph(50, 0)
        out["read_graph_page50_json_bytes"] = len(json.dumps(to_dict(page)))
        t = time.perf_counter()
        offset: int | None = 0
        while offset is not None:
            offset = kg.read_graph(200, offset).next_offset
        out["read_graph_walk_all_pages_s"] = round(time.perf_counter() - t, 3)
        out["search_nodes_p50_ms"] = timed(lambda: kg.search_nodes("entity 4242"), args.sample)
        out["open_nodes_10_p50_ms"] = timed(
            lambda: kg.open_nodes([f"entity {i}" for i in range(10)]), args.sample
        )
        text = "\n".join(memory_jsonl_lines(store.refresh(), kg.namespace, store.clock())) + "\n"
        out["memory_jsonl_bytes"] = len(text.encode())
        store.close()

        t = time.perf_counter()
        copy = open_store(Path(tmp) / "b")
        report = import_text(copy, text, "bench.jsonl")
        out["import_memory_jsonl_s"] = round(time.perf_counter() - t, 3)
        out["import_events"] = copy.state.seq - 1
        out["import_memories"] = report.memories
        t = time.perf_counter()
        again = "\n".join(memory_jsonl_lines(copy.state, kg.namespace, copy.clock())) + "\n"
        out["export_memory_jsonl_s"] = round(time.perf_counter() - t, 3)
        out["round_trip_identical"] = again == text
        copy.close()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
