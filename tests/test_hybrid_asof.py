"""recall_memories as of a past point: the past state, its rows and text, and nothing recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from keytrail.core import Store


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
