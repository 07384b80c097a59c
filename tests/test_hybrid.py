"""recall_memories: fusion, hops, hubs, gates, namespaces, explain, the Hebbian event, surfaces."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from keytrail.core import InvalidInput, RememberItem, Settings, Store
from keytrail.core.config import HybridParams
from keytrail.server import cli
from keytrail.server.mcp_server import build_server


def chain(store: Store) -> list[str]:
    """A -> B -> C -> D, each pair sharing one key only they have; only A matches the query."""
    ids = []
    for i, text in enumerate(
        [
            "Quartz crystals resonate at a precise frequency",
            "Umbrellas were forgotten on the northbound tram",
            "Pelicans gather near the old fishing pier",
            "Violins need their strings replaced every season",
        ]
    ):
        keys = [f"link{i}", f"link{i + 1}"] if i else ["link1"]
        if i == 3:
            keys = ["link3"]
        ids.append(store.remember(text, keys).memory_id)
    return ids


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_a_chain_is_reached_at_exactly_n_hops(store: Store, hops: int) -> None:
    a, b, c, d = chain(store)
    result = store.recall_memories("quartz crystals resonate", top_k=10, hops=hops, learn=False)
    found = {m.memory_id: m.hop for m in result.memories}
    expected = {a: 0, b: 1, c: 2, d: 3}
    assert found == {mid: hop for mid, hop in expected.items() if hop <= hops}
    scores = [m.score for m in result.memories]
    assert scores == sorted(scores, reverse=True)  # each hop decays the score
    deepest = result.memories[-1]
    assert deepest.found_by == ["hop"] and deepest.hop == hops


def test_hub_noise_is_bounded(store: Store) -> None:
    target = store.remember(
        "Grandma Rosa bakes cardamom bread every Sunday", ["family", "cardamom"]
    ).memory_id
    hub = store.remember_batch(
        [RememberItem(f"Cousin number {i} moved to town {i}", ["family"]) for i in range(40)]
    )
    hub_ids = {r.memory_id for r in hub}
    result = store.recall_memories("cardamom bread", top_k=50, hops=2, explain=True, learn=False)
    assert result.memories[0].memory_id == target
    noise = [m for m in result.memories if m.memory_id in hub_ids]
    params = store.settings.hybrid
    # Through the hub, at most `fanout` memories per hop, each worth a sliver of the target.
    assert len(noise) <= 2 * params.fanout
    top = result.memories[0].score
    assert all(m.score < 0.05 * top for m in noise)
    assert all(m.explain and m.explain.hop_via is not None for m in noise)


def test_an_orthogonal_query_is_gated_out(real_store: Store) -> None:
    real_store.remember_batch(
        [
            RememberItem("Dana's daughter Mia starts school in September", ["Mia", "school"]),
            RememberItem("The user prefers green tea to coffee", ["tea"]),
            RememberItem("Our team ships the mobile app on Fridays", ["release"]),
        ]
    )
    assert real_store.recall_memories("quantum chromodynamics lattice", learn=False).memories == []
    near = real_store.recall_memories("which drink does the user like?", learn=False)
    assert [m.content for m in near.memories][:1] == ["The user prefers green tea to coffee"]


def test_an_exact_rare_term_is_found_by_bm25_alone(real_store: Store) -> None:
    # Near-identical codes the model cannot tell apart from the one asked for.
    items = [
        RememberItem(f"Part {code} fits the printer", ["printer"])
        for code in ("QX7731", "QX7713B", "QX7721B", "QX7741B", "QX7751B", "QX7732B")
    ]
    items.append(
        RememberItem(
            "The facilities invoice for March lists fuser unit QX7731B among forty other "
            "line items for the third floor copier room",
            ["invoice"],
        )
    )
    rare = real_store.remember_batch(items)[-1].memory_id
    result = real_store.recall_memories("QX7731B", top_k=5, explain=True, learn=False)
    first = result.memories[0]
    assert first.memory_id == rare
    assert first.explain is not None and first.explain.signals["bm25"].rank == 1
    # BM25 is the only signal that singles it out: the model ranks look-alike codes higher.
    dense = first.explain.signals.get("dense")
    assert dense is None or dense.rank > 1
    bm25_found = [m for m in result.memories if m.explain and "bm25" in m.explain.signals]
    assert [m.memory_id for m in bm25_found] == [rare]


def test_namespace_filter_applies_before_the_top_k_cut(store: Store) -> None:
    store.remember_batch(
        [RememberItem(f"Sourdough starter note {i}", ["sourdough"]) for i in range(30)]
    )
    other = store.remember("Sourdough starter note for the bakery", ["sourdough"], namespace="work")
    result = store.recall_memories("sourdough starter", top_k=1, namespace="work", learn=False)
    assert [m.memory_id for m in result.memories] == [other.memory_id]
    assert all(
        m.namespace == "default"
        for m in store.recall_memories("sourdough", top_k=20, namespace="default").memories
    )


def test_explain_breaks_the_score_down(store: Store) -> None:
    a, *_ = chain(store)
    result = store.recall_memories("quartz crystals", hops=1, explain=True, learn=False)
    for m in result.memories:
        e = m.explain
        assert e is not None
        assert e.fused == pytest.approx(sum(s.share for s in e.signals.values()), abs=1e-5)
        assert m.score == pytest.approx(
            max(e.fused, e.hop_score) * e.depth_factor * e.time_factor * e.date_factor + e.context,
            abs=1e-5,
        )
    top = result.memories[0]
    assert top.memory_id == a and set(top.found_by) >= {"bm25", "dense"}
    assert store.recall_memories("quartz", learn=False).memories[0].explain is None


def test_superseded_and_forgotten_memories_are_not_returned(store: Store) -> None:
    old = store.remember("The wifi password is falcon42", ["wifi"])
    new = store.correct(old.memory_id, "The wifi password is osprey77")
    gone = store.remember("The alarm code is 9911 for the wifi closet", ["alarm"])
    store.forget(gone.memory_id)
    ids = [m.memory_id for m in store.recall_memories("wifi password", learn=False).memories]
    assert new.memory_id in ids and old.memory_id not in ids and gone.memory_id not in ids


def test_after_a_forget_the_dense_scores_are_those_of_a_fresh_process(
    make_store: Callable[..., Store],
) -> None:
    """The dense signal is scaled by the mean cosine over every memory's row. A process that
    had embedded a memory before folding its forget kept the forgotten content's row in that
    mean, where a process opened after it has the row of the blanked content: the same store
    ranked differently in a long-running server than in a fresh one."""
    store = make_store()
    for i, text in enumerate(
        ["quartz crystals resonate", "quartz watches keep time", "the river runs cold"]
    ):
        store.remember(text, [f"topic{i}"])
    gone = store.remember("quartz and granite and quartz again", ["stone"]).memory_id
    store.recall_memories("quartz", learn=False)  # the content rows, built
    store.forget(gone)
    fresh = make_store(home=store.home)
    for now in (store, fresh):
        now.clock = lambda: fresh.state.at
    live = store.recall_memories("quartz crystals", learn=False, explain=True).memories
    replayed = fresh.recall_memories("quartz crystals", learn=False, explain=True).memories
    assert [(m.memory_id, m.explain) for m in live] == [(m.memory_id, m.explain) for m in replayed]


def test_hebbian_update_is_one_event_and_replays(make_store: Callable[..., Store]) -> None:
    store = make_store()
    a, b, c, _ = chain(store)
    key1 = store.state.key_for_label("link1")
    key2 = store.state.key_for_label("link2")
    assert key1 is not None and key2 is not None
    before_seq = store.state.seq
    result = store.recall_memories("quartz crystals resonate", top_k=2, hops=2)
    assert result.seq == before_seq + 1
    kinds = [json.loads(line)["type"] for line in _log_lines(store.home)]
    assert kinds[-1] == "links.adjusted" and kinds.count("links.adjusted") == 1
    params, rules = store.settings.hybrid, store.state.rules
    returned = {m.memory_id for m in result.memories}
    assert returned == {a, b}
    assert key1.links[b] == pytest.approx(1.0 + params.reinforce)
    assert key2.links[c] == pytest.approx(1.0 - rules.hebbian_decay)  # explored, not returned
    replayed = make_store(home=store.home)
    assert replayed.state.keys[key2.id].links == key2.links
    assert replayed.state.keys[key1.id].links == key1.links
    # learn=False records nothing.
    seq = store.state.seq
    store.recall_memories("quartz crystals resonate", learn=False)
    assert store.refresh().seq == seq


def _log_lines(home: Path) -> list[str]:
    return [
        line for p in sorted((home / "log").glob("*.jsonl")) for line in p.read_text().splitlines()
    ]


def test_bad_input_is_refused_and_changes_nothing(store: Store) -> None:
    chain(store)
    seq = store.state.seq
    for kwargs, field in (
        ({"query": ""}, "query"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "hops": 6}, "hops"),
        ({"query": "x", "namespace": "bad space"}, "namespace"),
        ({"query": "quartz", "learn": "no"}, "learn"),  # a truthy string must not learn
    ):
        with pytest.raises(InvalidInput) as info:
            store.recall_memories(**kwargs)  # type: ignore[arg-type]
        assert info.value.field == field
    assert store.refresh().seq == seq


def test_constants_are_overridable_by_environment() -> None:
    settings = Settings.from_env(
        {"KEYTRAIL_HYBRID_WEIGHT_DENSE": "0.7", "KEYTRAIL_HYBRID_HOPS": "3"}
    )
    assert settings.hybrid.weight_dense == 0.7 and settings.hybrid.hops == 3
    assert Settings.from_env({}).hybrid == HybridParams()


def test_mcp_tool_only_when_enabled(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    chain(store)

    async def tools() -> list[str]:
        return [t.name for t in await build_server(store).list_tools()]

    monkeypatch.delenv("KEYTRAIL_DIRECT_RECALL", raising=False)
    assert "recall_memories" not in anyio.run(tools)
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    assert "recall_memories" in anyio.run(tools)
    for off in ("0", "off", " False "):
        monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", off)
        assert "recall_memories" not in anyio.run(tools)
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "yes")
    assert "recall_memories" in anyio.run(tools)

    async def call() -> dict[str, object]:
        result = await build_server(store).call_tool(
            "recall_memories", {"query": "quartz crystals", "hops": 0, "explain": True}
        )
        return result.structured_content  # type: ignore[union-attr,return-value]

    data = anyio.run(call)
    memories = data["memories"]
    assert isinstance(memories, list) and memories[0]["content"].startswith("Quartz")
    assert memories[0]["explain"]["signals"]["bm25"]["rank"] == 1


def test_cli_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "cli"
    opts = ["--home", str(home), "--embedder", "hash"]
    assert cli.main(["remember", *opts, "Quartz crystals resonate", "-k", "quartz"]) == 0
    capsys.readouterr()
    assert cli.main(["recall-memories", *opts, "quartz", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "Quartz crystals resonate" in out and "bm25 #1" in out
    assert cli.main(["recall-memories", *opts, "quartz", "--json", "--no-learn"]) == 0
    assert json.loads(capsys.readouterr().out)["memories"][0]["hop"] == 0
