"""The OpenAI backend, through the real `openai` client, against a small OpenAI-compatible
`/v1/embeddings` server on 127.0.0.1 started by the tests (vectors from feature hashing)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from keytrail.core import HashEmbedder, RememberItem, Settings, Store, StoreError
from keytrail.core import reembed as projection
from keytrail.core.embedders import OpenAIEmbedder

REPO = Path(__file__).resolve().parent.parent
MODEL = "text-embedding-3-small"
DIM = 1536  # what keytrail knows text-embedding-3-small to have


class EmbeddingsServer(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.hashing = HashEmbedder(dim=DIM)
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        #: statuses to answer with before serving (e.g. [429, 503])
        self.failures: list[int] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class Handler(BaseHTTPRequestHandler):
    server: EmbeddingsServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.requests.append(body)
        server.auth.append(self.headers.get("Authorization"))
        if self.path != "/v1/embeddings":
            return self._reply(404, {"error": {"message": "no such route"}})
        if server.failures:
            status = server.failures.pop(0)
            # retry-after-ms keeps the client's backoff short in tests
            return self._reply(
                status, {"error": {"message": "slow down", "type": "rate_limit"}}, retry_ms="5"
            )
        texts = body["input"]
        # `dimensions` shortens text-embedding-3 vectors, as the API does
        dim = body.get("dimensions", DIM)
        vectors = (server.hashing if dim == DIM else HashEmbedder(dim=dim)).embed(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
            for i in range(len(texts))
        ]
        data.reverse()  # the API does not promise order; the client must sort by index
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        self._reply(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    def _reply(self, status: int, payload: dict[str, Any], retry_ms: str | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if retry_ms:
            self.send_header("retry-after-ms", retry_ms)
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_batches_keep_order_and_match_the_server_vectors(server: EmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(MODEL, api_key="sk-test", base_url=server.url, batch_size=4)
    texts = [f"fact number {i} about bees" for i in range(10)]
    vectors = embedder.embed(texts)
    assert [len(r["input"]) for r in server.requests] == [4, 4, 2]
    assert all(r["model"] == MODEL for r in server.requests)
    assert server.auth[0] == "Bearer sk-test"
    assert np.allclose(vectors, HashEmbedder(dim=DIM).embed(texts), atol=1e-6)
    assert embedder.fingerprint == f"openai:{MODEL}:{DIM}"
    # An empty text (what a forgotten memory leaves) is never sent: it gets a zero vector.
    sent = len(server.requests)
    mixed = embedder.embed(["", "bees", " "])
    assert [r["input"] for r in server.requests[sent:]] == [["bees"]]
    assert not mixed[0].any() and not mixed[2].any()
    assert np.allclose(mixed[1], HashEmbedder(dim=DIM).embed(["bees"])[0], atol=1e-6)


def test_rate_limits_and_server_errors_are_retried(server: EmbeddingsServer) -> None:
    embedder = OpenAIEmbedder(MODEL, base_url=server.url, max_retries=3)
    server.failures = [429, 503, 500]
    vectors = embedder.embed(["apples"])
    assert len(server.requests) == 4 and vectors.shape == (1, DIM)
    server.failures = [429, 429]
    stingy = OpenAIEmbedder(MODEL, base_url=server.url, max_retries=1)
    with pytest.raises(StoreError, match=r"HTTP 429") as err:
        stingy.embed(["pears"])
    assert err.value.fields["url"] == server.url + "/" and err.value.fields["status"] == 429


def test_an_unreachable_endpoint_is_a_clear_error_naming_the_url() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    embedder = OpenAIEmbedder(MODEL, base_url=url, max_retries=1, timeout=2)
    with pytest.raises(StoreError, match=rf"cannot reach the embeddings endpoint {url}"):
        embedder.embed(["anything"])


def test_a_model_of_unknown_dimension_is_asked_once(server: EmbeddingsServer) -> None:
    embedder = OpenAIEmbedder("local-embedder", base_url=server.url)
    assert embedder.dim == DIM and len(server.requests) == 1
    assert embedder.fingerprint == f"openai:local-embedder:{DIM}" and len(server.requests) == 1


def test_a_store_on_the_openai_backend_from_the_environment(
    server: EmbeddingsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    env = {
        "KEYTRAIL_HOME": str(tmp_path / "store"),
        "KEYTRAIL_EMBEDDER": "openai",
        "KEYTRAIL_EMBED_MODEL": MODEL,
    }
    with Store(Settings.from_env(env)) as store:
        assert store.embedder.fingerprint == f"openai:{MODEL}:{DIM}"
        made = store.remember("Ada keeps bees on the roof", ["bees", "roof garden"])
        assert store.recall("bees").keys[0].key_id == made.keys[0].key_id
    assert server.auth and set(server.auth) == {"Bearer sk-env"}
    # The command line, in another process, through the same server.
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "reembed", "--json", "--embedder", "openai"],
        env={**env, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-env", "PATH": "/bin"},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["fingerprint"] == f"openai:{MODEL}:{DIM}" and result["texts"] == 3


def test_opening_with_a_new_model_builds_its_projection_with_progress(
    server: EmbeddingsServer, tmp_path: Path
) -> None:
    home = tmp_path / "store"
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        store.remember_batch(
            [RememberItem(f"fact {i} about the garden", [f"plot {i}"]) for i in range(40)]
        )
    env = {
        "KEYTRAIL_HOME": str(home),
        "KEYTRAIL_EMBEDDER": "openai",
        "OPENAI_BASE_URL": server.url,
        "PATH": "/bin",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "recall", "plot 7", "--json"],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    fingerprint = f"openai:{MODEL}:{DIM}"
    # 40 contents and 40 labels, embedded before the verb ran, with a progress bar on stderr
    assert f"embedding 80 texts with {fingerprint}: 100%" in proc.stderr
    assert [len(r["input"]) for r in server.requests][-1] == 1  # the query, after the build
    assert sum(len(r["input"]) for r in server.requests[:-1]) == 80
    assert json.loads(proc.stdout)["keys"][0]["label"] == "plot 7"
    with Store(Settings(home=home), embedder=OpenAIEmbedder(MODEL, base_url=server.url)) as again:
        assert projection.status(again).current


@pytest.mark.filterwarnings("ignore:no similarity profile")
def test_a_model_of_unknown_dimension_with_its_endpoint_down_still_serves(
    server: EmbeddingsServer, tmp_path: Path
) -> None:
    """A server on a local endpoint that is not up yet (an Ollama started after the client)
    must start and answer what needs no vectors, as it does for a model of known dimension:
    asking the dimension belongs to the build, which fails, says why, and is tried again."""
    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph
    from keytrail.server.embed_cli import build_while_serving

    home = tmp_path / "store"
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        store.remember("Ada keeps bees on the roof", ["bees"])
    server.failures = [503] * 4
    embedder = OpenAIEmbedder("local-embedder", base_url=server.url, max_retries=0)
    with Store(Settings(home=home, embedder="openai"), embedder=embedder) as store:
        build = build_while_serving(store)
        assert store.list_memories().total == 1
        assert store.memory_stats().embedder.startswith("openai:local-embedder")
        KnowledgeGraph(store).create_entities([EntityInput("Ada", "person", ["Likes honey"])])
        assert build.thread is not None
        build.thread.join(10)
        with pytest.raises(projection.ProjectionUnavailable, match="HTTP 503") as err:
            store.recall("bees")
        assert "openai:local-embedder" in str(err.value)
        server.failures = []  # the endpoint is up: the next call builds, no restart
        assert [k.label for k in store.recall("bees").keys] == ["bees"]
        assert store.embedder.fingerprint == f"openai:local-embedder:{DIM}"


def test_a_shorter_dimension_is_asked_of_the_model(
    server: EmbeddingsServer, tmp_path: Path
) -> None:
    """KEYTRAIL_EMBED_DIM below a text-embedding-3 model's own is sent as the API's
    `dimensions`: the vectors come back that short, and the projection is that model at that
    dimension. Unset, the model's own vectors are asked for, without `dimensions`."""
    short = OpenAIEmbedder(MODEL, base_url=server.url, dim=256)
    assert short.fingerprint == f"openai:{MODEL}:256"
    with Store(Settings(home=tmp_path / "short"), embedder=short) as store:
        made = store.remember("Ada keeps bees on the roof", ["bees", "roof"])
        assert store.recall("bees").keys[0].key_id == made.keys[0].key_id
        assert store.key_vectors().matrix.shape == (2, 256)
    assert server.requests and {r.get("dimensions") for r in server.requests} == {256}
    server.requests.clear()
    whole = OpenAIEmbedder(MODEL, base_url=server.url)
    assert whole.embed(["bees"]).shape == (1, DIM)
    assert ["dimensions" in r for r in server.requests] == [False]


@pytest.mark.parametrize(
    ("model", "dim", "says"),
    [
        (MODEL, 4096, f"{MODEL} makes vectors of at most {DIM} dimensions"),
        (
            "text-embedding-ada-002",
            512,
            "text-embedding-ada-002 makes 1536-dimensional vectors only",
        ),
    ],
)
def test_a_dimension_the_model_cannot_make_is_refused_before_any_request(
    server: EmbeddingsServer, model: str, dim: int, says: str
) -> None:
    with pytest.raises(StoreError) as refused:
        OpenAIEmbedder(model, base_url=server.url, dim=dim)
    assert refused.value.message == f"KEYTRAIL_EMBED_DIM (--embed-dim) is {dim}, but {says}"
    assert refused.value.fields["field"] == "embed_dim"
    assert server.requests == []
