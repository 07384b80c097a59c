"""recall_memories as of a past point: the past state, its rows and text, and nothing recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from keytrail.core import Store, timetravel
from keytrail.core.timetravel import view


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def test_recall_memories_as_of_answers_from_the_past_and_records_nothing(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home", "Seoul"], {"Seoul": "name"})
    before = store.state.seq
    busan = store.correct(seoul.memory_id, "The user moved to Busan", ["home", "Busan"])

    now = store.recall_memories("where does the user live Seoul Busan", learn=False)
    assert [m.memory_id for m in now.memories] == [busan.memory_id]

    written = log_bytes(store.home)
    past = store.recall_memories("where does the user live Seoul Busan", as_of=before)
    assert [m.memory_id for m in past.memories] == [seoul.memory_id]
    assert past.seq is None
    assert log_bytes(store.home) == written, "a read of the past appended something"


def test_recall_memories_as_of_shows_each_keys_link_as_it_was_then(
    make_store: Callable[..., Store],
) -> None:
    """A past answer's keys carry the link weights of that point (not today's, which reading
    has strengthened since), and a link cut since (a knowledge-graph delete of one entity's
    observation that another entity keeps) is still shown, as it was then."""
    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput

    store = make_store()
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Dana", "person"), EntityInput("Eve", "person")])
    told = store.remember(
        "Dana and Eve ride bikes together on Sundays",
        ["bikes", "Dana", "Eve"],
        {"Dana": "name", "Eve": "name"},
    )
    before = store.state.seq
    bikes = next(k.key_id for k in told.keys if k.label == "bikes")
    store.read_memory(told.memory_id, via_key_id=bikes)  # strengthens the bikes link
    kg.delete_observations(
        [ObservationInput("Dana", ["Dana and Eve ride bikes together on Sundays"])]
    )
    assert store.state.memories[told.memory_id].keys == [bikes, store.state.key_for_label("Eve").id]

    written = log_bytes(store.home)
    past = store.recall_memories("ride bikes on Sundays", as_of=before)
    (memory,) = past.memories
    then = store.past.state(before)
    assert {k.label: k.weight for k in memory.keys} == {
        then.keys[k].label: then.keys[k].links[told.memory_id]
        for k in then.memories[told.memory_id].keys
    }
    assert {k.label: k.weight for k in memory.keys} == {"bikes": 1.0, "Dana": 1.0, "Eve": 1.0}
    assert log_bytes(store.home) == written


def test_as_of_the_latest_point_is_not_moved_by_a_write_landing_meanwhile(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As of the latest seq, the past is the store's own state, which folds in place: a write
    that lands between choosing that state and reading it (another process's, another
    thread's) must not show in the answer."""
    store = make_store()
    other = make_store()  # a second process on the same store
    tea = store.remember("Alice drinks green tea every morning", ["tea", "Alice"])
    latest = store.state.seq
    made = view(store, latest)
    coffee = store.remember("Alice drinks black coffee at night", ["coffee", "Alice"])
    assert [m.memory_id for m in made.list_memories().memories] == [tea.memory_id]

    def landing(store_: Store, as_of: object, valid_at: object = None) -> object:
        chosen = view(store_, as_of, valid_at)
        other.remember("Alice drinks mint tea after lunch", ["tea", "Alice"])
        return chosen

    monkeypatch.setattr(timetravel, "view", landing)  # recall_memories imports it per call
    found = store.recall_memories("what does Alice drink", as_of=latest + 1, learn=False)
    assert coffee.memory_id in [m.memory_id for m in found.memories]
    assert len(found.memories) == 2  # tea and coffee, not the mint tea written meanwhile


def test_recall_memories_valid_at_answers_with_what_was_true_then(
    make_store: Callable[..., Store],
) -> None:
    """valid_at, as on the other reads: the version of each fact true in the world at that
    time, and none not yet true then; it records nothing."""
    store = make_store()
    lyon = store.remember(
        "Dana lives in Lyon",
        ["Dana", "Lyon"],
        {"Dana": "name", "Lyon": "name"},
        valid_from="2020-01-01T00:00:00Z",
    )
    paris = store.correct(
        lyon.memory_id,
        "Dana lives in Paris",
        ["Dana", "Paris"],
        {"Paris": "name"},
        valid_from="2025-06-01T00:00:00Z",
    )
    store.remember("Dana lives next to a bakery", ["Dana", "bakery"])  # true from now on
    question = "where does Dana live"
    now = store.recall_memories(question, learn=False)
    assert lyon.memory_id not in [m.memory_id for m in now.memories]

    written = log_bytes(store.home)
    then = store.recall_memories(question, valid_at="2024-01-01T00:00:00Z")
    assert [m.memory_id for m in then.memories] == [lyon.memory_id]
    assert then.seq is None
    later = store.recall_memories(question, valid_at="2025-07-01T00:00:00Z")
    assert [m.memory_id for m in later.memories] == [paris.memory_id]
    assert log_bytes(store.home) == written, "a read at a valid time appended something"
