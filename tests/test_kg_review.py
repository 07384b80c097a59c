"""Bugs found reviewing the knowledge graph, import/export and history (each pinned here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from keytrail.core import Store
from keytrail.core.history import changes
from keytrail.core.importers import import_text
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)
from keytrail.core.timetravel import view
from keytrail.events import EventLog
from keytrail.projections import fold
from keytrail.server.cli import main


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KEYTRAIL_HOME", "KEYTRAIL_NAMESPACE", "KEYTRAIL_KG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")


def test_changes_count_observations_created_imported_and_deleted(store: Store) -> None:
    """`changes` lists memories added and deleted: knowledge-graph observations are memories
    too, whether made by create_entities, an import, or removed by a delete."""
    kg = KnowledgeGraph(store)
    since = store.state.seq
    kg.create_entities(
        [EntityInput("Alice", "person", ["likes tea"]), EntityInput("Bob", "person", ["is tall"])]
    )
    import_text(
        store,
        '{"type":"entity","name":"Cy","entityType":"cat","observations":["naps"]}',
        "cats.jsonl",
    )
    ids = {m.content: m.id for m in store.state.memories.values()}
    kg.delete_observations([ObservationInput("Alice", ["likes tea"])])
    kg.delete_entities(["Bob"])
    c = changes(store, since=since)
    assert c.added == [ids["likes tea"], ids["is tall"], ids["naps"]]
    assert c.deleted == [ids["likes tea"], ids["is tall"]]
    assert c.forgotten == []


def test_past_graph_reads_leave_out_forgotten_observations(store: Store) -> None:
    """A forgotten observation is gone from the past too: not served as an empty string."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", ["likes tea", "plays chess"])])
    then = store.state.seq
    chess = next(m for m in store.state.memories.values() if m.content == "plays chess")
    store.forget(chess.id)
    for page in (
        kg.read_graph(as_of=then),
        kg.open_nodes(["Alice"], as_of=then),
        kg.search_nodes("alice", as_of=then),
    ):
        assert msgspec.to_builtins(page)["entities"][0]["observations"] == ["likes tea"]


def test_past_reads_of_a_deleted_observation_do_not_depend_on_the_process(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """An as_of read answers the same in the process that deleted an observation and in one
    opened afterwards."""
    store = make_store()
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", ["likes tea"])])
    then = store.state.seq
    assert view(store, then).list_memories().total == 1
    kg.delete_observations([ObservationInput("Alice", ["likes tea"])])
    same_process = view(store, then).list_memories().total
    store.close()
    reopened = make_store(home=store.home)
    assert view(reopened, then).list_memories().total == same_process


def test_namespace_export_with_a_dropped_learned_alias_imports(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    """A learned alias dropped on a key of another namespace is no part of a namespace's
    export: the export must import into an empty store (and not carry the other's alias)."""
    store = make_store(alias_after_reads=1, alias_unused_reads=2)
    tea = store.remember("Green tea is calming", ["tea"])
    store.remember("The team meets on Mondays", ["team"], namespace="work")
    key = store.state.key_for_label("tea")
    assert key is not None
    store.read_memory(tea.memory_id, key.id, "hot drink")  # learns the alias
    for _ in range(3):
        store.read_memory(tea.memory_id, key.id)  # ...and drops it, unused
    assert key.aliases == []
    out = tmp_path / "work.jsonl"
    assert main(["export", "--home", str(store.home), "--namespace", "work", "-o", str(out)]) == 0
    assert "hot drink" not in out.read_text()
    assert main(["import", "--home", str(tmp_path / "b"), str(out)]) == 0
    copy = fold(EventLog(tmp_path / "b").iter_new())
    assert [m.content for m in copy.memories.values()] == ["The team meets on Mondays"]


def _keymem(memory: str) -> str:
    return (
        '{"keys": {"k1": {"concept": "Dana", "key_type": "name"}}, "memories": {"m1": '
        + memory
        + '}, "links": [{"key_id": "k1", "memory_id": "m1"}]}'
    )


@pytest.mark.parametrize(
    ("memory", "where"),
    [
        ('{"content": "Dana likes tea", "created_at": 1e20}', "$.memories.m1.created_at"),
        ('{"content": "Dana likes tea", "created_at": NaN}', "$.memories.m1.created_at"),
        ('{"content": "Dana likes tea", "last_accessed": -1e19}', "$.memories.m1.last_accessed"),
        ('{"content": "Dana likes tea", "ttl": 100000000000000000000}', "$.memories.m1.ttl"),
        (
            '{"content": "Dana likes tea", "created_at": "9999-12-31T23:59:59", "ttl": 86400}',
            "$.memories.m1.ttl",
        ),
    ],
)
def test_keymem_times_out_of_range_are_refused_before_the_store_is_made(
    tmp_path: Path, cli_env: None, capsys: pytest.CaptureFixture[str], memory: str, where: str
) -> None:
    """A time or ttl no datetime can hold is a problem of the file, named by its JSON path and
    found in the check: no traceback, and the store is not even created."""
    source = tmp_path / "graph.json"
    source.write_text(_keymem(memory), encoding="utf-8")
    home = tmp_path / "fresh"
    with pytest.raises(SystemExit) as exit_:
        main(["import", "--home", str(home), str(source)])
    assert exit_.value.code == 2
    assert where in capsys.readouterr().err
    assert not home.exists()


def test_deleting_a_shared_observation_from_one_entity_keeps_it_on_the_other(
    store: Store,
) -> None:
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person"), EntityInput("Bob", "person")])
    store.remember("Alice and Bob are friends", ["Alice", "Bob"])
    kg.delete_observations([ObservationInput("Alice", ["Alice and Bob are friends"])])
    opened = msgspec.to_builtins(kg.open_nodes(["Alice", "Bob"]))["entities"]
    assert [(e["name"], e["observations"]) for e in opened] == [
        ("Alice", []),
        ("Bob", ["Alice and Bob are friends"]),
    ]


def test_an_existing_key_made_an_entity_gets_no_duplicate_observation(store: Store) -> None:
    """Duplicate observations are skipped: also when the key already had that memory."""
    kg = KnowledgeGraph(store)
    store.remember("Paris is nice", ["Paris"])
    kg.create_entities([EntityInput("Paris", "city", ["Paris is nice", "Has the Louvre"])])
    opened = msgspec.to_builtins(kg.open_nodes(["Paris"]))["entities"]
    assert opened[0]["observations"] == ["Paris is nice", "Has the Louvre"]


def test_delete_relations_says_every_relation_asked_for_matched(store: Store) -> None:
    """The same relation named twice (any case) matched both times: nothing 'matched nothing'."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Al", "person"), EntityInput("Bob", "person")])
    kg.create_relations([RelationInput("Al", "Bob", "knows")])
    out = kg.delete_relations(
        [RelationInput("Al", "Bob", "knows"), RelationInput("al", "BOB", "knows")]
    )
    assert (out.deleted_count, out.message) == (1, "Relations deleted successfully")
    assert out.deleted == ["Al knows Bob"]  # once, spelled as stored


def test_delete_relations_lists_those_that_matched_nothing(store: Store) -> None:
    """`notFound` names every relation asked for that matched nothing, once each."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Al", "person"), EntityInput("Bob", "person")])
    kg.create_relations([RelationInput("Al", "Bob", "knows")])
    out = kg.delete_relations(
        [
            RelationInput("Al", "Bob", "knows"),
            RelationInput("Bob", "Al", "knows"),  # both exist, no such relation
            RelationInput("Al", "ghost", "knows"),  # an entity that does not exist
            RelationInput("al", "GHOST", "knows"),  # the same one again
        ]
    )
    assert out.deleted == ["Al knows Bob"]
    assert out.not_found == ["Bob knows Al", "Al knows ghost"]
    assert out.message == ("Deleted 1 of 3 relations. Not found: Bob knows Al; Al knows ghost")


def test_delete_entities_counts_each_name_once(store: Store) -> None:
    """A name asked twice (any case or Unicode form) is one entity, found or not."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Bob", "person"), EntityInput("Zoë", "person")])
    out = kg.delete_entities(["Bob", "Bob", "bob", "ghost", "GHOST"])
    assert (out.deleted, out.not_found, out.deleted_count) == (["Bob"], ["ghost"], 1)
    assert out.message == "Deleted 1 of 2 entities. Not found: ghost"
    out = kg.delete_entities(["Zoe\u0308", "ZOË"])  # decomposed, then composed
    assert (out.deleted, out.message) == (["Zoë"], "Entities deleted successfully")
    out = kg.delete_entities(["nobody", "Nobody"])
    assert (out.not_found, out.message) == (
        ["nobody"],
        "Deleted 0 of 1 entities. Not found: nobody",
    )


def test_delete_observations_counts_each_observation_asked_once(store: Store) -> None:
    """It counted the memories deleted against the texts asked: deleting a shared observation
    from both its entities, or one entity named twice (any case), said "Deleted 1 of 2
    observations." though everything asked went, as if one had not been found. An observation
    is an entity's text: each (entity, text) asked counts once, as delete_entities and
    delete_relations count a name or a relation asked twice once."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Al", "person", ["tall"]), EntityInput("Bob", "person")])
    store.remember("Al and Bob are friends", ["Al", "Bob"])
    out = kg.delete_observations(
        [
            ObservationInput("Al", ["Al and Bob are friends"]),
            ObservationInput("Bob", ["Al and Bob are friends"]),
        ]
    )
    assert (out.message, out.deleted_count) == ("Observations deleted successfully", 2)
    assert out.deleted == ["Al and Bob are friends"]
    out = kg.delete_observations(
        [ObservationInput("Al", ["tall"]), ObservationInput("al", ["tall", "short"])]
    )
    assert (out.message, out.deleted_count) == ("Deleted 1 of 2 observations. Not found: short", 1)
    assert out.not_found == ["short"]
    assert msgspec.to_builtins(kg.read_graph())["entities"][0]["observations"] == []
