"""The head of recall_memories (the first `direct_share` of top_k): session support, diversity."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from keytrail.core import RememberItem, Store
from keytrail.core.config import HybridParams
from keytrail.core.hybrid import _Candidate, _head

#: session -> number of turns; the scores below go to the first turns of each
SESSIONS = {"a": 3, "b": 2, "c": 1}
SCORES = {"a0": 1.0, "a1": 0.9, "a2": 0.3, "b0": 0.85, "b1": 0.1, "c0": 0.92}


def candidates(store: Store) -> dict[str, _Candidate]:
    """One candidate per turn, named like "a0", scored from SCORES (by memory id)."""
    found: dict[str, _Candidate] = {}
    for session, turns in SESSIONS.items():
        items = [RememberItem(f"turn {i} of {session}", session_id=session) for i in range(turns)]
        for i, outcome in enumerate(store.remember_batch(items)):
            node = store.state.memories[outcome.memory_id]
            found[f"{session}{i}"] = _Candidate(node, score=SCORES[f"{session}{i}"])
    return found


def head_names(store: Store, size: int, **params: float) -> list[str]:
    params = {"head_support": 0.0, "head_diversity": 0.0, **params}  # each rule on its own
    found = candidates(store)
    name_of = {c.node.id: name for name, c in found.items()}
    by_id = {c.node.id: c for c in found.values()}
    with store._mutex:
        head = _head(by_id, size, 0.2, HybridParams(**params), store.session_order)  # type: ignore[arg-type]
    return [name_of[c.node.id] for c in head]


def test_without_support_or_diversity_the_head_is_the_best_scores_above_the_gate(
    store: Store,
) -> None:
    assert head_names(store, 5) == ["a0", "c0", "a1", "b0", "a2"]  # b1 (0.1) is under the gate


def test_support_lifts_a_turn_whose_session_holds_another_strong_hit(store: Store) -> None:
    # score + 0.2 x the session's best other score: a1 0.9 + 0.2 = 1.1 passes the isolated c0
    # (0.92, alone in its session); b0 0.85 + 0.2 x 0.1 = 0.87 stays behind c0.
    assert head_names(store, 4, head_support=0.2, support_turns=1) == ["a0", "a1", "c0", "b0"]


def test_support_sums_the_best_other_turns(store: Store) -> None:
    # support_turns 2: a2 0.3 + 0.5 x (1.0 + 0.9) = 1.25 passes c0 (0.92) and b0 (0.85 + 0.05)
    names = head_names(store, 4, head_support=0.5, support_turns=2)
    assert names == ["a0", "a1", "a2", "c0"]


def test_diversity_prefers_a_session_not_yet_in_the_head(store: Store) -> None:
    # a second pick from session a counts a1 0.9 x 0.5 = 0.45, behind c0 and b0
    assert head_names(store, 4, head_diversity=0.5) == ["a0", "c0", "b0", "a1"]


def test_support_and_diversity_together(store: Store) -> None:
    # ranked: a0 1.18, a1 1.1, c0 0.92, b0 0.87; then a1 halves to 0.55 once a0 is in
    names = head_names(store, 4, head_support=0.2, support_turns=1, head_diversity=0.5)
    assert names == ["a0", "c0", "b0", "a1"]


def test_the_defaults_use_both(store: Store) -> None:
    defaults = HybridParams()
    assert defaults.head_support > 0 and defaults.head_diversity > 0
    # ranked: a0 1.18, a1 1.1, c0 0.92, b0 0.87; a1 counts 1.1 x 0.8 = 0.88 once a0 is in
    names = head_names(
        store,
        4,
        head_support=defaults.head_support,
        support_turns=defaults.support_turns,
        head_diversity=defaults.head_diversity,
    )
    assert names == ["a0", "c0", "a1", "b0"]


@pytest.mark.parametrize("diversity", [0.0, 0.9])
def test_recall_memories_spreads_its_head_over_sessions(
    make_store: Callable[..., Store], diversity: float
) -> None:
    store = make_store(hybrid=HybridParams(head_support=0.0, head_diversity=diversity))
    kites = ["Ana: blue kite, blue kite!", "Ben: a blue kite, yes, a blue kite."]
    shop = ["Ana: I saw a blue kite in the shop window next to the bakery on the corner."]
    store.remember_batch([RememberItem(t, session_id="kites") for t in kites])
    store.remember_batch([RememberItem(t, session_id="shop") for t in shop])
    result = store.recall_memories("blue kite", top_k=4, hops=0, learn=False)
    head_sessions = [m.session_id for m in result.memories[:2]]
    # Both kite turns outscore the long shop turn; diversity lets the shop turn into the head.
    assert head_sessions == (["kites", "kites"] if diversity == 0.0 else ["kites", "shop"])


def test_explain_shows_the_session_support_that_ranked_the_head(store: Store) -> None:
    kites = ["Ana: blue kite, blue kite!", "Ben: a blue kite, yes, a blue kite."]
    store.remember_batch([RememberItem(t, session_id="kites") for t in kites])
    result = store.recall_memories("blue kite", top_k=4, hops=0, explain=True, learn=False)
    first = result.memories[0].explain
    assert first is not None
    # the other kite turn is a candidate of the same session: support = 0.2 x its score
    other = result.memories[1]
    assert first.session_support == pytest.approx(0.2 * other.score, abs=1e-5)
    for m in result.memories[2:]:
        assert m.explain is not None and m.explain.session_support == 0.0
