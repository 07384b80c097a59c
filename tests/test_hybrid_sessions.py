"""recall_memories with session context: adjacent turns, the direct head, as_of, SessionOrder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from keytrail.core import RememberItem, Store
from keytrail.core.sessions import SessionOrder

#: The answer ("Lisbon") sits in the turn after the one that matches the question's words.
TALK = [
    "Ana: Guess where I am moving for the new job?",
    "Ben: No idea, tell me!",
    "Ana: Lisbon, in March. The company found me a flat near the river.",
    "Ben: That sounds wonderful, congratulations.",
]
OTHER = [
    "Ana: I repotted the basil on the balcony today.",
    "Ben: Mine keeps dying, too much sun I think.",
]


def remember_sessions(store: Store, namespace: str | None = None) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {}
    for session, turns in (("s1", TALK), ("s2", OTHER)):
        items = [RememberItem(t, session_id=session, namespace=namespace) for t in turns]
        ids[session] = [r.memory_id for r in store.remember_batch(items)]
    return ids


def test_the_turn_next_to_a_match_comes_with_it(store: Store) -> None:
    ids = remember_sessions(store)
    result = store.recall_memories("moving new job", top_k=4, hops=0, explain=True, learn=False)
    returned = [m.memory_id for m in result.memories]
    match = ids["s1"][0]
    assert returned[0] == match
    # Found by nothing but adjacency: the turn before and after the match in its session.
    by_session = {m.memory_id for m in result.memories if m.found_by == ["session"]}
    assert ids["s1"][1] in by_session
    for m in result.memories:
        if m.found_by == ["session"]:
            assert m.explain is not None and m.explain.context > 0
            assert m.explain.context_from is not None
            assert m.memory_id not in ids["s2"]


def test_the_head_is_ranked_by_direct_score_alone(store: Store) -> None:
    ids = remember_sessions(store)
    result = store.recall_memories("basil balcony sun", top_k=4, hops=0, explain=True, learn=False)
    head = result.memories[:2]  # direct_share 0.5 of top_k 4
    assert head[0].memory_id in ids["s2"]
    for m in head:
        assert m.explain is not None and m.explain.context == 0.0
        assert "session" not in m.found_by
    scores = [m.score for m in result.memories[2:]]
    assert scores == sorted(scores, reverse=True)


def test_without_session_context_only_direct_matches_return(
    make_store: Callable[..., Store],
) -> None:
    from keytrail.core.config import HybridParams

    store = make_store(hybrid=HybridParams(context_neighbour=0.0, context_session=0.0))
    remember_sessions(store)
    result = store.recall_memories("moving new job", top_k=6, hops=0, learn=False)
    assert all(m.found_by != ["session"] for m in result.memories)


def test_neighbours_stay_in_their_namespace(store: Store) -> None:
    mine = remember_sessions(store, namespace="home")
    remember_sessions(store, namespace="work")  # same session ids, another namespace
    result = store.recall_memories("moving new job", top_k=6, hops=0, namespace="home", learn=False)
    home = {mid for ids in mine.values() for mid in ids}
    assert result.memories and {m.memory_id for m in result.memories} <= home


def test_a_past_read_brings_no_turn_remembered_later(store: Store) -> None:
    first = store.remember_batch([RememberItem(TALK[0], session_id="s1")])[0].memory_id
    seq = store.state.seq
    later = store.remember_batch([RememberItem(t, session_id="s1") for t in TALK[1:]])
    now = store.recall_memories("moving new job", top_k=4, hops=0, learn=False)
    assert later[0].memory_id in {m.memory_id for m in now.memories}
    past = store.recall_memories("moving new job", top_k=4, hops=0, as_of=seq)
    assert [m.memory_id for m in past.memories] == [first]


def test_session_order_catches_up_and_skips_what_is_not_eligible(store: Store) -> None:
    ids = remember_sessions(store)
    order = SessionOrder().catch_up(store.state)
    assert len(order) == len(TALK) + len(OTHER)
    s1 = ids["s1"]
    everything: Callable[[str], object] = store.state.memories.get
    assert order.neighbours(s1[0], everything) == [s1[1]]
    assert order.neighbours(s1[1], everything) == [s1[0], s1[2]]
    # A forgotten turn is stepped over: its neighbours become adjacent.
    store.forget(s1[1])

    def active(memory_id: str) -> object:
        node = store.state.memories.get(memory_id)
        return node if node is not None and node.status == "active" else None

    assert order.catch_up(store.state).neighbours(s1[0], active) == [s1[2]]
    # New turns are indexed incrementally, in order.
    more = store.remember_batch([RememberItem("Ana: One more thing.", session_id="s1")])
    order.catch_up(store.state)
    assert order.neighbours(s1[3], everything) == [s1[2], more[0].memory_id]
    assert order.session_of(more[0].memory_id) == ("default", "s1")
    assert order.session_of(store.remember("no session here").memory_id) is None


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_direct_share_bounds(make_store: Callable[..., Store], share: float) -> None:
    from keytrail.core.config import HybridParams

    store = make_store(hybrid=HybridParams(direct_share=share))
    ids = remember_sessions(store)
    result = store.recall_memories("moving new job", top_k=3, hops=0, learn=False)
    assert len(result.memories) <= 3
    if share == 1.0:  # direct matches first, by their own score; adjacency only fills up
        kinds = [m.found_by == ["session"] for m in result.memories]
        assert kinds == sorted(kinds)
        direct = [m.score for m in result.memories if m.found_by != ["session"]]
        assert direct and direct == sorted(direct, reverse=True)
    else:
        assert ids["s1"][0] in {m.memory_id for m in result.memories}


def test_a_corrected_turn_keeps_its_place_in_the_session(store: Store) -> None:
    """A correction replaces a turn where it was said, not after the session's last turn."""
    ids = remember_sessions(store)
    s1 = ids["s1"]
    store.remember_batch([RememberItem(t, session_id="s1") for t in ("Ben: Later!", "Ana: Bye")])
    fixed = store.correct(s1[2], "Ana: Porto, in March. The company found me a flat by the sea.")
    memories = store.state.memories
    order = SessionOrder().catch_up(store.state)

    def current(memory_id: str) -> object:
        node = memories.get(memory_id)
        return node if node is not None and node.current() else None

    def before_the_correction(memory_id: str) -> object:
        return None if memory_id == fixed.memory_id else memories.get(memory_id)

    assert order.neighbours(fixed.memory_id, current) == [s1[1], s1[3]]
    assert order.neighbours(s1[1], current) == [s1[0], fixed.memory_id]
    assert order.neighbours(s1[1], before_the_correction) == [s1[0], s1[2]]
    # The turn after the question is the corrected answer, as it was before the correction.
    result = store.recall_memories("No idea, tell me", top_k=4, hops=0, learn=False)
    assert fixed.memory_id in {m.memory_id for m in result.memories}


def test_a_turn_told_again_later_in_the_session_takes_the_place_it_replaces(store: Store) -> None:
    """correct(stale, by_memory_id=turn told later) makes that turn the stale one's correction.
    An order built before it kept the turn where it was told; one built after puts it in the
    stale turn's place, as for any correction: a server and one started after it answered
    different neighbours from one log. The first starts over and agrees."""
    s1 = remember_sessions(store)["s1"]
    told = store.remember("Ana: Porto, in March, by the sea.", session_id="s1").memory_id
    memories = store.state.memories

    def current(memory_id: str) -> object:
        node = memories.get(memory_id)
        return node if node is not None and node.current() else None

    live = SessionOrder().catch_up(store.state)
    assert live.neighbours(told, current) == [s1[-1]]
    store.correct(s1[2], by_memory_id=told)
    live.catch_up(store.state)
    fresh = SessionOrder().catch_up(store.state)
    assert live.neighbours(told, current) == fresh.neighbours(told, current) == [s1[1], s1[3]]
    assert live.neighbours(s1[-1], current) == fresh.neighbours(s1[-1], current)


def test_a_direct_share_above_one_still_returns_at_most_top_k(
    make_store: Callable[..., Store],
) -> None:
    """KEYTRAIL_HYBRID_DIRECT_SHARE=2 is accepted; the head must still stop at top_k."""
    from keytrail.core.config import HybridParams

    store = make_store(hybrid=HybridParams(direct_share=2.0))
    store.remember_batch([RememberItem(f"Quartz note number {i}", ["quartz"]) for i in range(10)])
    result = store.recall_memories("quartz note", top_k=3, hops=0, learn=False)
    assert len(result.memories) == 3


def test_a_store_without_sessions_never_walks_for_turn_order(store: Store) -> None:
    store.remember_batch([RememberItem(t) for t in TALK])  # no session_id
    assert store.recall_memories("moving new job", learn=False).memories
    assert store._session_order is None  # the whole-store walk was never needed
    store.remember_batch([RememberItem(t, session_id="s1") for t in OTHER])
    store.recall_memories("basil balcony", learn=False)
    assert store._session_order is not None and len(store._session_order) == len(OTHER)


def test_a_turn_corrected_many_times_keeps_both_neighbours(store: Store) -> None:
    """Each correction sits right after the version it corrects, so a turn corrected five times
    had five superseded versions between its neighbour and its current version: past MAX_SKIP,
    the lookup gave up and the turn lost its neighbour before (and that one its next turn)."""
    s1 = remember_sessions(store)["s1"]
    latest = s1[2]
    for n in range(6):
        latest = store.correct(latest, f"Ana: Porto, in March (version {n}).").memory_id
    memories = store.state.memories

    def current(memory_id: str) -> object:
        node = memories.get(memory_id)
        return node if node is not None and node.current() else None

    order = SessionOrder().catch_up(store.state)
    assert order.neighbours(latest, current) == [s1[1], s1[3]]
    assert order.neighbours(s1[1], current) == [s1[0], latest]
    assert order.neighbours(s1[3], current) == [latest]


def test_the_description_says_how_results_are_ordered_and_what_found_by_is(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent saw a 0.87 result listed before a 1.03 one, the second raised by its session
    (explain.context > 0) with found_by ["bm25", "dense", "keys"], though the description
    said such turns carry found_by "session". Both are by design (the head is ranked by own
    score, the tail with session context; found_by names what matched the memory itself):
    the description says so."""
    import anyio

    from keytrail.server.mcp_server import build_server

    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    remember_sessions(store)

    async def ask() -> tuple[str, dict[str, Any]]:
        server = build_server(store)
        tool = next(t for t in await server.list_tools() if t.name == "recall_memories")
        args = {"query": "Ana", "top_k": 2, "hops": 0, "explain": True}
        result = await server.call_tool("recall_memories", args)
        return tool.description or "", result.structured_content  # type: ignore[union-attr,return-value]

    described, answer = anyio.run(ask)
    description = " ".join(described.split())
    first, second = answer["memories"]
    assert second["score"] > first["score"]  # the tail's score holds its session context
    assert second["explain"]["context"] > 0 and "session" not in second["found_by"]
    assert "not in score order" in description
    assert "the score of the rest includes that context" in description
    assert 'or "session" (a turn next to a result in its session, matched by nothing' in description


def test_a_past_read_orders_turns_as_they_were_then(store: Store) -> None:
    """A read as of a point before correct(stale, by_memory_id=turn told later) sees that turn
    where it was told then (the session's last), not in the stale turn's place as it stands
    now: the neighbours of the turn before it are those it had then."""
    s1 = remember_sessions(store)["s1"]
    told = store.remember("Ana: Porto, in March, by the sea.", session_id="s1").memory_id
    seq = store.state.seq
    store.correct(s1[2], by_memory_id=told)

    def by_session(**past: Any) -> set[str]:
        result = store.recall_memories(
            "sounds wonderful congratulations", top_k=3, hops=0, learn=False, **past
        )
        assert result.memories[0].memory_id == s1[3]
        return {m.memory_id for m in result.memories if m.found_by == ["session"]}

    # Then: s1[3] sat between s1[2] and the turn told last; now the correction sits before it.
    assert by_session(as_of=seq) == {s1[2], told}
    assert by_session() == {told}
