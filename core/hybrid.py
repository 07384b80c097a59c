"""Direct hybrid recall (`recall_memories`): memories, with content, in one call.

Three signals each rank candidate memories:

- **bm25**: the Tantivy text index over content and the key labels the content lacks;
- **dense**: cosine of the query with each memory's content vector (at or above the model's
  content-recall threshold);
- **keys**: keys the query matches (names literally, concepts at or above the key-recall
  threshold) lead to their memories, scored key similarity x IDF x link weight.

The lists are fused (`fusion`) in one of two ways, each with per-signal weights and normalised
so 1.0 means first in every signal:

- **score** (the default): each signal's scores are scaled to 0..1 (BM25 and keys divided by
  the best hit; dense as (cosine − mean cosine over all rows) / (best − mean), so an
  unremarkable cosine counts for nothing) and summed. A score fusion keeps how far ahead a hit
  is, which rank fusion throws away: with a weak embedding model, RRF let memories that sit
  mid-list in both BM25 and dense outrank BM25's clear top hits.
- **rrf**: reciprocal rank fusion, a list's item at rank r adds weight / (rrf_k + r).

The fused score is then modulated by depth (x (0.9 + 0.1·depth)) and, mildly, time
(the time factor of DESIGN §5, weighted by `time_weight`), and raised x (1 + date_boost) when
the query names a period (a day, month or year: "on 1 February, 2023", "in July") that the
memory's time falls in, or was told within `date_grace_days` after. From the best memories a
breadth-first walk follows shared keys and related_to edges for up to `hops` hops: a memory
reached at hop h scores its parent's score x hop_decay x the edge's specificity (1 when only
the two memories share the key, else 1/count), so hubs add little.

Session context: a memory remembered as a turn of a session (`session_id`) is read with its
neighbours. Each candidate gains `context_neighbour` x the score of its best adjacent turn
(whose neighbours join as candidates, found by "session") plus `context_session` x the best
score in its session. The first `direct_share` of `top_k` results are the best by their own
score; the rest are ranked by score + context, so the top stays the strongest direct evidence
and the tail brings the turns around it (an answer often sits next to the turn that matches
the question's words). The head spreads over sessions: a memory ranks there by its score +
`head_support` x the best `support_turns` scores of other candidates in its session (several
strong hits in one session outweigh an isolated hit of equal score), picked greedily with each
earlier pick from its session multiplying that by (1 - `head_diversity`), so the first turns
of several likely sessions come before a second turn of the best one. Results under the
minimum score are dropped; the namespace filter applies before every top-k cut. Under rrf
every listed memory has at least the fused score of one last in the lowest-weighted list (the
floor), so there the gate is floor + min_score x (1 − floor) rather than min_score itself.

`hybrid_recall` is a pure function of a graph state plus the indexes (text index, vector sets)
and the query's vector, so a read as of the past can pass a past state. The Hebbian update it
proposes (links that led to returned memories strengthen, explored links to memories not
returned weaken) is recorded by the store as one `links.adjusted` event.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any

import numpy as np

from keytrail.events import InvalidInput, LinkDelta, LinksAdjusted
from keytrail.projections import GraphState, KeyNode, MemoryNode, VectorSet
from keytrail.projections.text import IndexAhead, IndexProgress

from . import validation as check
from .config import MAX_HOPS, zone_info
from .queries import (
    HUB_LINKS,
    SIMILAR_KEYS,
    literal_keys,
    newest_links,
    related_edges,
    visible,
)
from .results import KeyRef
from .sessions import SessionOrder
from .when import named_periods

if TYPE_CHECKING:
    from keytrail.events import Appender, EventLog
    from keytrail.events.log import Clock
    from keytrail.projections.text import TextIndex
    from keytrail.projections.vectors import Matrix

    from .config import HybridParams, Settings
    from .embedders import Embedder
    from .profiles import Thresholds

SIGNALS = ("bm25", "dense", "keys")
#: found_by of a memory that only session adjacency brought in
SESSION = "session"


@dataclass(frozen=True)
class SignalScore:
    """One signal's view of a memory: its rank in that signal's list, raw score, fused share."""

    rank: int
    score: float
    #: this signal's part of `fused`: weight x (the score scaled to 0..1 under score fusion,
    #: (rrf_k + 1) / (rrf_k + rank) under rrf) over the sum of weights
    share: float


@dataclass(frozen=True)
class Explanation:
    """How a result's score: max(fused, hop_score) x depth x time x date + context.

    `context` is 0 for the results ranked by their own score (the first `direct_share`);
    these were ranked by score + `session_support` (head_support x the best other scores in
    their session), discounted for earlier picks from the same session.
    """

    signals: dict[str, SignalScore]
    fused: float
    hop: int
    hop_from: str | None
    hop_via: str | None
    hop_score: float
    depth_factor: float
    time_factor: float
    score: float
    context: float = 0.0
    #: 1 + date_boost when the memory's time falls in a period the query names, else 1
    date_factor: float = 1.0
    context_from: str | None = None
    #: the fusion that made `fused`: "score" or "rrf"
    fusion: str = "score"
    #: k of rrf fusion (None under score fusion)
    rrf_k: float | None = None
    #: head_support x the best other scores in its session (ranked the head; 0 in the tail)
    session_support: float = 0.0


@dataclass(frozen=True)
class RecalledMemory:
    memory_id: str
    namespace: str
    content: str
    score: float
    #: 0 for a direct match, h for a memory reached h hops from one
    hop: int
    #: the signals that found it directly (bm25, dense, keys), else "hop" or "session"
    found_by: list[str]
    keys: list[KeyRef]
    depth: float
    created_at: datetime
    session_id: str | None = None
    explain: Explanation | None = None


@dataclass(frozen=True)
class MemoryRecall:
    query: str
    memories: list[RecalledMemory]
    #: seq of the links.adjusted event recording the Hebbian update (None: nothing recorded)
    seq: int | None = None


@dataclass(slots=True)
class _Candidate:
    node: MemoryNode
    signals: dict[str, SignalScore] = field(default_factory=dict)
    fused: float = 0.0
    hop: int = 0
    hop_from: str | None = None
    hop_via: str | None = None
    hop_score: float = 0.0
    depth_factor: float = 1.0
    time_factor: float = 1.0
    date_factor: float = 1.0
    score: float = 0.0
    #: session context added to the score when ranked in the tail (see the module docstring)
    context: float = 0.0
    context_from: str | None = None
    by_session: bool = False
    #: what session support added to its rank in the head
    session_support: float = 0.0

    @property
    def with_context(self) -> float:
        return self.score + self.context


@dataclass(frozen=True)
class HybridOutcome:
    """What `hybrid_recall` found and the link adjustments it proposes (key, memory, delta)."""

    results: list[_Candidate]
    adjustments: list[tuple[str, str, float]]


def time_factor(node: MemoryNode, now: datetime, decay_days: float) -> float:
    """0.5 + 0.5·exp(−age·(1−0.7·depth)/decay_days), age since the last read or creation."""
    last = node.last_read_at or node.created_at
    age_days = max(0.0, (now - last).total_seconds() / 86400.0)
    return 0.5 + 0.5 * math.exp(-age_days * (1 - 0.7 * node.depth) / decay_days)


def hybrid_recall(
    state: GraphState,
    *,
    query: str,
    query_vector: Matrix,
    text: TextIndex | None,
    memory_vectors: VectorSet,
    key_vectors: VectorSet,
    thresholds: Thresholds,
    params: HybridParams,
    now: datetime,
    decay_days: float,
    top_k: int,
    hops: int,
    namespace: str | None = None,
    zone: tzinfo = UTC,
    max_seq: int | None = None,
    sessions: Callable[[], SessionOrder] | None = None,
    shown: Callable[[MemoryNode, datetime], bool] = visible,
) -> HybridOutcome:
    """Rank memories for `query` from the state and indexes given (see the module docstring).

    `shown` decides which memories may be returned (a read of the past passes its own)."""
    memories = state.memories
    checked: dict[str, MemoryNode | None] = {}  # every signal and hop asks about the same ids

    def eligible(memory_id: str) -> MemoryNode | None:
        if memory_id in checked:
            return checked[memory_id]
        node = memories.get(memory_id)
        wrong_namespace = namespace is not None and node is not None and node.namespace != namespace
        if node is None or wrong_namespace or not shown(node, now):
            node = None
        checked[memory_id] = node
        return node

    limit = params.candidates
    lists: dict[str, list[tuple[str, float]]] = {}
    if text is not None:
        lists["bm25"] = _bm25(text, query, limit, namespace, max_seq, eligible)
    lists["dense"], mean_cosine = _dense(
        memory_vectors, query_vector, thresholds.content_recall, limit, eligible
    )
    lists["keys"], key_edges = _keys(
        state, query, query_vector, key_vectors, thresholds.key_recall, limit, eligible
    )

    weights = {"bm25": params.weight_bm25, "dense": params.weight_dense, "keys": params.weight_keys}
    best_possible = sum(weights[name] for name in lists) or 1.0
    rrf = params.fusion == "rrf"
    if rrf:
        # weight / (k + rank), over the sum of weight / (k + 1): 1.0 is first in every list
        k = params.rrf_k
        units = {
            name: [(k + 1) / (k + r) for r in range(1, len(ranked) + 1)]
            for name, ranked in lists.items()
        }
        floor = min(weights[name] for name in lists) * (k + 1) / (k + limit) / best_possible
        gate = floor + params.min_score * (1 - floor)
    else:
        units = {name: _by_best(ranked) for name, ranked in lists.items()}
        best = lists["dense"][0][1] if lists["dense"] else 0.0
        units["dense"] = [
            max(0.0, (raw - mean_cosine) / (best - mean_cosine or 1.0)) for _, raw in lists["dense"]
        ]
        gate = params.min_score
    found: dict[str, _Candidate] = {}
    for name, ranked in lists.items():
        for rank, ((memory_id, raw), unit) in enumerate(zip(ranked, units[name], strict=True), 1):
            cand = found.get(memory_id)
            if cand is None:
                cand = found[memory_id] = _Candidate(memories[memory_id])
            share = weights[name] * unit / best_possible
            cand.signals[name] = SignalScore(rank, round(raw, 6), round(share, 6))
            cand.fused += share

    grace = timedelta(days=params.date_grace_days)
    periods = [(start, end + grace) for start, end in named_periods(query, now, zone)]

    def modulate(cand: _Candidate) -> None:
        node = cand.node
        cand.depth_factor = 0.9 + 0.1 * node.depth
        cand.time_factor = (
            1 - params.time_weight + params.time_weight * time_factor(node, now, decay_days)
        )
        if periods:
            when = node.valid_since()
            named = any(start <= when < end for start, end in periods)
            cand.date_factor = 1 + params.date_boost if named else 1.0
        cand.score = (
            max(cand.fused, cand.hop_score)
            * cand.depth_factor
            * cand.time_factor
            * cand.date_factor
        )

    for cand in found.values():
        modulate(cand)

    explored = set(key_edges)
    _expand(state, found, hops, params, eligible, modulate, explored)

    # direct_share is a free setting (KEYTRAIL_HYBRID_DIRECT_SHARE): never a head past top_k
    head_size = min(top_k, math.ceil(top_k * params.direct_share))
    head = _head(found, head_size, gate, params, sessions)
    tail: list[_Candidate] = []
    if len(head) < top_k:
        if sessions is not None and (params.context_neighbour or params.context_session):
            _session_context(found, sessions, params, eligible, modulate)
        chosen = {c.node.id for c in head}
        tail = heapq.nsmallest(
            top_k - len(head),
            (c for c in found.values() if c.node.id not in chosen and c.with_context >= gate),
            key=lambda c: (-c.with_context, c.node.created_seq),
        )
    for cand in head:
        cand.context, cand.context_from = 0.0, None  # ranked by its own score
    for cand in tail:
        cand.session_support = 0.0
    results = head + tail
    returned = {c.node.id for c in results}
    adjustments = [
        (
            key_id,
            memory_id,
            params.reinforce if memory_id in returned else -state.rules.hebbian_decay,
        )
        for key_id, memory_id in sorted(explored)
    ]
    return HybridOutcome(results, [a for a in adjustments if a[2] != 0.0])


def _head(
    found: dict[str, _Candidate],
    size: int,
    gate: float,
    params: HybridParams,
    order_of: Callable[[], SessionOrder] | None,
) -> list[_Candidate]:
    """The first `size` results, by own score (with session support and diversity if set)."""
    direct = [c for c in found.values() if c.score >= gate]
    spread = params.head_support or params.head_diversity
    if order_of is None or not spread or all(c.node.session_id is None for c in direct):
        return heapq.nsmallest(size, direct, key=lambda c: (-c.score, c.node.created_seq))
    sessions = order_of()
    session_of = {c.node.id: sessions.session_of(c.node.id) for c in direct}
    by_session: dict[tuple[str, str], list[float]] = {}
    for cand in direct:
        session = session_of[cand.node.id]
        if session is not None:
            by_session.setdefault(session, []).append(cand.score)
    best_of = {
        s: heapq.nlargest(params.support_turns + 1, scores) for s, scores in by_session.items()
    }
    ranked: dict[str, float] = {}
    for cand in direct:
        session = session_of[cand.node.id]
        support = 0.0
        if session is not None and params.head_support:
            top = list(best_of[session])
            if cand.score in top:
                top.remove(cand.score)  # the others' support, not its own score
            support = sum(top[: params.support_turns])
        cand.session_support = params.head_support * support
        ranked[cand.node.id] = cand.score + cand.session_support
    # Diversity only discounts, so the head comes from the best by ranked score; a pool a few
    # times the head's size holds every pick unless one session fills it.
    pool = heapq.nsmallest(
        max(4 * size, size + 20), direct, key=lambda c: (-ranked[c.node.id], c.node.created_seq)
    )
    head: list[_Candidate] = []
    picked: dict[tuple[str, str] | None, int] = {}

    def value(c: _Candidate) -> tuple[float, int]:  # reads `picked` as the head grows
        session = session_of[c.node.id]
        times = picked.get(session, 0) if session is not None else 0
        return (-ranked[c.node.id] * (1 - params.head_diversity) ** times, c.node.created_seq)

    while pool and len(head) < size:
        best = min(pool, key=value)
        pool.remove(best)
        head.append(best)
        session = session_of[best.node.id]
        picked[session] = picked.get(session, 0) + 1
    return head


def _bm25(
    text: TextIndex,
    query: str,
    limit: int,
    namespace: str | None,
    max_seq: int | None,
    eligible: Any,
) -> list[tuple[str, float]]:
    # Superseded and expired versions stay in the index (time travel reads them): ask for more
    # until `limit` current ones are found or the index has no more.
    want = limit
    while True:
        hits = text.search(query, want, namespace=namespace, max_seq=max_seq)
        kept = [(h.memory_id, h.score) for h in hits if eligible(h.memory_id) is not None]
        if len(kept) >= limit or len(hits) < want:
            return kept[:limit]
        want *= 4


def _by_best(ranked: list[tuple[str, float]]) -> list[float]:
    """Scores divided by the best one (best first): 1.0 for the top hit."""
    top = ranked[0][1] if ranked else 0.0
    return [raw / top if top > 0 else 0.0 for _, raw in ranked]


def _dense(
    vectors: VectorSet, query_vector: Matrix, threshold: float, limit: int, eligible: Any
) -> tuple[list[tuple[str, float]], float]:
    """The best rows at or above the threshold, and the mean cosine over all rows."""
    if not len(vectors):
        return [], 0.0
    scores = vectors.matrix @ query_vector
    mean = float(scores.mean())
    above = np.flatnonzero(scores >= threshold)
    # Sort only what can be kept, with room for ineligible rows (other namespaces, superseded);
    # all of them when that room runs out.
    room = 4 * limit
    if len(above) > room:
        best = above[np.argpartition(-scores[above], room)[:room]]
        kept = _eligible_rows(best, scores, vectors.ids, limit, eligible)
        if len(kept) == limit:
            return kept, mean
    return _eligible_rows(above, scores, vectors.ids, limit, eligible), mean


def _eligible_rows(
    rows: Any, scores: Any, ids: list[str], limit: int, eligible: Any
) -> list[tuple[str, float]]:
    order = rows[np.argsort(-scores[rows], kind="stable")]
    kept: list[tuple[str, float]] = []
    seen: set[str] = set()
    for row in order:  # stops after `limit` eligible rows: the filter comes before the cut
        memory_id = ids[row]
        if memory_id in seen or eligible(memory_id) is None:
            continue
        seen.add(memory_id)
        kept.append((memory_id, float(scores[row])))
        if len(kept) == limit:
            break
    return kept


def _member_count(key: KeyNode, eligible: int) -> int:
    """How many memories `key` leads to, given the `eligible` ones among `newest_links(key)`.

    A hub's count is all its links: a walk over them to count the eligible ones is what
    newest_links avoids, and its share of a score is near zero either way.
    """
    return eligible if len(key.links) <= HUB_LINKS else len(key.links)


def _keys(
    state: GraphState,
    query: str,
    query_vector: Matrix,
    vectors: VectorSet,
    threshold: float,
    limit: int,
    eligible: Any,
) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """Memories through the keys the query matches: key similarity x IDF x link weight."""
    matched = literal_keys(state, query)
    if len(vectors):
        scores = vectors.matrix @ query_vector
        above = np.flatnonzero(scores >= threshold)
        similar = 0
        # The best SIMILAR_KEYS concepts, not the concepts among as many best rows: name
        # rows, which never match by similarity, must not crowd them out.
        for row in above[np.argsort(-scores[above])]:
            key_id = vectors.ids[row]
            if state.keys[key_id].type == "concept" and key_id not in matched:
                matched[key_id] = float(scores[row])
                similar += 1
                if similar == SIMILAR_KEYS:
                    break
    totals: dict[str, float] = {}
    edges: list[tuple[str, str]] = []
    for key_id, similarity in matched.items():
        key = state.keys[key_id]
        links = key.links
        linked = [(mid, links[mid]) for mid in newest_links(key) if eligible(mid) is not None]
        if not linked:
            continue
        df = _member_count(key, len(linked))
        idf = 1.0 if df <= 1 else 1.0 / df
        if key.type != "concept":
            idf *= 0.5
        for memory_id, weight in linked:
            totals[memory_id] = totals.get(memory_id, 0.0) + similarity * idf * weight
    ranked = heapq.nlargest(limit, totals.items(), key=lambda kv: kv[1])
    for key_id in matched:
        links = state.keys[key_id].links
        edges.extend((key_id, mid) for mid, _ in ranked if mid in links)
    return ranked, edges


def _expand(
    state: GraphState,
    found: dict[str, _Candidate],
    hops: int,
    params: HybridParams,
    eligible: Any,
    modulate: Any,
    explored: set[tuple[str, str]],
) -> None:
    """Breadth-first over shared keys and related_to edges, from the best memories."""
    counts: dict[str, list[str]] = {}

    def members(key_id: str) -> list[str]:
        if key_id not in counts:
            key = state.keys[key_id]
            counts[key_id] = [m for m in newest_links(key) if eligible(m) is not None]
        return counts[key_id]

    frontier = heapq.nlargest(params.fanout, found.values(), key=lambda c: c.score)
    for hop in range(1, hops + 1):
        reached: dict[str, _Candidate] = {}  # first reached at this hop
        touched: dict[str, _Candidate] = {}  # whose hop score rose
        for parent in frontier:
            node = parent.node
            base = max(parent.fused, parent.hop_score) * params.hop_decay
            steps: list[tuple[str, str | None, float]] = []
            for key_id in node.keys:
                if key_id not in state.keys:
                    continue
                group = members(key_id)
                links = state.keys[key_id].links
                size = _member_count(state.keys[key_id], len(group))
                specificity = 1.0 if size <= 2 else 1.0 / size
                others = [m for m in group if m != node.id]
                nearest = (
                    others
                    if len(others) <= params.fanout
                    else heapq.nlargest(params.fanout, others, key=links.__getitem__)
                )
                for memory_id in nearest:
                    explored.add((key_id, memory_id))
                    steps.append((memory_id, key_id, specificity * min(1.0, links[memory_id])))
            for memory_id in related_edges(state.memories, node, lambda m: eligible(m) is not None):
                steps.append((memory_id, None, 1.0))
            for memory_id, via, strength in steps:
                value = base * strength
                cand = found.get(memory_id) or reached.get(memory_id)
                if cand is None:
                    cand = reached[memory_id] = _Candidate(state.memories[memory_id], hop=hop)
                if value > cand.hop_score:
                    cand.hop_score, cand.hop_from, cand.hop_via = value, node.id, via
                    touched[memory_id] = cand
        found.update(reached)
        for cand in touched.values():
            modulate(cand)
        frontier = heapq.nlargest(params.fanout, reached.values(), key=lambda c: c.score)
        if not frontier:
            break


def _session_context(
    found: dict[str, _Candidate],
    order_of: Callable[[], SessionOrder],
    params: HybridParams,
    eligible: Any,
    modulate: Any,
) -> None:
    """Give each candidate its session context; bring in the adjacent turns of candidates."""
    if not any(c.node.session_id is not None for c in found.values()):
        return  # no candidate is a session turn: the turn order is not even looked at
    sessions = order_of()
    scored = [c for c in found.values() if c.score > 0 and sessions.session_of(c.node.id)]
    if not scored:
        return
    session_best: dict[tuple[str, str] | None, float] = {}
    nearby: dict[str, tuple[float, str | None]] = {}  # memory id -> best adjacent score, whose
    for cand in scored:
        session = sessions.session_of(cand.node.id)
        session_best[session] = max(session_best.get(session, 0.0), cand.score)
        for memory_id in sessions.neighbours(cand.node.id, eligible):
            if cand.score > nearby.get(memory_id, (0.0, None))[0]:
                nearby[memory_id] = (cand.score, cand.node.id)
    for memory_id in nearby:
        if memory_id not in found:
            node = eligible(memory_id)
            added = found[memory_id] = _Candidate(node, by_session=True)
            modulate(added)
    for cand in found.values():
        session = sessions.session_of(cand.node.id)
        if session is None:
            continue
        adjacent, source = nearby.get(cand.node.id, (0.0, None))
        cand.context = (
            params.context_neighbour * adjacent
            + params.context_session * session_best.get(session, 0.0)
        )
        cand.context_from = source


class HybridQueries:
    """`recall_memories` on the Store (a mixin, like `Queries`)."""

    state: GraphState
    settings: Settings
    clock: Clock
    log: EventLog
    embedder: Embedder
    thresholds: Thresholds
    text: TextIndex
    _mutex: threading.RLock
    _text_observed_from: int
    _forgotten_unindexed: list[str]
    _unlinked_unindexed: list[str]
    _session_order: SessionOrder | None = None
    #: turn order of the last past state read (see `past_session_order`)
    _past_session_order: SessionOrder | None = None
    #: dropped by a reload after a cut-back, as `Queries._KEPT_BETWEEN_CALLS`
    _KEPT_BETWEEN_CALLS: tuple[str, ...] = ("_session_order", "_past_session_order")

    def refresh(self) -> GraphState:
        raise NotImplementedError

    def key_vectors(self) -> VectorSet:
        raise NotImplementedError

    def memory_vectors(self) -> VectorSet:
        raise NotImplementedError

    def wait_for_vectors(self, need: Any = "all", progress: Any = None) -> None:
        raise NotImplementedError

    def _write(self, decide: Any) -> Any:
        raise NotImplementedError

    def _fold(self, events: Iterable[Any]) -> None:
        raise NotImplementedError

    def session_order(self) -> SessionOrder:
        """Turn order per session, caught up with the live state (call holding the mutex).

        Called only when a candidate is a session turn, so a store that never records sessions
        never walks its memories for it (a lazily opened state stays undecoded).
        """
        order = self._session_order
        if order is None:
            order = self._session_order = SessionOrder()
        return order.catch_up(self.state)

    def past_session_order(self, state: GraphState) -> SessionOrder:
        """Turn order per session as it was in the past `state` (call holding the mutex).

        Not the live order: a `correct(by_memory_id=...)` since moved the turn told later into
        the replaced turn's place, and a read of then must see it where it was told. Kept for
        the last past state read (a time view's state is kept and reused), so repeated reads
        of one point walk its memories once.
        """
        order = self._past_session_order
        if order is None:
            order = self._past_session_order = SessionOrder()
        return order.catch_up(state)

    def index_text(self, progress: IndexProgress | None = None) -> int:
        """Bring the text index up to date now (searches otherwise do it when first needed).
        Returns how many memories it holds. `progress(done, total)` hears how many of the
        memories to index are written (nothing when there is nothing to index)."""
        with self._mutex:
            self.refresh()
            index = self.text_index(progress)
            # Counted holding the index's writers' lock: another process's forget removes the
            # index under it, and a purge or rebuild swaps a new one in; read without it, the
            # files could go mid-read (ValueError: `keytrail rebuild` ended in a traceback).
            with index.exclusive():
                if index.drop_if_moved():
                    index = self.text_index(progress)
                return len(index.committed()[1])

    def catch_up_text_index(self, progress: IndexProgress | None = None) -> None:
        """Catch the text index up with the log now, telling `progress(done, total)` about the
        memories it writes (a query catching up itself reports nothing); cheap when current."""
        with self._mutex:
            self.refresh()
            self.text_index(progress)

    def text_index(self, progress: IndexProgress | None = None) -> TextIndex:
        """The text index, caught up with the state (call holding the mutex)."""
        index = self.text
        index._open()
        if (
            index.current_for(self.state)
            and index.seq >= self._text_observed_from
            and not self._forgotten_unindexed
            and not self._unlinked_unindexed
            # Another process (a rebuild) removed it and wrote a new one, which leaves the
            # log as it was: searched through this handle, tantivy's own reloads of the path
            # may show it empty while it is filled.
            and not index.moved()
        ):
            return index  # nothing to write: no need to wait for another process's writes
        # Catch up holding the index's writers' lock: a forget appends its event before it
        # deletes the index under that lock, so the state indexed from here either has folded
        # the forget or is written before the deletion (never into the index after it).
        with index.exclusive():
            self.refresh()
            index.drop_if_moved()  # open what is there now, whole: its writer let the lock go

            def changed() -> tuple[list[str], list[str]]:
                """The memories forgotten since the index's seq, and those a knowledge-graph
                delete may have cut keys from (the index compares their keys fields)."""
                if index.seq >= self._text_observed_from:
                    return self._forgotten_unindexed, self._unlinked_unindexed
                # The index was behind when this process started watching (or folded the log
                # afresh): both are found in the state, in one walk of it. Every memory
                # changed since the index's seq may have lost a key.
                seq, forgotten, unlinked = index.seq, [], []
                for m in self.state.memories.values():
                    if m.status == "forgotten":
                        forgotten.append(m.id)
                    elif m.updated_seq > seq >= m.created_seq:
                        unlinked.append(m.id)
                return forgotten, unlinked

            # The log's cursor stands at the state's last event: what it reads back from there
            # tells whether the index's last event is still the log's.
            time_of = self.log.time_of
            try:
                forgotten, unlinked = changed()
                index.sync(self.state, forgotten, progress, time_of, unlinked)
            except IndexAhead:
                # Another process indexed events we have not folded yet: catch up and sync
                # again. Still ahead after that means the log is older than the index (a
                # restored store), or it indexed lines a failed append then cut back.
                self.refresh()
                try:
                    forgotten, unlinked = changed()
                    index.sync(self.state, forgotten, progress, time_of, unlinked)
                except IndexAhead:
                    index.rebuild(self.state, progress)
            self._forgotten_unindexed = []
            self._unlinked_unindexed = []
        return index

    def recall_memories(
        self,
        query: str,
        top_k: int | None = None,
        namespace: str | None = None,
        hops: int | None = None,
        explain: bool = False,
        learn: bool = True,
        as_of: object | None = None,
        valid_at: object | None = None,
    ) -> MemoryRecall:
        """Memories (with content) for a query, by BM25 + keys + content fused and expanded.

        `hops` (0-5, default from settings) bounds the walk over shared keys and related_to.
        With `learn`, the links that led to returned memories are strengthened and explored
        links to memories not returned weakened, as one `links.adjusted` event.
        `as_of` (a log seq or ISO-8601 time) answers from the store as it stood then: the past
        state, the key and content rows that existed, text hits created by then; `valid_at`
        (ISO-8601) answers with the version of each fact true in the world then. Either records
        nothing.
        """
        from .timetravel import TimeView, view

        limits = self.settings.limits
        params = self.settings.hybrid
        query = check.text("query", query, limits.query_chars)
        if top_k is None:
            top_k = limits.default_top_k()
        top_k = check.count("top_k", top_k, 1, limits.top_k)
        namespace = check.optional_namespace(namespace)
        hops = check.count("hops", params.hops if hops is None else hops, 0, MAX_HOPS)
        if not isinstance(explain, bool):
            raise InvalidInput("explain", "must be true or false")
        if not isinstance(learn, bool):
            raise InvalidInput("learn", "must be true or false")
        self.wait_for_vectors("all")  # the content path reads every memory's vector
        query_vector = self.embedder.embed([query])[0]
        timed = as_of is not None or valid_at is not None
        past = view(self, as_of, valid_at) if timed else None  # type: ignore[arg-type]
        with self._mutex:
            self.refresh()
            source = past if isinstance(past, TimeView) else self
            source.refresh()  # a past pinned to the latest seq stays there (TimeView.refresh)
            outcome = hybrid_recall(
                source.state,
                query=query,
                query_vector=query_vector,
                text=self.text_index(),
                memory_vectors=source.memory_vectors(),
                key_vectors=source.key_vectors(),
                thresholds=self.thresholds,
                params=params,
                now=source.clock(),
                decay_days=self.settings.time_decay_days,
                zone=zone_info(self.settings.time_zone),
                top_k=top_k,
                hops=hops,
                namespace=namespace,
                max_seq=source.state.seq if source is not self else None,
                sessions=self.session_order
                if source.state is self.state  # the present, or a view of it (valid_at)
                else lambda: self.past_session_order(source.state),
                shown=past._visible if isinstance(past, TimeView) else visible,
            )
            if source is not self:
                learn = False  # a read of the past reinforces nothing
            # Keys, types and link weights as the answering state holds them: a past answer's
            # are those of then (a link cut since is not in today's key at all).
            keys = source.state.keys
            results = [self._recalled(c, explain, params, keys) for c in outcome.results]
        seq = None
        if learn and outcome.adjustments:
            seq = self._record_adjustments(outcome.adjustments, query)
        return MemoryRecall(query=query, memories=results, seq=seq)

    def _record_adjustments(self, adjustments: list[tuple[str, str, float]], query: str) -> int:
        def decide(app: Appender) -> int:
            keys = self.state.keys
            deltas = [
                LinkDelta(key_id=k, memory_id=m, delta=round(d, 6))
                for k, m, d in adjustments
                if k in keys and m in keys[k].links
            ]
            stamped = app.append(LinksAdjusted(adjustments=deltas, query=query))
            self._fold((stamped,))
            return stamped.seq

        result: int = self._write(decide)
        return result

    def _recalled(
        self, cand: _Candidate, explain: bool, params: HybridParams, keys: dict[str, KeyNode]
    ) -> RecalledMemory:
        node = cand.node
        return RecalledMemory(
            memory_id=node.id,
            namespace=node.namespace,
            content=node.content,
            score=round(cand.with_context, 6),
            hop=cand.hop,
            found_by=[s for s in SIGNALS if s in cand.signals]
            or [SESSION if cand.by_session else "hop"],
            keys=[
                KeyRef(k, keys[k].label, keys[k].type, round(keys[k].links[node.id], 6))
                for k in node.keys
                if k in keys
            ],
            depth=round(node.depth, 6),
            created_at=node.created_at,
            session_id=node.session_id,
            explain=Explanation(
                signals=cand.signals,
                fused=round(cand.fused, 6),
                hop=cand.hop,
                hop_from=cand.hop_from,
                hop_via=cand.hop_via,
                hop_score=round(cand.hop_score, 6),
                depth_factor=round(cand.depth_factor, 6),
                time_factor=round(cand.time_factor, 6),
                date_factor=round(cand.date_factor, 6),
                score=round(cand.with_context, 6),
                context=round(cand.context, 6),
                context_from=cand.context_from,
                fusion=params.fusion,
                rrf_k=params.rrf_k if params.fusion == "rrf" else None,
                session_support=round(cand.session_support, 6),
            )
            if explain
            else None,
        )
