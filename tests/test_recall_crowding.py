"""Concept keys are found by similarity even where many name keys (knowledge-graph entities,
extracted names) are more similar to the query: names never match by similarity, so they must
not use up the candidates a concept needs."""

from __future__ import annotations

from keytrail.core import RememberItem, Store

QUERY = "orchard persons apples"


def crowded(store: Store, names: int) -> str:
    """A concept key under the query's words, and `names` name keys nearer to the query."""
    key_id = store.remember("The user grows apples", ["apple orchard"]).keys[0].key_id
    store.remember_batch(
        [
            RememberItem(
                f"fact {i}",
                [f"Orchard Persons Apples {i}"],
                {f"Orchard Persons Apples {i}": "name"},
            )
            for i in range(names)
        ]
    )
    return key_id


def test_recall_finds_a_concept_behind_hundreds_of_nearer_names(store: Store) -> None:
    key_id = crowded(store, 300)
    keys = store.recall(QUERY).keys
    assert [k.key_id for k in keys] == [key_id] and keys[0].match == "similar"
    assert keys[0].score >= store.thresholds.key_recall


def test_recall_memories_key_signal_sees_the_concept_too(store: Store) -> None:
    key_id = crowded(store, 300)
    (memory_id,) = store.state.keys[key_id].links
    found = store.recall_memories(QUERY, top_k=5, learn=False).memories
    hit = next(m for m in found if m.memory_id == memory_id)
    assert "keys" in hit.found_by


def test_a_new_concept_merges_into_its_variant_behind_nearer_names(store: Store) -> None:
    """Merging a new concept key as an alias compares it with the nearest concept key; name
    rows nearer to it than that concept must not hide it (the merge then depended on how
    many unrelated names the store held)."""
    key_id = store.remember("The user grows apples", ["apple orchard"]).keys[0].key_id
    names = [f"Apple Orchards {i}" for i in range(20)]
    store.remember_batch([RememberItem(f"fact {n}", [n], {n: "name"}) for n in names])
    (outcome,) = store.remember("Another apple fact", ["apple orchards"]).keys
    assert outcome.key_id == key_id and outcome.resolution == "alias"
