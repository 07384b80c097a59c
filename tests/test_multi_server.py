"""Several `keytrail serve` processes (and the command line) on one store, over real MCP clients.

What Claude Desktop and Claude Code running side by side rely on: every server answers from a
state that holds every other process's acknowledged writes, and another process holding the
appenders' lock for a long time (an import) stalls only this server's writes, never its reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from test_kg_server import kg_session
from test_server import REPO, call, run, server_env

from keytrail.core import HashEmbedder, Settings, Store, StoreError
from keytrail.core.maintenance import verify
from keytrail.events import EventLog, MemoryRemembered


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


def child_pids() -> set[int]:
    pids: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids |= {int(p) for p in f.read().split()}
    return pids


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc")
def test_a_server_killed_mid_batch_loses_nothing_acknowledged(tmp_path: Path) -> None:
    """SIGKILL one server while its remember_batch is in flight: the other server goes on, sees
    every acknowledged call once, nothing of the unacknowledged batch, and the store verifies."""
    home, errlog = tmp_path / "store", tmp_path / "err.txt"

    def batch(tag: str, n: int) -> list[dict[str, object]]:
        return [{"content": f"{tag} item {j}", "keys": [tag, f"item {j}"]} for j in range(n)]

    async def test() -> None:
        acked: list[str] = []
        async with kg_session(home, errlog) as b:
            before = child_pids()
            killed = False
            try:
                async with kg_session(home, errlog) as a:
                    (pid,) = child_pids() - before
                    acked.append(
                        (await call(a, "remember", content="one", keys=["one"]))["memory_id"]
                    )
                    done = await call(a, "remember_batch", items=batch("first", 10))
                    acked += [m["memory_id"] for m in done["memories"]]
                    turn = await call(b, "record_turn", session_id="s1", role="user", content="hi")
                    assert turn["turn"] == 1
                    log = EventLog(home)
                    with log.lock():  # hold the writers back, so the batch is surely in flight
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(
                                partial(call, a, "remember_batch", items=batch("killed", 100))
                            )
                            with anyio.fail_after(30):
                                await wait_for_a_waiter(home / "lock")
                            os.kill(pid, signal.SIGKILL)
                            killed = True
                    log.close()
            except Exception:
                if not killed:  # only the killed server's session may end in an error
                    raise
            assert killed
            # b answers, from a store holding every acknowledged write once and nothing else.
            page = await call(b, "list_memories", limit=100)
            assert sorted(m["memory_id"] for m in page["memories"]) == sorted(acked)
            for memory_id in acked:
                assert (await call(b, "read_memory", memory_id=memory_id))["memory_id"] == memory_id
            labels = {k["label"] for k in (await call(b, "browse_keys", limit=100))["keys"]}
            assert "first" in labels and "killed" not in labels
            turn = await call(b, "record_turn", session_id="s1", role="user", content="again")
            assert turn["turn"] == 2
        written = Counter(
            m.memory_id
            for e in EventLog(home).read_new()
            if isinstance(e, MemoryRemembered)
            for m in e.memories
        )
        assert sorted(written) == sorted(acked) and set(written.values()) == {1}
        report = verify(home)
        assert report.ok, report.problems

    run(test)


def test_a_running_server_finishes_another_process_interrupted_forget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between appending `memory.forgotten` and erasing the content leaves a
    pending purge. A server that stays open (Claude Desktop, for days) must finish it at its
    next write, not leave the forgotten text on disk until someone forgets again or reopens."""
    from keytrail.core import forgetting

    home = tmp_path / "store"
    secret = "the door code is 4417"
    desktop = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    code = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    memory_id = code.remember(secret, ["door"]).memory_id

    def killed(*args: object, **kwargs: object) -> list[str]:
        raise OSError("killed before the purge")

    monkeypatch.setattr(forgetting, "purge", killed)
    with pytest.raises(StoreError, match="erasing its content stopped: killed before the purge"):
        code.forget(memory_id)
    code.log.close()  # the process is gone
    monkeypatch.undo()
    assert forgetting.pending_path(home).exists()

    desktop.remember("the user likes tea", ["tea"])  # any write, holding the lock
    leftover = [
        p.relative_to(home)
        for p in home.rglob("*")
        if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert leftover == []
    assert not forgetting.pending_path(home).exists()
    desktop.close()
    assert verify(home).ok
