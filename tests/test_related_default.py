"""A page limit set below related's default of 10 (KEYTRAIL_MAX_PAGE=3): `related` made
without a `limit` answers the largest page allowed, in core, over MCP and on the command
line, instead of refusing its own default ('limit: 10 is out of range (limit: 1 to 3)'), as
every other paginated call does since the page default follows KEYTRAIL_MAX_PAGE."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from test_cli import REPO, env_for
from test_server import call, run, stdio_session

from keytrail.core import RememberItem, Store
from keytrail.core.config import Limits

PAGE = 3


def filled(store: Store) -> str:
    """Eight memories sharing a key; the id of the first."""
    done = store.remember_batch([RememberItem(f"fact {i} about tea", ["tea"]) for i in range(8)])
    return done[0].memory_id


def test_core_related_without_a_limit_answers_the_largest_page_allowed(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(limits=Limits(page=PAGE))
    assert len(store.related(filled(store)).related) == PAGE


def test_mcp_related_without_a_limit_answers_the_largest_page_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    memory = filled(store)
    store.close()

    async def test() -> None:
        async with stdio_session(home, tmp_path / "stderr.txt", "--max-page", str(PAGE)) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            limit = tools["related"].input_schema["properties"]["limit"]
            assert limit["maximum"] == PAGE and limit["default"] <= PAGE, limit
            assert len((await call(session, "related", memory_id=memory))["related"]) == PAGE

    run(test)


def test_the_command_line_related_without_a_limit_answers_the_largest_page_allowed(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home)
    memory = filled(store)
    store.close()
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "related", memory],
        env=env_for(home) | {"KEYTRAIL_MAX_PAGE": str(PAGE)},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == PAGE
