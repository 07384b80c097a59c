"""Long work on a big store: what it holds the appenders' lock for, what it reports, what it
answers. Each test counts calls or sizes instead of timing anything (see BENCHMARKS.md, "Long
operations", for the measured numbers these stand in for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from keytrail.core import RememberItem, Store
from keytrail.core.decide import Batch


def test_a_batch_matches_its_new_concept_labels_against_the_graph_in_one_pass(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Matching a new concept label against every key of the graph reads the whole key matrix
    # (20,000 labels: ~8 ms). Done once per item, a 500-item remember_batch on a 100,000-memory
    # store held the appenders' lock 9 s, every other process's write waiting behind it.
    # The hashing embedder puts garden and gardens at 0.67: merged below a 0.6 merge threshold.
    store = make_store(threshold_overrides={"merge": 0.6})
    store.remember("an old fact about gardens", ["gardens", "plants"])
    passes: list[list[str]] = []
    real = Batch._closest_in_graph

    def counted(self: Batch, labels: list[str]) -> Any:
        if labels:
            passes.append(labels)
        return real(self, labels)

    monkeypatch.setattr(Batch, "_closest_in_graph", counted)
    items = [
        RememberItem(f"fact {i} on its own topic", [f"topic {i}", "gardens"]) for i in range(20)
    ]
    items.append(RememberItem("a fact naming a label twice", ["topic 3", "garden"]))
    outcomes = store.remember_batch(items)
    assert len(passes) == 1
    assert sorted(passes[0]) == sorted({f"topic {i}" for i in range(20)} | {"garden"})
    # The same decisions as one pass per item: "garden" still merges into "gardens" as an
    # alias, "topic 3" is the key made earlier in the batch, each topic is its own key.
    last = {k.label: k for k in outcomes[-1].keys}
    assert last["garden"].resolution == "alias" and last["garden"].merged_into == "gardens"
    assert last["topic 3"].key_id == next(
        k.key_id for k in outcomes[3].keys if k.label == "topic 3"
    )
    assert (
        len({k.key_id for o in outcomes[:20] for k in o.keys if k.label.startswith("topic")}) == 20
    )
