"""Shared fixtures: stores on temporary directories, with the hashing or the real embedder."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.core.embedders import DEFAULT_MODEL, FastEmbedder
from keytrail.core.store import content_hash
from keytrail.events import KeyLink, MemoryRemembered, NewMemory
from keytrail.projections import KeyNode

REPO = Path(__file__).resolve().parent.parent


def model_path() -> str | None:
    """Where the real model is when tests run offline (CI sets KEYTRAIL_EMBED_MODEL_PATH)."""
    return os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or None


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., Store]]:
    """Open stores (hash embedder unless one is given) on a temp directory; closed afterwards."""
    opened: list[Store] = []

    def make(home: Path | None = None, embedder: object = None, **settings: object) -> Store:
        store = Store(
            Settings(home=home or tmp_path / "store", embedder="hash", **settings),  # type: ignore[arg-type]
            embedder=embedder or HashEmbedder(),
        )  # type: ignore[arg-type]
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., Store]) -> Store:
    return make_store()


@pytest.fixture(scope="session")
def real_embedder() -> FastEmbedder:
    """all-MiniLM-L6-v2 from KEYTRAIL_EMBED_MODEL_PATH (offline), or fetched like a user's."""
    return FastEmbedder(DEFAULT_MODEL, model_path())


@pytest.fixture
def real_store(make_store: Callable[..., Store], real_embedder: FastEmbedder) -> Store:
    return make_store(embedder=real_embedder)


@pytest.fixture
def hash_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line run in-process with the hashing embedder, and no store, namespace or
    knowledge-graph namespace from the environment of whoever runs the tests."""
    for var in ("KEYTRAIL_HOME", "KEYTRAIL_NAMESPACE", "KEYTRAIL_KG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")


def rest_of_output(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 120
) -> tuple[bytes | str, bytes | str]:
    """`proc.communicate()` for a process whose stdout has been read with `readline()`.

    communicate() reads the pipe's descriptor directly, so what readline() had already buffered
    beyond its line is skipped, and a line split at that point reads as two broken ones. This
    reads on through the same buffered file instead (stderr beside it, so neither pipe fills).
    """
    assert proc.stdout is not None and proc.stderr is not None
    err: list[bytes | str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))  # type: ignore[union-attr]
    reader.start()
    out = proc.stdout.read()
    reader.join(timeout)
    proc.wait(timeout)
    return out, err[0]


def tell_again(
    store: Store, memory_id: str, content: str, keys: list[KeyNode], namespace: str = "default"
) -> None:
    """Append a `memory.remembered` that tells `memory_id` again with another text, keys or
    namespace, as a hand-made log can (`GraphState.ids_retold`): no command writes one."""
    again = NewMemory(
        memory_id=memory_id,
        namespace=namespace,
        content=content,
        content_hash=content_hash(content),
        keys=[KeyLink(key_id=key.id, label=key.label) for key in keys],
    )
    store._write(lambda app: store._append(app, MemoryRemembered(memories=[again])))
