"""Following the log: `keytrail log --follow` and servers see other processes' events promptly,
and a forget's rewrite of a segment does not confuse them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_cli import env_for, kt, kt_json
from test_cut_back import failing
from test_server import call, run, stdio_session

from keytrail.events import (
    AnyEvent,
    EventLog,
    LogCutBack,
    MemoryForgotten,
    MemoryRemembered,
    event_tag,
)
from keytrail.server.care import Shown, follow

REPO = Path(__file__).resolve().parent.parent


def wait_for(condition: Any, what: str, limit: float = 15.0) -> None:
    """A bounded wait for an observable effect (not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_follow_wakes_on_other_processes_appends_and_survives_a_redaction(tmp_path: Path) -> None:
    home = tmp_path / "store"
    secret = kt_json(home, "remember", "the vault code is 4471", "-k", "vault")["memory_id"]
    seen: list[AnyEvent] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def show(events: Any) -> None:
        seen.extend(events)

    def run_follow() -> None:
        try:
            # No safety poll within the test: only change notifications can wake it.
            follow(EventLog(home), show, stop, safety_poll_ms=600_000)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_follow, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(seen) == 2, "the existing log")
        kt(home, "remember", "appended by another process", "-k", "other")
        wait_for(lambda: len(seen) == 3, "another process's append")
        # Another process forgets the first memory: its segment is rewritten under the follower.
        kt(home, "forget", secret, "--reason", "follow test")
        kt(home, "remember", "after the rewrite", "-k", "after")
        wait_for(lambda: len(seen) == 5, "the forget and the append after it")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors, errors
    assert not thread.is_alive()
    assert [e.seq for e in seen] == [1, 2, 3, 4, 5]
    assert isinstance(seen[3], MemoryForgotten) and seen[3].memory_id == secret
    assert event_tag(seen[4]) == "memory.remembered"
    assert b"4471" not in b"".join(p.read_bytes() for p in (home / "log").glob("*.jsonl"))


def test_log_follow_command_reads_on_through_a_forget(tmp_path: Path) -> None:
    home = tmp_path / "store"
    secret = kt_json(home, "remember", "the vault code is 4471", "-k", "vault")["memory_id"]
    out_path = tmp_path / "follow.out"
    with open(out_path, "w") as out:
        follower = subprocess.Popen(
            [sys.executable, "-m", "keytrail.server.cli", "log", "--json", "--follow"],
            env=env_for(home),
            cwd=str(REPO),
            stdout=out,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(lambda: out_path.read_text().count("\n") == 2, "the existing log", 30)
            kt(home, "forget", secret)
            kt(home, "remember", "after the rewrite", "-k", "after")
            wait_for(lambda: "after the rewrite" in out_path.read_text(), "the later append")
            assert follower.poll() is None
        finally:
            follower.terminate()
            follower.wait(timeout=10)
    events = [json.loads(x) for x in out_path.read_text().splitlines()]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert [e["type"] for e in events[2:]] == ["memory.forgotten", "memory.remembered"]
    # A later reader of the log sees the line redacted; the forget is in the history.
    again = [
        json.loads(x) for x in kt(home, "log", "--json", "--memory", secret).stdout.splitlines()
    ]
    assert again[0]["memories"][0]["content"] == "" and again[-1]["type"] == "memory.forgotten"
    assert "[content forgotten]" in kt(home, "log", "--memory", secret).stdout


def test_a_server_sees_another_servers_forget_at_its_next_call(tmp_path: Path) -> None:
    home, errlog = tmp_path / "store", tmp_path / "server-stderr.txt"

    async def test() -> None:
        async with stdio_session(home, errlog) as a, stdio_session(home, errlog) as b:
            secret = await call(a, "remember", content="the vault code is 4471", keys=["vault"])
            view = await call(b, "read_memory", memory_id=secret["memory_id"])
            assert view["content"] == "the vault code is 4471"
            gone = await call(a, "forget", memory_id=secret["memory_id"], reason="asked")
            assert any(p.startswith("log/") for p in gone["purged"])
            # b's very next call folds a's forget (the store refreshes on every call).
            result = await b.call_tool("read_memory", {"memory_id": secret["memory_id"]})
            assert result.is_error and "no memory" in result.content[0].text
            # b keeps working on the rewritten log, and a sees what b writes.
            later = await call(b, "remember", content="the vault moved", keys=["vault"])
            page = await call(a, "list_memories")
            assert [m["memory_id"] for m in page["memories"]] == [later["memory_id"]]

    run(test)
    data = b"".join(p.read_bytes() for p in home.rglob("*") if p.is_file())
    assert b"4471" not in data


def test_follow_goes_on_after_lines_it_printed_were_cut_back(
    make_store: Any, tmp_path: Path, capsys: Any
) -> None:
    """The follower prints the pears memory (seq 3) between a's write and its failed fsync; a
    cuts the line back and writes the plums one at seq 3. The follower died with LogCutBack:
    `keytrail log --follow` stopped, having printed an event the log never held."""
    home = tmp_path / "store"
    a = make_store(home)
    a.remember("first fact about apples", ["apple"])
    seen: list[AnyEvent] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def run_follow() -> None:
        try:
            follow(EventLog(home), seen.extend, stop, safety_poll_ms=200)
        except BaseException as exc:
            errors.append(exc)

    def printed_pears() -> None:
        wait_for(lambda: len(seen) == 3, "the pears line")

    thread = threading.Thread(target=run_follow, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(seen) == 2, "the existing log")
        with (
            failing("fsync", printed_pears),
            pytest.raises(Exception, match="nothing was recorded"),
        ):
            a.remember("second fact about pears", ["pear"])
        plums = a.remember("second fact about plums", ["plum"])
        wait_for(lambda: len(seen) == 4 or bool(errors), "the plums line")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors, errors
    assert [e.seq for e in seen] == [1, 2, 3, 3]
    assert isinstance(seen[3], MemoryRemembered)
    assert seen[3].memories[0].memory_id == plums.memory_id
    assert isinstance(seen[2], MemoryRemembered) and seen[2].memories[0].content.endswith("pears")
    err = capsys.readouterr().err
    assert "the events shown as seq 3 were cut back by a failed write" in err


def test_a_follower_says_every_seq_of_a_batch_cut_back_and_reads_on_from_before_it(
    make_store: Any, tmp_path: Path, capsys: Any
) -> None:
    """A forget of two versions is one batch (seqs 4 and 5), cut back whole after the follower
    showed both: it says both seqs and shows the canteen memory that took seq 4."""
    home = tmp_path / "store"
    a = make_store(home)
    first = a.remember("the office is in Leeds", ["office"])
    second = a.correct(first.memory_id, "the office is in York")
    log, shown = EventLog(home), Shown()
    seen = [event.seq for event in shown.read(log)]

    def follower_reads() -> None:
        seen.extend(event.seq for event in shown.read(log))

    with (  # the forget's first two fsyncs are its pending file's
        failing("fsync", follower_reads, after=2),
        pytest.raises(Exception, match="nothing was recorded"),
    ):
        a.forget(second.memory_id, all_versions=True)
    canteen = a.remember("the canteen opens at noon", ["canteen"])
    with pytest.raises(LogCutBack) as cut:
        list(shown.read(log))
    shown.resume(log, cut.value.seq)

    again = list(shown.read(log))
    assert seen == [1, 2, 3, 4, 5]
    assert [e.seq for e in again] == [4]
    assert isinstance(again[0], MemoryRemembered)
    assert again[0].memories[0].memory_id == canteen.memory_id
    assert "the events shown as seq 4..5 were cut back by a failed write" in capsys.readouterr().err
