"""A fact told again (deduplicated) keeps where it came from.

The new version replaces the old one and takes over what it had built up. Told again without a
`source`, it dropped the old version's: read_memory of the current version said nothing of where
the fact came from, though a correction given no source keeps the old one's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from conftest import tell_again

from keytrail.core import RememberItem, Settings, Store
from keytrail.core.embedders import HashEmbedder
from keytrail.core.results import Remembered


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_fact_told_again_without_a_source_keeps_the_old_versions(store: Store) -> None:
    told = store.remember("Dana's lease ends in March", ["lease"], source="the signed lease")
    again = store.remember("Dana's lease ends in March", ["lease"])
    assert again.deduplicated is not None and again.deduplicated.memory_id == told.memory_id
    assert store.read_memory(again.memory_id).source == "the signed lease"
    # A source given with the retelling is the new version's.
    third = store.remember_batch(
        [RememberItem("Dana's lease ends in March", ["lease"], source="Dana, on the phone")]
    )[0]
    assert third.deduplicated is not None
    assert store.read_memory(third.memory_id).source == "Dana, on the phone"


# -- the same text under other keys ------------------------------------------------------------


def test_the_same_text_told_under_other_keys_is_deduplicated(store: Store) -> None:
    """Dedup compares with memories sharing a key; the same text told again under keys of its
    own is found by its text, and both tellings' keys lead to the one current version."""
    told = store.remember("Anna likes green tea", keys=["tea"], namespace="home")
    # Told again in other case and spacing: the same text (NFC, case-folded, spaces collapsed).
    again = store.remember("anna likes  GREEN tea\n", keys=["drinks", "Anna"], namespace="home")
    assert again.deduplicated is not None
    assert again.deduplicated.memory_id == told.memory_id
    assert again.deduplicated.similarity == 1.0
    assert store.state.memories[told.memory_id].superseded_by == again.memory_id
    assert store.state.memories[told.memory_id].supersede_reason is None
    assert store.state.memories[again.memory_id].supersede_reason == "duplicate"
    for label in ("tea", "drinks", "Anna"):
        key = store.state.key_for_label(label)
        assert key is not None
        found = store.read_key(key.id)
        assert [m.memory_id for m in found.memories] == [again.memory_id], label
    # Another namespace keeps its own.
    other = store.remember("Anna likes green tea", keys=["cafe"], namespace="work")
    assert other.deduplicated is None
    assert store.state.memories[again.memory_id].superseded_by is None


def test_the_same_text_is_not_deduplicated_into_a_memory_no_longer_current(
    tmp_path: Path,
) -> None:
    clock = Clock()
    settings = Settings(home=tmp_path / "s", embedder="hash")
    with Store(settings, embedder=HashEmbedder(), clock=clock) as s:
        replaced = s.remember("the boat is blue", keys=["boat"])
        s.correct(replaced.memory_id, "the boat is red")
        forgotten = s.remember("the shed is locked", keys=["shed"])
        s.forget(forgotten.memory_id)
        s.remember("the gate code is new", keys=["gate"], ttl_seconds=60)
        s.remember("the van is parked", keys=["van"], ttl_seconds=60)
        clock.now += timedelta(seconds=61)
        s.cleanup_expired()  # the van's expiry recorded; the gate's only passed
        for text in ("the boat is blue", "the shed is locked", "the gate code is new"):
            assert s.remember(text, keys=["elsewhere"]).deduplicated is None, text
        assert s.remember("the van is parked", keys=["elsewhere"]).deduplicated is None


def test_a_memory_told_again_under_its_id_is_compared_by_its_new_text(store: Store) -> None:
    """Dedup keeps each compared memory's text hash for the next remember. A hand-made log
    may tell a memory again under its id with another text: the hash kept for the old text
    made a retelling of the new one miss it (compared with the old text's vector)."""
    moved = store.remember("the harbour master is called Jim", keys=["sea"])
    store.remember("the tide is high at noon", keys=["sea"])  # compared with it
    sea = store.state.key_for_label("sea")
    assert sea is not None
    tell_again(store, moved.memory_id, "the boat is red", [sea])
    told = store.remember("the boat is red", keys=["sea"])
    assert told.deduplicated is not None
    assert (told.deduplicated.memory_id, told.deduplicated.similarity) == (moved.memory_id, 1.0)


def test_a_batch_finds_the_same_text_as_its_items_told_one_by_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    items = [
        RememberItem("Anna likes green tea", keys=["drinks"]),
        RememberItem("Anna likes green tea", keys=["Anna"]),  # an earlier item's text
        RememberItem("the boat is blue", keys=["colours"]),  # a stored one's
        RememberItem("The boat is blue", keys=["boat"], namespace="work"),
        RememberItem("the boat is blue", keys=["water"]),  # the earlier item's now
    ]

    def decisions(store: Store, told: list[Remembered]) -> list[Any]:
        place = {m.id: f"stored {m.content}" for m in store.state.memories.values()}
        place.update({r.memory_id: i for i, r in enumerate(told)})
        return [r.deduplicated and place[r.deduplicated.memory_id] for r in told]

    one_by_one = make_store(home=tmp_path / "one-by-one")
    batch = make_store(home=tmp_path / "batch")
    for store in (one_by_one, batch):
        store.remember("the boat is blue", keys=["boat"])
        store.remember("Anna likes green tea", keys=["tea"], namespace="work")
    told = [one_by_one.remember(i.content, i.keys, namespace=i.namespace) for i in items]
    expected = decisions(one_by_one, told)
    assert expected == [None, 0, "stored the boat is blue", None, 2]
    assert decisions(batch, batch.remember_batch(items)) == expected


def test_the_same_text_sharing_a_key_wins_over_one_found_by_its_text_alone(store: Store) -> None:
    """Equally near candidates (the same text told twice) go to the first in the walk's order,
    where one found by its text alone comes after those sharing a key."""
    boat = store.remember("the boat is blue", keys=["boat"]).memory_id
    sea = store.remember("the sea is calm", keys=["sea"]).memory_id
    sea = store.correct(sea, "the boat is blue").memory_id  # two tellings, sharing no key
    again = store.remember("the boat is blue", keys=["sea"])
    assert again.deduplicated is not None
    assert (again.deduplicated.memory_id, again.deduplicated.similarity) == (sea, 1.0)
    assert [c.memory_id for c in again.possible_contradictions] == [boat]
    last = store.remember("the boat is blue", keys=["boat"])
    assert last.deduplicated is not None
    assert (last.deduplicated.memory_id, last.deduplicated.similarity) == (boat, 1.0)
