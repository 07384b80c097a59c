"""A verb that reads no vectors never loads the embedding model.

Opening a store with a model whose projection is behind the log builds the projection first,
but only for the verbs that read vectors. `keytrail stats` (or list, history, forget...) right
after a switch of model, or on a machine without the model, answers at once instead of
embedding the whole store (minutes to an hour) or failing to download the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from keytrail.core import StoreError
from keytrail.core.embedders import FastEmbedder
from keytrail.server.cli import main

#: Every verb that opens a store and reads no vectors, with arguments that make it run.
NO_VECTORS = [
    ["stats"],
    ["list"],
    ["keys"],
    ["read", "{memory}"],
    ["read", "{memory}", "--via", "{key}", "--query", "bees"],
    ["read-key", "{key}"],
    ["related", "{memory}"],
    ["history", "{memory}"],
    ["changes"],
    ["sessions"],
    ["cleanup-expired"],
    ["forget", "{memory}"],
]
#: Verbs that do read vectors: they build the projection, so they need the model.
VECTORS = [
    ["recall", "bees"],
    ["read-key", "{key}", "--query", "bees"],
    ["recall-memories", "bees"],
    ["remember", "Ada sells honey", "-k", "honey"],
    ["correct", "{memory}", "Ada keeps wasps"],
]


@pytest.fixture
def store_made_with_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> dict[str, str]:
    for name in list(os.environ):
        if name.startswith("KEYTRAIL_"):
            monkeypatch.delenv(name)
    home = str(tmp_path / "store")
    told = ["remember", "--home", home, "--embedder", "hash", "Ada keeps bees", "-n", "Ada"]
    assert main([*told, "-k", "bees", "--session", "chat-1", "--json"]) == 0
    out = capsys.readouterr().out
    memory = out.split('"memory_id": "')[1].split('"')[0]
    key = out.split('"key_id": "')[1].split('"')[0]
    loads: list[str] = []

    def no_model(self: FastEmbedder) -> Any:
        loads.append(self.model_id)
        raise StoreError("the model is not at hand")

    monkeypatch.setattr(FastEmbedder, "_load", no_model)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "fastembed")
    return {"home": home, "memory": memory, "key": key, "loads": loads}  # type: ignore[dict-item]


@pytest.mark.parametrize("verb", NO_VECTORS, ids=" ".join)
def test_a_verb_that_reads_no_vectors_loads_no_model(
    store_made_with_hash: dict[str, Any], verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = store_made_with_hash
    argv = [a.format(**ids) for a in verb]
    code = main([argv[0], "--home", ids["home"], *argv[1:]])
    err = capsys.readouterr().err
    assert code == 0, err
    assert ids["loads"] == []


@pytest.mark.parametrize("verb", VECTORS, ids=" ".join)
def test_a_verb_that_reads_vectors_builds_the_projection(
    store_made_with_hash: dict[str, Any], verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    ids = store_made_with_hash
    argv = [a.format(**ids) for a in verb]
    with pytest.raises(SystemExit) as exited:
        main([argv[0], "--home", ids["home"], *argv[1:]])
    assert exited.value.code == 2
    assert "the model is not at hand" in capsys.readouterr().err
    assert ids["loads"] == ["sentence-transformers/all-MiniLM-L6-v2"]
