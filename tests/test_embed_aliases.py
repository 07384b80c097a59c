"""Learned aliases: a query that keeps leading to a key's memories becomes that key's alias."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from test_server import call, run, stdio_session

from keytrail.core import InvalidInput, Store
from keytrail.events import AnyEvent, EventLog, KeyAliased, KeyUnaliased
from keytrail.projections import fold

QUERY = "where do I get food"


def events_of(store: Store, kind: type[AnyEvent]) -> list[AnyEvent]:
    return [e for e in EventLog(store.home).iter_new() if isinstance(e, kind)]


def shop(store: Store) -> tuple[str, str]:
    made = store.remember("The user buys groceries at the Lidl on Main Street", ["supermarket"])
    return made.memory_id, made.keys[0].key_id


def labels(store: Store, query: str) -> list[str]:
    return [k.label for k in store.recall(query).keys]


def test_a_repeated_query_becomes_an_alias_and_recall_finds_the_key_by_it(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    memory_id, key_id = shop(store)
    assert "supermarket" not in labels(store, QUERY)  # no shared word: hashing cannot link them
    for _ in range(2):
        store.read_memory(memory_id, via_key_id=key_id, query=QUERY)
    store.read_memory(memory_id, via_key_id=key_id, query="Where do I get FOOD?")  # a variant
    assert events_of(store, KeyAliased) == []  # two reads of the query are not a habit yet
    store.read_memory(memory_id, via_key_id=key_id, query="  Where do I  get food ")
    (learned,) = events_of(store, KeyAliased)
    assert learned.learned and learned.key_id == key_id and learned.alias == "Where do I get food"
    assert "3 reads" in learned.evidence
    found = store.recall(QUERY).keys[0]
    assert found.label == "supermarket" and "Where do I get food" in found.aliases
    # Reads without a key or without a query teach nothing, and one alias is learned once.
    store.read_memory(memory_id, via_key_id=key_id, query=QUERY)
    store.read_memory(memory_id, query=QUERY)
    assert len(events_of(store, KeyAliased)) == 1
    # A replay of the log gives the same key, aliases and counts.
    replayed = fold(EventLog(store.home).iter_new())
    assert replayed.keys[key_id] == store.state.keys[key_id]
    assert replayed.labels == store.state.labels


def test_learned_aliases_are_capped_per_key_and_never_steal_a_label(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(learned_aliases_per_key=1, alias_after_reads=2)
    memory_id, key_id = shop(store)
    store.remember("Bananas are on sale this week", ["groceries"])
    for query in (QUERY, "food shopping place", "groceries"):
        for _ in range(2):
            store.read_memory(memory_id, via_key_id=key_id, query=query)
    # the first was learned; the second hit the cap; the third is another key's label
    assert [e.alias for e in events_of(store, KeyAliased)] == [QUERY]
    assert store.state.keys[key_id].aliases == [QUERY]


def test_a_query_no_label_could_be_is_never_learned(make_store: Callable[..., Store]) -> None:
    # A key label refuses control characters (a terminal escape would act on the terminal of
    # whoever lists keys) and text with nothing visible: a learned alias becomes a label too.
    store = make_store(alias_after_reads=2)
    memory_id, key_id = shop(store)
    for _ in range(2):
        store.read_memory(memory_id, via_key_id=key_id, query="where \x1b[2Jis food")
    assert events_of(store, KeyAliased) == []
    assert store.state.keys[key_id].aliases == []
    # A query of nothing visible is refused as empty before it is read at all.
    with pytest.raises(InvalidInput, match="must not be empty"):
        store.read_memory(memory_id, via_key_id=key_id, query="\u200b\u200b")


def test_a_query_that_names_the_key_already_is_never_learned(
    make_store: Callable[..., Store],
) -> None:
    """An agent answering one question reads several memories through the key the question
    names ("Caroline"): three reads made the whole question an alias of that key, listed in
    every recall of it after, though the question found the key by its name already."""
    store = make_store()
    question = "Where did Caroline move from 4 years ago?"
    caroline = store.remember("Caroline moved from Sweden", ["Caroline"], {"Caroline": "name"})
    key_id = caroline.keys[0].key_id
    others = [store.remember(f"Caroline fact {i}", ["Caroline"]).memory_id for i in range(2)]
    for memory_id in (caroline.memory_id, *others):
        store.read_memory(memory_id, via_key_id=key_id, query=question)
    assert events_of(store, KeyAliased) == []
    assert store.state.keys[key_id].aliases == []
    # A question that does not name it still teaches the key (the rule above is unchanged).
    for memory_id in (caroline.memory_id, *others):
        store.read_memory(memory_id, via_key_id=key_id, query="who came from Scandinavia")
    assert store.state.keys[key_id].aliases == ["who came from Scandinavia"]


def test_a_query_that_names_the_key_with_other_accents_is_never_learned(
    make_store: Callable[..., Store],
) -> None:
    """recall finds the name Zoë in "Where is Zoe?" (accents folded) and "Anna Lena" in
    "Anna-Lena" (a hyphen for a space): such a question names the key as much as its label."""
    store = make_store()
    for label, question in (("Zoë", "Where did Zoe move?"), ("Anna Lena", "Is Anna-Lena in?")):
        told = store.remember(f"{label} moved", [label], {label: "name"})
        key_id = told.keys[0].key_id
        others = [store.remember(f"{label} fact {i}", [label]).memory_id for i in range(2)]
        for memory_id in (told.memory_id, *others):
            store.read_memory(memory_id, via_key_id=key_id, query=question)
        assert store.state.keys[key_id].aliases == []
    assert events_of(store, KeyAliased) == []


def test_an_unused_learned_alias_is_pruned(make_store: Callable[..., Store]) -> None:
    store = make_store(alias_after_reads=2, alias_unused_reads=3)
    memory_id, key_id = shop(store)
    for _ in range(2):
        store.read_memory(memory_id, via_key_id=key_id, query=QUERY)
    assert labels(store, QUERY)[0] == "supermarket"
    # Using it keeps it: a read with the alias resets its clock.
    for query in ("milk", "bread", QUERY, "eggs", "rice"):
        store.read_memory(memory_id, via_key_id=key_id, query=query)
    assert events_of(store, KeyUnaliased) == []
    store.read_memory(memory_id, via_key_id=key_id)  # third read since its last use
    (pruned,) = events_of(store, KeyUnaliased)
    assert pruned.key_id == key_id and pruned.alias == QUERY and "unused" in pruned.evidence
    assert store.state.keys[key_id].aliases == []
    assert "supermarket" not in labels(store, QUERY)  # its vector row is gone too
    # another process replaying the log agrees
    other = make_store(home=store.home)
    assert other.state.keys[key_id] == store.state.keys[key_id]
    assert "supermarket" not in labels(other, QUERY)


def test_an_agent_teaches_an_alias_over_mcp(tmp_path: Path) -> None:
    """The whole loop through a real MCP client against `keytrail serve` over stdio."""
    home = tmp_path / "store"

    async def test() -> None:
        async with stdio_session(home, tmp_path / "stderr.txt") as session:
            made = await call(
                session, "remember", content="The user buys groceries at the Lidl", keys=["shop"]
            )
            key_id = made["keys"][0]["key_id"]
            miss = await call(session, "recall", query=QUERY)
            assert key_id not in [k["key_id"] for k in miss["keys"]]
            for _ in range(3):
                await call(
                    session,
                    "read_memory",
                    memory_id=made["memory_id"],
                    via_key_id=key_id,
                    query=QUERY,
                )
            hit = await call(session, "recall", query=QUERY)
            assert hit["keys"][0]["key_id"] == key_id and QUERY in hit["keys"][0]["aliases"]

    run(test)


def test_a_past_read_sees_a_learned_alias_dropped_since(make_store: Callable[..., Store]) -> None:
    store = make_store(alias_after_reads=2, alias_unused_reads=1)
    memory_id, key_id = shop(store)
    for _ in range(2):
        store.read_memory(memory_id, via_key_id=key_id, query=QUERY)
    learned_at = store.state.seq
    store.read_memory(memory_id, via_key_id=key_id)  # unused once: dropped
    assert events_of(store, KeyUnaliased)
    assert "supermarket" not in labels(store, QUERY)
    # As of the moment it was learned, recall finds the key by the alias, with that key's rows.
    from keytrail.core.timetravel import view

    past = view(store, learned_at).recall(QUERY).keys
    assert past and past[0].key_id == key_id


def test_a_name_keys_learned_alias_finds_it_for_a_question_or_a_long_query(
    make_store: Callable[..., Store],
) -> None:
    """A name key is matched only literally, so its learned alias must match literally too:
    also when the query ends in "?" or has more words than a label n-gram (6)."""
    store = make_store(alias_after_reads=2)
    made = store.remember(
        "Anna approves every purchase order", ["Anna"], key_types={"Anna": "name"}
    )
    memory_id, key_id = made.memory_id, made.keys[0].key_id
    questions = ("Who signs off the budget?", "the person in charge of approving all team spending")
    for query in questions:
        for _ in range(2):
            store.read_memory(memory_id, via_key_id=key_id, query=query)
    assert store.state.keys[key_id].aliases == list(questions)
    for query in questions:
        assert [k.key_id for k in store.recall(query).keys] == [key_id], query
        found = store.recall_memories(query, learn=False).memories
        assert [m.memory_id for m in found] == [memory_id], query
        assert "keys" in found[0].found_by, query


def test_a_query_typed_decomposed_is_the_same_query_and_never_learns_a_name(
    make_store: Callable[..., Store],
) -> None:
    """macOS and some pastes type accents as combining marks. Labels are NFC, so "Zoë" typed
    decomposed names the key Zoë: it must not become another key's alias (which would make a
    recall of the name, typed that way, find that other key too), and the two forms of one
    query are one habit."""
    store = make_store(alias_after_reads=3)
    memory_id, key_id = shop(store)
    zoe = store.remember("Zoë is an old friend of the user", ["Zoë"]).keys[0].key_id
    decomposed = unicodedata.normalize("NFD", "Zoë")
    for _ in range(3):
        store.read_memory(memory_id, via_key_id=key_id, query=decomposed)
    assert events_of(store, KeyAliased) == []
    assert [k.key_id for k in store.recall(decomposed).keys] == [zoe]
    for form in ("NFC", "NFD", "NFC"):
        store.read_memory(memory_id, via_key_id=key_id, query=unicodedata.normalize(form, "café"))
    (learned,) = events_of(store, KeyAliased)
    assert learned.key_id == key_id and learned.alias == unicodedata.normalize("NFC", "café")
