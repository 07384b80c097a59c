"""Long work on a big store: what it holds the appenders' lock for, what it reports, what it
answers. Each test counts calls or sizes instead of timing anything (see BENCHMARKS.md, "Long
operations", for the measured numbers these stand in for)."""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest.mock import patch

import anyio
import pytest
from mcp import Client
from test_cli import kt, run_main

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core import reembed as projection
from keytrail.core.decide import Batch
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.core.maintenance import drop_cache
from keytrail.events.log import Appender
from keytrail.server import cli, mcp_server
from keytrail.server.mcp_server import build_server


def test_a_batch_matches_its_new_concept_labels_against_the_graph_in_one_pass(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Matching a new concept label against every key of the graph reads the whole key matrix
    # (20,000 labels: ~8 ms). Done once per item, a 500-item remember_batch on a 100,000-memory
    # store held the appenders' lock 9 s, every other process's write waiting behind it.
    # The hashing embedder puts garden and gardens at 0.67: merged below a 0.6 merge threshold.
    store = make_store(threshold_overrides={"merge": 0.6})
    store.remember("an old fact about gardens", ["gardens", "plants"])
    passes: list[list[str]] = []
    real = Batch._closest_in_graph

    def counted(self: Batch, labels: list[str]) -> Any:
        if labels:
            passes.append(labels)
        return real(self, labels)

    monkeypatch.setattr(Batch, "_closest_in_graph", counted)
    items = [
        RememberItem(f"fact {i} on its own topic", [f"topic {i}", "gardens"]) for i in range(20)
    ]
    items.append(RememberItem("a fact naming a label twice", ["topic 3", "garden"]))
    outcomes = store.remember_batch(items)
    assert len(passes) == 1
    assert sorted(passes[0]) == sorted({f"topic {i}" for i in range(20)} | {"garden"})
    # The same decisions as one pass per item: "garden" still merges into "gardens" as an
    # alias, "topic 3" is the key made earlier in the batch, each topic is its own key.
    last = {k.label: k for k in outcomes[-1].keys}
    assert last["garden"].resolution == "alias" and last["garden"].merged_into == "gardens"
    assert last["topic 3"].key_id == next(
        k.key_id for k in outcomes[3].keys if k.label == "topic 3"
    )
    assert (
        len({k.key_id for o in outcomes[:20] for k in o.keys if k.label.startswith("topic")}) == 20
    )


class CountingEmbedder(HashEmbedder):
    """The hashing embedder, counting the texts it is asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed(self, texts: list[str]) -> Any:
        self.texts += len(texts)
        return super().embed(texts)


def forty_facts(make_store: Callable[..., Store], home: Path) -> Path:
    """A store at `home` of 40 memories, each under its own key (80 texts to embed)."""
    writer = make_store(home)
    writer.remember_batch(
        [RememberItem(f"fact {i} about topic {i}", [f"topic {i}"]) for i in range(40)]
    )
    writer.close()
    return home


def hold_build_lock(store: Store) -> int:
    """Take the build lock of `store`'s projection, as a builder under way holds it: the fd."""
    lock_path = projection.build_lock_path(store)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def test_a_second_process_building_the_same_projection_waits_for_the_first_instead_of_repeating_it(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    # Two servers (Claude Desktop and Claude Code) opened on a store whose projection is
    # missing each embedded every text of it: at 100,000 memories 120,019 texts twice, which
    # with a real model on a laptop is half an hour each, both on the same CPU.
    home = forty_facts(make_store, tmp_path / "store")
    shutil.rmtree(home / "cache" / "vectors")
    first, second = CountingEmbedder(), CountingEmbedder()
    building, waiting = make_store(home, embedder=first), make_store(home, embedder=second)
    first.texts = second.texts = 0
    # The first builder is under way: it holds the build lock.
    lock = hold_build_lock(building)
    heard: list[tuple[int, int]] = []
    is_waiting = threading.Event()

    def progress(done: int, total: int) -> None:
        heard.append((done, total))
        is_waiting.set()

    result: list[projection.Reembedded] = []
    thread = threading.Thread(target=lambda: result.append(projection.build(waiting, progress)))
    thread.start()
    try:
        assert is_waiting.wait(30), "the second builder never reported while it waited"
        # Meanwhile the first builds (through the lock it already holds) and lets go.
        with patch.object(projection, "build_lock_path", lambda store: tmp_path / "elsewhere"):
            projection.build(building)
    finally:
        os.close(lock)
        thread.join(60)
    assert not thread.is_alive()
    assert first.texts == 80  # 40 contents and 40 labels
    assert second.texts == 0 and result[0].embedded == 0
    assert heard[-1][0] == heard[-1][1] == 80  # the bar it showed while waiting reached the end
    assert projection.status(waiting).current


def test_a_rebuild_leaves_a_running_builders_lock_so_a_second_builder_still_waits(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    # `keytrail rebuild` deleted cache/ whole, the build lock files with it: a `reembed`
    # under way kept its flock on a file no longer there, and the next builder of the same
    # model made a new one, took it at once and embedded the same texts beside it (a stress
    # run saw 518 texts embedded twice).
    home = forty_facts(make_store, tmp_path / "store")
    first, second = CountingEmbedder(), CountingEmbedder()
    building = make_store(home, embedder=first)
    # The first builder is under way: it holds the build lock. Then a rebuild drops the cache.
    lock = hold_build_lock(building)
    drop_cache(home)
    waiting = make_store(home, embedder=second)
    first.texts = second.texts = 0
    heard = threading.Semaphore(0)
    result: list[projection.Reembedded] = []
    thread = threading.Thread(
        target=lambda: result.append(projection.build(waiting, lambda d, t: heard.release()))
    )
    thread.start()
    try:
        # Its first report is the bar's start; the next, one made while waiting (or, had it
        # taken the lock, the one after its first chunk embedded).
        assert heard.acquire(timeout=30) and heard.acquire(timeout=30)
        assert second.texts == 0, "the second builder embedded while the first held the lock"
        with patch.object(projection, "build_lock_path", lambda store: tmp_path / "elsewhere"):
            projection.build(building)
    finally:
        os.close(lock)
        thread.join(60)
    assert not thread.is_alive()
    assert first.texts == 80  # 40 contents and 40 labels
    assert second.texts == 0 and result[0].embedded == 0


def test_a_builder_that_records_late_does_not_move_the_recorded_coverage_back(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    # Each builder records the seq it listed its texts at once it lets go of the build lock.
    # One that started earlier can record after a later one has: its lower seq written over
    # the higher one made the next open check (and list) a stretch of log for nothing.
    home = tmp_path / "store"
    early, late = make_store(home), make_store(home)
    early.remember("a fact", ["topic"])
    projection.build(early)
    listed_at = early.state.seq
    late.remember("a later fact", ["another topic"])
    projection.build(late)
    assert late.vectors.manifest().seq == late.state.seq > listed_at  # type: ignore[union-attr]
    early.save_vectors(covered=(early.state.store_id, listed_at))  # the early one, late
    reopened = make_store(home)
    manifest = reopened.vectors.manifest()
    assert manifest is not None and manifest.seq == late.state.seq
    assert projection.status(reopened).current


def test_building_the_text_index_reports_progress(store: Store, tmp_path: Path) -> None:
    # `keytrail rebuild` spent 7-14 s at 100,000 memories indexing text after its last bar
    # reached 100%, printing nothing.
    store.remember_batch([RememberItem(f"note {i} on tea", [f"tea {i}"]) for i in range(30)])
    store.text.remove()
    heard: list[tuple[int, int]] = []
    assert store.index_text(progress=lambda done, total: heard.append((done, total))) == 30
    assert heard[0] == (0, 30) and heard[-1] == (30, 30)
    assert [d for d, _ in heard] == sorted(d for d, _ in heard)
    heard.clear()
    store.index_text(progress=lambda done, total: heard.append((done, total)))
    assert heard in ([], [(0, 0)])  # nothing to index: nothing, or an empty bar at once


def test_rebuild_shows_a_bar_while_it_indexes_text(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Alice likes tea", "-n", "Alice", "-k", "tea")
    err = kt(home, "rebuild").stderr
    assert "index" in err.splitlines()[-1] and err.splitlines()[-1].endswith("100%")


def mcp_answer(store: Store, tool: str, args: dict[str, Any], toolsets: Any = None) -> Any:
    """The structured answer of one tool call, through the SDK's in-memory client."""

    async def call() -> Any:
        async with Client(build_server(store, toolsets)) as client:
            result = await client.call_tool(tool, args)
            assert not result.is_error, result.content
            return result.structured_content

    return anyio.run(call)


# Before bounded answers, each of the next four listed every item however many (measured at
# 100,000 memories: changes 1.7 MB, cleanup_expired of 50,000 0.85 MB, one read_graph page
# 0.74 MB, history of a memory read 2,000 times 0.76 MB; each sent twice over MCP).


def test_changes_over_the_whole_log_answers_a_bounded_page(store: Store) -> None:
    page = store.settings.limits.page
    for start in range(0, page + 100, 100):
        store.remember_batch(
            [
                RememberItem(f"fact {i} told in bulk", [f"bulk {i}"])
                for i in range(start, start + 100)
            ]
        )
    answer = mcp_answer(store, "changes", {})
    assert len(answer["added"]) <= page


def test_cleanup_expired_answers_a_bounded_list(tmp_path: Path) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = Store(
        Settings(home=tmp_path / "store", embedder="hash"),
        embedder=HashEmbedder(),
        clock=lambda: now[0],
    )
    page = store.settings.limits.page
    for start in range(0, page + 100, 100):
        store.remember_batch(
            [
                RememberItem(f"a passing fact {i}", [f"soon {i}"], ttl_seconds=60)
                for i in range(start, start + 100)
            ]
        )
    now[0] += timedelta(hours=1)
    try:
        answer = mcp_answer(store, "cleanup_expired", {})
    finally:
        store.close()
    assert len(answer["memory_ids"]) <= page


def test_a_read_graph_page_is_bounded_however_many_observations_an_entity_has(store: Store) -> None:
    kg = KnowledgeGraph(store)
    page = store.settings.limits.page
    kg.create_entities([EntityInput("default_user", "person", [])])
    for start in range(0, page + 100, 100):
        kg.add_observations(
            [
                ObservationInput(
                    "default_user", [f"the user said thing {i}" for i in range(start, start + 100)]
                )
            ]
        )
    answer = mcp_answer(store, "read_graph", {"limit": 1}, ("knowledge_graph",))
    assert len(answer["entities"][0]["observations"]) <= page


def test_history_of_a_much_read_memory_is_bounded(store: Store) -> None:
    page = store.settings.limits.page
    memory = store.remember("a fact that gets read a lot", ["fact"]).memory_id
    for _ in range(page + 50):
        store.read_memory(memory)
    answer = mcp_answer(store, "history", {"memory_id": memory})
    assert len(answer["events"]) <= page


def test_an_interrupted_import_leaves_no_partial_store(
    make_store: Callable[..., Store],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Ctrl-C 10 s into importing a 102,020-event export left a store of 47,534 events that
    # verify called ok and a second import refused ("already holds 47534 events"): a backup
    # restored by half, with nothing to say so.
    source = make_store(tmp_path / "source")
    for start in range(0, 60, 20):
        source.remember_batch(
            [RememberItem(f"fact {i}", [f"topic {i}"]) for i in range(start, start + 20)]
        )
    export = tmp_path / "export.jsonl"
    kt(source.home, "export", "--output", str(export))
    home = tmp_path / "restored"
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    appended = [0]
    real_append = Appender.append

    def interrupted(self: Appender, event: Any, **options: Any) -> Any:
        appended[0] += 1
        if appended[0] == 3:
            raise KeyboardInterrupt
        return real_append(self, event, **options)

    monkeypatch.setattr(Appender, "append", interrupted)
    capsys.readouterr()
    assert run_main(["import", str(export)]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        "keytrail: interrupted: an import is written in one step, whole or not at all; "
        "`keytrail log` shows whether it was"
    )
    monkeypatch.undo()
    # Nothing of it is a store; importing again restores it whole.
    assert not list((home / "log").glob("*.jsonl"))
    kt(home, "import", str(export))
    assert kt(home, "stats", "--json").stdout == kt(source.home, "stats", "--json").stdout.replace(
        str(source.home), str(home)
    )


def test_import_shows_a_bar_while_it_checks_the_export(store: Store, tmp_path: Path) -> None:
    # Decoding and folding a 102,020-event export before writing took 4.4 s with nothing shown.
    store.remember("Alice likes tea", ["tea"])
    export = tmp_path / "export.jsonl"
    kt(store.home, "export", "--output", str(export))
    lines = kt(tmp_path / "copy", "import", str(export)).stderr.splitlines()
    checked = [i for i, line in enumerate(lines) if line.startswith("check export")]
    imported = [i for i, line in enumerate(lines) if line.startswith("import:")]
    assert checked and imported and checked[-1] < imported[0]
    assert lines[checked[-1]].endswith("100%")


def test_serve_answers_before_a_missing_projection_is_built(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.remember("Alice likes tea", ["tea"])
    store.close()
    shutil.rmtree(store.home / "cache" / "vectors")
    order: list[str] = []
    real_build = projection.build

    def build(*args: Any, **kwargs: Any) -> Any:
        order.append("build")
        return real_build(*args, **kwargs)

    monkeypatch.setattr(projection, "build", build)
    monkeypatch.setattr(mcp_server, "run_stdio", lambda served: order.append("serve"))
    monkeypatch.setenv("KEYTRAIL_HOME", str(store.home))
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    assert cli.main(["serve"]) == 0
    assert order[0] == "serve"


def test_the_first_recall_memories_reports_progress_while_it_builds_the_text_index(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With the index missing (a deleted cache, a big import by another process) the first
    # recall_memories took 13.6 s at 100,000 memories with no word to the client.
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    store.remember_batch([RememberItem(f"note {i} on green tea", [f"tea {i}"]) for i in range(30)])
    store.text.remove()
    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))

    async def recall() -> None:
        async with Client(build_server(store)) as client:
            result = await client.call_tool(
                "recall_memories", {"query": "green tea"}, progress_callback=on_progress
            )
            assert not result.is_error, result.content
            assert result.structured_content["memories"]

    anyio.run(recall)
    assert heard[0][:2] == (0, 30) and heard[-1][:2] == (30, 30)
    heard.clear()
    anyio.run(recall)
    assert heard == []  # the index is current: nothing to report
