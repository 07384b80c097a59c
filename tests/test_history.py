"""history, changes and valid time: the Seoul -> Busan scenario with the real model, the CLI verbs
and the MCP tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from keytrail.core import InvalidInput, NotFound, Store
from keytrail.core import history as timeline
from keytrail.core.history import changes, history
from keytrail.core.queries import Queries
from keytrail.core.timetravel import read_memory_at, view
from keytrail.events import FoldRules, RulesChanged

REPO = Path(__file__).resolve().parent.parent


def walk(queries: Queries, question: str, store: Store, **at: Any) -> list[str]:
    """What an agent would find: recall keys, read their memories (as of `at`, recording nothing
    when `at` is given)."""
    found: list[str] = []
    for key in queries.recall(question, top_k=3).keys:
        for ref in queries.read_key(key.key_id).memories:
            content = read_memory_at(store, ref.memory_id, **at).content
            if content not in found:
                found.append(content)
    return found


def test_seoul_to_busan_with_the_real_model(real_store: Store) -> None:
    store = real_store
    seoul = store.remember(
        "The user lives in Seoul.",
        ["user", "home", "city", "Seoul"],
        {"Seoul": "name"},
        valid_from=(store.clock() - timedelta(days=400)).isoformat(),
    )
    home_key = store.state.key_for_label("home")
    assert home_key is not None
    store.read_memory(seoul.memory_id, home_key.id, "where does the user live?")
    before = store.state.seq
    told = store.clock()
    moved = (told - timedelta(days=20)).isoformat()
    busan = store.correct(
        seoul.memory_id,
        "The user moved to Busan.",
        ["user", "home", "city", "Busan"],
        {"Busan": "name"},
        valid_from=moved,
    )
    store.read_memory(busan.memory_id, home_key.id, "which city is home?")
    question = "Where does the user live?"

    # Record time: what the store believed.
    then = walk(view(store, before), question, store, as_of=before)
    assert any("Seoul" in c for c in then) and not any("Busan" in c for c in then)
    now = walk(store, question, store, as_of=store.state.seq)
    assert any("Busan" in c for c in now) and not any("Seoul" in c for c in now)

    # Valid time: the move is dated before it was told.
    between = (told - timedelta(days=10)).isoformat()
    earlier = (told - timedelta(days=30)).isoformat()
    true_then = walk(view(store, None, between), question, store, valid_at=between)
    assert any("Busan" in c for c in true_then) and not any("Seoul" in c for c in true_then)
    true_earlier = walk(view(store, None, earlier), question, store, valid_at=earlier)
    assert any("Seoul" in c for c in true_earlier)
    # ...but as of before the correction, the store did not know of the move yet.
    believed = walk(view(store, before, between), question, store, as_of=before, valid_at=between)
    assert not any("Busan" in c for c in believed)

    # History: both versions, the reads with key and query, the depth trajectory.
    h = history(store, busan.memory_id)
    assert [v.memory_id for v in h.versions] == [seoul.memory_id, busan.memory_id]
    assert [v.status for v in h.versions] == ["superseded", "active"]
    assert h.versions[1].valid_from is not None
    assert h.versions[1].valid_from.isoformat() == moved
    reads = [e for e in h.events if e.type == "memory.read"]
    assert [(e.memory_id, e.via_key, e.query) for e in reads] == [
        (seoul.memory_id, "home", "where does the user live?"),
        (busan.memory_id, "home", "which city is home?"),
    ]
    assert any(e.what.startswith("corrected by " + busan.memory_id) for e in h.events)
    depths = [(t.memory_id, t.depth) for t in h.trajectory]
    step = store.state.rules.depth_step
    weakened = round(step * store.state.rules.weaken_shallow, 6)
    assert depths == [
        (seoul.memory_id, 0.0),
        (seoul.memory_id, step),
        (seoul.memory_id, weakened),
        (busan.memory_id, 0.0),
        (busan.memory_id, step),
    ]
    home_weights = [t.weights["home"] for t in h.trajectory if t.memory_id == seoul.memory_id]
    assert home_weights == [1.0, 1.1, 1.1]  # the read through `home` strengthened that link


def test_history_of_a_forgotten_memory_and_links_adjusted(make_store: Callable[..., Store]) -> None:
    store = make_store()
    a = store.remember("The user's locker code is 4412", ["locker", "code"])
    b = store.remember(
        "The gym locker is on floor two", ["locker", "gym"], related_to=[a.memory_id]
    )
    store.forget(a.memory_id, reason="the user asked")
    h = history(store, a.memory_id)
    assert [v.status for v in h.versions] == ["forgotten"]
    assert h.versions[0].preview == ""  # forgotten content is not served back
    whats = [(e.type, e.what) for e in h.events]
    assert whats == [
        ("memory.remembered", "created"),
        ("memory.remembered", f"related to by new memory {b.memory_id}"),
        ("memory.forgotten", "forgotten"),
    ]
    assert h.events[-1].reason == "the user asked"
    with pytest.raises(NotFound):
        history(store, "m_000000000000")


def test_changes_between_two_points(make_store: Callable[..., Store]) -> None:
    store = make_store()
    old = store.remember("The user drinks coffee", ["drinks"])
    since = store.state.seq
    added = store.remember("The user plays chess", ["games"], namespace="hobby")
    new = store.correct(old.memory_id, "The user drinks tea now")
    for _ in range(3):
        store.read_memory(added.memory_id)
    store.read_memory(new.memory_id)
    gone = store.remember("A passing thought", ["misc"])
    store.forget(gone.memory_id)
    c = changes(store, since=since)
    assert c.added == [added.memory_id, gone.memory_id]
    assert [(x.old_id, x.new_id) for x in c.corrected] == [(old.memory_id, new.memory_id)]
    assert [(r.memory_id, r.reads) for r in c.read_most] == [
        (added.memory_id, 3),
        (new.memory_id, 1),
    ]
    assert c.forgotten == [gone.memory_id]
    hobby = changes(store, since=since, namespace="hobby")
    assert hobby.added == [added.memory_id] and hobby.corrected == [] and hobby.forgotten == []
    upto = changes(store, since=since, until=since + 1)
    assert upto.added == [added.memory_id] and upto.corrected == []
    with pytest.raises(InvalidInput) as err:
        changes(store, since=since + 1, until=since)
    assert err.value.field == "since"
    # Since a time before the store existed: all of it ("what changed since January?").
    assert changes(store, since="2000-01-01T00:00:00Z") == changes(store)
    # A span that ends before the store existed holds nothing that could be: refused.
    with pytest.raises(InvalidInput, match="before the store existed") as err:
        changes(store, until="2000-01-01T00:00:00Z")
    assert err.value.field == "until"


def test_changes_refuses_since_after_until_given_as_a_seq_and_a_time(
    make_store: Callable[..., Store],
) -> None:
    """since=seq, until=time (or the other way round) with since after until was answered as
    an empty span ("after seq 4 up to seq 4") where two seqs or two times are refused."""
    from keytrail.events import EventLog

    store = make_store()
    first = store.remember("The user drinks coffee", ["drinks"])
    second = store.remember("The user plays chess", ["games"])
    third = store.remember("The user reads novels", ["books"])
    at = {e.seq: e.at.isoformat() for e in EventLog(store.home).iter_new()}
    for since, until in ((third.seq, at[first.seq]), (at[third.seq], first.seq)):
        with pytest.raises(InvalidInput, match="is after until") as err:
            changes(store, since=since, until=until)
        assert err.value.field == "since"
    # Spans that hold nothing or one event are no error.
    assert changes(store, since=second.seq, until=at[second.seq]).added == []
    assert changes(store, since=at[second.seq], until=second.seq).added == []
    assert changes(store, since=at[first.seq], until=second.seq).added == [second.memory_id]
    assert changes(store, since=first.seq, until=at[second.seq]).added == [second.memory_id]


def test_changes_since_seq_0_is_the_whole_log(make_store: Callable[..., Store]) -> None:
    """Seq 0 is where an answer without `since` starts (its since_seq): given back as since,
    it is the same span, not "outside the log". As until, or as_of, it is still refused."""
    store = make_store()
    made = [store.remember(f"The user likes sport number {i}", ["sport"]) for i in range(3)]
    whole = changes(store)
    assert whole.since_seq == 0
    again = changes(store, since=0)
    assert again.added == whole.added == [m.memory_id for m in made]
    assert (again.since_seq, again.until_seq) == (0, whole.until_seq)
    for field, call in (
        ("until", lambda: changes(store, until=0)),
        ("since", lambda: changes(store, since=whole.until_seq + 1)),
    ):
        with pytest.raises(InvalidInput, match="outside the log") as err:
            call()
        assert err.value.field == field
    with pytest.raises(InvalidInput, match=r"limit: 0 to "):
        changes(store, since=whole.until_seq + 1)


def test_changes_from_the_start_say_when_the_store_began(make_store: Callable[..., Store]) -> None:
    """A span from before the first event (since_seq 0: no since, since=0, or a time before the
    store existed) answered since_at 1970-01-01, a time no agent can use: it is the time of the
    first event, when the store began."""
    from keytrail.events import EventLog

    store = make_store()
    store.remember("The user likes tea", ["tea"])
    began = next(iter(EventLog(store.home).iter_new())).at
    for since in (None, 0, "2000-01-01T00:00:00Z"):
        span = changes(store, since=since)
        assert (span.since_seq, span.since_at) == (0, began), since
    after_one = changes(store, since=1)
    assert (after_one.since_seq, after_one.since_at) == (1, began)


# -- the command line ----------------------------------------------------------------------------


def kt(home: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(home), KEYTRAIL_EMBEDDER="hash")
    done = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_cli_history_changes_and_as_of(tmp_path: Path) -> None:
    home = tmp_path / "store"
    first = json.loads(kt(home, "remember", "The user lives in Seoul", "-k", "home", "--json"))
    mid = first["memory_id"]
    kt(home, "read", mid)
    fixed = json.loads(
        kt(
            home,
            "correct",
            mid,
            "The user moved to Busan",
            "--valid-from",
            "2026-03-15T00:00:00Z",
            "--json",
        )
    )
    then = kt(home, "read", mid, "--as-of", str(first["seq"]))
    assert "The user lives in Seoul" in then and "superseded" not in then
    page = json.loads(kt(home, "read-key", fixed["keys"][0]["key_id"], "--as-of", "2", "--json"))
    assert [m["memory_id"] for m in page["memories"]] == [mid]
    text = kt(home, "history", fixed["memory_id"])
    assert "2 versions" in text and "valid from 2026-03-15" in text
    assert "read" in text and f"corrected by {fixed['memory_id']}" in text
    assert "depth 0.050" in text
    data = json.loads(kt(home, "history", mid, "--json"))
    assert [v["memory_id"] for v in data["versions"]] == [mid, fixed["memory_id"]]
    log_before = (
        (home / "log").stat().st_mtime_ns,
        sum(p.stat().st_size for p in (home / "log").glob("*.jsonl")),
    )
    changed = json.loads(kt(home, "changes", "--since", str(first["seq"]), "--json"))
    assert changed["corrected"][0]["new_id"] == fixed["memory_id"]
    assert "corrected  1" in kt(home, "changes")
    stats = json.loads(kt(home, "stats", "--as-of", str(first["seq"]), "--json"))
    assert stats["memories"] == 1 and stats["seq"] == first["seq"]
    assert sum(p.stat().st_size for p in (home / "log").glob("*.jsonl")) == log_before[1]


# -- MCP -----------------------------------------------------------------------------------------


def test_mcp_as_of_history_and_changes(tmp_path: Path) -> None:
    home = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(home), KEYTRAIL_EMBEDDER="hash")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keytrail.server.cli", "serve"], env=env, cwd=str(REPO)
    )

    async def call(session: ClientSession, name: str, **args: Any) -> Any:
        result = await session.call_tool(name, args)
        assert not result.is_error, result.content
        return result.structured_content

    async def scenario() -> None:
        with open(tmp_path / "stderr.txt", "w") as err, anyio.fail_after(60):
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                r = await call(
                    session,
                    "remember",
                    content="The user lives in Seoul",
                    keys=["home", "Seoul"],
                    key_types={"Seoul": "name"},
                    valid_from="2019-09-01",
                )
                c = await call(
                    session,
                    "correct",
                    memory_id=r["memory_id"],
                    content="The user moved to Busan",
                    keys=["home", "Busan"],
                    key_types={"Busan": "name"},
                    valid_from="2026-03-15T00:00:00Z",
                )
                past = await call(session, "recall", query="Seoul", as_of=r["seq"])
                assert [k["label"] for k in past["keys"]] == ["Seoul"]
                present = await call(session, "recall", query="Seoul")
                assert present["keys"] == []
                old = await call(session, "read_memory", memory_id=r["memory_id"], as_of=r["seq"])
                assert old["content"] == "The user lives in Seoul" and old["seq"] is None
                valid = await call(session, "list_memories", valid_at="2026-03-01T00:00:00Z")
                assert [m["memory_id"] for m in valid["memories"]] == [r["memory_id"]]
                h = await call(session, "history", memory_id=c["memory_id"])
                assert [v["memory_id"] for v in h["versions"]] == [r["memory_id"], c["memory_id"]]
                ch = await call(session, "changes", since=r["seq"])
                assert ch["corrected"][0]["new_id"] == c["memory_id"]
                bad = await session.call_tool("recall", {"query": "x", "as_of": 999})
                assert bad.is_error and "outside the log" in bad.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)


def told_over_time(store: Store) -> dict[str, Any]:
    """Dana's home (Lyon, then Paris from June 2025), a key and turns added after seq `before`."""
    lyon = store.remember(
        "Dana lives in Lyon",
        ["Dana", "Lyon"],
        {"Dana": "name", "Lyon": "name"},
        valid_from="2020-01-01T00:00:00Z",
    )
    store.record_turn("chat-1", "user", "Hi")
    before = store.state.seq
    store.remember("Dana likes green tea", ["Dana", "tea"])
    store.record_turn("chat-1", "assistant", "Hello")
    store.record_turn("chat-2", "user", "Later")
    paris = store.correct(
        lyon.memory_id,
        "Dana lives in Paris",
        ["Dana", "Paris"],
        {"Paris": "name"},
        valid_from="2025-06-01T00:00:00Z",
    )
    return {"before": before, "lyon": lyon.memory_id, "paris": paris.memory_id}


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


#: Points every read refuses, with what it says (as for recall, list_memories, ...).
BAD_POINTS = [
    (0, "outside the log"),
    ("1990-01-01T00:00:00Z", "before the store existed"),
    ("2999-01-01T00:00:00Z", "in the future"),
    ("yesterday", "not an ISO-8601 time"),
]
WHERE = "where does Dana live"
IN_2024 = "2024-01-01T00:00:00Z"


def test_mcp_keys_conversations_and_direct_recall_as_of_a_past_point(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """browse_keys, get_conversation and list_sessions take as_of (browse_keys valid_at too),
    recall_memories valid_at beside its as_of: each answers as of then, writes nothing and
    refuses a bad point as the other reads do."""
    from mcp import Client

    from keytrail.server.mcp_server import build_server

    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    store = make_store()
    told = told_over_time(store)
    before = told["before"]
    ids = [m.memory_id for m in store.recall_memories(WHERE).memories]  # records the links
    assert told["paris"] in ids and told["lyon"] not in ids
    written = log_bytes(store.home)

    async def scenario() -> None:
        async with Client(build_server(store)) as client:

            async def call(tool: str, /, **args: Any) -> Any:
                result = await client.session.call_tool(tool, args)
                assert not result.is_error, (tool, args, result.content)
                return result.structured_content

            async def refused(tool: str, args: dict[str, Any], says: str) -> None:
                result = await client.session.call_tool(tool, args)
                assert result.is_error, (tool, args)
                assert says in result.content[0].text, (tool, args, result.content)  # type: ignore[union-attr]

            def labels(page: Any) -> set[str]:
                return {k["label"] for k in page["keys"]}

            assert labels(await call("browse_keys")) == {"Dana", "tea", "Paris"}
            assert labels(await call("browse_keys", as_of=before)) == {"Dana", "Lyon"}
            assert labels(await call("browse_keys", valid_at=IN_2024)) == {"Dana", "Lyon"}

            now = await call("list_sessions")
            assert [s["session_id"] for s in now["sessions"]] == ["chat-2", "chat-1"]
            then = await call("list_sessions", as_of=before)
            assert [(s["session_id"], s["turns"]) for s in then["sessions"]] == [("chat-1", 1)]
            assert (await call("get_conversation", session_id="chat-1"))["total"] == 2
            past = await call("get_conversation", session_id="chat-1", as_of=before)
            assert [t["content"] for t in past["turns"]] == ["Hi"]
            await refused(
                "get_conversation",
                {"session_id": "chat-2", "as_of": before},
                "not at that point in time",
            )

            valid = await call("recall_memories", query=WHERE, valid_at=IN_2024)
            assert [m["memory_id"] for m in valid["memories"]] == [told["lyon"]]
            assert valid["seq"] is None

            for tool, args in [
                ("browse_keys", {}),
                ("list_sessions", {}),
                ("get_conversation", {"session_id": "chat-1"}),
            ]:
                for point, says in BAD_POINTS:
                    await refused(tool, {**args, "as_of": point}, says)
            for tool, args in [("browse_keys", {}), ("recall_memories", {"query": WHERE})]:
                await refused(tool, {**args, "valid_at": "soon"}, "valid_at")
            # A conversation's turns are no facts with a valid time: refused, not ignored.
            await refused("list_sessions", {"valid_at": IN_2024}, "valid_at")

    anyio.run(scenario)
    assert log_bytes(store.home) == written, "a read of the past appended something"


def test_cli_keys_sessions_conversation_and_recall_memories_as_of(
    tmp_path: Path, hash_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from keytrail.core import HashEmbedder, Settings
    from keytrail.server.cli import main

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    told = told_over_time(store)
    store.close()
    before = str(told["before"])

    def out(*args: str) -> str:
        capsys.readouterr()
        assert main([*args, "--home", str(home)]) == 0
        return capsys.readouterr().out

    def labels(*args: str) -> set[str]:
        return {k["label"] for k in json.loads(out("keys", *args, "--json"))["keys"]}

    assert labels() == {"Dana", "tea", "Paris"}
    assert labels("--as-of", before) == {"Dana", "Lyon"}
    assert labels("--valid-at", IN_2024) == {"Dana", "Lyon"}
    assert out("keys", "--as-of", before).startswith("2 keys")
    assert out("sessions", "--as-of", before).startswith(
        "1 session, most recently active first (showing 1-1)\nchat-1  1 turn "
    )
    assert "chat-2" in out("sessions")
    assert out("conversation", "chat-1", "--as-of", before).startswith("chat-1: 1 turn\n")
    assert out("conversation", "chat-1").startswith("chat-1: 2 turns\n")
    valid = json.loads(out("recall-memories", WHERE, "--valid-at", IN_2024, "--json"))
    assert [m["memory_id"] for m in valid["memories"]] == [told["lyon"]]
    for verb in (["sessions"], ["conversation", "chat-1"]):
        with pytest.raises(SystemExit) as usage:  # no valid time to a conversation
            main([*verb, "--valid-at", IN_2024, "--home", str(home)])
        assert usage.value.code == 2
        assert "unrecognized arguments: --valid-at" in capsys.readouterr().err
    for verb in (["keys"], ["sessions"], ["conversation", "chat-1"], ["recall-memories", WHERE]):
        for point, says in BAD_POINTS:
            with pytest.raises(SystemExit) as refused:
                main([*verb, "--as-of", str(point), "--home", str(home)])
            assert refused.value.code == 2
            err = capsys.readouterr().err
            assert err.startswith("keytrail: error: --as-of: ") and says in err, (verb, err)


def test_mcp_read_memory_valid_at_answers_the_version_true_then(
    make_store: Callable[..., Store],
) -> None:
    """read_memory over MCP with valid_at answered the id asked for whatever the time: Paris
    in 2024, before the move. It answers the version true then (Lyon) with `asked_id`, and
    refuses a time when no version was true, naming valid_at; nothing is appended."""
    from mcp import Client

    from keytrail.server.mcp_server import build_server

    store = make_store()
    told = told_over_time(store)
    lyon, paris = told["lyon"], told["paris"]
    written = log_bytes(store.home)

    async def scenario() -> None:
        async with Client(build_server(store)) as client:

            async def call(**args: Any) -> Any:
                result = await client.session.call_tool("read_memory", args)
                assert not result.is_error, (args, result.content)
                return result.structured_content

            then = await call(memory_id=paris, valid_at=IN_2024)
            assert (then["memory_id"], then["asked_id"], then["content"]) == (
                lyon,
                paris,
                "Dana lives in Lyon",
            )
            assert (await call(memory_id=lyon, valid_at=IN_2024))["asked_id"] is None
            now = await call(memory_id=lyon, valid_at="2025-07-01T00:00:00Z")
            assert (now["memory_id"], now["asked_id"]) == (paris, lyon)
            # As of before the correction, Lyon was all the store knew, in 2025 too.
            believed = await call(memory_id=lyon, as_of=told["before"], valid_at="2025-07-01")
            assert (believed["memory_id"], believed["asked_id"]) == (lyon, None)
            early = await client.session.call_tool(
                "read_memory", {"memory_id": paris, "valid_at": "2019-01-01"}
            )
            assert early.is_error
            assert early.content[0].text.endswith(  # type: ignore[union-attr]
                f"valid_at: no memory {paris!r}: not yet true at 2019-01-01T00:00:00+00:00 "
                "(true from 2020-01-01T00:00:00+00:00)"
            )

    anyio.run(scenario)
    assert log_bytes(store.home) == written, "a read at a valid time appended something"


def test_read_memory_says_which_version_to_read_under_valid_at(
    make_store: Callable[..., Store],
) -> None:
    """Under valid_at the version true then is answered, and it is superseded (a newer version
    replaced it since): the description's "read that one" (superseded_by) sent an agent to the
    version true now, not the one it asked about. It says when to follow superseded_by."""
    from mcp import Client

    from keytrail.server.mcp_server import build_server

    store = make_store()
    told = told_over_time(store)

    async def scenario() -> tuple[dict[str, Any], str]:
        async with Client(build_server(store)) as client:
            tools = (await client.list_tools()).tools
            result = await client.session.call_tool(
                "read_memory", {"memory_id": told["paris"], "valid_at": IN_2024}
            )
            described = next(t.description or "" for t in tools if t.name == "read_memory")
            return result.structured_content or {}, " ".join(described.split())

    then, description = anyio.run(scenario)
    assert (then["memory_id"], then["status"]) == (told["lyon"], "superseded")
    assert then["superseded_by"] == told["paris"]  # true now, not in 2024
    assert "(`superseded_by`, null if forgotten): read that one." not in description
    assert "with valid_at, the answer is the version true then" in description


def test_cli_read_valid_at_shows_the_version_true_then(
    tmp_path: Path, hash_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keytrail read PARIS --valid-at 2024` showed Paris; it shows Lyon and says which id was
    asked for, and refuses a time before Dana lived in either, naming --valid-at."""
    from keytrail.core import HashEmbedder, Settings
    from keytrail.server.cli import main

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    told = told_over_time(store)
    store.close()
    lyon, paris = told["lyon"], told["paris"]
    written = log_bytes(home)

    def out(*args: str) -> str:
        capsys.readouterr()
        assert main([*args, "--home", str(home)]) == 0
        return capsys.readouterr().out

    text = out("read", paris, "--valid-at", IN_2024)
    assert text.startswith(f"{lyon} [default] superseded (by {paris})")
    assert "Dana lives in Lyon\n" in text and "Paris" not in text.split("\n")[1]
    assert f"asked for {paris}: the version true then" in text
    assert "asked for" not in out("read", lyon, "--valid-at", IN_2024)
    shown = json.loads(out("read", paris, "--valid-at", IN_2024, "--json"))
    assert (shown["memory_id"], shown["asked_id"]) == (lyon, paris)
    with pytest.raises(SystemExit) as refused:
        main(["read", lyon, "--valid-at", "2019-01-01", "--home", str(home)])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (
        f"keytrail: error: --valid-at: no memory {lyon!r}: not yet true at "
        "2019-01-01T00:00:00+00:00 (true from 2020-01-01T00:00:00+00:00)\n"
    )
    assert log_bytes(home) == written, "a read at a valid time appended something"


def test_mcp_related_valid_at_starts_from_the_version_true_then(
    make_store: Callable[..., Store],
) -> None:
    """related over MCP with valid_at started from the id asked for whatever the time: Paris in
    2024 had Lyon, its own earlier version, as a neighbour. It starts from the version true then
    (Lyon) with `asked_id`, and refuses a time when no version was true, naming valid_at."""
    from mcp import Client

    from keytrail.server.mcp_server import build_server

    store = make_store()
    told = told_over_time(store)
    lyon, paris = told["lyon"], told["paris"]
    written = log_bytes(store.home)

    async def scenario() -> None:
        async with Client(build_server(store)) as client:

            async def call(**args: Any) -> Any:
                result = await client.session.call_tool("related", args)
                assert not result.is_error, (args, result.content)
                return result.structured_content

            then = await call(memory_id=paris, valid_at=IN_2024)
            assert (then["memory_id"], then["asked_id"], then["related"]) == (lyon, paris, [])
            assert (await call(memory_id=lyon, valid_at=IN_2024))["asked_id"] is None
            later = await call(memory_id=lyon, valid_at="2025-07-01T00:00:00Z")
            assert (later["memory_id"], later["asked_id"], later["related"]) == (paris, lyon, [])
            # As of before the correction, Lyon was all the store knew, in 2025 too.
            believed = await call(memory_id=lyon, as_of=told["before"], valid_at="2025-07-01")
            assert (believed["memory_id"], believed["asked_id"]) == (lyon, None)
            early = await client.session.call_tool(
                "related", {"memory_id": paris, "valid_at": "2019-01-01"}
            )
            assert early.is_error
            assert early.content[0].text.endswith(  # type: ignore[union-attr]
                f"valid_at: no memory {paris!r}: not yet true at 2019-01-01T00:00:00+00:00 "
                "(true from 2020-01-01T00:00:00+00:00)"
            )

    anyio.run(scenario)
    assert log_bytes(store.home) == written, "related at a valid time appended something"


def test_cli_related_valid_at_starts_from_the_version_true_then(
    tmp_path: Path, hash_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keytrail related PARIS --valid-at 2024` listed Lyon, Paris's own earlier version, as
    related; it starts from Lyon, the version true then, and says which id was asked for."""
    from keytrail.core import HashEmbedder, Settings
    from keytrail.server.cli import main

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    told = told_over_time(store)
    store.close()
    lyon, paris = told["lyon"], told["paris"]

    def out(*args: str) -> str:
        capsys.readouterr()
        assert main([*args, "--home", str(home)]) == 0
        return capsys.readouterr().out

    assert out("related", paris, "--valid-at", IN_2024) == (
        f"asked for {paris}: related to {lyon}, the version true then\nnothing related to {lyon}\n"
    )
    assert "asked for" not in out("related", lyon, "--valid-at", IN_2024)
    shown = json.loads(out("related", paris, "--valid-at", IN_2024, "--json"))
    assert (shown["memory_id"], shown["asked_id"], shown["related"]) == (lyon, paris, [])
    with pytest.raises(SystemExit) as refused:
        main(["related", lyon, "--valid-at", "2019-01-01", "--home", str(home)])
    assert refused.value.code == 2
    assert capsys.readouterr().err == (
        f"keytrail: error: --valid-at: no memory {lyon!r}: not yet true at "
        "2019-01-01T00:00:00+00:00 (true from 2020-01-01T00:00:00+00:00)\n"
    )


def test_history_of_knowledge_graph_observations(make_store: Callable[..., Store]) -> None:
    from keytrail.core.importers import import_text
    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput

    store = make_store()
    kg = KnowledgeGraph(store)
    kg.create_entities(
        [EntityInput("Alice", "person", ["likes tea"]), EntityInput("Bob", "person", ["is tall"])]
    )
    kg.delete_observations([ObservationInput("Alice", ["likes tea"])])
    kg.delete_entities(["Bob"])
    cat = '{"type":"entity","name":"Cy","entityType":"cat","observations":["naps"]}'
    import_text(store, cat, "cats.jsonl")

    def story(content: str) -> list[tuple[str, str]]:
        memory = next(m for m in store.state.memories.values() if m.content == content)
        return [(t.type, t.what) for t in history(store, memory.id).events]

    deleted = [m.id for m in store.state.memories.values() if m.status == "deleted"]
    assert len(deleted) == 2
    for memory_id in deleted:
        first = history(store, memory_id).events[0]
        assert first.what.startswith("created as an observation of ")
    assert story("naps") == [("graph.imported", "imported from memory-jsonl cats.jsonl")]
    whats = {t.what for mid in deleted for t in history(store, mid).events}
    assert {"deleted as an observation", "deleted with its entity"} <= whats


class _CountingBytes(bytes):
    """A segment's bytes that count how many bytes `find` looked through."""

    scanned = 0

    def find(self, sub: Any, start: Any = None, end: Any = None) -> int:  # type: ignore[override]
        at = super().find(sub, start, end)
        begin = 0 if start is None else start
        stop = len(self) if end is None else end
        _CountingBytes.scanned += (stop if at < 0 else at + len(sub)) - begin
        return at


@contextmanager
def _counting_segments(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """While in it, `history` searches what it reads of segments as `_CountingBytes` (counted
    from 0)."""
    read = timeline._read

    def counting(fd: int, begin: int, end: int) -> _CountingBytes:
        return _CountingBytes(read(fd, begin, end))

    _CountingBytes.scanned = 0
    with monkeypatch.context() as patched:
        patched.setattr(timeline, "_read", counting)
        yield


def test_history_of_a_long_chain_reads_the_log_a_few_times_not_once_per_version(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fact corrected many times (a running score) has a long chain: history must still be
    about one read of the log, as documented, not one search of every segment per version
    (600 versions searched a 1 MB log 600 times; a 326 MB log took minutes)."""
    store = make_store()
    for i in range(50):  # other memories around the chain
        store.remember(f"unrelated fact number {i}", ["other"])
    first = store.remember("the score is 0", ["score"])
    current = first.memory_id
    for i in range(1, 600):
        current = store.correct(current, f"the score is {i}").memory_id
        if i % 100 == 0:
            store.read_memory(current)
    size = sum(p.stat().st_size for p in (store.home / "log").glob("*.jsonl"))

    with _counting_segments(monkeypatch):
        h = history(store, first.memory_id, limit=200, offset=1100)
    assert _CountingBytes.scanned <= 8 * size, "each version searched the whole log again"

    assert len(h.versions) == 600 and h.versions[-1].memory_id == current
    # created once, then each correction touches two versions, plus the five reads
    assert h.events_total == 1 + 2 * 599 + 5
    assert [e.seq for e in h.events] == sorted(e.seq for e in h.events)
    assert {e.memory_id for e in h.events[-2:]} == {h.versions[-2].memory_id, current}
    assert h.next_offset is None
    # The same answer as a search per version gives.
    monkeypatch.setattr(timeline, "_SEARCH_EACH", 10_000)
    assert history(store, first.memory_id, limit=200, offset=1100) == h


def _every_line(store: Store, ids: list[str], start_seq: int, end_seq: int) -> Iterator[bytes]:
    """`_matching_lines` the slow, sure way: every line of every segment, start to end."""
    quoted = [f'"{i}"'.encode() for i in ids]
    for path in sorted((store.home / "log").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if any(n in line for n in [*quoted, *timeline._RULE_TAGS]):
                yield line


def test_history_reads_from_the_first_version_on_and_misses_nothing(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """history skips the segments before a chain's first version and bisects the one it starts
    in: every memory's history must still be the one a scan of the whole log gives, with the
    fold rules changed before the chain began, its versions and reads spread over many small
    segments."""
    store = make_store(segment_bytes=4096)
    for i in range(40):
        store.remember(f"filler fact {i} about nothing much", [f"filler {i % 7}", "misc"])
    with store.log.lock() as app:  # rules only a hand-made log changes: reads deepen by 0.2
        app.append(RulesChanged(rules=FoldRules(depth_step=0.2)))
    store.refresh()
    for i in range(40, 80):
        store.remember(f"filler fact {i} about nothing much", [f"filler {i % 7}", "misc"])
    score = store.remember("the score is 0", ["score", "game"])
    current = score.memory_id
    for i in range(1, 6):
        for j in range(25):
            store.remember(f"more filler {i}.{j}", [f"filler {j % 7}", "misc"])
        store.read_memory(current)
        store.remember(f"a note on score {i}", ["notes"], related_to=[current])
        store.recall_memories("what is the score of the game?")
        current = store.correct(current, f"the score is {i}").memory_id
    newest = store.remember("the newest fact", ["fresh"])
    store.read_memory(newest.memory_id)
    segments = sorted((store.home / "log").glob("*.jsonl"))
    assert len(segments) > 20
    ids = list(store.state.memories)

    def answers() -> list[timeline.History]:
        return [history(store, m) for m in ids] + [history(store, current, limit=3, offset=4)]

    fast = answers()
    with monkeypatch.context() as patched:
        patched.setattr(timeline, "_BISECT_STOP", 1)  # bisect down to the line
        to_the_line = answers()
        patched.setattr(timeline, "_matching_lines", _every_line)
        full_scan = answers()
    assert fast == full_scan and to_the_line == full_scan
    chain = history(store, score.memory_id)
    # created, then per round: read, related to, links adjusted, and the correction (two)
    assert len(chain.versions) == 6 and chain.events_total == 1 + 5 * 5
    assert any(e.what == "links adjusted by a recall" for e in chain.events)
    # The read deepened the first version by the rules changed before it was told.
    assert [t.depth for t in chain.trajectory if t.memory_id == score.memory_id][1] == 0.2

    # A new memory's history reads the end of the log, not all of it.
    size = sum(p.stat().st_size for p in segments)
    with _counting_segments(monkeypatch):
        assert history(store, newest.memory_id) == full_scan[ids.index(newest.memory_id)]
    assert 0 < _CountingBytes.scanned < size // 10


CUT_UNDER_HISTORY = r"""
import mmap, os, sys
from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core.history import history

store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
first = store.remember("the first fact", ["first"]).memory_id
store.remember_batch(
    [RememberItem(f"filler {i}: " + "lorem ipsum " * 40, [f"topic {i}"]) for i in range(300)]
)
expected = history(store, first)
(segment,) = (store.home / "log").glob("*.jsonl")
data = segment.read_bytes()
# Where the batch began: its lines are what an appender whose fsync failed cuts back.
keep = data.rfind(b"\n", 0, data.index(b"filler 0:")) + 1


def cut() -> None:
    if segment.stat().st_size > keep:
        os.truncate(segment, keep)


# However history reads a segment, the batch is cut back right after it sized the segment.
real_mmap, real_pread = mmap.mmap, os.pread


def mapped_then_cut(*args, **kwargs):
    mapping = real_mmap(*args, **kwargs)
    cut()
    return mapping


def cut_then_read(*args):
    cut()
    return real_pread(*args)


mmap.mmap, os.pread = mapped_then_cut, cut_then_read
answer = history(store, first)
mmap.mmap, os.pread = real_mmap, real_pread
assert answer == expected, (answer, expected)
print("answered", answer.events_total, flush=True)
"""


def test_history_survives_lines_cut_back_under_it(tmp_path: Path) -> None:
    """An appender whose fsync fails cuts the lines it wrote back (events/log.py). history
    mapped segments: touching a mapped page past a segment's new end is a SIGBUS, which
    Python cannot catch, and it killed the whole MCP server. It must answer from what the log
    holds."""
    child = subprocess.run(
        [sys.executable, "-c", CUT_UNDER_HISTORY, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr}"
    assert child.stdout == "answered 1\n"
