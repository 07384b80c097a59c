"""delete_observations on an observation shared with another entity: unlinked, not deleted.

A memory remembered under two entity names is an observation of both. Deleting it from one
entity cuts that link only (`observations.deleted` v2, `unlinked`); it is deleted once no
other entity has it. Replay, as_of, history, changes and namespace export all agree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from keytrail.core import Store
from keytrail.core.history import changes, history
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.events import EventLog, KeyMemory, ObservationsDeleted
from keytrail.projections import fold
from keytrail.server.cli import main

SHARED = "Alice and Bob are friends"


def _observations(kg: KnowledgeGraph, *names: str, as_of: object = None) -> dict[str, list[str]]:
    opened = msgspec.to_builtins(kg.open_nodes(list(names), as_of=as_of))["entities"]
    return {e["name"]: e["observations"] for e in opened}


def _shared(store: Store) -> tuple[KnowledgeGraph, str]:
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person"), EntityInput("Bob", "person")])
    return kg, store.remember(SHARED, ["Alice", "Bob"]).memory_id


def _key(store: Store, label: str) -> str:
    key = store.state.key_for_label(label)
    assert key is not None
    return key.id


def _last_event(store: Store) -> ObservationsDeleted:
    event = EventLog(store.home).read_new()[-1]
    assert isinstance(event, ObservationsDeleted)
    return event


def test_the_event_unlinks_the_shared_observation_and_deletes_the_rest(store: Store) -> None:
    kg, shared = _shared(store)
    kg.add_observations([ObservationInput("Alice", ["likes tea"])])
    tea = next(m.id for m in store.state.memories.values() if m.content == "likes tea")
    out = kg.delete_observations([ObservationInput("Alice", [SHARED, "likes tea"])])
    assert (out.deleted_count, out.message) == (2, "Observations deleted successfully")
    event = _last_event(store)
    assert event.v == 2
    assert event.memory_ids == [tea]
    assert event.unlinked == [KeyMemory(key_id=_key(store, "Alice"), memory_id=shared)]
    node = store.state.memories[shared]
    assert (node.status, node.content, node.keys) == ("active", SHARED, [_key(store, "Bob")])
    assert shared not in store.state.keys[_key(store, "Alice")].links
    assert store.state.memories[tea].status == "deleted"
    assert store.state.memories[shared].status == "active"
    assert _observations(kg, "Alice", "Bob") == {"Alice": [], "Bob": [SHARED]}


def test_deleted_from_every_entity_that_has_it_is_deleted(store: Store) -> None:
    """Named for both entities in one call, or one after the other: no entity keeps it."""
    kg, shared = _shared(store)
    kg.delete_observations([ObservationInput("Alice", [SHARED]), ObservationInput("Bob", [SHARED])])
    assert (_last_event(store).memory_ids, _last_event(store).unlinked) == ([shared], [])
    assert store.state.memories[shared].status == "deleted"

    met = store.remember("Alice met Bob in Lyon", ["Alice", "Bob"]).memory_id
    kg.delete_observations([ObservationInput("Alice", ["Alice met Bob in Lyon"])])
    assert store.state.memories[met].status == "active"
    kg.delete_observations([ObservationInput("Bob", ["Alice met Bob in Lyon"])])
    assert (_last_event(store).memory_ids, _last_event(store).unlinked) == ([met], [])
    assert store.state.memories[met].status == "deleted"
    assert _observations(kg, "Alice", "Bob") == {"Alice": [], "Bob": []}


def test_a_plain_key_does_not_keep_an_observation(store: Store) -> None:
    """Only another entity keeps it: a memory of one entity and a concept key is deleted."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person")])
    mid = store.remember("Alice drinks green tea", ["Alice", "tea"]).memory_id
    kg.delete_observations([ObservationInput("Alice", ["Alice drinks green tea"])])
    assert (_last_event(store).memory_ids, _last_event(store).unlinked) == ([mid], [])
    assert store.state.memories[mid].status == "deleted"


def test_replay_from_nothing_gives_the_same_state(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    kg, shared = _shared(store)
    kg.delete_observations([ObservationInput("Alice", [SHARED])])
    live = store.state.memories[shared]
    live_alice = dict(store.state.keys[_key(store, "Alice")].links)
    store.close()

    replayed = fold(EventLog(store.home).iter_new())
    node = replayed.memories[shared]
    assert (node.status, node.content, node.keys, node.updated_seq) == (
        live.status,
        live.content,
        live.keys,
        live.updated_seq,
    )
    assert replayed.keys[live.keys[0]].links == {shared: 1.0}
    assert replayed.keys[_key(store, "Alice")].links == live_alice == {}

    reopened = make_store(home=store.home)
    assert _observations(KnowledgeGraph(reopened), "Alice", "Bob") == {
        "Alice": [],
        "Bob": [SHARED],
    }
    assert reopened.state.memories[shared].status == "active"


def test_as_of_before_the_delete_shows_it_on_both(store: Store) -> None:
    kg, _ = _shared(store)
    then = store.state.seq
    kg.delete_observations([ObservationInput("Alice", [SHARED])])
    assert _observations(kg, "Alice", "Bob", as_of=then) == {"Alice": [SHARED], "Bob": [SHARED]}
    assert _observations(kg, "Alice", "Bob") == {"Alice": [], "Bob": [SHARED]}


def test_history_and_changes_do_not_call_it_deleted(store: Store) -> None:
    kg, shared = _shared(store)
    since = store.state.seq
    kg.delete_observations([ObservationInput("Alice", [SHARED])])
    touches = [t.what for t in history(store, shared).events]
    assert touches[-1] == "deleted as an observation of Alice, kept for its other entities"
    assert history(store, shared).versions[0].status == "active"
    assert (changes(store, since=since).deleted, changes(store, since=since).forgotten) == ([], [])


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KEYTRAIL_HOME", "KEYTRAIL_NAMESPACE", "KEYTRAIL_KG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")


def test_a_namespace_export_carries_the_unlink(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    store = make_store()
    kg, shared = _shared(store)
    kg.delete_observations([ObservationInput("Alice", [SHARED])])
    out = tmp_path / "default.jsonl"
    home = str(store.home)
    assert main(["export", "--home", home, "--namespace", "default", "-o", str(out)]) == 0
    assert main(["import", "--home", str(tmp_path / "b"), str(out)]) == 0
    copy = fold(EventLog(tmp_path / "b").iter_new())
    node = copy.memories[shared]
    assert (node.status, node.content) == ("active", SHARED)
    assert [copy.keys[k].label for k in node.keys] == ["Bob"]
