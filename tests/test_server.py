"""End to end over MCP: the SDK's real client against `keytrail serve` in a subprocess.

stdio for the tool surface, every tool's valid and invalid input, the associative walk and two
servers sharing one store; streamable HTTP for remember/recall and the bearer token.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden" / "mcp_tools.json"
TIMEOUT = 90.0
TOOLS = [
    "recall",
    "read_key",
    "read_memory",
    "browse_keys",
    "remember",
    "remember_batch",
    "correct",
    "related",
    "forget",
    "list_memories",
    "memory_stats",
    "cleanup_expired",
    "record_turn",
    "get_conversation",
    "list_sessions",
    "history",
    "changes",
]


#: An MCP initialize request and the headers streamable HTTP wants, for raw HTTP probes
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def server_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(home), KEYTRAIL_EMBEDDER="hash", PYTHONUNBUFFERED="1")
    return env


def run(test: Callable[[], Awaitable[None]], timeout: float = TIMEOUT) -> None:
    async def bounded() -> None:
        with anyio.fail_after(timeout):
            await test()

    anyio.run(bounded)


@asynccontextmanager
async def stdio_session(home: Path, errlog: Path, *flags: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keytrail.server.cli", "serve", *flags],
        env=server_env(home),
        cwd=str(REPO),
    )
    with open(errlog, "a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def data(result: Any) -> Any:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text block is the same JSON, for clients that read only text.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def call(session: ClientSession, name: str, **args: Any) -> Any:
    return data(await session.call_tool(name, args))


async def refused(
    session: ClientSession, home: Path, name: str, args: dict[str, Any], *needles: str
) -> str:
    """The call fails with isError, its message holds every needle, and nothing was written."""
    before = log_bytes(home)
    result = await session.call_tool(name, args)
    assert result.is_error, f"{name}({args}) should fail: {result.structured_content}"
    text = " ".join(getattr(c, "text", "") for c in result.content)
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    assert log_bytes(home) == before, f"{name}({args}) changed the log"
    return text


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def errlog(tmp_path: Path) -> Path:
    return tmp_path / "server-stderr.txt"


# -- the tool surface ------------------------------------------------------------------------


def surface(tools: list[Any]) -> dict[str, Any]:
    return {
        t.name: {
            "inputSchema": t.input_schema,
            "outputSchema": t.output_schema,
            "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True),
        }
        for t in tools
    }


def test_tool_list_and_schemas_are_pinned(home: Path, errlog: Path) -> None:
    async def test() -> None:
        async with stdio_session(home, errlog) as session:
            listed = (await session.list_tools()).tools
            assert sorted(t.name for t in listed) == sorted(TOOLS)
            for tool in listed:
                assert (tool.description and "Example" in tool.description) or tool.name in (
                    "memory_stats",
                    "cleanup_expired",
                    "list_sessions",
                ), tool.name
                assert tool.output_schema is not None, tool.name
            got = surface(listed)
            if os.environ.get("KEYTRAIL_UPDATE_GOLDEN"):
                GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
            assert got == json.loads(GOLDEN.read_text()), (
                "tool names or input/output schemas changed; if on purpose, rerun with "
                "KEYTRAIL_UPDATE_GOLDEN=1 and review the diff of tests/golden/mcp_tools.json"
            )
            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == ["memory_system_prompt"]
            prompt = await session.get_prompt("memory_system_prompt")
            text = prompt.messages[0].content.text  # type: ignore[union-attr]
            assert "recall" in text and "correct" in text and "name" in text

    run(test)


def test_instructions_are_the_prompt(home: Path, errlog: Path) -> None:
    from keytrail.server.mcp_server import MEMORY_SYSTEM_PROMPT

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keytrail.server.cli", "serve"],
        env=server_env(home),
        cwd=str(REPO),
    )

    async def test() -> None:
        with open(errlog, "a") as err:
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                init = await session.initialize()
                assert init.instructions == MEMORY_SYSTEM_PROMPT
                assert init.server_info.name == "keytrail"

    run(test)


# -- every tool, valid and invalid -----------------------------------------------------------


def test_every_tool_valid_and_invalid(home: Path, errlog: Path) -> None:
    async def test() -> None:
        async with stdio_session(home, errlog) as s:
            # remember
            r1 = await call(
                s,
                "remember",
                content="Alice likes strawberries with cream",
                keys=["Alice", "strawberry", "dessert"],
                key_types={"Alice": "name"},
                source="test",
            )
            m1 = r1["memory_id"]
            assert [k["label"] for k in r1["keys"]] == ["Alice", "strawberry", "dessert"]
            await refused(s, home, "remember", {"content": "x", "keys": [""]}, "keys")
            await refused(
                s, home, "remember", {"content": "x" * 20_001, "keys": ["a"]}, "content", "20000"
            )
            await refused(
                s,
                home,
                "remember",
                {"content": "   ", "keys": ["a"]},
                "content",
                "must not be empty",
            )
            await refused(
                s,
                home,
                "remember",
                {"content": "x", "keys": ["a"], "key_types": {"a": "person"}},
                "key_types",
            )
            await refused(
                s,
                home,
                "remember",
                {"content": "x", "keys": ["a"], "related_to": ["m_missing"]},
                "related_to[0]",
                "m_missing",
            )
            await refused(
                s,
                home,
                "remember",
                {"content": "x", "keys": ["a"], "namespace": "no spaces"},
                "namespace",
            )
            await refused(
                s,
                home,
                "remember",
                {"content": "x", "keys": ["a"], "ttl_seconds": 0},
                "ttl_seconds",
            )

            # remember_batch: all or nothing
            batch = await call(
                s,
                "remember_batch",
                items=[
                    {
                        "content": "Bob grows strawberries in his garden",
                        "keys": ["Bob", "strawberry", "garden"],
                        "key_types": {"Bob": "name"},
                    },
                    {
                        "content": "Carol bakes strawberry pies for the fair",
                        "keys": ["Carol", "strawberry", "baking"],
                        "key_types": {"Carol": "name"},
                        "related_to": [m1],
                    },
                ],
            )
            assert len(batch["memories"]) == 2
            await refused(s, home, "remember_batch", {"items": []}, "items")
            await refused(
                s,
                home,
                "remember_batch",
                {
                    "items": [
                        {"content": "Dave likes plums", "keys": ["Dave"]},
                        {"content": "bad", "keys": ["x"], "related_to": ["m_missing"]},
                    ]
                },
                "items[1].related_to[0]",
            )

            # recall
            rec = await call(s, "recall", query="What does Alice like?", top_k=5)
            alice = next(k for k in rec["keys"] if k["label"] == "Alice")
            assert alice["match"] == "literal" and alice["memory_count"] == 1
            await refused(s, home, "recall", {"query": ""}, "query")
            await refused(s, home, "recall", {"query": "x", "top_k": 1000}, "top_k", "100")
            await refused(s, home, "recall", {"query": "x", "namespace": "a b"}, "namespace")

            # read_key
            page = await call(s, "read_key", key_id=alice["key_id"])
            assert page["total"] == 1 and page["memories"][0]["memory_id"] == m1
            assert "content" not in page["memories"][0]
            await refused(s, home, "read_key", {"key_id": "k_missing"}, "key_id", "k_missing")
            await refused(s, home, "read_key", {"key_id": alice["key_id"], "limit": 0}, "limit")

            # read_memory (recorded: appends memory.read)
            before = log_bytes(home)
            view = await call(s, "read_memory", memory_id=m1, via_key_id=alice["key_id"])
            assert view["content"] == "Alice likes strawberries with cream"
            assert view["depth"] > 0 and log_bytes(home) != before
            await refused(s, home, "read_memory", {"memory_id": "m_missing"}, "memory_id")
            await refused(
                s,
                home,
                "read_memory",
                {"memory_id": m1, "namespace": "elsewhere"},
                "memory_id",
                "elsewhere",
            )
            await refused(
                s, home, "read_memory", {"memory_id": m1, "via_key_id": "k_missing"}, "via_key_id"
            )

            # browse_keys
            keys = await call(s, "browse_keys")
            top = keys["keys"][0]
            assert top["label"] == "strawberry" and top["memory_count"] == 3 and top["hub"]
            hubs = await call(s, "browse_keys", hubs_only=True)
            assert [k["label"] for k in hubs["keys"]] == ["strawberry"]
            await refused(s, home, "browse_keys", {"limit": 100_000}, "limit", "200")

            # correct
            corr = await call(
                s, "correct", memory_id=m1, content="Alice now prefers raspberries to strawberries"
            )
            m1b = corr["memory_id"]
            assert corr["old_id"] == m1 and m1b != m1
            # The old version still opens by id, saying it was replaced and by which.
            old = await call(s, "read_memory", memory_id=m1)
            assert (old["status"], old["superseded_by"]) == ("superseded", m1b)
            assert (await call(s, "read_memory", memory_id=m1b))["status"] == "active"
            await refused(
                s,
                home,
                "correct",
                {"memory_id": m1, "content": "again"},
                "memory_id",
                "already replaced",
            )
            await refused(
                s,
                home,
                "correct",
                {"memory_id": "m_missing", "content": "x"},
                "memory_id",
                "m_missing",
            )

            # related
            rel = await call(s, "related", memory_id=batch["memories"][1]["memory_id"])
            assert rel["related"]
            await refused(s, home, "related", {"memory_id": "m_missing"}, "memory_id")
            await refused(s, home, "related", {"memory_id": m1b, "limit": 0}, "limit")

            # list_memories
            listing = await call(s, "list_memories", limit=2)
            assert listing["total"] == 3 and len(listing["memories"]) == 2
            await refused(s, home, "list_memories", {"offset": -1}, "offset")

            # memory_stats
            stats = await call(s, "memory_stats")
            assert stats["memories"] == 3 and stats["superseded"] == 1

            # record_turn / get_conversation / list_sessions
            t1 = await call(s, "record_turn", session_id="chat-1", role="user", content="hi")
            t2 = await call(
                s, "record_turn", session_id="chat-1", role="assistant", content="hello!"
            )
            assert (t1["turn"], t2["turn"]) == (1, 2)
            await refused(
                s,
                home,
                "record_turn",
                {"session_id": "chat-1", "role": "robot", "content": "x"},
                "role",
            )
            await refused(
                s,
                home,
                "record_turn",
                {"session_id": "bad id", "role": "user", "content": "x"},
                "session_id",
            )
            conv = await call(s, "get_conversation", session_id="chat-1")
            assert [t["content"] for t in conv["turns"]] == ["hi", "hello!"]
            one = await call(s, "get_conversation", session_id="chat-1", turn=2)
            assert [t["role"] for t in one["turns"]] == ["assistant"]
            # A page is the newest turns; next_offset pages back to older ones.
            last = await call(s, "get_conversation", session_id="chat-1", limit=1)
            assert [t["turn"] for t in last["turns"]] == [2] and last["next_offset"] == 1
            first = await call(s, "get_conversation", session_id="chat-1", limit=1, offset=1)
            assert [t["turn"] for t in first["turns"]] == [1] and first["next_offset"] is None
            await refused(
                s, home, "get_conversation", {"session_id": "chat-1", "limit": 0}, "limit"
            )
            await refused(s, home, "get_conversation", {"session_id": "nope"}, "session_id")
            await refused(
                s, home, "get_conversation", {"session_id": "chat-1", "turn": 3}, "turn", "1 to 2"
            )
            sessions = await call(s, "list_sessions")
            assert sessions["sessions"][0]["session_id"] == "chat-1"
            assert (sessions["sessions"][0]["turns"], sessions["total"]) == (2, 1)
            past_the_end = await call(s, "list_sessions", offset=1)
            assert (past_the_end["sessions"], past_the_end["total"]) == ([], 1)

            # cleanup_expired
            short = await call(
                s,
                "remember",
                content="The oven is preheating right now",
                keys=["oven"],
                ttl_seconds=1,
            )
            await anyio.sleep(1.2)
            expired = await call(s, "cleanup_expired")
            assert expired["memory_ids"] == [short["memory_id"]]
            again = await call(s, "cleanup_expired")
            assert again["memory_ids"] == [] and again["seq"] is None

            # forget
            gone = await call(s, "forget", memory_id=m1b)
            assert gone["memory_id"] == m1b
            await refused(s, home, "forget", {"memory_id": m1b}, "memory_id", "forgotten")
            await refused(s, home, "forget", {"memory_id": ""}, "memory_id")
            await refused(s, home, "read_memory", {"memory_id": m1b}, "memory_id")

            # an unknown tool is an error too, and writes nothing
            await refused(s, home, "no_such_tool", {}, "no_such_tool")

    run(test, timeout=120)


# -- the associative walk --------------------------------------------------------------------


def test_associative_walk(home: Path, errlog: Path) -> None:
    async def test() -> None:
        async with stdio_session(home, errlog) as s:
            await call(
                s,
                "remember_batch",
                items=[
                    {
                        "content": "Isaac Newton watched an apple fall in his garden",
                        "keys": ["Newton", "apple", "gravity"],
                        "key_types": {"Newton": "name"},
                    },
                    {
                        "content": "Apples and strawberries are the user's favourite fruit",
                        "keys": ["apple", "strawberry", "fruit"],
                    },
                    {
                        "content": "The user grows strawberries on the balcony",
                        "keys": ["strawberry", "balcony", "gardening"],
                    },
                ],
            )
            # Key: recall finds Newton literally.
            rec = await call(s, "recall", query="Tell me about Newton")
            newton = next(k for k in rec["keys"] if k["label"] == "Newton")
            # Key -> Memory
            page = await call(s, "read_key", key_id=newton["key_id"])
            first = page["memories"][0]
            # the memory's other keys, key_id -> label: the next hops
            apple = {"key_id": next(k for k, label in first["keys"].items() if label == "apple")}
            view = await call(
                s, "read_memory", memory_id=first["memory_id"], via_key_id=newton["key_id"]
            )
            assert "Newton" in view["content"]
            # Memory -> Key -> Memory: apple leads to the fruit memory, then strawberry on.
            apple_page = await call(s, "read_key", key_id=apple["key_id"], query="fruit")
            fruit_ref = next(
                m for m in apple_page["memories"] if m["memory_id"] != first["memory_id"]
            )
            fruit = await call(
                s, "read_memory", memory_id=fruit_ref["memory_id"], via_key_id=apple["key_id"]
            )
            assert "favourite fruit" in fruit["content"]
            strawberry = next(k for k in fruit["keys"] if k["label"] == "strawberry")
            berry_page = await call(s, "read_key", key_id=strawberry["key_id"])
            assert berry_page["total"] == 2
            # The traversed link got stronger.
            again = await call(s, "read_memory", memory_id=fruit_ref["memory_id"])
            weights = {k["key_id"]: k["weight"] for k in again["keys"]}
            assert weights[apple["key_id"]] > 1.0 and weights[strawberry["key_id"]] == 1.0
            # correct the fruit memory: the new version is reached through the same keys
            fixed = await call(
                s,
                "correct",
                memory_id=fruit["memory_id"],
                content="Strawberries (no longer apples) are the favourite",
            )
            old = await call(s, "read_key", key_id=strawberry["key_id"])
            ids = [m["memory_id"] for m in old["memories"]]
            assert fixed["memory_id"] in ids and fruit["memory_id"] not in ids
            new = await call(
                s, "read_memory", memory_id=fixed["memory_id"], via_key_id=strawberry["key_id"]
            )
            assert new["supersedes"] == fruit["memory_id"]
            assert "no longer apples" in new["content"]

    run(test)


def test_a_version_whose_correction_was_forgotten_names_no_newer_one(
    home: Path, errlog: Path
) -> None:
    """read_memory says to read `superseded_by`: naming a forgotten correction sent the agent
    to a refusal. The old version stays superseded (it was corrected) and names none."""

    async def test() -> None:
        async with stdio_session(home, errlog) as s:
            old = await call(s, "remember", content="user lives in Seoul", keys=["home"])
            new = await call(
                s, "correct", memory_id=old["memory_id"], content="user moved to Busan"
            )
            await call(s, "forget", memory_id=new["memory_id"])
            view = await call(s, "read_memory", memory_id=old["memory_id"])
            assert (view["status"], view["superseded_by"]) == ("superseded", None)

    run(test)


def test_the_memory_remember_just_stored_replaces_the_flagged_stale_one(
    home: Path, errlog: Path
) -> None:
    """The contradiction flow the instructions teach: correct(stale, by_memory_id=new) makes
    the memory just stored the stale one's next version, leaving one current memory (a
    correct with the same text as content left two)."""
    from keytrail.server.mcp_server import MEMORY_SYSTEM_PROMPT

    assert "by_memory_id=<the id remember returned>" in MEMORY_SYSTEM_PROMPT

    async def test() -> None:
        async with stdio_session(home, errlog) as s:
            types = {"Mia": "name"}
            stale = await call(
                s,
                "remember",
                content="Dana's daughter Mia is 6 years old.",
                keys=["Mia"],
                key_types=types,
            )
            fresh = await call(
                s,
                "remember",
                content="Dana's daughter Mia is 7 years old.",
                keys=["Mia"],
                key_types=types,
            )
            flagged = [f["memory_id"] for f in fresh["possible_contradictions"]]
            assert flagged == [stale["memory_id"]]
            for args, field in (
                ({"memory_id": stale["memory_id"]}, "content"),
                (
                    {
                        "memory_id": stale["memory_id"],
                        "by_memory_id": fresh["memory_id"],
                        "content": "Mia is 7",
                    },
                    "by_memory_id",
                ),
                (
                    {
                        "memory_id": stale["memory_id"],
                        "by_memory_id": fresh["memory_id"],
                        "keys": ["Mia"],
                    },
                    "keys",
                ),
                ({"memory_id": stale["memory_id"], "by_memory_id": "m_missing"}, "m_missing"),
            ):
                await refused(s, home, "correct", args, field)
            fixed = await call(
                s, "correct", memory_id=stale["memory_id"], by_memory_id=fresh["memory_id"]
            )
            assert (fixed["old_id"], fixed["memory_id"]) == (
                stale["memory_id"],
                fresh["memory_id"],
            )
            listing = await call(s, "list_memories")
            assert [m["memory_id"] for m in listing["memories"]] == [fresh["memory_id"]]
            old = await call(s, "read_memory", memory_id=stale["memory_id"])
            assert (old["status"], old["superseded_by"]) == ("superseded", fresh["memory_id"])
            told = await call(s, "history", memory_id=fresh["memory_id"])
            assert [v["memory_id"] for v in told["versions"]] == [
                stale["memory_id"],
                fresh["memory_id"],
            ]

    run(test)


# -- two servers, one store ------------------------------------------------------------------


def test_two_servers_share_one_store(home: Path, errlog: Path) -> None:
    async def test() -> None:
        async with stdio_session(home, errlog) as a, stdio_session(home, errlog) as b:
            ra = await call(
                a,
                "remember",
                content="Dana lives in Lyon",
                keys=["Dana", "Lyon"],
                key_types={"Dana": "name", "Lyon": "name"},
            )
            rec = await call(b, "recall", query="Where does Dana live?")
            dana = next(k for k in rec["keys"] if k["label"] == "Dana")
            page = await call(b, "read_key", key_id=dana["key_id"])
            assert [m["memory_id"] for m in page["memories"]] == [ra["memory_id"]]
            rb = await call(
                b,
                "remember",
                content="Dana works as a nurse",
                keys=["Dana", "nurse", "work"],
                key_types={"Dana": "name"},
            )
            # b reused a's key (no duplicate "Dana" key), and a sees b's memory.
            assert rb["keys"][0]["key_id"] == dana["key_id"]
            assert rb["keys"][0]["resolution"] == "existing"
            view = await call(a, "read_memory", memory_id=rb["memory_id"])
            assert view["content"] == "Dana works as a nurse"
            stats_a = await call(a, "memory_stats")
            stats_b = await call(b, "memory_stats")
            assert stats_a["seq"] == stats_b["seq"] and stats_a["memories"] == 2

    run(test)


# -- streamable HTTP -------------------------------------------------------------------------


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(
    home: Path,
    tmp_path: Path,
    *flags: str,
    host: str = "127.0.0.1",
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """`keytrail serve --http` on host; yields its base URL (http://host:port/mcp)."""
    port = free_port(host)
    errpath = tmp_path / f"http-stderr-{port}.txt"
    with open(errpath, "w") as err:
        serve = ["serve", "--http", "--host", host, "--port", str(port), *flags]
        proc = subprocess.Popen(
            [sys.executable, "-m", "keytrail.server.cli", *serve],
            env={**server_env(home), **(env or {})},
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                if proc.poll() is not None:
                    raise AssertionError(errpath.read_text())
                try:
                    socket.create_connection((host, port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise AssertionError("the HTTP server did not start in 30 s") from None
                    time.sleep(0.1)
            yield f"http://{host}:{port}/mcp"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def http_server(home: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    token = "s3cret-token"
    with serving(home, tmp_path, "--token", token) as url:
        yield url, token


def test_a_tool_that_meets_an_os_error_says_which_file_and_why(home: Path, errlog: Path) -> None:
    """An OSError in a tool (a full disk, a store the server may no longer write, one deleted
    under it) reached the client as "Error executing tool remember" and nothing more: the SDK
    hides any exception but a ToolError. The client must see the file and the reason."""

    async def test() -> None:
        async with stdio_session(home, errlog) as session:
            await call(session, "remember", content="Dana lives in Lyon", keys=["Lyon"])
            shutil.rmtree(home)
            for name, args in (
                ("remember", {"content": "Dana moved to Paris", "keys": ["Paris"]}),
                ("list_memories", {}),
            ):
                result = await session.call_tool(name, args)
                assert result.is_error
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert str(home) in text and "No such file or directory" in text, text

    run(test)


def piped_serve(home: Path, *requests: dict[str, Any] | str) -> subprocess.CompletedProcess[str]:
    """`printf '<requests>' | keytrail serve` on `home`: the server reads them, then stdin ends.
    A request given as a string is sent as it is (JSON that `json.dumps` would not write)."""
    return subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "serve"],
        input="".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in requests),
        env=server_env(home),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_requests_piped_before_stdin_closes_are_all_answered(home: Path) -> None:
    """`printf '<requests>' | keytrail serve`: stdin ends right after the requests. The SDK
    cancels what is still running at end of input, so a remember landed in the log but its
    answer was never written (and a quick read's answer only sometimes): the client could
    not tell whether it had been stored. Every request read is answered before the server
    leaves, and the write lands once."""
    batch = [
        {"content": f"Piped fact {i}: the beacon {i} is lit", "keys": ["beacon"]} for i in range(40)
    ]
    requests = [
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "memory_stats", "arguments": {}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "remember_batch", "arguments": {"items": batch}},
        },
    ]
    proc = piped_serve(home, *requests)
    assert proc.returncode == 0, proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3], proc.stderr
    remembered = answers[3]["result"]["structuredContent"]["memories"]
    assert len(remembered) == len(batch)
    assert log_bytes(home).count(b'"memory.remembered"') == 1


def test_a_request_the_sdk_cannot_parse_is_answered_naming_the_argument(home: Path) -> None:
    """JSON that the grammar allows but the SDK's parser refuses: a lone surrogate escape
    ("\\ud800"), an integer of over 4,300 digits, arrays nested over 200 deep. The SDK dropped
    such a line with a log message and never answered it, so the client waited for ever. A
    tool call is refused naming the argument, another request gets a parse error (a client's
    answer gets none), and nothing is written."""

    def tool_call(request_id: int, tool: str, arguments: str) -> str:
        params = f'{{"name":"{tool}","arguments":{arguments}}}'
        return f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":{params}}}'

    deep = "[" * 250 + "]" * 250
    proc = piped_serve(
        home,
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        tool_call(2, "remember", '{"content":"Dana moved to \\ud800 Paris"}'),
        tool_call(3, "recall", '{"query":"Dana","top_k":1' + "0" * 5000 + "}"),
        tool_call(4, "remember_batch", '{"items":[{"content":"x","keys":' + deep + "}]}"),
        '{"jsonrpc":"2.0","id":5,"method":"resources/list","params":{"cursor":"\\udc00"}}',
        '{"jsonrpc":"2.0","id":99,"result":{"said":"\\ud800"}}',  # a client's answer: none back
        tool_call(6, "memory_stats", "{}"),
    )
    assert proc.returncode == 0, proc.stderr
    answers = {a["id"]: a for a in map(json.loads, proc.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3, 4, 5, 6], proc.stdout
    refusals = {i: answers[i]["result"] for i in (2, 3, 4)}
    assert all(result["isError"] for result in refusals.values()), refusals
    said = {i: result["content"][0]["text"] for i, result in refusals.items()}
    assert said[2] == (
        "Error executing tool remember: content: is not valid Unicode text: "
        "a lone surrogate U+D800 at character 14"
    )
    assert said[3] == (
        "Error executing tool recall: top_k: is an integer of 5,001 digits (limit: 4,300 digits)"
    )
    assert said[4] == (
        "Error executing tool remember_batch: items[0].keys: is nested too deep "
        "(limit: 201 levels of arrays and objects, the message's own included)"
    )
    assert answers[5]["error"]["code"] == -32700, answers[5]
    assert answers[6]["result"]["structuredContent"]["memories"] == 0
    assert b"memory.remembered" not in log_bytes(home)


def test_a_line_that_is_no_json_is_answered_with_a_parse_error(home: Path) -> None:
    """A line no JSON parser reads (`{not json`, nesting deeper than Python's recursion
    limit) got no answer at all. JSON-RPC 2.0 answers it with a parse error whose id is null
    (no id can be read from it); the server goes on serving after it. A blank line is no
    message and gets nothing; notifications and a client's answers still get nothing back."""
    deep = '{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":' + "[" * 100_000 + "}}"
    proc = piped_serve(
        home,
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "{not json",
        deep,
        "",
        '{"jsonrpc":"2.0","method":"notifications/progress","params":{"x":"\\ud800"}}',
        '{"jsonrpc":"2.0","id":99,"result":{"said":"\\ud800"}}',  # a client's answer: none back
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    unread = [a for a in answers if a["id"] is None]
    assert [a["error"]["code"] for a in unread] == [-32700, -32700], proc.stdout
    assert all(a["error"]["message"].startswith("Parse error: ") for a in unread), unread
    read = {a["id"]: a for a in answers if a["id"] is not None}
    assert sorted(read) == [1, 2], proc.stdout
    assert read[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}  # still serving after them


def test_json_that_is_no_json_rpc_message_is_answered_with_invalid_request(home: Path) -> None:
    """Valid JSON that is no JSON-RPC message (`42`, `[]`, `{"foo":1}`, a request whose method
    is no string) got no answer: the SDK only logged it. JSON-RPC 2.0 answers it with -32600
    Invalid Request, with its id where one can be read and null otherwise, and the server goes
    on serving; a broken notification or client's answer still gets nothing back."""
    proc = piped_serve(
        home,
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "42",
        "[]",
        '{"foo":1}',
        "null",
        '["\\ud800"]',  # JSON the SDK's parser refuses too
        '{"jsonrpc":"2.0","id":[5],"method":3}',  # no id an answer can carry
        '{"jsonrpc":"2.0","id":5}',
        '{"jsonrpc":"2.0","id":6,"method":3}',
        '{"jsonrpc":"1.0","id":"seven","method":"ping"}',
        '{"jsonrpc":"2.0","method":"notifications/progress","params":5}',  # a notification
        '{"jsonrpc":"2.0","id":98,"error":5}',  # a client's answer
        '{"jsonrpc":"2.0","id":99,"result":{}}',
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    refused = [a for a in answers if "error" in a]
    assert [a["id"] for a in refused] == [None] * 6 + [5, 6, "seven"], proc.stdout
    assert {a["error"]["code"] for a in refused} == {-32600}, refused
    assert all(a["error"]["message"].startswith("Invalid Request: ") for a in refused), refused
    read = {a["id"]: a for a in answers if "result" in a}
    assert sorted(read) == [1, 2], proc.stdout
    assert read[2] == {"jsonrpc": "2.0", "id": 2, "result": {}}  # still serving after them


def test_capabilities_promise_no_change_notifications(home: Path) -> None:
    """A 2026-07-28 client's server/discover was told listChanged for tools, prompts and
    resources and resources.subscribe, all true (the SDK serves subscriptions/listen by
    default), though the server never sends a change: its tools are fixed at start and it has
    no resources. Both eras now hear false; `resources` is the SDK's empty list."""

    def answers(*requests: dict[str, Any]) -> dict[int, Any]:
        proc = piped_serve(home, *requests)
        return {a["id"]: a.get("result", a) for a in map(json.loads, proc.stdout.splitlines())}

    handshake = answers(
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list"},
    )
    assert handshake[2] == {"resources": []}
    era = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": era}}
    for said in (handshake[1], answers(discover)[1]):
        assert said["capabilities"] == {
            "prompts": {"listChanged": False},
            "resources": {"listChanged": False, "subscribe": False},
            "tools": {"listChanged": False},
        }


def test_a_client_gone_mid_call_ends_the_server_quietly(home: Path) -> None:
    """A client killed mid-call closes both pipes: the answer the server then writes meets a
    broken pipe. That is no error of the server's: it ends with 0, without a traceback, and
    the write is in the log whole."""
    requests = [
        INIT,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {
                "name": "remember_batch",
                "arguments": {
                    "items": [{"content": f"Gone {i}", "keys": ["gone"]} for i in range(40)]
                },
            },
        },
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "keytrail.server.cli", "serve"],
        env=server_env(home),
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.stdout.close()  # gone before the answer to the batch
    proc.stdin.close()
    try:
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
    assert "Traceback" not in proc.stderr.read()
    assert log_bytes(home).count(b'"memory.remembered"') <= 1
    check = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "verify"],
        env=server_env(home),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_http_remember_and_recall(http_server: tuple[str, str]) -> None:
    url, token = http_server

    async def test() -> None:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == set(TOOLS)
            r = await call(
                s,
                "remember",
                content="Emil plays the cello on Sundays",
                keys=["Emil", "cello", "music"],
                key_types={"Emil": "name"},
            )
            rec = await call(s, "recall", query="Emil's hobbies")
            emil = next(k for k in rec["keys"] if k["label"] == "Emil")
            page = await call(s, "read_key", key_id=emil["key_id"])
            assert page["memories"][0]["memory_id"] == r["memory_id"]
            bad = await s.call_tool("recall", {"query": ""})
            assert bad.is_error

    run(test)


def test_http_refuses_requests_without_the_token(http_server: tuple[str, str]) -> None:
    url, token = http_server
    init, headers = INIT, HEADERS
    with httpx2.Client(timeout=10) as client:
        none = client.post(url, json=init, headers=headers)
        assert none.status_code == 401
        wrong = client.post(url, json=init, headers={**headers, "Authorization": "Bearer wrong"})
        assert wrong.status_code == 401
        right = client.post(url, json=init, headers={**headers, "Authorization": f"Bearer {token}"})
        assert right.status_code == 200


def test_http_on_a_public_host_needs_a_token(home: Path) -> None:
    env = server_env(home)
    env.pop("KEYTRAIL_HTTP_TOKEN", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "keytrail.server.cli",
            "serve",
            "--http",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("keytrail: error: --token")
    assert "Traceback" not in proc.stderr


# -- settings as serve flags -----------------------------------------------------------------


def test_every_setting_is_a_serve_flag() -> None:
    from keytrail.core.config import tunable_variables

    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )
    assert proc.returncode == 0, proc.stderr
    for var in tunable_variables():
        assert var.flag in proc.stdout and var.env in proc.stdout, var.env


def test_serve_help_says_what_an_unset_embed_dim_means(capsys: pytest.CaptureFixture[str]) -> None:
    """`--embed-dim` is no threshold: unset, a model gives its own dimension and hash 256; the
    help said "default the model's profile", which holds no dimension."""
    from keytrail.server.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "(KEYTRAIL_EMBED_DIM, default the model's own; 256 for hash)" in shown
    assert "(KEYTRAIL_THRESHOLD_MERGE, default the model's profile)" in shown


def test_serve_flags_set_the_limits_schemas_advertise_and_core_enforces(
    home: Path, errlog: Path
) -> None:
    async def test() -> None:
        flags = ("--max-content-chars", "40", "--max-keys-per-memory", "2")
        async with stdio_session(home, errlog, *flags) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            content = tools["remember"].input_schema["properties"]["content"]
            assert content["maxLength"] == 40
            # Refused naming the field and the limit; nothing written.
            too_long = {"content": "x" * 41, "keys": ["a"]}
            await refused(session, home, "remember", too_long, "content", "40")
            too_many = {"content": "fine", "keys": ["a", "b", "c"]}
            await refused(session, home, "remember", too_many, "keys", "2")
            made = await call(session, "remember", content="short fact", keys=["a", "b"])
            assert made["memory_id"]

    run(test)
