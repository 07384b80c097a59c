"""A page limit set below the default page size (KEYTRAIL_MAX_PAGE=10): every paginated call
made without a `limit` answers a page of the largest size allowed, in core, over MCP and on the
command line, instead of refusing its own default of 50."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_cli import REPO, env_for
from test_server import call, run, stdio_session

from keytrail.core import RememberItem, Store
from keytrail.core import history as timeline
from keytrail.core.config import Limits
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph

PAGE = 10


def filled(store: Store) -> str:
    """Thirty memories under one key, one of them read thirty times; its id."""
    store.remember_batch([RememberItem(f"fact {i} about tea", ["tea"]) for i in range(30)])
    memory = store.remember("the much-read fact about tea", ["tea"]).memory_id
    for _ in range(30):
        store.read_memory(memory)
    return memory


def test_core_calls_without_a_limit_answer_the_largest_page_allowed(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(limits=Limits(page=PAGE))
    memory = filled(store)
    key = store.state.key_for_label("tea")
    assert key is not None
    assert len(store.list_memories().memories) == PAGE
    assert len(store.read_key(key.id).memories) == PAGE
    assert len(timeline.history(store, memory).events) == PAGE
    assert len(timeline.changes(store).added) == PAGE
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput(f"person {i}", "person", []) for i in range(30)])
    assert len(kg.read_graph().entities) == PAGE
    assert len(kg.search_nodes("person").entities) == PAGE
    assert store.cleanup_expired().count == 0


def test_mcp_tools_without_a_limit_answer_the_largest_page_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    memory = filled(store)
    key = store.state.key_for_label("tea")
    assert key is not None
    store.close()

    async def test() -> None:
        flags = ("--max-page", str(PAGE), "--toolsets", "keygraph,knowledge_graph")
        async with stdio_session(home, tmp_path / "stderr.txt", *flags) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ("list_memories", "read_key", "history", "changes", "read_graph"):
                limit: dict[str, Any] = tools[name].input_schema["properties"]["limit"]
                assert limit["maximum"] == PAGE and limit["default"] <= PAGE, (name, limit)
            answers = {
                "list_memories": (await call(session, "list_memories"))["memories"],
                "read_key": (await call(session, "read_key", key_id=key.id))["memories"],
                "history": (await call(session, "history", memory_id=memory))["events"],
                "changes": (await call(session, "changes"))["added"],
            }
            assert {name: len(items) for name, items in answers.items()} == dict.fromkeys(
                answers, PAGE
            )
            assert (await call(session, "cleanup_expired"))["count"] == 0
            assert (await call(session, "read_graph"))["total"] == 0

    run(test)


def test_the_command_line_without_a_limit_answers_the_largest_page_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    memory = filled(store)
    store.close()
    env = env_for(home) | {"KEYTRAIL_MAX_PAGE": str(PAGE)}
    outputs = {}
    for verb in (("list",), ("keys",), ("history", memory), ("changes",), ("cleanup-expired",)):
        proc = subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", *verb],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, (verb, proc.stderr)
        outputs[verb[0]] = proc.stdout
    assert f"events 1-{PAGE} of 31" in outputs["history"]  # created, then 30 reads
    assert f"showing 1-{PAGE}" in outputs["list"]
