"""Long work reports progress: remember_batch over MCP sends notifications/progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from test_server import stdio_session

from keytrail.core import RememberItem, Store
from keytrail.core.store import EMBED_CHUNK
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
