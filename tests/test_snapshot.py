"""Snapshots by column: a lazily loaded state is the saved one, node for node, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.projections import snapshot as snapshots
from keytrail.projections.snapshot import LazyNodes


def filled(make_store: Callable[..., Store], home: Path) -> Store:
    store = make_store(home=home)
    first = store.remember("the apple fell on Newton", keys=["apple", "gravity"])
    store.remember("apples are a fruit", keys=["apple", "fruit"], related_to=[first.memory_id])
    store.read_memory(first.memory_id, via_key_id=first.keys[0].key_id, query="apple")
    store.correct(first.memory_id, "an apple fell near Newton", keys=["apple"])
    return store


def test_a_lazy_load_decodes_nothing_until_looked_at_and_equals_the_eager_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = filled(make_store, tmp_path / "store")
    store.close()
    lazy = snapshots.load(store.snapshot_path, lazy=True)
    eager = snapshots.load(store.snapshot_path)
    assert lazy is not None and eager is not None
    memories = lazy.state.memories
    assert isinstance(memories, LazyNodes)
    assert all(type(v) is int for v in dict.values(memories))  # nothing decoded yet
    some_id = next(iter(memories))
    assert memories[some_id] == eager.state.memories[some_id]
    assert type(dict.__getitem__(memories, some_id)) is not int  # decoded once, kept
    # A partly decoded state writes the same bytes as the fully decoded one.
    assert snapshots.encode(lazy) == snapshots.encode(eager)
    assert lazy.state == eager.state  # compares every node, decoding the rest
    assert msgspec.msgpack.encode(lazy.state) == msgspec.msgpack.encode(eager.state)


def test_a_store_opened_from_a_snapshot_folds_onto_its_lazy_state(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.close()
    reopened = make_store(home=home)
    assert isinstance(reopened.state.memories, LazyNodes)
    later = reopened.remember("pears are a fruit too", keys=["fruit", "pear"])
    page = reopened.read_key(later.keys[0].key_id)
    assert {m.memory_id for m in page.memories} >= {later.memory_id}
    reopened.close()
    again = make_store(home=home)
    expected = snapshots.materialize(reopened.state)
    assert msgspec.msgpack.encode(snapshots.materialize(again.state)) == msgspec.msgpack.encode(
        expected
    )


def test_a_snapshot_cut_short_is_unreadable(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = filled(make_store, tmp_path / "store")
    store.close()
    data = bytearray(store.snapshot_path.read_bytes())
    store.snapshot_path.write_bytes(bytes(data[:-3]))  # the memories' blob cut short
    assert snapshots.load(store.snapshot_path, lazy=True) is None


def undecoded(nodes: dict[str, object]) -> int:
    return sum(1 for v in dict.values(nodes) if type(v) is int)


def test_warm_up_builds_what_the_first_queries_would_and_they_answer_the_same(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    for i in range(30):
        store.remember(f"fact {i} about orchards", keys=["orchard", f"tree {i}"])
    store.close()
    # One fixed clock: the answers are compared to the last digit.
    now = store.clock()
    cold, warm = (
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=lambda: now)
        for _ in range(2)
    )
    assert undecoded(warm.state.memories) == len(warm.state.memories)
    plain = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    plain.warm_up().join(timeout=60)
    assert undecoded(plain.state.memories) == undecoded(plain.state.keys) == 0
    assert plain._labels_embedded == len(plain.state.labels)
    assert plain._memories_embedded == 0  # not asked for: a copy of every vector
    plain.close()
    warm.warm_up(memory_vectors=True).join(timeout=60)
    assert undecoded(warm.state.memories) == 0
    assert warm._memories_embedded == len(warm.state.memories)
    # The cold store builds the same on demand: the answers do not depend on who built it.
    for query in ("apple", "orchard tree 7", "what fell on Newton?"):
        assert warm.recall(query) == cold.recall(query)
        assert warm.recall_memories(query, learn=False) == cold.recall_memories(query, learn=False)
    assert undecoded(cold.state.memories) == 0  # recall_memories decoded them on demand
    cold.close()
    warm.close()


def test_a_query_during_warm_up_and_a_close_after_it_are_safe(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.close()
    now = store.clock()
    reopened, other = (
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=lambda: now)
        for _ in range(2)
    )
    expected = other.recall_memories("apple", learn=False)
    other.close()
    thread = reopened.warm_up()
    assert reopened.recall_memories("apple", learn=False) == expected
    reopened.close()
    thread.join(timeout=60)
    assert not thread.is_alive()
