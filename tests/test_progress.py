"""Long work reports progress: remember_batch over MCP sends notifications/progress."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from mcp import Client
from test_server import log_bytes, stdio_session

from keytrail.core import RememberItem, Store, history
from keytrail.core.embedders import HashEmbedder
from keytrail.core.store import EMBED_CHUNK
from keytrail.events.log import EventLog
from keytrail.server.mcp_server import build_server


def test_remember_batch_reports_embedding_progress_to_a_client_that_asks(store: Store) -> None:
    items = [
        {"content": f"fact number {i} about topic {i}", "keys": [f"topic {i}", "facts"]}
        for i in range(150)
    ]
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async def call(batch: list[dict[str, Any]]) -> Any:
        async with Client(build_server(store)) as client:
            result = await client.call_tool(
                "remember_batch", {"items": batch}, progress_callback=on_progress
            )
            assert not result.is_error, result.content
            return result.structured_content

    stored = anyio.run(call, items)
    assert len(stored["memories"]) == 150
    # 150 contents and 151 new labels, embedded EMBED_CHUNK at a time: 0, then each chunk
    to_embed = 150 + 151
    assert seen[0] == (0, to_embed, "embedding") and seen[-1] == (to_embed, to_embed, "embedding")
    done = [p for p, _, _ in seen]
    assert done == sorted(done) and len(seen) == 1 + -(-to_embed // EMBED_CHUNK)
    # Told again, nothing is embedded anew, so nothing is reported
    seen.clear()
    anyio.run(call, items[:10])
    assert seen == []


def test_chunked_embedding_gives_the_same_vectors_and_counts_every_text(
    store: Store, make_store: Any, tmp_path: Any
) -> None:
    texts = [f"text {i}" for i in range(EMBED_CHUNK * 2 + 5)]
    calls: list[tuple[int, int]] = []
    chunked = store.embed(texts, progress=lambda done, total: calls.append((done, total)))
    whole = make_store(tmp_path / "other").embed(texts)
    assert (chunked == whole).all()
    n = len(texts)
    assert calls == [(0, n), (EMBED_CHUNK, n), (2 * EMBED_CHUNK, n), (n, n)]
    calls.clear()
    store.remember_batch(
        [RememberItem("fresh words", ["fresh"]), RememberItem("text 1", ["text 2"])],
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(0, 2), (2, 2)]  # "fresh words" and "fresh": the rest was embedded before


def test_progress_reaches_a_client_over_stdio(tmp_path: Path) -> None:
    # The in-memory client above may take a direct path; a real client talks JSON-RPC.
    items = [{"content": f"note {i} on stdio", "keys": [f"label {i}"]} for i in range(70)]
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async def call() -> None:
        async with stdio_session(tmp_path / "store", tmp_path / "err.log") as session:
            result = await session.call_tool(
                "remember_batch", {"items": items}, progress_callback=on_progress
            )
            assert not result.is_error, result.content

    anyio.run(call)
    assert seen[0] == 0 and seen[-1] == 140 and seen == sorted(seen)


def test_many_calls_reporting_progress_at_once_over_stdio_all_answer(tmp_path: Path) -> None:
    # Each sync tool runs on a worker thread, and the stdio transport reads and writes through
    # worker threads too. A call that reports progress while it holds the store waits for the
    # notification to be written: with every worker thread taken by calls waiting for the
    # store, nothing could write it, and the server hung for good.
    calls = 80
    answered: list[bool] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    async def one(session: Any) -> None:
        result = await session.call_tool("changes", {}, progress_callback=on_progress)
        answered.append(not result.is_error)

    async def test() -> None:
        async with stdio_session(tmp_path / "store", tmp_path / "err.log") as session:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tasks:
                    for _ in range(calls):
                        tasks.start_soon(one, session)

    anyio.run(test)
    assert answered == [True] * calls


class SlowEmbedder(HashEmbedder):
    """The hash embedder at a model's pace: a batch takes long enough to be cancelled."""

    def embed(self, texts: Sequence[str]) -> Any:
        time.sleep(0.01 * len(texts))
        return super().embed(texts)


def test_a_cancelled_remember_batch_stops_before_writing_and_the_server_goes_on(
    make_store: Any, tmp_path: Path
) -> None:
    store = make_store(embedder=SlowEmbedder())
    store.remember("Dana lives in Lyon", ["Dana", "Lyon"])
    before = log_bytes(tmp_path / "store")
    items = [{"content": f"cancelled fact {i}", "keys": [f"topic {i}"]} for i in range(300)]
    seen: list[float] = []

    async def test() -> None:
        # "legacy": JSON-RPC over streams, where leaving the call sends notifications/cancelled
        # (the direct in-process path awaits the tool's thread, which no cancel interrupts).
        async with Client(build_server(store), mode="legacy") as client:
            with anyio.CancelScope() as call:

                async def on_progress(progress: float, total: float | None, _: str | None) -> None:
                    seen.append(progress)
                    call.cancel()  # the client sends notifications/cancelled

                await client.call_tool(
                    "remember_batch", {"items": items}, progress_callback=on_progress
                )
            assert call.cancelled_caught
            # `changes` waits for the store's mutex, which the batch held while it embedded
            changed = await client.call_tool("changes", {})
            assert changed.structured_content["added_total"] == 1  # type: ignore[index]
            told = await client.call_tool("remember", {"content": "Mia likes tea"})
            assert not told.is_error, told.content

    anyio.run(test)  # leaving the client waits for every call's thread
    assert seen[0] == 0 and len(seen) < 5  # the batch embeds 600 texts, 64 at a time
    after = log_bytes(tmp_path / "store")
    assert after.startswith(before) and after[len(before) :].count(b"\n") == 1
    assert b"cancelled fact" not in after and b"Mia likes tea" in after


def test_a_cancelled_changes_stops_scanning_the_log(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(40):
        store.remember(f"fact {i}", [f"topic {i}"])
    scanned: list[int] = []
    first_read = threading.Event()
    iter_new = EventLog.iter_new

    def watched_scan(log: EventLog) -> Iterator[Any]:
        for event in iter_new(log):
            scanned.append(event.seq)
            if len(scanned) == 1:
                # Hold the scan until the client's cancel has reached the call.
                first_read.set()
                deadline = time.monotonic() + 10
                while not cancelled() and time.monotonic() < deadline:
                    time.sleep(0.01)
            yield event

    def cancelled() -> bool:
        try:
            anyio.from_thread.check_cancelled()
        except asyncio.CancelledError:  # anyio's on asyncio (none to ask for in a thread)
            return True
        return False

    monkeypatch.setattr(EventLog, "iter_new", watched_scan)
    monkeypatch.setattr(history, "_PROGRESS_EVERY", 1)  # progress at every event

    async def test() -> None:
        async with Client(build_server(store), mode="legacy") as client:
            async with anyio.create_task_group() as tasks:

                async def call() -> None:
                    await client.call_tool("changes", {})
                    raise AssertionError("the cancelled call was answered")

                tasks.start_soon(call)
                await anyio.to_thread.run_sync(first_read.wait)
                tasks.cancel_scope.cancel()  # the client sends notifications/cancelled
            monkeypatch.setattr(EventLog, "iter_new", iter_new)
            changed = await client.call_tool("changes", {})
            assert changed.structured_content["added_total"] == 40  # type: ignore[index]

    anyio.run(test)  # leaving the client waits for every call's thread
    # The cancelled scan stopped at its next report, not at the end of the log's 41 events.
    assert len(scanned) < store.state.seq == 41
