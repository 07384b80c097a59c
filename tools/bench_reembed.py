"""Re-embedding benchmark: building a new model's projection vs bare fastembed on the same texts.

A store is filled with the LoCoMo dev turns (each a memory with its speaker as a name key and
its session as a concept key) using the hashing embedder; then the store is switched to
all-MiniLM-L6-v2 and its projection built by `keytrail.core.reembed.build` (what `keytrail
reembed` and every open with a new model run). The same distinct texts, in the same order, are
embedded by a bare `fastembed.TextEmbedding.embed` with the same batch size. Both load the model
before the clock starts; runs alternate, and the best of each is compared.

    KEYTRAIL_EMBED_MODEL_PATH=../shared/models/all-MiniLM-L6-v2-onnx \\
        .venv/bin/python tools/bench_reembed.py --repeats 3 > reembed.json

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core import reembed as projection
from keytrail.core.embedders import DEFAULT_MODEL, FastEmbedder
from keytrail.projections.vectors import VECTORS_DIR, Matrix, _safe


class Precomputed:
    """The model's vectors, looked up: building with it times everything but the model."""

    def __init__(self, like: FastEmbedder, texts: list[str], vectors: Matrix) -> None:
        self.backend, self.model_id, self.dim = like.backend, like.model_id, like.dim
        self.fingerprint = like.fingerprint
        self.rows = dict(zip(texts, vectors, strict=True))

    def embed(self, texts: Sequence[str]) -> Matrix:
        return np.array([self.rows[t] for t in texts], dtype=np.float32)


LOCOMO = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "locomo"


def turns(path: Path, limit: int | None) -> list[RememberItem]:
    items: list[RememberItem] = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        sessions = conv["conversation"]
        for name, session in sessions.items():
            if not name.startswith("session_") or not isinstance(session, list):
                continue
            for turn in session:
                items.append(
                    RememberItem(
                        content=turn["text"],
                        keys=[turn["speaker"], f"{conv['sample_id']} {name}"],
                        key_types={turn["speaker"]: "name"},
                    )
                )
    return items[:limit] if limit else items


def fill(home: Path, items: list[RememberItem]) -> None:
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        for start in range(0, len(items), 500):
            store.remember_batch(items[start : start + 500])
        projection.build(store)  # as the command line does on open: the hashing model's vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=LOCOMO / "locomo-dev.json")
    parser.add_argument("--limit", type=int, help="only the first N turns")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model_path = os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or None

    items = turns(args.data, args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        fill(home, items)
        embedder = FastEmbedder(DEFAULT_MODEL, model_path)
        embedder.embed(["load the model before the clock starts"])
        bare = embedder._load()  # the same fastembed TextEmbedding, called directly
        cache_dir = home / VECTORS_DIR / _safe(embedder.fingerprint)

        store = Store(Settings(home=home, embedder="fastembed"), embedder=embedder)
        texts = projection.needed_texts(store)
        store.close()

        bare_runs: list[float] = []
        build_runs: list[float] = []
        result: Any = None
        for _ in range(args.repeats):
            started = time.perf_counter()
            vectors = list(bare.embed(texts, batch_size=embedder.batch_size))
            bare_runs.append(time.perf_counter() - started)
            assert len(vectors) == len(texts)

            shutil.rmtree(cache_dir, ignore_errors=True)
            started = time.perf_counter()
            store = Store(Settings(home=home, embedder="fastembed"), embedder=embedder)
            result = projection.build(store)
            store.close()
            build_runs.append(time.perf_counter() - started)
            assert result.embedded == len(texts)

        # What building costs beyond the model: the same build with the vectors looked up.
        lookup = Precomputed(embedder, texts, np.array(vectors, dtype=np.float32))
        overhead_runs: list[float] = []
        for _ in range(args.repeats):
            shutil.rmtree(cache_dir, ignore_errors=True)
            started = time.perf_counter()
            store = Store(Settings(home=home, embedder="fastembed"), embedder=lookup)
            projection.build(store)
            store.close()
            overhead_runs.append(time.perf_counter() - started)

        # Switching back to the hashing model: everything is cached, nothing is embedded.
        started = time.perf_counter()
        back = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
        switched_back = projection.build(back)
        back.close()
        back_seconds = time.perf_counter() - started

    bare_rate = len(texts) / min(bare_runs)
    build_rate = len(texts) / min(build_runs)
    json.dump(
        {
            "benchmark": "reembed",
            "model": embedder.fingerprint,
            "memories": len(items),
            "texts": len(texts),
            "key_rows": result.key_rows,
            "memory_rows": result.memory_rows,
            "batch_size": embedder.batch_size,
            "cpus": os.cpu_count(),
            "bare_fastembed_seconds": [round(s, 3) for s in bare_runs],
            "reembed_seconds": [round(s, 3) for s in build_runs],
            "bare_fastembed_texts_per_s": round(bare_rate, 1),
            "reembed_texts_per_s": round(build_rate, 1),
            "reembed_vs_bare": round(build_rate / bare_rate, 3),
            # open + hash + cache + flush + manifest + matrices, with no model call
            "overhead_seconds": round(min(overhead_runs), 3),
            "overhead_ms_per_text": round(1000 * min(overhead_runs) / len(texts), 4),
            # the ratio if the model ran at its best measured speed and only overhead were added
            "reembed_vs_bare_from_overhead": round(
                min(bare_runs) / (min(bare_runs) + min(overhead_runs)), 4
            ),
            "target_reembed_vs_bare": 0.9,
            "switch_back_embedded": switched_back.embedded,
            "switch_back_seconds": round(back_seconds, 3),
        },
        sys.stdout,
        indent=2,
    )
    print()


if __name__ == "__main__":
    main()
