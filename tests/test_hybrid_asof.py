"""recall_memories as of a past point: the past state, its rows and text, and nothing recorded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from keytrail.core import Store


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def test_recall_memories_as_of_answers_from_the_past_and_records_nothing(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home", "Seoul"], {"Seoul": "name"})
    before = store.state.seq
    busan = store.correct(seoul.memory_id, "The user moved to Busan", ["home", "Busan"])

    now = store.recall_memories("where does the user live Seoul Busan", learn=False)
    assert [m.memory_id for m in now.memories] == [busan.memory_id]

    written = log_bytes(store.home)
    past = store.recall_memories("where does the user live Seoul Busan", as_of=before)
    assert [m.memory_id for m in past.memories] == [seoul.memory_id]
    assert past.seq is None
    assert log_bytes(store.home) == written, "a read of the past appended something"
