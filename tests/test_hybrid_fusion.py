"""recall_memories fusion: score vs rank (RRF) fusion, rrf_k, the min-score gate under each.

The signal lists are set by hand (a text index stub, a two-dimensional content matrix, no key
rows), so which memory wins is computed from each fusion's formula rather than from a model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from keytrail.core import RememberItem, Settings, Store
from keytrail.core.config import HybridParams
from keytrail.core.hybrid import HybridOutcome, hybrid_recall
from keytrail.projections.text import TextHit
from keytrail.projections.vectors import VectorSet
from keytrail.server import cli

#: every list weight as configured by default: bm25, dense, keys
WEIGHTS = HybridParams()
SUM_OF_WEIGHTS = WEIGHTS.weight_bm25 + WEIGHTS.weight_dense + WEIGHTS.weight_keys
#: rank of the memory that is mid-list in both BM25 and dense
MID_RANK = 6


class ListedText:
    """A text index stub answering every query with the hits given, best first."""

    def __init__(self, hits: list[tuple[str, float]]) -> None:
        self.hits = [TextHit(memory_id, score) for memory_id, score in hits]

    def search(
        self, query: str, limit: int, namespace: str | None = None, max_seq: int | None = None
    ) -> list[TextHit]:
        return self.hits[:limit]


def unit_vector(cosine: float) -> np.ndarray:
    """A 2-d unit row whose cosine with the query (1, 0) is `cosine`."""
    return np.array([cosine, np.sqrt(1 - cosine**2)], dtype=np.float32)


@dataclasses.dataclass
class Lists:
    store: Store
    solo: str  # first in BM25, absent from dense
    mid: str  # at MID_RANK in both BM25 and dense
    others: list[str]
    bm25: list[tuple[str, float]]
    dense: list[tuple[str, float]]


@pytest.fixture
def lists(store: Store) -> Lists:
    made = store.remember_batch(
        [RememberItem(f"Filler note number {i}", [f"topic{i}"]) for i in range(12)]
    )
    ids = [r.memory_id for r in made]
    solo, mid, others = ids[0], ids[1], ids[2:]
    # BM25: solo far ahead, then fillers, mid at MID_RANK with a third of the top score.
    bm25_order = [solo, *others[: MID_RANK - 2], mid, *others[MID_RANK - 2 :]]
    bm25 = [(m, 9.0 if m == solo else 3.0 - 0.1 * i) for i, m in enumerate(bm25_order)]
    # Dense (threshold 0.3): fillers ahead, mid at MID_RANK, solo under the threshold.
    dense_order = [*others[: MID_RANK - 1], mid, *others[MID_RANK - 1 :]]
    dense = [(m, 0.9 - 0.05 * i) for i, m in enumerate(dense_order)]
    assert [m for m, _ in bm25].index(mid) + 1 == MID_RANK
    assert [m for m, _ in dense].index(mid) + 1 == MID_RANK
    return Lists(store, solo, mid, others, bm25, dense)


def recall(lists: Lists, top_k: int = 20, **params: object) -> HybridOutcome:
    store = lists.store
    vectors = VectorSet(2)
    rows = [*lists.dense, (lists.solo, 0.1)]
    vectors.add([m for m, _ in rows], np.stack([unit_vector(c) for _, c in rows]))
    thresholds = dataclasses.replace(store.thresholds, content_recall=0.3, key_recall=2.0)
    return hybrid_recall(
        store.state,
        query="anything",
        query_vector=np.array([1.0, 0.0], dtype=np.float32),
        text=ListedText(lists.bm25),  # type: ignore[arg-type]
        memory_vectors=vectors,
        key_vectors=VectorSet(2),
        thresholds=thresholds,
        params=dataclasses.replace(WEIGHTS, time_weight=0.0, **params),  # type: ignore[arg-type]
        now=store.clock(),
        decay_days=30.0,
        top_k=top_k,
        hops=0,
    )


def rrf_fused(ranks: dict[str, int], k: float) -> float:
    """sum of weight / (k + rank) over the lists given, over sum of weight / (k + 1)."""
    weight = {"bm25": WEIGHTS.weight_bm25, "dense": WEIGHTS.weight_dense}
    return sum(weight[s] / (k + r) for s, r in ranks.items()) / (SUM_OF_WEIGHTS / (k + 1))


def score_fused(lists: Lists, memory_id: str) -> float:
    """Score fusion's formula: BM25 over the best, dense (cos - mean) / (best - mean)."""
    bm25 = dict(lists.bm25)[memory_id] / lists.bm25[0][1]
    cosines = [c for _, c in lists.dense] + [0.1]
    mean = float(np.mean(np.array(cosines, dtype=np.float32)))
    raw = dict(lists.dense).get(memory_id)
    dense = 0.0 if raw is None else (raw - mean) / (lists.dense[0][1] - mean)
    return (WEIGHTS.weight_bm25 * bm25 + WEIGHTS.weight_dense * dense) / SUM_OF_WEIGHTS


def fused_of(outcome: HybridOutcome) -> dict[str, float]:
    return {c.node.id: c.fused for c in outcome.results}


def order(outcome: HybridOutcome) -> list[str]:
    return [c.node.id for c in outcome.results]


def test_score_fusion_keeps_bm25s_clear_top_hit_first(lists: Lists) -> None:
    outcome = recall(lists, fusion="score")
    fused = fused_of(outcome)
    assert fused[lists.solo] == pytest.approx(score_fused(lists, lists.solo), abs=1e-6)
    assert fused[lists.mid] == pytest.approx(score_fused(lists, lists.mid), abs=1e-6)
    assert score_fused(lists, lists.solo) > score_fused(lists, lists.mid)
    assert order(outcome).index(lists.solo) < order(outcome).index(lists.mid)


def test_rrf_at_k_60_puts_a_memory_mid_list_in_both_above_it(lists: Lists) -> None:
    outcome = recall(lists, fusion="rrf", rrf_k=60.0)
    fused = fused_of(outcome)
    solo, mid = rrf_fused({"bm25": 1}, 60.0), rrf_fused({"bm25": MID_RANK, "dense": MID_RANK}, 60.0)
    assert fused[lists.solo] == pytest.approx(solo, abs=1e-6)
    assert fused[lists.mid] == pytest.approx(mid, abs=1e-6)
    assert mid > solo  # two middling ranks beat one first place at k = 60
    assert order(outcome).index(lists.mid) < order(outcome).index(lists.solo)


@pytest.mark.parametrize("k", [1.0, 5.0, 60.0, 200.0])
def test_rrf_k_reaches_the_ranking(lists: Lists, k: float) -> None:
    outcome = recall(lists, fusion="rrf", rrf_k=k)
    solo, mid = rrf_fused({"bm25": 1}, k), rrf_fused({"bm25": MID_RANK, "dense": MID_RANK}, k)
    assert fused_of(outcome)[lists.mid] == pytest.approx(mid, abs=1e-6)
    # A small k makes first place worth much more than sixth: the formula decides who leads.
    first, second = (lists.mid, lists.solo) if mid > solo else (lists.solo, lists.mid)
    assert order(outcome).index(first) < order(outcome).index(second)


def test_the_winner_flips_between_small_and_large_k(lists: Lists) -> None:
    assert rrf_fused({"bm25": 1}, 1.0) > rrf_fused({"bm25": MID_RANK, "dense": MID_RANK}, 1.0)
    assert rrf_fused({"bm25": 1}, 60.0) < rrf_fused({"bm25": MID_RANK, "dense": MID_RANK}, 60.0)
    small, large = order(recall(lists, fusion="rrf", rrf_k=1.0)), order(recall(lists, rrf_k=60.0))
    assert small.index(lists.solo) < small.index(lists.mid)
    # rrf_k is read only under rrf: score fusion keeps solo ahead whatever k says
    assert large.index(lists.solo) < large.index(lists.mid)
    rrf_large = order(recall(lists, fusion="rrf", rrf_k=60.0))
    assert rrf_large.index(lists.mid) < rrf_large.index(lists.solo)


def test_the_gate_under_rrf_starts_from_the_floor_of_a_listed_memory(lists: Lists) -> None:
    k = 60.0
    everything = recall(lists, fusion="rrf", rrf_k=k, min_score=0.0)
    scores = {c.node.id: c.score for c in everything.results}
    assert set(scores) == {lists.solo, lists.mid, *lists.others}
    # Under rrf nothing listed scores near 0: the floor is one last in the lowest-weighted list.
    floor = WEIGHTS.weight_keys / (k + WEIGHTS.candidates) / (SUM_OF_WEIGHTS / (k + 1))
    assert min(scores.values()) > floor
    # A gate just above the median score drops exactly the memories under it, including
    # that one, which min_score on its own (unscaled) would have kept.
    median = sorted(scores.values())[len(scores) // 2]
    min_score = (median - floor) / (1 - floor) + 1e-9
    gate = floor + min_score * (1 - floor)
    gated = recall(lists, fusion="rrf", rrf_k=k, min_score=min_score)
    assert set(order(gated)) == {m for m, s in scores.items() if s >= gate}
    assert min_score <= median < gate


def test_the_default_gate_keeps_listed_memories_under_either_fusion(lists: Lists) -> None:
    # Every memory here is in the BM25 list with a third of the top score or more.
    listed = {lists.solo, lists.mid, *lists.others}
    assert set(order(recall(lists, fusion="score"))) == listed
    assert set(order(recall(lists, fusion="rrf"))) == listed


def test_the_store_explains_which_fusion_it_used(make_store: Callable[..., Store]) -> None:
    store = make_store(hybrid=HybridParams(fusion="rrf", rrf_k=10.0))
    store.remember("Quartz crystals resonate at a precise frequency", ["quartz"])
    store.remember("Pelicans gather near the old fishing pier", ["pelican"])
    result = store.recall_memories("quartz crystals", explain=True, learn=False)
    top = result.memories[0]
    assert top.content.startswith("Quartz")
    e = top.explain
    assert e is not None and e.fusion == "rrf" and e.rrf_k == 10.0
    assert e.fused == pytest.approx(sum(s.share for s in e.signals.values()), abs=1e-5)
    bm25 = e.signals["bm25"]
    assert bm25.share == pytest.approx(
        WEIGHTS.weight_bm25 * 11.0 / (10.0 + bm25.rank) / SUM_OF_WEIGHTS, abs=1e-5
    )
    default = make_store(home=store.home.parent / "other")
    default.remember("Quartz crystals resonate at a precise frequency", ["quartz"])
    plain = default.recall_memories("quartz", explain=True, learn=False).memories[0].explain
    assert plain is not None and plain.fusion == "score" and plain.rrf_k is None


def test_fusion_is_a_setting_and_the_cli_shows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings.from_env({"KEYTRAIL_HYBRID_FUSION": "rrf", "KEYTRAIL_HYBRID_RRF_K": "30"})
    assert settings.hybrid.fusion == "rrf" and settings.hybrid.rrf_k == 30.0
    opts = ["--home", str(tmp_path / "cli"), "--embedder", "hash"]
    assert cli.main(["remember", *opts, "Quartz crystals resonate", "-k", "quartz"]) == 0
    monkeypatch.setenv("KEYTRAIL_HYBRID_FUSION", "rrf")
    monkeypatch.setenv("KEYTRAIL_HYBRID_RRF_K", "30")
    capsys.readouterr()
    assert cli.main(["recall-memories", *opts, "quartz", "--explain", "--no-learn"]) == 0
    assert "fusion rrf (k 30)" in capsys.readouterr().out
