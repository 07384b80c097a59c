"""Snapshots by column: a lazily loaded state is the saved one, node for node, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec

from keytrail.core import Store
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
