"""Streamable HTTP edges: DNS-rebinding checks on loopback, the bearer token's form, several
clients at once, and stopping with calls running. `keytrail serve --http` in a subprocess, raw
HTTP or the SDK client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from test_server import HEADERS, INIT, REPO, free_port, server_env, serving


def can_bind(host: str) -> bool:
    try:
        free_port(host)
    except OSError:
        return False
    return True


def post_init(url: str, **headers: str) -> Any:
    with httpx2.Client(timeout=20) as client:
        return client.post(url, json=INIT, headers={**HEADERS, **headers})


# -- DNS rebinding ---------------------------------------------------------------------------


@pytest.mark.skipif(not can_bind("127.0.0.2"), reason="127.0.0.2 is not a local address here")
def test_a_tokenless_server_on_any_loopback_address_refuses_foreign_hosts(
    tmp_path: Path,
) -> None:
    """Serving on loopback needs no token, so the Host/Origin checks are all that stops a web
    page whose DNS name was rebound to 127.0.0.x from driving the store. The SDK turns them on
    only for the literal hosts 127.0.0.1, localhost and ::1; keytrail calls every loopback
    address loopback, so every one must keep them."""
    with serving(tmp_path / "store", tmp_path, host="127.0.0.2") as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        assert post_init(url).status_code == 200
        assert post_init(url, Host=f"evil.example:{port}").status_code == 421
        assert post_init(url, Origin="http://evil.example").status_code == 403


# -- the bearer token ------------------------------------------------------------------------


def test_the_auth_scheme_is_case_insensitive_the_token_is_not() -> None:
    """RFC 7235 2.1: the scheme ('Bearer') is case-insensitive; the token is compared exactly."""
    from keytrail.server.mcp_server import token_matches

    assert token_matches("Bearer s3cret", "s3cret")
    assert token_matches("bearer s3cret", "s3cret")
    assert token_matches("BEARER s3cret", "s3cret")
    assert not token_matches("Bearer S3CRET", "s3cret")
    assert not token_matches("Bearer s3cret2", "s3cret")
    assert not token_matches("Basic s3cret", "s3cret")
    assert not token_matches("Bearers3cret", "s3cret")
    assert not token_matches(None, "s3cret")


@pytest.mark.parametrize("token", ["s3cret ", " s3cret", "s3cret\n", "pässwörd", "a\tb"])
def test_a_token_no_client_could_send_is_refused_at_start(tmp_path: Path, token: str) -> None:
    """HTTP strips a header value's surrounding whitespace and carries only ASCII, so such a
    token (a stray space or newline from a .env file) would make a server that refuses every
    client with 401 and never says why. It is refused before serving, naming --token."""
    for how in ("flag", "env"):
        flags = ["--token", token] if how == "flag" else []
        env = server_env(tmp_path / "store")
        if how == "env":
            env["KEYTRAIL_HTTP_TOKEN"] = token
        try:
            serve = ["serve", "--http", "--port", str(free_port()), *flags]
            proc = subprocess.run(
                [sys.executable, "-m", "keytrail.server.cli", *serve],
                env=env,
                cwd=str(REPO),
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"served with the unusable token {token!r} ({how})") from None
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("keytrail: error: --token"), proc.stderr
        assert token.strip() not in proc.stderr  # the secret is not echoed


def test_an_empty_token_flag_is_refused_not_served_without_a_token(tmp_path: Path) -> None:
    """`--token "$TOKEN"` with TOKEN unset or misspelled passes an empty token: the caller asked
    for one, so serving without any (every client let in, the banner silent about it) fails
    open. It is refused before serving, naming --token, like an empty --home."""
    env = server_env(tmp_path / "store")
    serve = ["serve", "--http", "--port", str(free_port()), "--token", ""]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", *serve],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("served without a token though --token was given") from None
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("keytrail: error: --token"), proc.stderr
    assert not (tmp_path / "store").exists()  # refused before a store was made


# -- several clients at once -----------------------------------------------------------------


def test_several_http_sessions_remember_at_once_and_lose_nothing(tmp_path: Path) -> None:
    """Four clients, each its own MCP session, remember concurrently: every write lands once,
    and each client reads back exactly what it stored (no cross-session mix-up)."""
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from test_server import call, run

    clients, each = 4, 8
    stored: dict[int, dict[str, str]] = {}

    @asynccontextmanager
    async def session(url: str) -> AsyncIterator[ClientSession]:
        http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret"})
        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as s,
        ):
            await s.initialize()
            yield s

    async def client(url: str, n: int) -> None:
        async with session(url) as s:
            mine: dict[str, str] = {}
            for i in range(each):
                content = f"Client {n} fact {i}: the lighthouse {n}-{i} is painted red"
                r = await call(s, "remember", content=content, keys=[f"c{n}", f"f{n}-{i}"])
                mine[r["memory_id"]] = content
            for memory_id, content in mine.items():
                assert (await call(s, "read_memory", memory_id=memory_id))["content"] == content
            stored[n] = mine

    with serving(tmp_path / "store", tmp_path, "--token", "s3cret") as url:

        async def test() -> None:
            async with anyio.create_task_group() as tg:
                for n in range(clients):
                    tg.start_soon(client, url, n)
            async with session(url) as s:
                stats = await call(s, "memory_stats")
                assert stats["memories"] == clients * each
                listed = await call(s, "list_memories", limit=100)
                assert {m["memory_id"] for m in listed["memories"]} == {
                    memory_id for mine in stored.values() for memory_id in mine
                }

        run(test)


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here")
def test_the_banner_gives_a_usable_url_for_an_ipv6_host(tmp_path: Path) -> None:
    """`--host ::1` serves at http://[::1]:port/mcp; `http://::1:port/mcp` is not a URL."""
    with socket.socket(socket.AF_INET6) as sock:
        sock.bind(("::1", 0))
        port = sock.getsockname()[1]
    serve = ["serve", "--http", "--host", "::1", "--port", str(port)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "keytrail.server.cli", *serve],
        env=server_env(tmp_path / "store"),
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert f"http://[::1]:{port}/mcp" in banner, banner


@pytest.mark.parametrize("taken", ["port", "host"])
def test_a_port_in_use_or_an_unknown_host_is_one_line_and_status_2(
    tmp_path: Path, taken: str
) -> None:
    """uvicorn reported a failed bind on its own, with exit status 3, after keytrail had said
    `serving ... on http://127.0.0.1:PORT/mcp` (a port in use, a host that does not resolve).
    It is refused before serving, as every other error is: one line, status 2, no store made."""
    home = tmp_path / "store"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        host = "127.0.0.1" if taken == "port" else "no-such-host.invalid"
        serve = ["serve", "--http", "--host", host, "--port", str(port), "--token", "t"]
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "keytrail.server.cli", *serve],
                env=server_env(home),
                cwd=str(REPO),
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(f"served on a {taken} it cannot listen on") from None
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"keytrail: error: --{taken}: "), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "serving" not in proc.stderr
    assert not home.exists()


@pytest.mark.parametrize("flag", [["--port", "9000"], ["--host", "0.0.0.0"], ["--token", "t"]])
def test_an_http_option_without_http_is_refused(tmp_path: Path, flag: list[str]) -> None:
    """`serve --port 9000` served over stdio, the address dropped without a word."""
    home = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "serve", *flag],
        env=server_env(home),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"keytrail: error: {flag[0]}: is for serving over HTTP: add --http (stdio has no address)\n"
    )
    assert not home.exists()


def serve_http(home: Path, port: int) -> subprocess.Popen[str]:
    """`keytrail serve --http` on `port`, its stderr a pipe (its first line is the banner)."""
    return subprocess.Popen(
        [sys.executable, "-m", "keytrail.server.cli", "serve", "--http", "--port", str(port)],
        env=server_env(home),
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def open_session(client: httpx2.Client, url: str) -> dict[str, str]:
    """Initialize an MCP session at `url` by raw HTTP; the headers its requests carry."""
    for _ in range(100):  # the banner comes just before uvicorn listens
        try:
            init = client.post(url, json=INIT, headers=HEADERS)
            break
        except httpx2.ConnectError:
            time.sleep(0.1)
    session = {**HEADERS, "mcp-session-id": init.headers["mcp-session-id"]}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    client.post(url, json=initialized, headers=session)
    return session


def test_sigterm_closes_the_store_before_the_http_server_dies_of_it(tmp_path: Path) -> None:
    """uvicorn shuts down on SIGTERM (how a service manager or a container stops a server),
    then raises the signal again to die of it: that killed the process inside uvicorn.run,
    before `serve` closed the store, so the snapshot of what it had folded was never saved
    (safe, the log is the truth, but every start replayed the log from the last snapshot).
    It still dies of SIGTERM, as before, once the store is closed."""
    import signal

    home = tmp_path / "store"
    port = free_port()
    proc = serve_http(home, port)
    try:
        assert proc.stderr is not None
        assert "serving" in proc.stderr.readline()
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx2.Client(timeout=20) as client:
            session = open_session(client, url)
            for i in range(3):
                arguments = {"content": f"Fact {i} about the harbour", "keys": ["harbour"]}
                params = {"name": "remember", "arguments": arguments}
                request = {"jsonrpc": "2.0", "id": 2 + i, "method": "tools/call", "params": params}
                assert client.post(url, json=request, headers=session).status_code == 200
        snapshot = home / "cache" / "snapshot" / "keygraph.msgpack"
        assert not snapshot.exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert snapshot.exists()


def test_sigterm_ends_a_sessions_get_stream_as_a_closed_stream_not_a_broken_one(
    tmp_path: Path,
) -> None:
    """A session's GET stream (the SDK client keeps one open for the server's own messages) is
    ended at shutdown. sse-starlette did that by cancelling it mid-response: the client read a
    broken connection (`incomplete chunked read`) and the server's log said `ASGI callable
    returned without completing response`. The stream now ends as a response ends."""
    import signal
    import threading

    home = tmp_path / "store"
    port = free_port()
    proc = serve_http(home, port)
    ended: list[BaseException | None] = []
    try:
        assert proc.stderr is not None
        assert "serving" in proc.stderr.readline()
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx2.Client(timeout=60) as client:
            session = open_session(client, url)
            opened = threading.Event()

            def read_stream() -> None:
                headers = {**session, "accept": "text/event-stream"}
                try:
                    with client.stream("GET", url, headers=headers) as stream:
                        assert stream.status_code == 200
                        opened.set()
                        for _ in stream.iter_bytes():
                            pass
                    ended.append(None)
                except BaseException as exc:  # what the reader saw, asserted below
                    ended.append(exc)

            reader = threading.Thread(target=read_stream, daemon=True)
            reader.start()
            assert opened.wait(timeout=30)
            time.sleep(0.3)  # the server side of the stream is waiting for messages
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == -signal.SIGTERM
            reader.join(timeout=30)
        errors = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert ended == [None], f"the stream broke: {ended[0]!r}"
    assert "without completing response" not in errors


def batch_of_seconds() -> list[dict[str, Any]]:
    """A `remember_batch` that takes seconds with the hash embedder: 500 texts of 19,200
    characters to embed, reporting progress as it goes."""
    return [
        {"content": f"Batch fact {i}: " + "lighthouse keeper notes " * 800, "keys": [f"b{i}"]}
        for i in range(500)
    ]


def test_a_call_running_when_the_http_server_gets_sigterm_is_answered_first(
    tmp_path: Path,
) -> None:
    """SIGTERM while a `remember_batch` was embedding: uvicorn waits for open connections, but
    sse-starlette ended every SSE stream, the call's answer among them, as soon as shutdown
    began. The batch could still land in the log (its thread runs on), and the client, seeing
    a failure, would store it again. The call is answered first, the batch is in the log once,
    and the server then dies of SIGTERM as it does when nothing was running."""
    import json
    import signal

    from test_server import log_bytes

    home = tmp_path / "store"
    port = free_port()
    proc = serve_http(home, port)
    items = batch_of_seconds()
    try:
        assert proc.stderr is not None
        assert "serving" in proc.stderr.readline()
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx2.Client(timeout=60) as client:
            session = open_session(client, url)
            params = {
                "name": "remember_batch",
                "arguments": {"items": items},
                "_meta": {"progressToken": "batch"},
            }
            request = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
            progress, answer = 0, None
            try:
                with client.stream("POST", url, json=request, headers=session) as stream:
                    for line in stream.iter_lines():
                        if not line.startswith("data:") or not line[5:].strip():
                            continue
                        message = json.loads(line[5:])
                        if message.get("method") == "notifications/progress":
                            progress += 1
                            if progress == 1:  # the call is at work
                                proc.send_signal(signal.SIGTERM)
                        elif message.get("id") == 2:
                            answer = message
            except httpx2.TransportError as exc:
                raise AssertionError(f"the stream broke before the answer: {exc!r}") from None
        assert progress > 0  # the signal came while the call was running
        assert answer is not None, "the stream ended without the call's answer"
        memories = answer["result"]["structuredContent"]["memories"]
        assert len(memories) == len(items)
        with httpx2.Client(timeout=20) as late, pytest.raises(httpx2.ConnectError):
            late.post(url, json=INIT, headers=HEADERS)  # no new requests once stopped
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert code == -signal.SIGTERM  # once the store is closed, as the supervisor expects
    log = log_bytes(home)
    assert log.count(b'"memory.remembered"') == 1  # the batch, once
    assert all(log.count(m["memory_id"].encode()) == 1 for m in memories)


def test_ctrl_c_answers_an_sdk_client_and_ends_its_stream_without_waiting_out_the_grace(
    tmp_path: Path,
) -> None:
    """The SDK client keeps a GET stream open for the server's own messages, which never ends
    of itself: with sse-starlette's drain off, the server ends it once every call is answered,
    rather than waiting out its grace period and cancelling it. Ctrl-C answers the running
    call, as SIGTERM does, and the server leaves with 0."""
    import signal

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from test_server import log_bytes, run

    home = tmp_path / "store"
    port = free_port()
    errpath = tmp_path / "stderr.txt"
    items = batch_of_seconds()
    with open(errpath, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keytrail.server.cli", "serve", "--http", "--port", str(port)],
            env=server_env(home),
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        for _ in range(300):  # until uvicorn listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)

        async def test() -> None:
            stopped: list[bool] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                if not stopped:  # the call is at work
                    proc.send_signal(signal.SIGINT)
                    stopped.append(True)

            http = create_mcp_http_client()
            async with (
                http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                await s.list_tools()  # what call_tool checks answers against, asked before
                result = await s.call_tool(
                    "remember_batch", {"items": items}, progress_callback=on_progress
                )
                assert not result.is_error, result.content
                assert result.structured_content is not None
                assert len(result.structured_content["memories"]) == len(items)
            assert stopped

        run(test, timeout=120)
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert code == 0
    assert "graceful shutdown exceeded" not in errpath.read_text()  # the GET stream was ended
    assert log_bytes(home).count(b'"memory.remembered"') == 1


def test_a_batch_within_the_documented_limits_is_taken_over_http(tmp_path: Path) -> None:
    """The SDK refuses request bodies over 4 MiB with a bare 413, though 500 memories of 20,000
    characters are within the documented limits: a batch stdio took was refused over HTTP."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from test_server import call, run

    items = [
        {"content": f"fact {i}: " + "lighthouse keeper notes " * 800, "keys": [f"k{i}"]}
        for i in range(250)
    ]  # about 4.8 MB of JSON

    with serving(tmp_path / "store", tmp_path) as url:

        async def test() -> None:
            http = create_mcp_http_client()
            async with (
                http,
                streamable_http_client(url, http_client=http) as (read, write),
                ClientSession(read, write) as s,
            ):
                await s.initialize()
                answer = await call(s, "remember_batch", items=items)
                assert len(answer["memories"]) == len(items)
                assert (await call(s, "memory_stats"))["memories"] == len(items)

        run(test, timeout=120)
