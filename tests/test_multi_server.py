"""Several `keytrail serve` processes (and the command line) on one store, over real MCP clients.

What Claude Desktop and Claude Code running side by side rely on: every server answers from a
state that holds every other process's acknowledged writes, and another process holding the
appenders' lock for a long time (an import) stalls only this server's writes, never its reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from test_kg_server import kg_session
from test_server import REPO, call, run, server_env

from keytrail.events import EventLog


def waiters_on(lock_file: Path) -> int:
    """How many flock(2) waiters are blocked on `lock_file` (from /proc/locks)."""
    inode = f":{os.stat(lock_file).st_ino} "
    with open("/proc/locks") as f:
        return sum("->" in line and inode in line for line in f)


async def wait_for_a_waiter(lock_file: Path) -> None:
    while waiters_on(lock_file) == 0:
        await anyio.sleep(0.05)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_reads_answer_while_another_process_holds_the_lock(tmp_path: Path) -> None:
    """A write waiting for the lock (held here, as a long import would) must not stall reads
    of the same server: they answer from the log as it is, then see the import once it lands."""
    home, errlog = tmp_path / "store", tmp_path / "err.txt"
    jsonl = tmp_path / "graph.jsonl"
    jsonl.write_text(
        '{"type": "entity", "name": "Imported Person", "entityType": "person",'
        ' "observations": ["arrived by import"]}\n'
    )

    async def test() -> None:
        async with kg_session(home, errlog) as s:
            first = await call(s, "remember", content="Dana lives in Lyon", keys=["Lyon"])
            key_id = first["keys"][0]["key_id"]
            written: list[dict[str, object]] = []

            async def write(session: ClientSession) -> None:
                written.append(await call(session, "read_memory", memory_id=first["memory_id"]))

            log = EventLog(home)
            with ExitStack() as held:
                held.enter_context(log.lock())  # another process's appender, mid-way through
                async with anyio.create_task_group() as tg:
                    tg.start_soon(write, s)
                    with anyio.fail_after(30):
                        await wait_for_a_waiter(home / "lock")
                    # The server's write now waits for the lock; its reads must not.
                    with anyio.move_on_after(30) as blocked:
                        page = await call(s, "list_memories")
                        keys = await call(s, "recall", query="Lyon")
                        memories = await call(s, "read_key", key_id=key_id)
                    assert not blocked.cancelled_caught, "reads stalled behind a write's lock wait"
                    assert page["total"] == 1
                    assert any(k["key_id"] == key_id for k in keys["keys"])
                    assert memories["memories"][0]["memory_id"] == first["memory_id"]
                    assert written == []  # the write did wait
                    held.close()  # the lock is free: the write goes on
            log.close()
            assert written and written[0]["content"] == "Dana lives in Lyon"
            done = await anyio.to_thread.run_sync(
                lambda: subprocess.run(
                    [sys.executable, "-m", "keytrail.server.cli", "import", str(jsonl)],
                    env=server_env(home),
                    cwd=str(REPO),
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
            )
            assert done.returncode == 0, done.stderr
            assert (await call(s, "list_memories"))["total"] == 2
            nodes = await call(s, "open_nodes", names=["Imported Person"])
            assert nodes["entities"][0]["observations"] == ["arrived by import"]

    run(test)
