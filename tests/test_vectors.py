"""The embedding projections a store keeps in memory: key labels and memory contents."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keytrail.core import Store


def test_memory_vectors_follow_the_graph_and_embed_each_text_once(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    first = store.remember("Ada keeps bees on the roof", ["bees"])
    assert store.memory_vectors().ids == [first.memory_id]
    second = store.remember("The roof garden has tomatoes", ["garden"])
    third = store.correct(second.memory_id, "The roof garden has peppers now")

    vectors = store.memory_vectors()
    assert vectors.ids == [first.memory_id, second.memory_id, third.memory_id]
    expected = store.embed(
        [
            "Ada keeps bees on the roof",
            "The roof garden has tomatoes",
            "The roof garden has peppers now",
        ]
    )
    assert np.allclose(vectors.matrix, expected)
    # A second look embeds nothing new and returns the same rows.
    assert store.memory_vectors().matrix.shape == (3, store.embedder.dim)


def test_memory_vectors_see_writes_of_another_store_on_the_same_home(
    make_store: Callable[..., Store],
) -> None:
    writer = make_store()
    reader = make_store(home=writer.home)
    assert reader.memory_vectors().ids == []
    made = writer.remember("Lin runs on Sundays", ["running"])
    reader.refresh()
    assert reader.memory_vectors().ids == [made.memory_id]
