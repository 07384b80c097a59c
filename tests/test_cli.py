"""The `keytrail` command, run as a user would: a subprocess per verb, under a timeout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from keytrail.events import EventLog, LinkDelta, LinksAdjusted
from keytrail.projections.snapshot import read_header
from keytrail.server.care import kg_summary, summary

REPO = Path(__file__).resolve().parent.parent
VERBS = [
    "serve",
    "stats",
    "log",
    "verify",
    "rebuild",
    "reembed",
    "remember",
    "recall",
    "read-key",
    "read",
    "correct",
    "forget",
    "export",
    "import",
    "history",
    "changes",
    "list",
    "related",
    "keys",
    "cleanup-expired",
    "sessions",
    "conversation",
    "recall-memories",
]


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(home), KEYTRAIL_EMBEDDER="hash", PYTHONUNBUFFERED="1")
    return env


def kt(
    home: Path, *args: str, ok: bool = True, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env_for(home),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
    )
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def kt_json(home: Path, *args: str) -> Any:
    return json.loads(kt(home, *args, "--json").stdout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_help_for_every_verb(home: Path) -> None:
    top = kt(home, "--help")
    for verb in VERBS:
        assert verb in top.stdout
        out = kt(home, verb, "--help").stdout
        assert f"usage: keytrail {verb}" in out and "--home" in out


def test_key_flags_show_one_key_each(home: Path) -> None:
    """`-k` and `-n` take one key each, repeated: their help showed `-k KEYS`, as if one flag
    took a list (`-k "a, b"` makes the single key "a, b")."""
    for verb in ("remember", "correct"):
        out = " ".join(kt(home, verb, "--help").stdout.split())
        assert "-k KEY, --key KEY" in out and "-n NAME, --name NAME" in out, verb
        assert "KEYS" not in out, verb


def test_stats_offers_no_valid_at_it_would_ignore(home: Path) -> None:
    """memory_stats counts by record time only (the MCP tool takes as_of, no valid_at), so
    `stats --valid-at` is refused as a usage error instead of printing today's counts as if
    they were the counts valid then."""
    kt(home, "remember", "Dana lives in Lyon", "-n", "Dana")
    log = sorted((home / "log").glob("*.jsonl"))
    before = [p.read_bytes() for p in log]
    refused = kt(home, "stats", "--valid-at", "2020-01-01", ok=False)
    assert refused.returncode == 2
    assert "--valid-at" in refused.stderr
    assert [p.read_bytes() for p in log] == before
    assert "--valid-at" not in kt(home, "stats", "--help").stdout
    assert kt_json(home, "stats", "--as-of", "1")["memories"] == 0


def test_quick_verbs(home: Path) -> None:
    r = kt_json(home, "remember", "Alice likes strawberries", "-n", "Alice", "-k", "fruit")
    memory_id = r["memory_id"]
    assert [(k["label"], k["type"]) for k in r["keys"]] == [("Alice", "name"), ("fruit", "concept")]
    rec = kt_json(home, "recall", "What does Alice like?")
    alice = next(k for k in rec["keys"] if k["label"] == "Alice")
    page = kt_json(home, "read-key", alice["key_id"])
    assert page["memories"][0]["memory_id"] == memory_id
    view = kt_json(home, "read", memory_id, "--via", alice["key_id"])
    assert view["content"] == "Alice likes strawberries" and view["depth"] > 0
    fixed = kt_json(home, "correct", memory_id, "Alice likes raspberries now")
    assert fixed["old_id"] == memory_id
    stats = kt_json(home, "stats")
    assert stats["memories"] == 1 and stats["superseded"] == 1
    # the readable forms run too
    assert "Alice [name] literal" in kt(home, "recall", "Alice").stdout
    gone = kt_json(home, "forget", fixed["memory_id"])
    assert gone["memory_id"] == fixed["memory_id"]
    shown = kt(home, "stats").stdout
    assert "events" in shown
    # The keys stay in the graph with nothing current behind them; `keys` lists none.
    made = kt_json(home, "stats")["keys"]
    assert made > 0 and kt_json(home, "keys")["total"] == 0
    assert f"keys                   {made} (0 lead to current memories)\n" in shown
    assert "remembered m_" in kt(home, "remember", "Bob is tall", "-n", "Bob").stdout
    made, in_use = kt_json(home, "stats")["keys"], kt_json(home, "keys")["total"]
    assert in_use == 1 and f"{made} ({in_use} lead to current memories)" in kt(home, "stats").stdout


def test_list_related_keys_and_cleanup_answer_as_the_mcp_tools_do(home: Path) -> None:
    dana = kt_json(home, "remember", "Dana lives in Lyon", "-n", "Dana", "-n", "Lyon")
    mia = kt_json(home, "remember", "Dana's daughter is Mia", "-n", "Dana", "-n", "Mia")
    alone = kt_json(home, "remember", "Bob collects stamps", "-n", "Bob", "-k", "stamps")

    page = kt_json(home, "list")
    assert page["total"] == 3
    newest_first = [alone, mia, dana]
    assert [m["memory_id"] for m in page["memories"]] == [m["memory_id"] for m in newest_first]
    second = kt_json(home, "list", "--limit", "1", "--offset", "1")
    assert [m["memory_id"] for m in second["memories"]] == [mia["memory_id"]]
    text = kt(home, "list", "--limit", "2").stdout
    assert text.startswith("3 memories, newest first (showing 1-2)")
    assert "Bob collects stamps" in text and "keys: Bob, stamps" in text

    related = kt_json(home, "related", dana["memory_id"])
    assert [r["memory_id"] for r in related["related"]] == [mia["memory_id"]]
    assert [k["label"] for k in related["related"][0]["shared_keys"]] == ["Dana"]
    assert f"{mia['memory_id']}  score" in kt(home, "related", dana["memory_id"]).stdout
    assert "nothing related to" in kt(home, "related", alone["memory_id"]).stdout

    keys = kt_json(home, "keys")
    counts = {k["label"]: k["memory_count"] for k in keys["keys"]}
    assert counts["Dana"] == 2 and counts["Bob"] == 1 and keys["keys"][0]["label"] == "Dana"
    assert "Dana [name]  2 memories" in kt(home, "keys").stdout

    assert kt(home, "cleanup-expired").stdout == "nothing has expired\n"
    trip = kt_json(home, "remember", "Dana is in Rome this week", "-n", "Rome", "--ttl", "1")
    time.sleep(1.2)  # the trip's ttl passes: hidden at once, recorded by cleanup-expired
    assert kt_json(home, "list")["total"] == 3
    expired = kt_json(home, "cleanup-expired")
    assert expired["memory_ids"] == [trip["memory_id"]] and expired["seq"] is not None
    assert kt(home, "cleanup-expired").stdout == "nothing has expired\n"
    assert kt_json(home, "stats")["expired"] == 1

    proc = kt(home, "related", "m_missing", ok=False)
    assert proc.returncode == 2
    assert proc.stderr == "keytrail: error: memory_id: no memory 'm_missing'\n"
    proc = kt(home, "list", "--limit", "0", ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("keytrail: error: --limit:")


def test_sessions_and_conversation_show_the_recorded_turns(home: Path) -> None:
    from keytrail.core import Settings, Store

    with Store(Settings.from_env(home=str(home), embedder="hash")) as store:
        store.record_turn("chat-1", "user", "Hi, I moved to Lyon")
        store.record_turn("chat-1", "assistant", "Congratulations!")
        store.record_turn("chat-2", "user", "What's the weather?")
    sessions = kt_json(home, "sessions")
    assert [(s["session_id"], s["turns"]) for s in sessions["sessions"]] == [
        ("chat-2", 1),
        ("chat-1", 2),
    ]
    # A header with the total, as `list` and `keys` have: a later page showed none.
    assert kt(home, "sessions").stdout.startswith(
        "2 sessions, most recently active first (showing 1-2)\nchat-2  1 turn  "
    )
    chat = kt_json(home, "conversation", "chat-1")
    assert chat["total"] == 2
    assert [(t["turn"], t["role"], t["content"]) for t in chat["turns"]] == [
        (1, "user", "Hi, I moved to Lyon"),
        (2, "assistant", "Congratulations!"),
    ]
    text = kt(home, "conversation", "chat-1", "--turn", "2").stdout
    assert text.startswith("chat-1: 2 turns\n") and text.rstrip().endswith(
        "assistant: Congratulations!"
    )
    # Paged: the latest turns first, and the way back to older ones said.
    text = kt(home, "conversation", "chat-1", "--limit", "1").stdout
    assert text.startswith("chat-1: 2 turns (showing 2-2; older: --offset 1)\n")
    assert "Hi, I moved" not in text
    assert (
        "Hi, I moved" in kt(home, "conversation", "chat-1", "--limit", "1", "--offset", "1").stdout
    )
    first = kt(home, "sessions", "--limit", "1").stdout.splitlines()
    assert (first[0], first[2:]) == (
        "2 sessions, most recently active first (showing 1-1)",
        ["more: --offset 1"],
    )
    last = kt(home, "sessions", "--limit", "1", "--offset", "1").stdout.splitlines()
    assert last[0] == "2 sessions, most recently active first (showing 2-2)"
    assert last[1].startswith("chat-1  2 turns  ") and len(last) == 2
    assert (
        kt(home, "sessions", "--offset", "5").stdout
        == "2 sessions, most recently active first (showing none)\n"
    )
    proc = kt(home, "conversation", "chat-9", ok=False)
    assert proc.returncode == 2
    assert proc.stderr == "keytrail: error: session_id: no session 'chat-9'\n"
    proc = kt(home, "conversation", "chat-1", "--turn", "3", ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("keytrail: error: --turn:")


def test_remember_says_when_nothing_was_extracted_and_no_key_leads_to_it(home: Path) -> None:
    out = kt(home, "remember", "ok, thanks!").stdout
    assert out.splitlines()[1] == (
        "  no keys (none given, none found in the content): no key leads to it"
    )
    assert kt_json(home, "remember", "ok then, bye!")["keys"] == []
    named = kt(home, "remember", "Dana lives in Lyon").stdout
    assert "no keys" not in named and "Dana [name] new" in named


def test_an_option_prefix_is_no_option(home: Path) -> None:
    # `--name X` quietly meant `--namespace X`: argparse took any unambiguous prefix.
    kt(home, "remember", "Ana moved to Porto", "-k", "Ana", "--namespace", "work")
    for args in (["--name", "work", "list"], ["list", "--name", "work"]):
        refused = kt(home, *args, ok=False)
        assert refused.returncode == 2 and refused.stdout == ""  # refused, nothing listed


def test_store_options_work_before_the_verb_too(home: Path, tmp_path: Path) -> None:
    # `keytrail --home D stats` is how a person writes it; it used to fail as "invalid choice".
    elsewhere = tmp_path / "elsewhere"
    kt(home, "--home", str(elsewhere), "--namespace", "work", "remember", "Ana moved", "-k", "Ana")
    assert not home.exists()  # KEYTRAIL_HOME (home) was overridden, not used
    before = kt_json(home, "--home", str(elsewhere), "stats")
    after = kt_json(home, "stats", "--home", str(elsewhere))
    assert before == after and before["memories"] == 1
    listed = kt_json(elsewhere, "list", "--namespace", "work")
    assert [m["namespace"] for m in listed["memories"]] == ["work"]
    # given on both sides, the verb's own option wins; an empty one is still refused
    both = kt_json(tmp_path / "nowhere", "--home", str(home), "stats", "--home", str(elsewhere))
    assert both["memories"] == 1
    refused = kt(home, "--home", "", "stats", ok=False)
    assert refused.returncode == 2 and "--home: empty" in refused.stderr


def segments(home: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((home / "log").glob("*.jsonl"))]


def test_unreadable_import_and_unwritable_export_name_the_argument(
    home: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-folder" / "x.jsonl"
    refused = kt(home, "import", str(missing), ok=False)
    assert refused.returncode == 2 and not home.exists()
    assert refused.stderr.startswith(f"keytrail: error: input: cannot read {str(missing)!r}")
    kt(home, "remember", "Ana moved to Porto", "-k", "Ana")
    before = segments(home)
    for fmt in ("keytrail", "memory-jsonl"):
        refused = kt(home, "export", "--format", fmt, "-o", str(missing), ok=False)
        assert refused.returncode == 2, refused.stderr
        assert f"--output: cannot write {str(missing)!r}" in refused.stderr
    refused = kt(home, "import", str(tmp_path), ok=False)  # a directory
    assert "input: cannot read" in refused.stderr
    # an export written over the store's own files would wipe a log segment before reading it
    segment = sorted((home / "log").glob("*.jsonl"))[0]
    for target in (segment, home / "export.jsonl"):
        refused = kt(home, "export", "-o", str(target), ok=False)
        assert refused.returncode == 2 and "is inside the store" in refused.stderr
    assert segments(home) == before  # nothing written by a refused export or import
    assert kt_json(home, "stats")["memories"] == 1


def test_errors_are_one_line_and_exit_2(home: Path) -> None:
    proc = kt(home, "stats", ok=False)  # a read never makes a store (test_cli_home.py)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and not home.exists()
    kt(home, "remember", "Carol is here", "-n", "Carol")
    proc = kt(home, "read", "m_missing", ok=False)
    assert proc.returncode == 2
    assert proc.stderr == "keytrail: error: memory_id: no memory 'm_missing'\n"
    proc = kt(home, "remember", "a fact", "-k", "x" * 201, ok=False)
    assert proc.returncode == 2 and proc.stderr.startswith("keytrail: error: keys[0]:")
    assert "Traceback" not in proc.stderr
    proc = kt(home.parent / "nothing-here", "log", ok=False)
    assert proc.returncode == 2 and "no keytrail store at" in proc.stderr


def test_log_filters(home: Path) -> None:
    a = kt_json(home, "remember", "Alice likes tea", "-n", "Alice")
    kt_json(home, "remember", "Bob likes coffee", "-n", "Bob")
    kt_json(home, "read", a["memory_id"])
    lines = [json.loads(x) for x in kt(home, "log", "--json").stdout.splitlines()]
    assert [e["type"] for e in lines] == [
        "store.created",
        "memory.remembered",
        "memory.remembered",
        "memory.read",
    ]
    assert [e["seq"] for e in lines] == [1, 2, 3, 4]
    only = kt(home, "log", "--json", "--type", "memory.read").stdout.splitlines()
    assert [json.loads(x)["seq"] for x in only] == [4]
    mine = kt(home, "log", "--json", "--memory", a["memory_id"]).stdout.splitlines()
    assert [json.loads(x)["seq"] for x in mine] == [2, 4]
    table = kt(home, "log").stdout
    assert "memory.remembered" in table and "'Alice likes tea'" in table


def test_verify_ok_then_detects_a_corrupted_line(home: Path) -> None:
    for i in range(3):
        kt(home, "remember", f"fact number {i}", "-k", f"topic{i}")
    ok = kt(home, "verify")
    assert "ok: 4 events" in ok.stdout and "verify" in ok.stderr  # progress on stderr
    segment = sorted((home / "log").glob("*.jsonl"))[0]
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"fact number 1", b"fact number X")  # checksum now wrong
    segment.write_bytes(b"".join(lines))
    bad = kt(home, "verify", ok=False)
    assert bad.returncode == 1
    assert "PROBLEMS" in bad.stdout and "line 3" in bad.stdout and "checksum" in bad.stdout
    report = json.loads(kt(home, "verify", "--json", ok=False).stdout)
    assert report["ok"] is False and report["problems"]


def test_rebuild_replays_from_the_log(home: Path) -> None:
    kt(home, "remember", "Alice likes tea", "-n", "Alice", "-k", "tea")
    kt(home, "remember", "Bob likes tea too", "-n", "Bob", "-k", "tea")
    before = kt_json(home, "stats")
    out = kt(home, "rebuild")
    assert "rebuilt" in out.stdout and "replay" in out.stderr
    assert (home / "cache" / "snapshot").exists()
    after = kt_json(home, "stats")
    assert {k: v for k, v in after.items() if k != "log_bytes"} == {
        k: v for k, v in before.items() if k != "log_bytes"
    }
    rec = kt_json(home, "recall", "tea")
    assert any(k["label"] == "tea" for k in rec["keys"])


def test_rebuild_says_it_cut_a_torn_last_line(home: Path) -> None:
    kt(home, "remember", "Alice likes tea", "-n", "Alice", "-k", "tea")
    (segment,) = sorted((home / "log").glob("*.jsonl"))
    whole = segment.read_bytes()
    with open(segment, "ab") as f:  # a writer that died in the middle of its line
        f.write(b'{"type":"memory.remembered","seq":3,"at":"2026-')
    out = kt(home, "rebuild").stdout
    (torn,) = os.listdir(home / "log" / "torn")
    assert f"cut a torn last line (a write that never finished) into log/torn/{torn}" in out
    assert segment.read_bytes() == whole
    assert "torn" not in kt(home, "rebuild").stdout  # said once, when it happened


def test_rebuild_of_a_damaged_log_drops_no_cache(home: Path) -> None:
    """A flipped byte behind the snapshot: the store still answers from its snapshot (only
    verify, rebuild, export, log read that far back). rebuild dropped every cache first and
    then failed on the line, so the store answered nothing any more and the state the
    snapshot held past the damage was gone. It must refuse before it drops anything."""
    for i in range(4):
        kt(home, "remember", f"fact number {i} about tea", "-k", "tea")
    before = kt_json(home, "stats")
    (segment,) = sorted((home / "log").glob("*.jsonl"))
    data = segment.read_bytes()
    segment.write_bytes(data.replace(b"fact number 1", b"fact numbeR 1", 1))
    caches = {p: p.read_bytes() for p in (home / "cache").rglob("*") if p.is_file()}
    assert caches
    refused = kt(home, "rebuild", ok=False)
    assert refused.returncode == 2
    assert segment.name in refused.stderr and "line 3" in refused.stderr
    assert "nothing dropped" in refused.stderr and "backup" in refused.stderr
    assert {p: p.read_bytes() for p in (home / "cache").rglob("*") if p.is_file()} == caches
    assert kt_json(home, "stats") == before


def test_export_then_import_into_an_empty_store(home: Path, tmp_path: Path) -> None:
    a = kt_json(home, "remember", "Alice likes tea", "-n", "Alice", "-k", "tea", "--ttl", "3600")
    kt_json(home, "correct", a["memory_id"], "Alice likes green tea")
    kt_json(home, "remember", "Bob likes coffee", "-n", "Bob")
    dump = tmp_path / "export.jsonl"
    kt(home, "export", "-o", str(dump))
    to_stdout = kt(home, "export").stdout
    assert to_stdout == dump.read_text()
    copy = tmp_path / "copy"
    out = kt(copy, "import", str(dump))
    assert "imported 4 events" in out.stderr
    # Same events, same seq and record times: the copy is the same history.
    assert kt(copy, "export").stdout == dump.read_text()
    assert kt_json(copy, "stats")["memories"] == 2
    assert "ok: 4 events" in kt(copy, "verify").stdout
    # from stdin as well
    third = tmp_path / "third"
    kt(third, "import", stdin=dump.read_text())
    assert kt(third, "export").stdout == dump.read_text()
    # never into a store that holds events, and a broken export writes nothing
    again = kt(copy, "import", str(dump), ok=False)
    assert again.returncode == 2 and "empty store" in again.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join([*dump.read_text().splitlines()[:1], '{"seq": 5}']) + "\n")
    fourth = tmp_path / "fourth"
    bad = kt(fourth, "import", str(broken), ok=False)
    assert bad.returncode == 2 and "line 2" in bad.stderr
    assert not list((fourth / "log").glob("*.jsonl")) or all(
        p.stat().st_size == 0 for p in (fourth / "log").glob("*.jsonl")
    )


def test_import_splits_the_log_as_the_configured_segment_size_says(
    home: Path, tmp_path: Path
) -> None:
    # A store restored from an export gets the segments KEYTRAIL_SEGMENT_BYTES asks for, as the
    # store it came from had: one segment of the whole log would make every forget in it
    # rewrite, and read into memory, all of it.
    for i in range(6):
        kt(home, "remember", f"fact {i} " + "x" * 200, "-k", "topic")
    dump = tmp_path / "export.jsonl"
    kt(home, "export", "-o", str(dump))
    restored = tmp_path / "restored"
    subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "import", str(dump)],
        env={**env_for(restored), "KEYTRAIL_SEGMENT_BYTES": "2000"},
        cwd=str(REPO),
        capture_output=True,
        check=True,
    )
    sizes = [p.stat().st_size for p in sorted((restored / "log").glob("*.jsonl"))]
    assert len(sizes) > 1 and max(sizes) <= 2000, sizes
    assert kt(restored, "export").stdout == dump.read_text()


def test_log_follow_sees_another_process_append(home: Path, tmp_path: Path) -> None:
    kt(home, "remember", "first fact", "-k", "one")
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
            deadline = time.monotonic() + 30
            while out_path.read_text().count("\n") < 2:
                assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
                assert time.monotonic() < deadline, "follow did not print the existing log"
                time.sleep(0.05)
            kt(home, "remember", "second fact from another process", "-k", "two")
            deadline = time.monotonic() + 20
            while "second fact from another process" not in out_path.read_text():
                assert follower.poll() is None
                assert time.monotonic() < deadline, "follow did not see the append"
                time.sleep(0.05)
        finally:
            follower.terminate()
            follower.wait(timeout=10)
    events = [json.loads(x) for x in out_path.read_text().splitlines()]
    assert [e["seq"] for e in events] == [1, 2, 3]


def test_serve_flags_override_the_environment(home: Path, tmp_path: Path) -> None:
    # --home beats KEYTRAIL_HOME for every verb (checked on a quick one).
    other = tmp_path / "other"
    kt(home, "remember", "lives elsewhere", "-k", "x", "--home", str(other))
    assert (other / "log").is_dir() and not (home / "log").exists()
    ns = kt_json(
        home, "remember", "namespaced", "-k", "y", "--home", str(other), "--namespace", "work"
    )
    assert ns["namespace"] == "work"


def test_export_to_a_device_is_not_an_error(home: Path) -> None:
    """`-o /dev/null` (timing an export) or `-o /dev/stdout`: fsync on a character device fails
    with EINVAL, and the export exited 2 after writing every line."""
    kt(home, "remember", "Dana lives in Lyon", "-k", "Lyon")
    done = kt(home, "export", "-o", os.devnull, ok=False)
    assert done.returncode == 0, done.stderr
    assert "exported 2 events" in done.stderr
    done = kt(home, "export", "--namespace", "default", "-o", os.devnull, ok=False)
    assert done.returncode == 0, done.stderr


def _rpc(proc: subprocess.Popen[bytes], method: str, ident: int | None, **params: Any) -> None:
    """Send one JSON-RPC message to a server's stdin (a notification without `ident`)."""
    assert proc.stdin is not None
    message = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        message["id"] = ident
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


@pytest.mark.parametrize("end", ["ctrl-d", "ctrl-c", "sigterm"])
def test_serve_over_stdio_ends_quietly_on_ctrl_d_ctrl_c_and_sigterm(home: Path, end: str) -> None:
    """Ctrl-C once left the server waiting for a line on stdin (the SDK reads it on a worker
    thread no cancellation wakes), and then printed a KeyboardInterrupt traceback. SIGTERM
    (an MCP client's or a service manager's stop) killed it without closing the store."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "keytrail.server.cli", "serve"],
        env=env_for(home),
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    try:
        assert b"serving" in proc.stderr.readline()
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}}
        _rpc(proc, "initialize", 1, **hello, clientInfo={"name": "t", "version": "0"})
        assert json.loads(proc.stdout.readline())["id"] == 1
        _rpc(proc, "notifications/initialized", None)
        remember = {"content": "Dana lives in Lyon", "keys": ["Lyon"]}
        _rpc(proc, "tools/call", 2, name="remember", arguments=remember)
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 2 and not answer["result"].get("isError"), answer
        if end == "ctrl-d":
            proc.stdin.close()
        else:  # stdin stays open, as at a terminal or in a client that stops its server
            proc.send_signal(signal.SIGINT if end == "ctrl-c" else signal.SIGTERM)
        code = proc.wait(timeout=30)
        rest = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert rest == "", rest  # nothing after the banner: no traceback, no noise
    assert code == {"ctrl-d": 0, "ctrl-c": 130, "sigterm": 143}[end]
    # Closed, not killed: the snapshot holds what it acknowledged.
    assert snapshot_seq(home) == EventLog(home).read_new()[-1].seq
    # What it acknowledged is in the store, which opens and verifies.
    assert "ok" in kt(home, "verify").stdout
    assert [m["preview"] for m in kt_json(home, "list")["memories"]] == ["Dana lives in Lyon"]


def snapshot_seq(home: Path) -> int | None:
    """The seq the store's snapshot holds, None without one."""
    header = read_header(home / "cache" / "snapshot" / "keygraph.msgpack")
    return header.seq if header is not None else None


def cut_short(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, after: int = 0) -> None:
    """Ctrl-C arrives in `owner.name` once it has run `after` times."""
    real = getattr(owner, name)
    calls = [0]

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > after:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)


def test_ctrl_c_while_the_command_is_still_loading_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The console script's first quarter second is spent importing; a Ctrl-C then escaped as
    a traceback. Here the import of the command line itself is interrupted."""
    import importlib.abc
    import sys

    from keytrail.server import entry

    class Interrupting(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, *args: object) -> None:
            if name == "keytrail.server.cli":
                raise KeyboardInterrupt
            return None

    monkeypatch.delitem(sys.modules, "keytrail.server.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Interrupting(), *sys.meta_path])
    try:
        status = entry.main(["stats"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C while loading escaped the entry point")
    assert status == 130
    assert capsys.readouterr().err == "keytrail: interrupted while starting: nothing was done\n"


def test_the_console_script_runs_the_command_line(tmp_path: Path, hash_cli: None) -> None:
    from keytrail.server import entry

    with pytest.raises(SystemExit) as failed:
        entry.main(["stats", "--home", str(tmp_path / "none")])  # no store there
    assert failed.value.code == 2
    assert entry.main(["remember", "Anna lives in Lyon", "--home", str(tmp_path / "s")]) == 0


def test_a_system_without_posix_file_locks_is_refused_in_one_line(tmp_path: Path) -> None:
    """On Windows `import fcntl` fails deep inside the event log: the command died with a
    traceback. It says in one line what keytrail needs and where it runs instead."""
    from keytrail.server import entry

    windows = (
        "import os, sys; os.name = 'nt'; sys.modules['fcntl'] = None; "
        "from keytrail.server.entry import main; sys.exit(main(['stats', '--home', sys.argv[1]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", windows, str(tmp_path / "store")], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [entry.UNSUPPORTED]
    assert "WSL" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()


def test_the_entry_module_runs_as_a_script(tmp_path: Path) -> None:
    # It did nothing and exited 0: the module had no __main__ block.
    done = subprocess.run(
        [sys.executable, "-m", "keytrail.server.entry", "stats", "--home", str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "no keytrail store" in done.stderr, done.stderr


BLAS_PROBE = """
import os, sys
from keytrail.server import entry
try:
    entry.main(["--version"])  # loads the command line, numpy with it
except SystemExit:
    pass
assert "numpy" in sys.modules
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="BLAS starts one thread a core")
def test_the_console_script_runs_numpy_on_one_thread_unless_told() -> None:
    """By default numpy's BLAS started a thread per core, which spun after every product: a
    remember burned twice its time in CPU. The user's own setting still wins."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}

    def probe(**extra: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", BLAS_PROBE],
            env={**env, **extra},
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split()[-2:]  # after the version line

    assert probe() == ["1", "1"]  # the main thread alone
    assert probe(OPENBLAS_NUM_THREADS="2") == ["2", "2"]


def run_main(argv: list[str]) -> int:
    """cli.main in this process; a KeyboardInterrupt escaping it fails the test (pytest would
    take it for the user's Ctrl-C and stop the whole run)."""
    from keytrail.server import cli

    try:
        return cli.main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped keytrail's main: a traceback, not a line and status 130")


def interrupt_rebuild_mid_embedding(mp: pytest.MonkeyPatch) -> None:
    from keytrail.core import Store
    from keytrail.server import care

    mp.setattr(care, "EMBED_BATCH", 1)  # caches dropped, log replayed, one batch embedded
    cut_short(mp, Store, "embed", after=1)


def interrupt_rebuild_mid_indexing(mp: pytest.MonkeyPatch) -> None:
    from keytrail.core import Store

    cut_short(mp, Store, "index_text")


def interrupt_verify_mid_fold(mp: pytest.MonkeyPatch) -> None:
    from keytrail.core import maintenance

    cut_short(mp, maintenance, "apply", after=2)


def interrupt_reembed(mp: pytest.MonkeyPatch) -> None:
    from keytrail.core import HashEmbedder

    cut_short(mp, HashEmbedder, "embed")


def interrupt_export_mid_write(mp: pytest.MonkeyPatch) -> None:
    from keytrail.server import care

    cut_short(mp, care, "encode_event", after=2)


def interrupt_remember_before_its_append(mp: pytest.MonkeyPatch) -> None:
    from keytrail.events.log import Appender

    cut_short(mp, Appender, "append")


@pytest.mark.parametrize(
    ("argv", "interrupt", "said"),
    [
        (["verify"], interrupt_verify_mid_fold, "verify writes nothing"),
        (["rebuild"], interrupt_rebuild_mid_embedding, "run `keytrail rebuild` again"),
        (["rebuild"], interrupt_rebuild_mid_indexing, "run `keytrail rebuild` again"),
        (["reembed"], interrupt_reembed, "run `keytrail reembed` again to resume"),
        (
            ["export", "-o", "{tmp}/export.jsonl"],
            interrupt_export_mid_write,
            "run `keytrail export` again",
        ),
        (
            ["remember", "Bob likes coffee", "-k", "coffee"],
            interrupt_remember_before_its_append,
            "a write is in the log whole or not at all",
        ),
    ],
)
def test_ctrl_c_ends_a_verb_with_one_line_and_status_130(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    interrupt: Callable[[pytest.MonkeyPatch], None],
    said: str,
) -> None:
    for i in range(4):
        kt(home, "remember", f"fact number {i}", "-k", f"topic{i}", "-n", "Dana")
    if argv == ["reembed"]:
        shutil.rmtree(home / "cache" / "vectors")  # so that it has something to embed
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    capsys.readouterr()
    with monkeypatch.context() as patched:
        interrupt(patched)
        code = run_main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert code == 130
    assert "Traceback" not in err
    lines = err.splitlines()  # progress bars before it, on lines of their own
    assert [line for line in lines if "interrupt" in line] == [lines[-1]]
    assert lines[-1].startswith("keytrail: interrupted: ") and said in lines[-1], lines[-1]
    # Whatever it left, the store opens and verifies, and the log holds what it held.
    assert "ok: 5 events" in kt(home, "verify").stdout
    assert kt_json(home, "stats")["memories"] == 4
    if argv[0] == "export":  # no file that looks like a backup, nor its partial start
        assert not (tmp_path / "export.jsonl").exists()
        assert list(tmp_path.glob("*export.jsonl*")) == []
    if "again" in said:  # and what it says to do works
        kt(home, *(a.format(tmp=tmp_path) for a in argv))


def test_an_export_cut_short_leaves_the_backup_already_at_its_name_as_it_was(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written in place, a second export cut short truncated the first one: the one backup
    # there was, gone, and a half file that imports as half a store in its place.
    from keytrail.server import care

    kt(home, "remember", "first fact", "-k", "one")
    backup = tmp_path / "backup.jsonl"
    kt(home, "export", "-o", str(backup))
    before = backup.read_bytes()
    kt(home, "remember", "second fact", "-k", "two")
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    with monkeypatch.context() as patched:
        cut_short(patched, care, "encode_event", after=1)  # a line written, then Ctrl-C
        assert run_main(["export", "-o", str(backup)]) == 130
    assert backup.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if "backup" in p.name] == [backup.name]
    kt(home, "export", "-o", str(backup))  # a whole one replaces it
    assert len(backup.read_text().splitlines()) == len(before.splitlines()) + 1


def test_ctrl_c_stops_log_follow_as_its_normal_end_but_cuts_a_listing_short(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from keytrail.server import care

    kt(home, "remember", "first fact", "-k", "one")
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    capsys.readouterr()
    with monkeypatch.context() as patched:
        cut_short(patched, care, "follow")
        assert run_main(["log", "--follow"]) == 0  # Ctrl-C is how following stops
    assert capsys.readouterr().err == ""
    with monkeypatch.context() as patched:
        cut_short(patched, care, "summary", after=1)
        assert run_main(["log"]) == 130
    out = capsys.readouterr()
    assert out.out.count("\n") == 1  # the first event, then the interrupt
    assert out.err == "keytrail: interrupted: log writes nothing\n"


def test_read_of_a_corrected_version_says_superseded_not_active(home: Path) -> None:
    """It printed `m_old [default] active  depth 0.05` over `superseded by m_new`."""
    old = kt_json(home, "remember", "Mia starts school in 2025", "-n", "Mia")["memory_id"]
    new = kt_json(home, "correct", old, "Mia starts school in 2026")["memory_id"]
    first, *rest = kt(home, "read", old).stdout.splitlines()
    assert first == f"{old} [default] superseded (by {new})  depth 0.05"
    assert not any("superseded" in line for line in rest)  # said once
    first, *rest = kt(home, "read", new).stdout.splitlines()
    assert first == f"{new} [default] active  depth 0.05"
    assert rest[-1] == f"supersedes {old}"
    # --json is the MCP tool's record, which says it too, as `history` does.
    record = kt_json(home, "read", old)
    assert (record["status"], record["superseded_by"]) == ("superseded", new)
    assert kt_json(home, "read", new)["status"] == "active"


def test_counts_of_one_are_said_in_the_singular(
    tmp_path: Path, hash_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each said "1 memories", "1 keys", "1 events" or "1 entities"."""
    from keytrail.core import HashEmbedder, Settings, Store
    from keytrail.server.cli import main

    def said(home: Path, *args: str) -> str:
        assert main([*args, "--home", str(home)]) == 0
        out = capsys.readouterr()
        return out.out + out.err

    home = tmp_path / "store"
    told = json.loads(said(home, "remember", "the door code is 4711", "-k", "door", "--json"))
    rebuilt = said(home, "rebuild")
    assert "1 memory, 1 key, 1 label vector, 1 content vector (" in rebuilt
    assert "1 memory in the text index" in rebuilt
    assert "index/text (seq 2, 1 memory)" in said(home, "verify")
    assert said(home, "keys").startswith("1 key, most memories first")
    assert "1 key row, 1 memory row" in said(home, "reembed")
    assert f"history of {told['memory_id']}: 1 version\n" in said(
        home, "history", told["memory_id"]
    )

    fresh = tmp_path / "fresh"  # a store of one event: store.created
    Store(Settings(home=fresh, embedder="hash"), embedder=HashEmbedder()).close()
    backup = tmp_path / "backup.jsonl"
    assert said(fresh, "export", "-o", str(backup)).endswith("exported 1 event\n")
    assert "imported 1 event into" in said(tmp_path / "copy", "import", str(backup))

    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        '{"type": "entity", "name": "Door", "entityType": "thing", "observations": ["code 4711"]}\n'
    )
    kg = tmp_path / "kg"
    assert ": 1 key, 1 entity, 1 memory, 0 relations" in said(kg, "import", str(graph))
    assert "its 1 entity, their" in said(kg, "import", str(graph))
    assert "exported 1 memory.jsonl line (" in said(kg, "export", "--format", "memory-jsonl")


@pytest.mark.parametrize(
    ("tag", "data", "shown"),
    [
        ("entities.created", {"entities": [], "observations": ["x"]}, "; 1 observation"),
        (
            "entities.deleted",
            {"key_ids": ["k_1"], "forgotten": ["m_1"], "relations": [{}]},
            "k_1; 1 observation deleted, 1 relation removed",
        ),
        (
            "graph.imported",
            {
                "format": "keymem",
                "source": "g.json",
                "keys": [{}],
                "memories": [{}],
                "relations": [{}],
            },
            "keymem g.json: 1 key, 1 memory, 1 relation",
        ),
    ],
)
def test_log_summaries_say_a_count_of_one_in_the_singular(
    tag: str, data: dict[str, Any], shown: str
) -> None:
    """`keytrail log` said "1 observations", "1 relations removed", "1 keys, 1 memories"."""
    assert kg_summary(tag, data) == shown


def test_a_links_adjusted_summary_says_one_link_adjustment() -> None:
    delta = LinkDelta(key_id="k_1", memory_id="m_1", delta=0.1)
    assert summary(LinksAdjusted(adjustments=[delta])) == "1 link adjustment"


def test_read_says_when_a_version_became_valid_if_told_apart_from_when_told(home: Path) -> None:
    """A correction dated ahead ("moves to Berlin in January") read as any current fact: the
    text gave no sign it was not true yet (only --json had `valid_from`)."""
    old = kt_json(home, "remember", "The user lives in Oslo.", "-n", "Oslo")["memory_id"]
    new = kt_json(home, "correct", old, "The user lives in Berlin.", "--valid-from", "2031-01-15")[
        "memory_id"
    ]
    lines = kt(home, "read", new).stdout.splitlines()
    assert "valid from 2031-01-15 00:00:00" in lines
    # Told without one, a version is true from when it was told: nothing more to say.
    assert not any(
        line.startswith("valid from") for line in kt(home, "read", old).stdout.splitlines()
    )
