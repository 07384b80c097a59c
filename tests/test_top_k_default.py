"""A top_k limit set below the default of 10 (KEYTRAIL_MAX_TOP_K=5): `recall` and
`recall_memories` made without a `top_k` answer the most allowed, in core, over MCP and on the
command line, instead of refusing their own default ('top_k: 10 is out of range')."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from test_cli import REPO, env_for
from test_server import call, run, stdio_session

from keytrail.core import RememberItem, Store
from keytrail.core.config import Limits

TOP_K = 5


def filled(store: Store) -> None:
    """Twelve memories, each under a key of its own that the query names."""
    store.remember_batch([RememberItem(f"tea fact {i}", [f"tea{i}", "tea"]) for i in range(12)])


def test_core_recalls_without_top_k_answer_the_most_allowed(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(limits=Limits(top_k=TOP_K))
    filled(store)
    assert 0 < len(store.recall("tea").keys) <= TOP_K
    assert 0 < len(store.recall_memories("tea", learn=False).memories) <= TOP_K


def test_mcp_recalls_without_top_k_answer_the_most_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    filled(store)
    store.close()

    async def test() -> None:
        flags = ("--max-top-k", str(TOP_K), "--direct-recall")
        async with stdio_session(home, tmp_path / "stderr.txt", *flags) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ("recall", "recall_memories"):
                top_k = tools[name].input_schema["properties"]["top_k"]
                assert top_k["maximum"] == TOP_K and top_k["default"] <= TOP_K, (name, top_k)
            assert 0 < len((await call(session, "recall", query="tea"))["keys"]) <= TOP_K
            found = await call(session, "recall_memories", query="tea")
            assert 0 < len(found["memories"]) <= TOP_K

    run(test)


def test_the_command_line_without_top_k_answers_the_most_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    filled(store)
    store.close()
    env = env_for(home) | {"KEYTRAIL_MAX_TOP_K": str(TOP_K)}
    for verb in ("recall", "recall-memories"):
        proc = subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", verb, "tea"],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, (verb, proc.stderr)


def test_a_miss_offers_at_most_top_k_nearest_keys(make_store: Callable[..., Store]) -> None:
    """`top_k` is the most keys an answer holds: a recall that matched nothing answered five
    `nearest` keys to an agent that asked for two (to keep its context small)."""
    store = make_store()
    filled(store)
    for top_k in (1, 2, 3):
        missed = store.recall("zebra crossing", top_k=top_k)
        assert missed.keys == []
        assert len(missed.nearest) == top_k
    assert len(store.recall("zebra crossing", top_k=10).nearest) == 5  # a miss offers five
