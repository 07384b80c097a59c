"""Answers bounded however big the store is: `changes`, `history` and `cleanup_expired` cut
their lists to a page (`limit`, at most `settings.limits.page`, from `offset` on, in log order)
and carry the totals, so a client knows exactly what it did not see. Each test here fails if a
page loses, repeats or miscounts an item, or if a refused call writes anything."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from test_cli import kt

from keytrail.core import HashEmbedder, InvalidInput, RememberItem, Settings, Store, keyrank
from keytrail.core.history import Changes, changes, history
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)
from keytrail.core.timetravel import view
from keytrail.server.mcp_server import build_server

LISTS = ("added", "corrected", "expired", "forgotten", "keys_merged")


def log_bytes(store: Store) -> bytes:
    return b"".join((store.log.dir / name).read_bytes() for name in store.log.segments(fresh=True))


@pytest.fixture
def clocked(tmp_path: Path) -> Iterator[tuple[Store, list[datetime]]]:
    """A store on the hashing embedder whose clock the test moves (`now[0] += ...`), merging
    singular into plural labels ("garden" into "gardens", cosine 0.67 with the hashing model)."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = Store(
        Settings(home=tmp_path / "store", embedder="hash", threshold_overrides={"merge": 0.6}),
        embedder=HashEmbedder(),
        clock=lambda: now[0],
    )
    yield store, now
    store.close()


def every_page(fetch: Callable[[int], Any]) -> list[Any]:
    """The pages of one answer, from offset 0, following `next_offset` until it is None."""
    pages = [fetch(0)]
    while pages[-1].next_offset is not None:
        assert pages[-1].next_offset > pages[-1].offset
        pages.append(fetch(pages[-1].next_offset))
        assert len(pages) < 100, "next_offset never ran out"
    return pages


# -- changes -------------------------------------------------------------------------------------

PLURALS = ["gardens", "flowers", "planets", "oranges", "mountains"]


def eventful(store: Store, now: list[datetime]) -> dict[str, list[Any]]:
    """Some of everything changes lists, each more than a small page holds; returns what each
    list must hold, in log order."""
    added = [store.remember(f"a fact about {w}", [w]).memory_id for w in PLURALS]
    bulk = [RememberItem(f"fact {i} told in bulk", [f"bulk {i}"]) for i in range(30)]
    added += [r.memory_id for r in store.remember_batch(bulk)]
    merged: list[tuple[str, str]] = []
    for plural in PLURALS:
        singular = plural.removesuffix("s")
        outcome = store.remember(f"another fact on {singular} stuff", [singular])
        assert outcome.keys[0].resolution == "alias"
        added.append(outcome.memory_id)
        merged.append((singular, plural))
    passing = [RememberItem(f"a passing fact {i}", [f"soon {i}"], ttl_seconds=60) for i in range(9)]
    soon = [r.memory_id for r in store.remember_batch(passing)]
    added += soon
    corrected = [(m, store.correct(m, f"fact {m} told again").memory_id) for m in added[5:12]]
    forgotten = added[12:18]
    for memory_id in forgotten:
        store.forget(memory_id)
    for memory_id in added[20:23]:
        store.read_memory(memory_id)
    now[0] += timedelta(hours=1)
    assert store.cleanup_expired().count == len(soon)
    return {
        "added": added,
        "corrected": corrected,
        "expired": soon,
        "forgotten": forgotten,
        "keys_merged": merged,
    }


def items(answer: Changes, name: str) -> list[Any]:
    """A list of `answer` as plain values to compare."""
    if name == "corrected":
        return [(c.old_id, c.new_id) for c in answer.corrected]
    if name == "keys_merged":
        return [(m.alias, m.label) for m in answer.keys_merged]
    return list(getattr(answer, name))


def test_changes_pages_concatenate_to_every_list_with_exact_totals(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    since = store.state.seq
    expected = eventful(store, now)
    whole = changes(store, since=since, limit=200)
    assert whole.next_offset is None
    for name in LISTS:
        assert items(whole, name) == expected[name], name
        assert getattr(whole, f"{name}_total") == len(expected[name]), name
    assert whole.read_most_total == 3 and len(whole.read_most) == 3

    pages = every_page(lambda offset: changes(store, since=since, limit=4, offset=offset))
    longest = max(len(expected[name]) for name in LISTS)
    assert len(pages) == -(-longest // 4)  # as many pages as the longest list needs
    for page in pages:
        for name in LISTS:
            assert len(items(page, name)) <= 4
            # The counts are exact on every page, however the lists are cut.
            assert getattr(page, f"{name}_total") == len(expected[name]), name
        assert page.read_most == whole.read_most  # bounded by `top`, not paged
    for name in LISTS:
        joined = [item for page in pages for item in items(page, name)]
        assert joined == expected[name], name  # nothing lost, nothing repeated, in log order


def test_changes_past_the_end_lists_nothing_and_still_counts(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    expected = eventful(store, now)
    beyond = changes(store, limit=10, offset=1000)
    assert beyond.offset == 1000 and beyond.next_offset is None
    for name in LISTS:
        assert items(beyond, name) == []
        assert getattr(beyond, f"{name}_total") == len(expected[name])


def test_changes_in_a_namespace_counts_only_that_namespace(store: Store) -> None:
    since = store.state.seq
    store.remember_batch(
        [RememberItem(f"chess fact {i}", ["chess"], namespace="hobby") for i in range(7)]
    )
    store.remember_batch([RememberItem(f"work fact {i}", ["work"]) for i in range(5)])
    hobby = changes(store, since=since, namespace="hobby", limit=3, offset=3)
    assert hobby.added_total == 7 and len(hobby.added) == 3 and hobby.next_offset == 6


def test_changes_ends_at_the_state_it_read_so_polling_from_until_loses_nothing(
    make_store: Callable[..., Store], store: Store
) -> None:
    """Another process appending while `changes` scans: the answer stops at the state it
    refreshed (its lists are judged against that state), so `until_seq` never passes an event
    the lists left out, and the next poll from it lists that event."""
    store.remember("first fact", ["alpha"])
    other = make_store(store.home)  # another process sharing the store
    late = []

    def progress(done: int, total: int) -> None:
        if not late:  # the scan has begun: the other process writes meanwhile
            late.append(other.remember("second fact", ["beta"]))

    first = changes(store, progress=progress)
    assert late[0].memory_id not in first.added
    assert first.until_seq < late[0].seq
    polled = changes(store, since=first.until_seq)
    assert polled.added == [late[0].memory_id] and polled.added_total == 1


# -- history -------------------------------------------------------------------------------------


def test_history_pages_keep_the_depth_and_weights_of_the_whole_sequence(store: Store) -> None:
    rules = store.state.rules
    first = store.remember("a fact that gets read a lot", ["fact", "reading"])
    key = store.state.key_for_label("fact")
    assert key is not None
    for _ in range(30):
        store.read_memory(first.memory_id, key.id)
    second = store.correct(first.memory_id, "a fact that got corrected")
    for _ in range(12):
        store.read_memory(second.memory_id, key.id)

    whole = history(store, second.memory_id, limit=200)
    assert whole.events_total == len(whole.events) == 1 + 30 + 2 + 12
    assert whole.next_offset is None
    # Pages of 8 cut between the correction's two events (the 32nd and 33rd): its depth and
    # weights go with the first, on one page only.
    pages = every_page(lambda offset: history(store, second.memory_id, limit=8, offset=offset))
    assert len(pages) == -(-whole.events_total // 8)
    for page in pages:
        assert page.versions == whole.versions  # the version chain is whole on every page
        assert page.events_total == whole.events_total
        assert len(page.events) <= 8
        # The trajectory of a page is that of its events.
        assert {t.seq for t in page.trajectory} <= {e.seq for e in page.events}
    assert [e for page in pages for e in page.events] == whole.events
    assert [t for page in pages for t in page.trajectory] == whole.trajectory

    # On a later page depth and weights continue from the reads before it (a fold of the page
    # alone would start again at depth 0 and weight 1.0).
    later = history(store, second.memory_id, limit=5, offset=10)
    reads = [t for t in later.trajectory if t.memory_id == first.memory_id]
    assert [t.access_count for t in reads] == [10, 11, 12, 13, 14]
    for t in reads:
        assert t.depth == round(min(rules.depth_max, rules.depth_step * t.access_count), 6)
        step = rules.link_initial + rules.hebbian_step * t.access_count
        assert t.weights["fact"] == round(min(rules.weight_max, step), 6)
        assert t.weights["reading"] == rules.link_initial


def test_history_past_the_end_lists_no_event_and_still_counts(store: Store) -> None:
    memory = store.remember("a fact", ["fact"]).memory_id
    store.read_memory(memory)
    beyond = history(store, memory, limit=5, offset=2)
    assert beyond.events == [] and beyond.trajectory == []
    assert beyond.events_total == 2 and beyond.next_offset is None
    assert [v.memory_id for v in beyond.versions] == [memory]


# -- cleanup_expired -----------------------------------------------------------------------------


def test_cleanup_expired_expires_everything_and_lists_a_page(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    soon = [
        r.memory_id
        for r in store.remember_batch(
            [RememberItem(f"a passing fact {i}", [f"soon {i}"], ttl_seconds=60) for i in range(130)]
        )
    ]
    kept = store.remember("a lasting fact", ["lasting"]).memory_id
    now[0] += timedelta(hours=1)
    head = store.state.seq
    done = store.cleanup_expired(limit=50)
    assert done.count == 130 and done.memory_ids == soon[:50]
    assert done.seq == head + 1 == store.state.seq  # one event for all of them
    assert all(store.state.memories[m].status == "expired" for m in soon)
    assert store.state.memories[kept].status == "active"
    # Every id is in the log: changes over that one event pages through them all.
    recorded = every_page(
        lambda offset: changes(store, since=done.seq - 1, until=done.seq, limit=50, offset=offset)
    )
    assert [m for page in recorded for m in page.expired] == soon
    again = store.cleanup_expired()
    assert again.count == 0 and again.memory_ids == [] and again.seq is None


# -- limits --------------------------------------------------------------------------------------


def test_a_limit_above_the_page_is_refused_in_core_naming_the_field_and_writing_nothing(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    page = store.settings.limits.page
    memory = store.remember("a passing fact", ["soon"], ttl_seconds=60).memory_id
    now[0] += timedelta(hours=1)  # due: a cleanup that got through would write an event
    before = log_bytes(store)
    calls: list[Callable[[], object]] = [
        lambda: store.cleanup_expired(limit=page + 1),
        lambda: store.cleanup_expired(limit=0),
        lambda: changes(store, limit=page + 1),
        lambda: history(store, memory, limit=page + 1),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.field == "limit" and str(page) in str(err.value.limit)
    for call in (lambda: changes(store, offset=-1), lambda: history(store, memory, offset=-1)):
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.field == "offset"
    assert log_bytes(store) == before
    assert store.state.memories[memory].status == "active"


def test_a_limit_above_the_page_is_refused_over_mcp_naming_the_field_and_writing_nothing(
    clocked: tuple[Store, list[datetime]],
) -> None:
    store, now = clocked
    page = store.settings.limits.page
    memory = store.remember("a passing fact", ["soon"], ttl_seconds=60).memory_id
    now[0] += timedelta(hours=1)
    before = log_bytes(store)
    calls = [
        ("cleanup_expired", {"limit": page + 1}),
        ("changes", {"limit": page + 1}),
        ("history", {"memory_id": memory, "limit": page + 1}),
    ]

    async def refuse() -> None:
        async with Client(build_server(store)) as client:
            for tool, args in calls:
                result = await client.call_tool(tool, args)
                assert result.is_error, (tool, result.structured_content)
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert "limit" in text and str(page) in text, (tool, text)

    anyio.run(refuse)
    assert log_bytes(store) == before


def test_mcp_answers_carry_the_totals(clocked: tuple[Store, list[datetime]]) -> None:
    store, now = clocked
    since = store.state.seq
    expected = eventful(store, now)
    memory = expected["added"][20]

    async def ask() -> tuple[Any, Any]:
        async with Client(build_server(store)) as client:
            answers = []
            for tool, args in [
                ("changes", {"since": since, "limit": 2, "offset": 2}),
                ("history", {"memory_id": memory, "limit": 1, "offset": 1}),
            ]:
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content
                answers.append(result.structured_content)
            return answers[0], answers[1]

    changed, told = anyio.run(ask)
    assert changed["added"] == expected["added"][2:4]
    assert changed["added_total"] == len(expected["added"]) and changed["next_offset"] == 4
    assert changed["expired_total"] == 9 and changed["keys_merged_total"] == 5
    assert len(told["events"]) == 1 and told["events_total"] == 2  # created, then read
    assert told["events"][0]["type"] == "memory.read" and told["next_offset"] is None


def test_changes_over_mcp_reports_progress_while_it_scans_the_log(store: Store) -> None:
    store.remember_batch([RememberItem(f"note {i} on tea", [f"tea {i}"]) for i in range(30)])
    store.read_memory(store.remember("Alice likes tea", ["tea"]).memory_id)
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))

    async def ask() -> None:
        async with Client(build_server(store)) as client:
            result = await client.call_tool("changes", {}, progress_callback=on_progress)
            assert not result.is_error, result.content

    anyio.run(ask)
    head = store.state.seq
    assert heard[0][:2] == (0, head) and heard[-1][:2] == (head, head)
    assert [d for d, _, _ in heard] == sorted(d for d, _, _ in heard)


# -- the command line ----------------------------------------------------------------------------


def test_the_command_line_pages_history_changes_and_cleanup(tmp_path: Path) -> None:
    home = tmp_path / "store"
    made = json.loads(kt(home, "remember", "Alice likes tea", "-k", "tea", "--json").stdout)
    memory = made["memory_id"]
    for _ in range(4):
        kt(home, "read", memory)
    text = kt(home, "history", memory, "--limit", "2", "--offset", "1").stdout
    assert "events 2-3 of 5" in text and "--offset 3" in text
    data = json.loads(kt(home, "history", memory, "--limit", "2", "--json").stdout)
    assert len(data["events"]) == 2 and data["events_total"] == 5 and data["next_offset"] == 2
    for i in range(3):
        kt(home, "remember", f"another fact number {i}", "-k", "tea")
    page = json.loads(kt(home, "changes", "--limit", "1", "--offset", "1", "--json").stdout)
    assert len(page["added"]) == 1 and page["added_total"] == 4 and page["next_offset"] == 2
    text = kt(home, "changes", "--limit", "1", "--offset", "1").stdout
    assert "added      4 (showing 2-2)" in text
    # From the start (no --since): said so, not as "after seq 0 (1970-01-01 ...)".
    last = json.loads(kt(home, "stats", "--json").stdout)["seq"]
    assert text.startswith(f"changes since the store began, up to seq {last} (")
    since = json.loads(kt(home, "changes", "--since", "2", "--json").stdout)["since_at"]
    head = kt(home, "changes", "--since", "2").stdout.splitlines()[0]
    assert head.startswith(f"changes after seq 2 up to seq {last} ({since[:10]} {since[11:19]} ..")
    done = json.loads(kt(home, "cleanup-expired", "--limit", "1", "--json").stdout)
    assert done == {"memory_ids": [], "seq": None, "count": 0}
    for verb in (["history", memory], ["changes"], ["cleanup-expired"]):
        refused = kt(home, *verb, "--limit", "201", ok=False)
        assert refused.returncode != 0 and "limit" in refused.stderr and "200" in refused.stderr
        assert "--limit" in kt(home, *verb, "--help").stdout


def test_the_tools_and_their_output_schemas_say_what_the_totals_mean(store: Store) -> None:
    async def listed() -> dict[str, Any]:
        async with Client(build_server(store)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(listed)
    for name, fields in [
        ("history", ["events_total", "next_offset"]),
        ("changes", ["added_total", "read_most_total", "next_offset"]),
        ("cleanup_expired", ["count", "memory_ids"]),
    ]:
        described = tools[name].output_schema.get("description", "")
        for field in fields:
            assert field in tools[name].description, (name, field)
            assert field in described, (name, field)


# -- every paged answer --------------------------------------------------------------------------

#: Several pages' worth of everything: what each half of `paged` adds.
HALF = 10


@pytest.fixture
def paged(tmp_path: Path) -> Iterator[tuple[Store, KnowledgeGraph, int, str]]:
    """A store (clock held still, so a ranking cannot shift between pages) with more than a
    small page of every listed thing, half of it after the point `past` (a seq); and a memory
    read several times in each half."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = Store(
        Settings(home=tmp_path / "store", embedder="hash"),
        embedder=HashEmbedder(),
        clock=lambda: now[0],
    )
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("alice", "person", [])])
    read = store.remember("the much-read fact about tea", ["tea"]).memory_id

    def fill(first: int) -> None:
        numbers = range(first, first + HALF)
        store.remember_batch(
            [RememberItem(f"fact {i} about tea", ["tea", f"topic {i}"]) for i in numbers]
        )
        for i in numbers:
            store.record_turn(f"session-{i}", "user", "hello")
            store.record_turn("long", "user", f"turn {i}")
        kg.create_entities(
            [EntityInput(f"person {i}", "person", [f"likes tea {i}"]) for i in numbers]
        )
        kg.add_observations([ObservationInput("alice", [f"alice fact {i}" for i in numbers])])
        kg.create_relations([RelationInput("alice", f"person {i}", "knows") for i in numbers])
        for _ in range(4):
            store.read_memory(read)

    fill(0)
    past = store.state.seq
    now[0] += timedelta(hours=1)
    fill(HALF)
    yield store, kg, past, read
    store.close()


def _relation(r: Any) -> tuple[str, str, str]:
    return (r.from_, r.to, r.relation_type)


#: Each paged answer: how to fetch a page (store, graph, past seq or None, the read memory;
#: then offset, limit), and the items a page holds.
PAGED: dict[str, tuple[Callable[..., Any], Callable[[Any], list[Any]]]] = {
    "read_key": (
        lambda s, kg, at, m, o, n: view(s, at).read_key(
            s.state.key_for_label("tea").id, limit=n, offset=o
        ),
        lambda page: [m.memory_id for m in page.memories],
    ),
    "list_memories": (
        lambda s, kg, at, m, o, n: view(s, at).list_memories(limit=n, offset=o),
        lambda page: [m.memory_id for m in page.memories],
    ),
    "browse_keys": (
        lambda s, kg, at, m, o, n: view(s, at).browse_keys(limit=n, offset=o),
        lambda page: [k.key_id for k in page.keys],
    ),
    "list_sessions": (
        lambda s, kg, at, m, o, n: view(s, at).list_sessions(limit=n, offset=o),
        lambda page: [x.session_id for x in page.sessions],
    ),
    "get_conversation": (
        lambda s, kg, at, m, o, n: view(s, at).get_conversation("long", limit=n, offset=o),
        lambda page: [t.turn for t in page.turns],
    ),
    "history": (
        lambda s, kg, at, m, o, n: history(s, m, limit=n, offset=o),
        lambda page: [e.seq for e in page.events],
    ),
    "changes": (
        lambda s, kg, at, m, o, n: changes(s, until=at, limit=n, offset=o),
        lambda page: page.added + [c.new_id for c in page.corrected],
    ),
    "read_graph": (
        lambda s, kg, at, m, o, n: kg.read_graph(limit=n, offset=o, as_of=at),
        lambda page: [e.name for e in page.entities] + [_relation(r) for r in page.relations],
    ),
    "search_nodes": (
        lambda s, kg, at, m, o, n: kg.search_nodes("tea", limit=n, offset=o, as_of=at),
        lambda page: [e.name for e in page.entities],
    ),
    "read_entity": (
        lambda s, kg, at, m, o, n: kg.read_entity("alice", limit=n, offset=o, as_of=at),
        lambda page: page.entity.observations + [_relation(r) for r in page.relations],
    ),
}


#: history has no past point: it lists the whole chain's events whatever the time
WALKS = [
    (answer, past) for answer in PAGED for past in (False, True) if answer != "history" or not past
]


@pytest.mark.parametrize(
    ("answer", "past"), WALKS, ids=[f"{a}-{'as_of' if p else 'now'}" for a, p in WALKS]
)
def test_walking_next_offset_visits_every_item_once_and_ends_with_null(
    paged: tuple[Store, KnowledgeGraph, int, str], answer: str, past: bool
) -> None:
    """Every paged answer carries `next_offset`, meaning the same everywhere: call again with
    offset=next_offset for the next page; null on the last one. Followed from offset 0, the
    pages hold exactly the items of one page big enough for all, each once."""
    store, kg, seq, read = paged
    fetch, items = PAGED[answer]
    at = seq if past else None
    whole = fetch(store, kg, at, read, 0, 200)
    assert whole.next_offset is None
    every = items(whole)
    assert len(every) > 2 * 3, "too few items to need several pages"
    pages = every_page(lambda offset: fetch(store, kg, at, read, offset, 3))
    walked = [item for page in pages for item in items(page)]
    assert sorted(map(repr, walked)) == sorted(map(repr, every))  # each once, none missing
    assert len(set(map(repr, walked))) == len(walked)
    assert pages[-1].next_offset is None
    # Past the end: an empty page whose next_offset is null too.
    beyond = fetch(store, kg, at, read, 10_000, 3)
    assert items(beyond) == [] and beyond.next_offset is None


def test_a_big_key_pages_by_next_offset_like_a_small_one(store: Store) -> None:
    """A key with keyrank.COLUMNS_MIN_LINKS memories or more is ranked from its kept columns,
    another path to the same answer: its pages end with a null next_offset too."""
    links = keyrank.COLUMNS_MIN_LINKS + 8
    for first in range(0, links, 100):
        numbers = range(first, min(first + 100, links))
        store.remember_batch([RememberItem(f"fact {i} about tea", ["tea"]) for i in numbers])
    key = store.state.key_for_label("tea")
    assert key is not None
    pages = every_page(lambda offset: store.read_key(key.id, limit=200, offset=offset))
    walked = [m.memory_id for page in pages for m in page.memories]
    assert len(pages) == 3 and pages[0].total == links
    assert sorted(walked) == sorted(key.links) and len(set(walked)) == links


def test_every_tool_that_takes_an_offset_answers_next_offset(store: Store) -> None:
    """An agent pages every list the same way: each tool with an `offset` argument says in its
    output schema (and on every answer) where the next page starts."""

    async def listed() -> dict[str, Any]:
        server = build_server(store, ("keygraph", "knowledge_graph"))
        async with Client(server) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(listed)
    paged = sorted(name for name, t in tools.items() if "offset" in t.input_schema["properties"])
    assert set(paged) == set(PAGED)  # a new paged tool gets its walk above
    for name in paged:
        schema = tools[name].output_schema
        assert "next_offset" in schema["required"], name
        assert schema["properties"]["next_offset"]["type"] == ["integer", "null"], name
        assert "next_offset" in tools[name].description, name
