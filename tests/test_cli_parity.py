"""The CLI verbs take what their MCP tools take: `recall --context`, `correct --related-to`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.server.cli import main


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("KEYTRAIL_HOME", "KEYTRAIL_NAMESPACE", "KEYTRAIL_KG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    return tmp_path / "store"


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    out = capsys.readouterr()
    return code, out.out, out.err


def test_recall_context_weighs_in_like_the_tool(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(home)
    store.remember("Ada keeps stick insects", ["insects"])
    store.remember("Ada drinks green tea", ["tea"])
    store.close()
    query = "what does Ada keep"
    code, out, _ = run(capsys, "recall", query, "--home", str(home), "--json")
    assert code == 0 and json.loads(out)["nearest"][0]["label"] == "insects"
    context = "tea tea green tea drinks"
    code, out, _ = run(capsys, "recall", query, "--context", context, "--home", str(home), "--json")
    assert code == 0 and json.loads(out)["nearest"][0]["label"] == "tea"
    # the tool's limit: as long as a query
    code, _, err = run(capsys, "recall", query, "--context", "x" * 100_000, "--home", str(home))
    assert code == 2 and "context" in err
    assert "--context" in run(capsys, "recall", "--help")[1]


def test_correct_related_to_like_the_tool(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(home)
    a = store.remember("Mia starts school in 2025", ["Mia"]).memory_id
    b = store.remember("Dana is Mia's mother", ["Dana"]).memory_id
    c = store.remember("The school is in Lyon", ["school"]).memory_id
    store.close()
    code, out, _ = run(
        capsys, "correct", a, "Mia starts school in 2026", "--related-to", b,
        "--related-to", c, "--home", str(home), "--json",
    )  # fmt: skip
    assert code == 0
    new = json.loads(out)["memory_id"]
    # omitted, the old version's related_to stays
    code, out, _ = run(capsys, "correct", new, "Mia starts in 2027", "--home", str(home), "--json")
    newer = json.loads(out)["memory_id"]
    code, _, err = run(
        capsys, "correct", newer, "x", "--related-to", "m_000000000000", "--home", str(home)
    )
    assert code == 2 and "related_to" in err
    store = open_store(home)
    assert store.state.memories[new].related_to == [b, c]
    assert store.state.memories[newer].related_to == [b, c]
    store.close()
    assert "--related-to" in run(capsys, "correct", "--help")[1]
