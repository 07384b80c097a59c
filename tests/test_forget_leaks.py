"""Forgotten content must not come back: not through a past state cached in memory, not through a
snapshot a past read keeps, not through vectors embedded while the forget ran, and a deleted
knowledge-graph observation can still be forgotten for good.

Two `Store` objects on one directory stand for two processes: each has its own log, lock file
descriptor and caches, exactly as separate processes would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_forget import files_holding

from keytrail.core import HashEmbedder, NotFound, Settings, Store, reembed
from keytrail.core import timetravel as timetravel_module
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.core.maintenance import verify
from keytrail.core.timetravel import read_memory_at
from keytrail.events import EventLog
from keytrail.projections import fold
from keytrail.projections.vectors import VectorCache, text_hash

SECRET = "my bank PIN is 7391, tell nobody"


def open_store(home: Path, dim: int = 256, **over: Any) -> Store:
    base: dict[str, Any] = dict(home=home, embedder="hash", snapshot_every=10_000)
    base.update(over)
    return Store(Settings(**base), embedder=HashEmbedder(dim))


def fresh_prefix_state(home: Path, seq: int) -> Any:
    """The state a fresh replay of the (redacted) log's first `seq` events gives."""
    return fold(e for e in EventLog(home).iter_new() if e.seq <= seq)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_a_past_state_cached_before_a_forget_does_not_serve_the_content(home: Path) -> None:
    store = open_store(home)
    secret = store.remember(SECRET, ["bank"]).memory_id
    store.remember("tea every morning", ["tea"])
    then = store.state.seq - 1
    assert read_memory_at(store, secret, as_of=then).content == SECRET  # cached now
    store.forget(secret)
    expected = fresh_prefix_state(home, then).memories[secret].content
    assert expected == ""  # the log line is redacted
    # A read of the past refuses it (forgetting holds then too), and the cached past state no
    # longer holds its content for any other use (a kept snapshot, a history).
    with pytest.raises(NotFound, match="forgotten"):
        read_memory_at(store, secret, as_of=then)
    assert store.past.state(then).memories[secret].content == expected
    store.close()


def test_a_past_state_cached_before_another_process_forgets_does_not_serve_it(home: Path) -> None:
    writer = open_store(home)
    secret = writer.remember(SECRET, ["bank"]).memory_id
    writer.remember("tea every morning", ["tea"])
    then = writer.state.seq - 1
    reader = open_store(home)
    assert read_memory_at(reader, secret, as_of=then).content == SECRET  # cached in the reader
    writer.forget(secret)
    with pytest.raises(NotFound, match="forgotten"):
        read_memory_at(reader, secret, as_of=then)
    assert reader.past.state(then).memories[secret].content == ""
    reader.close()
    writer.close()


def test_a_past_read_does_not_write_a_snapshot_holding_content_forgotten_meanwhile(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A past state with a long tail is kept as a snapshot. If another process forgets a memory
    of it between the fold and the save, the save must not bring the content back to disk."""
    writer = open_store(home)
    secret = writer.remember(SECRET, ["bank"]).memory_id
    for i in range(12):
        writer.remember(f"filler fact {i}", ["tea"])
    then = writer.state.seq - 1
    past_read_while_another_process_forgets(home, writer, secret, then, monkeypatch)


@pytest.mark.parametrize("forget_after", [1, 3])  # batches before the forget lands
def test_a_reembed_running_across_a_forget_leaves_no_vector_of_it(
    home: Path, forget_after: int
) -> None:
    store = open_store(home)
    for i in range(3):
        store.remember(f"filler fact {i}", ["tea"])
    secret = store.remember(SECRET, ["bank"]).memory_id  # last: embedded in a later batch
    other_model = open_store(home, dim=128)
    forgotten: list[object] = []

    def forget_after_first_batch(done: int, total: int) -> None:
        # 1: the forget is folded before the secret's batch; 3: while that batch is embedded.
        if done >= forget_after and not forgotten:
            forgotten.append(store.forget(secret))

    reembed.build(other_model, progress=forget_after_first_batch, batch=1)
    assert forgotten
    other_model.close()
    store.close()
    for cache in (home / "cache" / "vectors").iterdir():
        hashes = (cache / "hashes.txt").read_text()
        assert text_hash(SECRET) not in hashes, cache.name


def test_a_deleted_observation_can_still_be_forgotten_for_good(home: Path) -> None:
    store = open_store(home)
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", [SECRET])])
    (memory_id,) = store.state.memories
    kg.delete_observations([ObservationInput("Alice", [SECRET])])
    gone = store.forget(memory_id, reason="user asked")
    assert any(p.startswith("log/") for p in gone.purged)
    with pytest.raises(NotFound, match="already forgotten"):
        store.forget(memory_id)  # nothing is left to erase
    store.close()
    assert files_holding(home, SECRET) == []
    report = verify(home)
    assert report.ok and report.redacted == [memory_id], report.problems


def test_a_search_racing_a_forget_does_not_write_the_content_into_the_text_index(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process forgets a memory between this one catching up and it updating the text
    index: the update must not write the forgotten text into the index after its purge."""
    writer = open_store(home)
    secret = writer.remember(SECRET, ["bank"]).memory_id
    searcher = open_store(home)
    assert searcher.recall_memories("bank PIN").memories  # the index holds the secret
    writer.remember("tea every morning", ["tea"])  # the index is behind: the next search writes
    real_refresh = searcher.refresh
    forgot: list[object] = []

    def refresh_then_forget() -> Any:
        state = real_refresh()
        if not forgot:  # the other process forgets right after this one caught up
            forgot.append(writer.forget(secret))
        return state

    monkeypatch.setattr(searcher, "refresh", refresh_then_forget)
    searcher.recall_memories("bank PIN")
    assert forgot
    assert files_holding(home, SECRET) == []
    searcher.close()
    writer.close()


def test_a_save_killed_before_erasing_a_forgotten_row_never_wrote_that_row(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reembed holds an unsaved vector of a text another process forgets meanwhile. Its next
    save must not write that row and erase it afterwards: killed in between, the row would stay
    on disk with no pending purge left to finish the job."""
    store = open_store(home)
    for i in range(3):
        store.remember(f"filler fact {i}", ["tea"])
    secret = store.remember(SECRET, ["bank"]).memory_id
    other_model = open_store(home, dim=128)

    def killed(self: object, digests: object) -> int:
        raise KeyboardInterrupt("killed before the erase")  # what a kill leaves on disk

    def forget_while_the_secret_is_embedded(done: int, total: int) -> None:
        if done == 3:
            store.forget(secret)
            monkeypatch.setattr(VectorCache, "purge", killed)

    with pytest.raises(KeyboardInterrupt):
        reembed.build(other_model, progress=forget_while_the_secret_is_embedded, batch=1)
    monkeypatch.undo()
    hashes = (home / "cache" / "vectors" / "hash_v1_128" / "hashes.txt").read_text()
    assert text_hash(SECRET) not in hashes
    store.close()


def a_deleted_observation(store: Store) -> str:
    """A secret told as an observation and then deleted (hidden, its content still in the state
    and in its log line, so past states hold it); returns its memory id."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", [SECRET])])
    (memory_id,) = store.state.memories
    for i in range(12):
        store.remember(f"filler fact {i}", ["tea"])
    kg.delete_observations([ObservationInput("Alice", [SECRET])])
    return memory_id


def test_a_past_state_cached_before_a_deleted_observation_is_forgotten_drops_its_content(
    home: Path,
) -> None:
    store = open_store(home)
    secret = a_deleted_observation(store)
    then = store.state.seq - 1  # before the delete: the observation is shown then
    assert store.past.state(then).memories[secret].content == SECRET  # cached now
    store.forget(secret)
    assert fresh_prefix_state(home, then).memories[secret].content == ""
    assert store.past.state(then).memories[secret].content == ""
    store.close()


def test_a_past_read_keeps_no_snapshot_holding_a_deleted_observation_forgotten_meanwhile(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, for a memory deleted as an observation before it was forgotten: hidden from
    the present, but its content is in the state and in the past state folded from the log."""
    writer = open_store(home)
    secret = a_deleted_observation(writer)
    then = writer.state.seq - 1
    past_read_while_another_process_forgets(home, writer, secret, then, monkeypatch)


def past_read_while_another_process_forgets(
    home: Path, writer: Store, secret: str, then: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader reads as of `then`, far from any snapshot (so it keeps its state as one), and
    `writer` forgets `secret` right after the reader folded the past: no file may hold it."""
    reader = open_store(home, snapshot_every=4)
    real_fold = timetravel_module.fold
    forgot: list[object] = []

    def fold_then_forget(events: Any, state: Any = None) -> Any:
        folded = real_fold(events, state)
        if not forgot:
            forgot.append(writer.forget(secret))
        return folded

    monkeypatch.setattr(timetravel_module, "fold", fold_then_forget)
    past = timetravel_module.view(reader, then)
    assert forgot and past.state.seq == then
    assert files_holding(home, SECRET) == []
    reader.close()
    writer.close()
    assert files_holding(home, SECRET) == []
