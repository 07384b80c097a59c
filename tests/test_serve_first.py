"""`keytrail serve` answers at once while a missing embedding projection is built beside it.

Tools that read no vectors answer during the build. Those that do wait for what they read
(recall and correct for the key labels, which are embedded first; remember, read_key with a
query and recall_memories for all of it), telling a client that sent a progress token how far the
build has got, and then answer exactly as they would after it. A build that fails is an error
naming its cause for those tools only. Nothing here is timed: the embedder (or the embeddings
endpoint) is held by an event, and each test waits for a signal, not for a while.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import patch

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from test_embed_openai import MODEL, EmbeddingsServer, Handler
from test_server import REPO, serving

from keytrail.core import HashEmbedder, RememberItem, Settings, Store, StoreError
from keytrail.core import reembed as projection
from keytrail.core import store as store_module
from keytrail.core.embedders import OpenAIEmbedder
from keytrail.projections.vectors import Matrix
from keytrail.server.embed_cli import build_while_serving
from keytrail.server.mcp_server import BUILDING, build_server

#: Seconds an event is waited for at most: only so that a broken build fails the test instead of
#: hanging it. No assertion depends on how long anything took.
SAFETY = 60

CONTENTS = [
    "Dana drinks green tea every morning",
    "Dana keeps bees on the roof",
    *(f"fact {i} about topic {i}" for i in range(30)),
]
#: The hashing embedder merges "green teas" into "green tea" above this (see `fill`).
OVERRIDES = {"merge": 0.6}


def fill(store: Store) -> None:
    store.remember(CONTENTS[0], ["green tea", "mornings", "Dana"], {"Dana": "name"})
    store.remember(CONTENTS[1], ["bees", "roof", "Dana"], {"Dana": "name"})
    store.remember_batch(
        [RememberItem(text, [f"topic {i}", "facts"]) for i, text in enumerate(CONTENTS[2:])]
    )


class HeldEmbedder(HashEmbedder):
    """The hashing embedder; a call asked to embed one of `held` waits until `release` is set.

    Counts the texts each thread asked it to embed, so a test can tell the build's work from
    a query's."""

    def __init__(self, held: Sequence[str] = (), failing: bool = False) -> None:
        super().__init__()
        self.held = set(held)
        self.entered = threading.Event()
        self.release = threading.Event()
        #: while set, every call fails as an unreachable endpoint would
        self.failing = failing
        self.by_thread: dict[str, int] = {}

    def embed(self, texts: Sequence[str]) -> Matrix:
        if self.failing:
            raise StoreError(
                "cannot reach the embeddings endpoint http://192.0.2.1/v1: Connection refused"
            )
        if self.held.intersection(texts) and not self.release.is_set():
            self.entered.set()
            if not self.release.wait(SAFETY):
                raise RuntimeError("the test never released the embedder")
        name = threading.current_thread().name
        self.by_thread[name] = self.by_thread.get(name, 0) + len(texts)
        return super().embed(texts)


@pytest.fixture
def home(make_store: Callable[..., Store], tmp_path: Path) -> Path:
    """A store of 32 memories and 36 key labels whose embedding projection is missing."""
    home = tmp_path / "store"
    writer = make_store(home, threshold_overrides=OVERRIDES)
    fill(writer)
    writer.close()
    shutil.rmtree(home / "cache" / "vectors")
    return home


def reference(make_store: Callable[..., Store], home: Path, tmp_path: Path) -> Store:
    """A copy of the store at `home` with its projection built before anything is asked."""
    copy = tmp_path / "reference"
    shutil.copytree(home, copy)
    store = make_store(copy, threshold_overrides=OVERRIDES)
    projection.build(store)
    return store


def with_client(store: Store, check: Callable[[Client], Awaitable[None]]) -> None:
    """Run `check` with the SDK's in-memory client connected (initialized) to a server."""

    async def main() -> None:
        with anyio.fail_after(SAFETY):
            async with Client(build_server(store)) as client:
                await check(client)

    anyio.run(main)


Heard = list[tuple[float, float | None, str | None]]


async def answer(
    client: Client, tool: str, args: dict[str, Any] | None = None, heard: Heard | None = None
) -> Any:
    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        assert heard is not None
        heard.append((done, total, message))

    result = await client.call_tool(
        tool, args or {}, progress_callback=on_progress if heard is not None else None
    )
    assert not result.is_error, result.content
    return result.structured_content


def mcp_answer(store: Store, tool: str, args: dict[str, Any]) -> Any:
    got: list[Any] = []

    async def check(client: Client) -> None:
        got.append(await answer(client, tool, args))

    with_client(store, check)
    return got[0]


async def waiting_call(
    client: Client, tool: str, args: dict[str, Any], release: Callable[[], object]
) -> tuple[Any, Heard]:
    """Call `tool` while the build is held; once the client hears progress from it (so it is
    waiting for the build), check it has not answered, then let the build go on (`release`,
    in a worker thread) and return the answer and the progress heard."""
    heard: Heard = []
    progressed = anyio.Event()
    got: list[Any] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        if "embedding projection" in (message or ""):  # not another long step's progress
            heard.append((done, total, message))
            progressed.set()

    async def call() -> None:
        result = await client.call_tool(tool, args, progress_callback=on_progress)
        assert not result.is_error, result.content
        got.append(result.structured_content)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call)
        await progressed.wait()
        assert not got, f"{tool} answered while the build it needs was held"
        await anyio.to_thread.run_sync(release)
    return got[0], heard


def outcome(decided: dict[str, Any]) -> Any:
    """What remember or correct decided, without the ids it drew at random."""
    keys = [
        (k["label"], k["type"], k["resolution"], k["merged_into"], k["similarity"])
        for k in decided["keys"]
    ]
    rest = {k: v for k, v in decided.items() if k not in ("keys", "memory_id")}
    return keys, rest


def test_tools_that_read_no_vectors_answer_while_the_build_is_held(
    make_store: Callable[..., Store], home: Path
) -> None:
    embedder = HeldEmbedder(held=CONTENTS)  # the key labels pass; the first contents are held
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build = build_while_serving(store)
    assert build is not None
    try:
        assert embedder.entered.wait(SAFETY)  # the build is under way, held among the contents

        async def check(client: Client) -> None:
            # Entering the client initialized it.
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"recall", "remember", "list_memories"} <= names
            stats = await answer(client, "memory_stats")
            assert stats["projection"] == {
                "status": "building",
                "embedded": 36,  # every key label: recall can answer
                "to_embed": 36 + 32,
                "keys_ready": True,
                "error": None,
            }
            page = await answer(client, "list_memories", {"limit": 50})
            assert page["total"] == 32
            tea = next(m["memory_id"] for m in page["memories"] if "green tea" in m["preview"])
            read = await answer(client, "read_memory", {"memory_id": tea})
            assert read["content"] == CONTENTS[0]
            related = await answer(client, "related", {"memory_id": tea})
            assert [r["shared_keys"][0]["label"] for r in related["related"]] == ["Dana"]
            keys = await answer(client, "browse_keys", {"limit": 50})
            facts = next(k["key_id"] for k in keys["keys"] if k["label"] == "facts")
            assert (await answer(client, "read_key", {"key_id": facts}))["total"] == 30
            await answer(
                client, "record_turn", {"session_id": "s1", "role": "user", "content": "hello"}
            )
            assert (await answer(client, "list_sessions"))["sessions"][0]["session_id"] == "s1"

        with_client(store, check)
        assert store.projection_state().status == "building"  # all that while: still held
    finally:
        embedder.release.set()
    store.wait_for_vectors()
    assert store.projection_state().status == "ready"
    assert projection.status(store).covered_seq is not None


def test_a_recall_during_the_build_waits_for_the_key_labels_with_progress_and_answers_as_after(
    make_store: Callable[..., Store], home: Path, tmp_path: Path
) -> None:
    expected = mcp_answer(
        reference(make_store, home, tmp_path), "recall", {"query": "green tea in the morning"}
    )
    assert expected["keys"]  # a question with an answer
    embedder = HeldEmbedder(held=["green tea"])  # the key labels' batch is held
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(store)
    got: dict[str, Any] = {}

    async def check(client: Client) -> None:
        assert await anyio.to_thread.run_sync(embedder.entered.wait, SAFETY)
        got["during"], got["heard"] = await waiting_call(
            client, "recall", {"query": "green tea in the morning"}, embedder.release.set
        )
        got["after"] = await answer(client, "recall", {"query": "green tea in the morning"})

    try:
        with_client(store, check)
    finally:
        embedder.release.set()
    assert got["during"] == got["after"] == expected
    heard = got["heard"]
    assert heard[0][:2] == (0, 68) and "embedding projection" in (heard[0][2] or "")
    assert [done for done, _, _ in heard] == sorted(done for done, _, _ in heard)


def test_writes_and_content_reads_during_the_build_wait_for_all_of_it_and_decide_as_after(
    make_store: Callable[..., Store], home: Path, tmp_path: Path
) -> None:
    ref = reference(make_store, home, tmp_path)
    fact = next(m.id for m in ref.state.memories.values() if m.content == CONTENTS[5])
    correct = {"memory_id": fact, "content": "fact 3 is about topic three", "keys": ["topics 3"]}
    expected_correct = mcp_answer(ref, "correct", correct)
    assert [k["resolution"] for k in expected_correct["keys"]] == ["alias"]
    remember = {"content": CONTENTS[0] + ".", "keys": ["green teas", "morning"]}
    expected_remember = mcp_answer(ref, "remember", remember)
    # The cases that read vectors: an alias merge and a deduplication against an old memory.
    assert [k["resolution"] for k in expected_remember["keys"]] == ["alias", "alias"]
    assert expected_remember["deduplicated"] is not None
    facts = ref.state.key_for_label("facts")
    assert facts is not None
    read_key = {"key_id": facts.id, "query": "topic 7", "limit": 5}
    expected_page = mcp_answer(ref, "read_key", read_key)

    embedder = HeldEmbedder(held=CONTENTS)  # the key labels pass; the contents are held
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(store)
    got: dict[str, Any] = {}
    recall = {"query": "bees on the roof"}

    async def check(client: Client) -> None:
        assert await anyio.to_thread.run_sync(embedder.entered.wait, SAFETY)
        # The key labels are in: recall and correct answer at once, held contents or not.
        got["recall"] = await answer(client, "recall", recall)
        got["corrected"] = await answer(client, "correct", correct)
        got["page"], got["page_heard"] = await waiting_call(
            client, "read_key", read_key, embedder.release.set
        )

    try:
        with_client(store, check)
    finally:
        embedder.release.set()
    assert got["recall"] == mcp_answer(ref, "recall", recall)
    assert outcome(got["corrected"]) == outcome(expected_correct)
    assert got["page"] == expected_page
    assert got["page_heard"][-1][:2] == (68, 68)

    # remember, on a store whose build is held among the contents again
    shutil.rmtree(home / "cache" / "vectors")
    embedder = HeldEmbedder(held=CONTENTS)
    again = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(again)

    async def write(client: Client) -> None:
        assert await anyio.to_thread.run_sync(embedder.entered.wait, SAFETY)
        got["remembered"], _ = await waiting_call(
            client, "remember", remember, embedder.release.set
        )

    try:
        with_client(again, write)
    finally:
        embedder.release.set()
    assert outcome(got["remembered"]) == outcome(expected_remember)


def test_recall_memories_during_the_build_waits_and_answers_as_after(
    make_store: Callable[..., Store],
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    args = {"query": "green tea", "top_k": 5}
    expected = mcp_answer(reference(make_store, home, tmp_path), "recall_memories", args)
    assert expected["memories"]
    embedder = HeldEmbedder(held=CONTENTS)
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(store, memory_vectors=True)
    got: list[Any] = []

    async def check(client: Client) -> None:
        assert await anyio.to_thread.run_sync(embedder.entered.wait, SAFETY)
        got.append((await waiting_call(client, "recall_memories", args, embedder.release.set))[0])

    try:
        with_client(store, check)
    finally:
        embedder.release.set()
    assert got[0] == expected


def test_a_query_through_core_during_the_build_waits_for_the_builder_instead_of_embedding(
    make_store: Callable[..., Store], home: Path, tmp_path: Path
) -> None:
    # Not only the MCP tools: any caller of the store's queries and commands waits for the
    # build, outside the store's mutex, rather than embed every missing label itself under it
    # (which would hold every other query for as long, and reports nothing).
    expected = reference(make_store, home, tmp_path).recall("green tea in the morning")
    embedder = HeldEmbedder(held=["green tea"])
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(store)
    assert embedder.entered.wait(SAFETY)
    answers: list[Any] = []
    asker = threading.Thread(
        target=lambda: answers.append(store.recall("green tea in the morning")), name="asker"
    )
    asker.start()
    listed = store.list_memories(limit=5)  # meanwhile, what needs no vectors answers
    assert listed.total == 32
    embedder.release.set()
    asker.join(SAFETY)
    assert answers == [expected]
    assert embedder.by_thread["asker"] == 1  # its query; every label came from the builder


def test_a_failed_build_leaves_the_other_tools_working_and_names_its_cause(
    make_store: Callable[..., Store],
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = mcp_answer(reference(make_store, home, tmp_path), "recall", {"query": "bees"})
    embedder = HeldEmbedder(failing=True)  # an endpoint that cannot be reached
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build = build_while_serving(store)
    assert build is not None
    build.thread.join(SAFETY)
    assert not build.thread.is_alive()
    # The server's log (stderr) says so, with the cause.
    assert "Connection refused" in capsys.readouterr().err
    cause = "cannot reach the embeddings endpoint http://192.0.2.1/v1"
    before = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    facts = store.state.key_for_label("facts").id  # type: ignore[union-attr]

    async def check(client: Client) -> None:
        stats = await answer(client, "memory_stats")
        assert stats["projection"]["status"] == "failed"
        assert cause in stats["projection"]["error"]
        assert (await answer(client, "list_memories"))["total"] == 32
        for tool, args in (
            ("recall", {"query": "bees"}),
            ("remember", {"content": "Dana sells honey", "keys": ["honey"]}),
            ("read_key", {"key_id": facts, "query": "topic"}),
        ):
            result = await client.call_tool(tool, args)
            assert result.is_error, tool
            text = result.content[0].text  # type: ignore[union-attr]
            assert "embedding projection" in text and cause in text, text

    with_client(store, check)
    after = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    assert after == before  # the refused remember wrote nothing
    # The endpoint comes back: the next call that needs the projection builds it again.
    embedder.failing = False
    assert mcp_answer(store, "recall", {"query": "bees"}) == expected
    store.wait_for_vectors()  # recall waited only for the key labels: the contents follow
    assert store.projection_state().status == "ready"


def test_a_server_finding_another_building_the_projection_waits_for_its_rows(
    make_store: Callable[..., Store], home: Path, tmp_path: Path
) -> None:
    expected = mcp_answer(reference(make_store, home, tmp_path), "recall", {"query": "bees"})
    embedder = HeldEmbedder()
    served = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    # Another process is building: it holds the build lock.
    lock_path = projection.build_lock_path(served)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    held = [os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)]
    fcntl.flock(held[0], fcntl.LOCK_EX)

    def let_go() -> None:
        if held:
            os.close(held.pop())  # closing the file releases its flock

    try:
        build = build_while_serving(served)
        assert build is not None
        got: list[Any] = []

        def other_builds() -> None:
            # Meanwhile the other process builds (through the lock it holds) and lets go.
            other = make_store(home, threshold_overrides=OVERRIDES)
            with patch.object(projection, "build_lock_path", lambda s: tmp_path / "x"):
                projection.build(other)
            let_go()

        async def check(client: Client) -> None:
            assert (await answer(client, "list_memories"))["total"] == 32
            got.append(await waiting_call(client, "recall", {"query": "bees"}, other_builds))

        with_client(served, check)
    finally:
        let_go()
    assert got[0][0] == expected
    # This server embedded nothing of the projection: only the query.
    assert sum(embedder.by_thread.values()) == 1


class HeldHandler(Handler):
    def do_POST(self) -> None:
        server: HeldEndpoint = self.server  # type: ignore[assignment]
        server.entered.set()
        if not server.gate.wait(SAFETY):
            raise RuntimeError("the test never opened the endpoint")
        super().do_POST()


class HeldEndpoint(EmbeddingsServer):
    """The OpenAI-compatible test endpoint, answering only while `gate` is open."""

    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = HeldHandler
        self.gate = threading.Event()
        self.entered = threading.Event()


@pytest.fixture
def endpoint() -> Iterator[HeldEndpoint]:
    srv = HeldEndpoint()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.gate.set()
    srv.shutdown()
    srv.server_close()


def openai_home(endpoint: HeldEndpoint, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A store filled through `endpoint` whose projection is then deleted, and the environment
    of a `keytrail serve` on it through the same endpoint (closed again)."""
    home = tmp_path / "store"
    endpoint.gate.set()
    writer = Store(
        Settings(home=home, embedder="openai", model=MODEL, threshold_overrides=OVERRIDES),
        embedder=OpenAIEmbedder(MODEL, base_url=endpoint.url, api_key="sk-test"),
    )
    fill(writer)
    writer.close()
    shutil.rmtree(home / "cache" / "vectors")
    endpoint.gate.clear()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYTRAIL_", "OPENAI_"))}
    env.update(
        KEYTRAIL_HOME=str(home),
        KEYTRAIL_EMBEDDER="openai",
        KEYTRAIL_EMBED_MODEL=MODEL,
        KEYTRAIL_THRESHOLD_MERGE=str(OVERRIDES["merge"]),
        OPENAI_BASE_URL=endpoint.url,
        OPENAI_API_KEY="sk-test",
        PYTHONUNBUFFERED="1",
    )
    return home, env


def test_serve_over_stdio_answers_at_once_and_a_real_client_hears_the_build_move(
    endpoint: HeldEndpoint, tmp_path: Path
) -> None:
    _, env = openai_home(endpoint, tmp_path)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "keytrail.server.cli", "serve"], env=env, cwd=str(REPO)
    )
    got: dict[str, Any] = {}

    async def main() -> None:
        with (
            anyio.fail_after(SAFETY),
            open(tmp_path / "server-stderr.txt", "w") as err,
        ):
            async with (
                stdio_client(params, errlog=err) as (read, write),
                ClientSession(read, write) as session,
            ):
                # The endpoint answers nothing yet, so the build cannot have finished.
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                assert "recall" in names
                stats = await session.call_tool("memory_stats", {})
                assert stats.structured_content is not None
                assert stats.structured_content["projection"]["status"] == "building"
                page = await session.call_tool("list_memories", {})
                assert page.structured_content and page.structured_content["total"] == 32

                heard: Heard = []
                progressed = anyio.Event()

                async def on_progress(done: float, total: float | None, msg: str | None) -> None:
                    heard.append((done, total, msg))
                    progressed.set()

                async def ask() -> None:
                    got["during"] = await session.call_tool(
                        "recall", {"query": "bees on the roof"}, progress_callback=on_progress
                    )

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(ask)
                    await progressed.wait()
                    assert "during" not in got
                    endpoint.gate.set()
                got["after"] = await session.call_tool("recall", {"query": "bees on the roof"})
                got["heard"] = heard

    anyio.run(main)
    during, after = got["during"], got["after"]
    assert not during.is_error, during.content
    assert during.structured_content == after.structured_content
    assert during.structured_content["keys"]
    assert got["heard"][0][:2] == (0, 68)
    # The server's log shows the build's bar, as it did before serving.
    assert "embedding 68 texts" in (tmp_path / "server-stderr.txt").read_text()


def test_serve_over_http_answers_initialize_while_the_build_waits_on_the_endpoint(
    endpoint: HeldEndpoint, tmp_path: Path
) -> None:
    home, env = openai_home(endpoint, tmp_path)

    async def main(url: str) -> None:
        with anyio.fail_after(SAFETY):
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                stats = await session.call_tool("memory_stats", {})
                assert stats.structured_content is not None
                assert stats.structured_content["projection"]["status"] == "building"
                endpoint.gate.set()
                result = await session.call_tool("recall", {"query": "bees on the roof"})
                assert not result.is_error, result.content

    with serving(home, tmp_path, env=env) as url:
        assert endpoint.entered.wait(SAFETY)  # the build has asked the endpoint: it is under way
        anyio.run(main, url)


def test_commands_without_a_new_concept_label_never_read_the_key_label_matrix(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a new concept label can become an alias, so only it needs the key labels'
    vectors: reading them first made a command whose keys are all names (or known) embed every
    label a missing projection lacked, holding the appenders' lock."""
    store = make_store()
    old = store.remember("Anna lives in Lisbon", ["Anna", "city"], key_types={"Anna": "name"})

    def refuse() -> None:
        raise AssertionError("read the key labels' vectors")

    monkeypatch.setattr(store, "key_vectors", refuse)
    store.remember("Anna plays chess", ["Anna", "Lisbon"], key_types={"Lisbon": "name"})
    store.correct(
        old.memory_id, "Anna lives in Porto", ["Anna", "Porto"], key_types={"Porto": "name"}
    )
    store.remember_batch([RememberItem("Anna likes tea", ["Anna", "city"])])


def test_a_batch_that_waits_for_the_build_reports_progress_that_only_increases(
    make_store: Callable[..., Store], home: Path
) -> None:
    """remember_batch first waits for the build (its progress), then embeds its own texts
    (counted from 0 again): MCP requires a call's progress to increase, so the second step
    goes on from where the first stopped, and each total covers what was said so far."""
    embedder = HeldEmbedder(held=CONTENTS)
    store = make_store(home, embedder=embedder, threshold_overrides=OVERRIDES)
    build_while_serving(store)
    items = [{"content": f"new fact {i} about plants", "keys": [f"plant {i}"]} for i in range(40)]
    heard: Heard = []
    waiting = anyio.Event()

    async def check(client: Client) -> None:
        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            heard.append((done, total, message))
            waiting.set()

        async def call() -> None:
            result = await client.call_tool(
                "remember_batch", {"items": items}, progress_callback=on_progress
            )
            assert not result.is_error, result.content

        assert await anyio.to_thread.run_sync(embedder.entered.wait, SAFETY)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call)
            await waiting.wait()
            await anyio.to_thread.run_sync(embedder.release.set)

    try:
        with_client(store, check)
    finally:
        embedder.release.set()
    messages = [m for _, _, m in heard]
    first_embedding = messages.index("embedding")
    assert set(messages[:first_embedding]) == {BUILDING} and set(messages[first_embedding:]) == {
        "embedding"
    }
    progress = [p for p, _, _ in heard]
    assert all(a < b for a, b in itertools.pairwise(progress)), progress
    assert all(t is not None and p <= t for p, t, _ in heard)
    built = heard[first_embedding - 1][0]
    assert heard[-1][:2] == (built + 80, built + 80)  # 40 contents and 40 new labels


def test_a_waiter_woken_after_several_steps_says_how_far_the_build_got() -> None:
    """A waiter woken once after the build's last steps returned on the figure it had heard
    before (36 of 68), so a client's progress never reached 68 of 68 (seen in CI, under load).
    Here the build moves on and finishes between two wake-ups of the waiter."""
    from keytrail.core.reembed import BackgroundBuild

    build = BackgroundBuild(store=object())  # type: ignore[arg-type]  # never started
    heard: list[tuple[int, int]] = []
    build._progress(36, 68)
    waiter = threading.Thread(
        target=build.wait, args=("all", lambda d, t: heard.append((d, t))), daemon=True
    )
    waiter.start()
    deadline = time.monotonic() + SAFETY
    while not heard and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heard == [(36, 68)]
    with build._changed:  # the last steps and the end, before the waiter runs again
        build._done, build._total = 68, 68
        build._keys_ready = build._finished = True
        build._changed.notify_all()
    waiter.join(SAFETY)
    assert not waiter.is_alive()
    assert heard == [(36, 68), (68, 68)]


def holds_lock(lock_file: Path) -> bool:
    """Whether this process holds a flock on `lock_file` (from /proc/locks, whose lines read
    "1: FLOCK  ADVISORY  WRITE <pid> <dev>:<inode> 0 EOF"; a waiter's has "->")."""
    inode, pid = f":{os.stat(lock_file).st_ino} ", f" {os.getpid()} "
    with open("/proc/locks") as f:
        return any("->" not in line and inode in line and pid in line for line in f)


class LockWatchingEmbedder(HashEmbedder):
    """The hashing embedder, noting for each call its thread, whether this process held the
    store's log lock (once `lock_file` is set) and the texts. A server's build waits at each
    call while `gate` is clear: a test clears it to hear the build's progress before the build
    can finish (a waiter that arrives once it is done hears nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock_file: Path | None = None
        self.calls: list[tuple[str, bool, list[str]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def embed(self, texts: Sequence[str]) -> Matrix:
        name = threading.current_thread().name
        if name == "keytrail-projection" and not self.gate.wait(SAFETY):
            raise RuntimeError("the test never opened the gate")
        held = self.lock_file is not None and holds_lock(self.lock_file)
        self.calls.append((name, held, list(texts)))
        return super().embed(texts)

    def texts(self, *, thread: str | None = None, held: bool | None = None) -> set[str]:
        return {
            text
            for name, locked, texts in list(self.calls)
            if thread in (None, name) and held in (None, locked)
            for text in texts
        }


#: What another process writes while a long-lived store is open: 41 key labels and 40 contents,
#: more than the store embeds inline (INLINE_EMBED_MAX is set to 20 below).
BACKLOG = [
    RememberItem(f"imported fact {i} about subject {i}", [f"subject {i}", "imports"])
    for i in range(40)
]
BACKLOG_TEXTS = {"imports", *(f"subject {i}" for i in range(40)), *(i.content for i in BACKLOG)}


@dataclass
class Behind:
    store: Store
    embedder: LockWatchingEmbedder
    #: the thread that builds the projection: the server's build, or the caller of a store
    #: used directly
    builder: str


@pytest.fixture(params=["server", "direct"])
def behind(
    request: pytest.FixtureRequest,
    make_store: Callable[..., Store],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Behind:
    """A long-lived store (a server's, whose projection was built at its start, or one used
    directly) whose projection was current, after another process, with a model whose rows it
    cannot read, wrote the BACKLOG."""
    monkeypatch.setattr(store_module, "INLINE_EMBED_MAX", 20)
    home = tmp_path / "store"
    embedder = LockWatchingEmbedder()
    store = make_store(home, embedder=embedder)
    store.remember("Dana keeps bees on the roof", ["bees", "roof"])
    if request.param == "server":
        build_while_serving(store)
    store.wait_for_vectors()
    assert store.recall("bees").keys
    embedder.lock_file = store.log.lock_path
    make_store(home, embedder=HashEmbedder(64)).remember_batch(BACKLOG)
    embedder.calls.clear()
    me = threading.current_thread().name
    return Behind(store, embedder, "keytrail-projection" if request.param == "server" else me)


def test_a_recall_behind_another_process_s_backlog_waits_for_a_build_with_progress(
    behind: Behind,
) -> None:
    store, embedder = behind.store, behind.embedder
    heard: list[tuple[int, int]] = []

    def told(done: int, total: int) -> None:
        heard.append((done, total))
        embedder.gate.set()

    embedder.gate.clear()
    # As the server does before a recall: wait for the key labels, hearing the build move.
    store.wait_for_vectors("keys", told)
    assert heard and {total for _, total in heard} == {81}  # the 41 labels and 40 contents
    assert heard[-1][0] >= 41  # every label was in before recall ran
    embedded = embedder.texts(thread=behind.builder)
    embedder.calls.clear()
    found = store.recall("subject 7")
    assert "subject 7" in [k.label for k in found.keys]
    # The recall embedded its query only: the build had embedded the backlog's labels.
    me = threading.current_thread().name
    assert [texts for name, _, texts in embedder.calls if name == me] == [["subject 7"]]
    store.wait_for_vectors()
    assert embedded | embedder.texts(thread=behind.builder) == BACKLOG_TEXTS
    assert projection.status(store).current  # rows saved and coverage recorded, as at a start
    assert store.projection_state().status == "ready"


def test_a_remember_behind_another_process_s_backlog_embeds_none_of_it_holding_the_lock(
    behind: Behind,
) -> None:
    store, embedder = behind.store, behind.embedder
    told = store.remember("Dana read about subject 7 by the hives", ["subject 7", "hives"])
    assert [k.resolution for k in told.keys] == ["existing", "new"]
    assert embedder.texts(held=True).isdisjoint(BACKLOG_TEXTS)
    assert embedder.texts(thread=behind.builder) >= BACKLOG_TEXTS
    # The build recorded its coverage: the log up to the remember, which came after it.
    assert projection.status(store).covered_seq == told.seq - 1


def test_a_server_behind_a_backlog_tells_the_client_how_far_its_build_is(behind: Behind) -> None:
    heard: Heard = []

    async def told(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, total, message))
        behind.embedder.gate.set()

    async def check(client: Client) -> None:
        args = {"content": "Dana read about subject 7 by the hives", "keys": ["subject 7"]}
        result = await client.call_tool("remember", args, progress_callback=told)
        assert not result.is_error, result.content

    behind.embedder.gate.clear()
    with_client(behind.store, check)
    building = [(done, total) for done, total, message in heard if message == BUILDING]
    assert building and {total for _, total in building} == {81}
    assert building[-1][0] == 81  # remember waits for every label and content
    assert behind.embedder.texts(held=True).isdisjoint(BACKLOG_TEXTS)


def test_a_backlog_of_contents_alone_is_built_before_a_remember_compares_with_it(
    make_store: Callable[..., Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Memories another process wrote under a key this server has: no new label, yet a new
    # memory under that key is compared with each of them (dedup, contradictions).
    monkeypatch.setattr(store_module, "INLINE_EMBED_MAX", 20)
    home = tmp_path / "store"
    embedder = LockWatchingEmbedder()
    store = make_store(home, embedder=embedder)
    store.remember("Dana keeps bees on the roof", ["bees"])
    build_while_serving(store)
    store.wait_for_vectors()  # built at the start: coverage recorded up to here
    embedder.lock_file = store.log.lock_path
    others = [f"Dana's hive {i} holds {i} thousand bees" for i in range(40)]
    make_store(home, embedder=HashEmbedder(64)).remember_batch(
        [RememberItem(text, ["bees"]) for text in others]
    )
    embedder.calls.clear()
    store.remember("Dana's hive 3 holds 3 thousand bees", ["bees"])
    assert embedder.texts(held=True).isdisjoint(others)
    assert set(others) <= embedder.texts(thread="keytrail-projection")
