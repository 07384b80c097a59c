"""A writer whose append fails cuts its lines back, after another process may have folded them.

Readers never lock, so a reader answering a query between a writer's write and its failed fsync
(a full disk, an I/O error) folds lines that are then cut back, and the next writer writes its
own events at those seqs. The reader must notice and fold the log afresh: it read on from the
middle of a line (CorruptLog on every call), wrote past the end of the file (a hole of NUL
bytes: every process refused the store), or kept the cut event silently (a line of the same
length). A text index written from the cut events must not survive either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from keytrail.core import HashEmbedder, Settings, Store, reembed, timetravel
from keytrail.core import history as core_history
from keytrail.core.maintenance import verify
from keytrail.core.results import Remembered
from keytrail.core.timetravel import view
from keytrail.events import AnyEvent, EventLog, MemoryRemembered
from keytrail.events import log as event_log
from keytrail.projections import GraphState
from keytrail.projections.vectors import text_hash

Make = Callable[..., Store]
T = TypeVar("T")


@contextmanager
def failing(name: str, meanwhile: Callable[[], object], *, after: int = 0) -> Iterator[None]:
    """`os.<name>` (pwrite or fsync) raises ENOSPC on its call number `after` + 1, having run
    `meanwhile` first: another process's query, in the window before the writer cuts back."""
    real = getattr(os, name)
    calls = 0

    def fail(*args: object) -> object:
        nonlocal calls
        calls += 1
        if calls <= after:
            return real(*args)
        meanwhile()
        raise OSError(28, "No space left on device")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_log.os, name, fail)
        yield
    assert calls > after, f"os.{name} was never called"


def contents(store: Store) -> list[str]:
    return sorted(m.content for m in store.state.memories.values())


def logged(home: Path) -> list[int]:
    log = EventLog(home)
    try:
        return [event.seq for event in log.read_new()]
    finally:
        log.close()


def segment(home: Path) -> Path:
    return sorted((home / "log").glob("*.jsonl"))[-1]


def test_a_reader_that_writes_after_lines_it_folded_were_cut_back_writes_at_the_log_end(
    make_store: Make, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """b folds a's pears line between a's write and its failed fsync; a cuts it back. b's next
    write took its cursor for the end of the log and wrote past the end of the file: a hole of
    NUL bytes, and every process and every open refused the store (CorruptLog)."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    a.remember("first fact about apples", ["apple"])
    b.memory_stats()
    with failing("fsync", b.memory_stats), pytest.raises(Exception, match="nothing was recorded"):
        a.remember("second fact about pears", ["pear"])
    assert "second fact about pears" in contents(b)  # folded in the window

    b.remember("b writes after the cut", ["cherry"])

    expected = ["b writes after the cut", "first fact about apples"]
    fresh = make_store(home)
    assert contents(fresh) == expected
    assert logged(home) == [1, 2, 3]
    assert contents(b) == expected and b.state.seq == 3
    assert "pear" not in b.state.labels
    a.refresh()
    assert contents(a) == expected
    assert b.reloads == 1 and a.reloads == 0 and fresh.reloads == 0
    assert "was cut back under a reader at seq 3" in caplog.text
    assert verify(home).ok


def test_a_query_after_lines_it_folded_were_cut_back_answers_from_the_log(
    make_store: Make, tmp_path: Path
) -> None:
    """After the cut, a writes a longer line at the same seq: b read on from the middle of it,
    and every query failed with `CorruptLog ... checksum mismatch` until b was restarted."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    a.remember("first fact about apples", ["apple"])
    b.memory_stats()
    with failing("fsync", b.memory_stats), pytest.raises(Exception, match="nothing was recorded"):
        a.remember("second fact about pears", ["pear"])
    plums = a.remember("a much longer fact, this one about plums and their orchards", ["plum"])

    found = b.recall_memories("plums orchards", learn=False)

    assert plums.memory_id in [m.memory_id for m in found.memories]
    assert contents(b) == contents(make_store(home))
    assert b.state.memories.keys() == a.state.memories.keys()
    assert b.reloads == 1


def fractional() -> datetime:
    """Now, never on a whole second: such a time is written without its fraction, shorter."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond or 1)


@pytest.fixture
def opened() -> Iterator[Make]:
    """Stores whose lines of equal content have equal length (see `fractional`)."""
    stores: list[Store] = []

    def make(home: Path) -> Store:
        store = Store(
            Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=fractional
        )
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.mark.parametrize("first", ["query", "write"])
def test_a_line_cut_back_and_written_again_at_the_same_length_is_not_kept(
    make_store: Make, opened: Make, tmp_path: Path, first: str
) -> None:
    """The line a writes after the cut has the cut one's length: b's cursor stood at its end,
    so b saw nothing new and silently kept the pears memory, which no log holds. Under the
    lock the file has the size and inode b last saw, so b wrote on after it too."""
    home = tmp_path / "store"
    a, b = opened(home), opened(home)
    b.remember("first fact about apples", ["apple"])  # b has written: its lock's shortcut
    a.memory_stats()
    with failing("fsync", b.memory_stats), pytest.raises(Exception, match="nothing was recorded"):
        a.remember("second fact about pears", ["pear"])
    cut_size = b.log.position.offset
    plums = a.remember("second fact about plums", ["plum"])
    assert segment(home).stat().st_size == cut_size  # the same length, as this test needs

    if first == "query":
        b.memory_stats()
        assert contents(b) == ["first fact about apples", "second fact about plums"]
    b.remember("b writes next", ["cherry"])
    assert plums.memory_id in b.state.memories
    assert contents(b) == ["b writes next", "first fact about apples", "second fact about plums"]
    assert contents(make_store(home)) == contents(b)
    assert logged(home) == [1, 2, 3, 4]
    assert b.reloads == 1


def test_a_text_index_written_from_lines_cut_back_is_rebuilt(
    make_store: Make, tmp_path: Path
) -> None:
    """b indexes the pears memory (seq 3) in the window and records seq 3 as indexed. a then
    writes plums at seq 3 and grapes at seq 4: the index looked one event behind, so plums was
    never indexed and BM25 found the pears memory no log holds."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    a.remember("first fact about apples", ["apple"])
    b.recall_memories("apples", learn=False)

    def b_searches() -> None:
        b.recall_memories("pears", learn=False)
        assert b.text.seq == 3  # the index now holds the pears memory at seq 3

    with failing("fsync", b_searches), pytest.raises(Exception, match="nothing was recorded"):
        a.remember("second fact about pears", ["pear"])
    plums = a.remember("second fact about plums", ["plum"])
    grapes = a.remember("third fact about grapes", ["grape"])
    assert plums.seq == 3 and grapes.seq == 4

    for reader in (make_store(home), b):  # one that never saw the pears, and b
        reader.catch_up_text_index()
        hits = [hit.memory_id for hit in reader.text_index().search("plums", 5)]
        assert hits == [plums.memory_id]
        assert reader.text_index().search("pears", 5) == []
        found = reader.recall_memories("plums", learn=False)
        assert found.memories and found.memories[0].memory_id == plums.memory_id
    report = verify(home)
    assert report.ok, report


@pytest.mark.parametrize("meanwhile", ["folds", "searches"])
def test_a_failed_batch_cut_back_after_a_reader_folded_its_first_line(
    make_store: Make, tmp_path: Path, meanwhile: str
) -> None:
    """A forget of two versions is one batch: its first line is written whole, the second
    write fails (ENOSPC) and both are cut. b folded the first forget meanwhile (and maybe
    indexed the state after it); it must not keep the memory forgotten, nor drop it from its
    text index, once a writes on."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    first = a.remember("the office is in Leeds", ["office"])
    second = a.correct(first.memory_id, "the office is in York")
    b.recall_memories("office", learn=False)

    def b_reads() -> None:
        if meanwhile == "searches":
            b.recall_memories("office York", learn=False)
        else:
            b.memory_stats()
        assert b.state.memories[first.memory_id].status == "forgotten"

    with (
        failing("pwrite", b_reads, after=1),
        pytest.raises(Exception, match="nothing was recorded"),
    ):
        a.forget(second.memory_id, all_versions=True)
    a.remember("the canteen opens at noon", ["canteen"])

    found = b.recall_memories("office York", learn=False)
    assert second.memory_id in [m.memory_id for m in found.memories]
    assert b.state.memories[first.memory_id].status != "forgotten"
    b.catch_up_text_index()
    assert [h.memory_id for h in b.text_index().search("York", 5)] == [second.memory_id]
    assert [h.memory_id for h in b.text_index().search("Leeds", 5)] == [first.memory_id]
    assert b.reloads == 1
    assert contents(make_store(home)) == contents(b)


def test_a_redacted_last_line_is_not_taken_for_a_cut(make_store: Make, tmp_path: Path) -> None:
    """A forget rewrites the line that created the memory at the same length (new content and
    checksum, same seq and time): when that is the line a reader folded last, the reader goes
    on, with no fresh fold of the log."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    a.remember("first fact about apples", ["apple"])
    secret = a.remember("the door code is 4711", ["door"])
    b.memory_stats()
    assert b.log.position.seq == secret.seq  # b's last line is the one the forget redacts

    a.forget(secret.memory_id)

    b.memory_stats()
    assert b.state.memories[secret.memory_id].status == "forgotten"
    b.remember("b writes next", ["cherry"])
    a.remember("a writes next", ["plum"])
    b.memory_stats()
    assert a.reloads == b.reloads == 0
    assert contents(make_store(home)) == contents(b)
    assert isinstance(EventLog(home).read_new()[secret.seq - 1], MemoryRemembered)


def read_across_a_cut_forget(
    a: Store,
    b: Store,
    forgotten: str,
    read: Callable[[], T],
    paused: threading.Event,
    go: threading.Event,
) -> tuple[T, Remembered]:
    """b runs `read` in a thread once it has folded a's forget of both versions of
    `forgotten` (seqs 4 and 5); `read` sets `paused` where it should meet the cut and waits
    for `go`. Meanwhile a's fsync fails, cutting both lines back, and a writes the canteen
    memory at seq 4. Returns what `read` answered, and the canteen memory."""
    answers: list[T] = []
    errors: list[BaseException] = []

    def b_reads() -> None:
        try:
            answers.append(read())
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=b_reads)

    def b_starts_reading() -> None:
        assert b.refresh().seq == 5  # both forget lines folded
        reader.start()
        assert paused.wait(30)

    with (  # the forget's first two fsyncs are its pending file's
        failing("fsync", b_starts_reading, after=2),
        pytest.raises(Exception, match="nothing was recorded"),
    ):
        a.forget(forgotten, all_versions=True)
    canteen = a.remember("the canteen opens at noon", ["canteen"])
    assert canteen.seq == 4
    go.set()
    reader.join(30)
    assert not errors, errors
    [answer] = answers
    return answer, canteen


def test_an_as_of_read_that_meets_a_cut_answers_from_the_log_as_it_now_is(
    make_store: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b folds the past as of seq 4 (a's forget of two versions, seqs 4 and 5) when a's fsync
    fails: a cuts both lines back and writes the canteen memory at seq 4. b answered from the
    cut forget, as of a seq whose event the log never held (York only, no canteen)."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    first = a.remember("the office is in Leeds", ["office"])
    second = a.correct(first.memory_id, "the office is in York")
    real_fold = timetravel.fold
    paused, go = threading.Event(), threading.Event()

    def fold_pausing(events: Iterator[AnyEvent], state: GraphState) -> GraphState:
        def pausing() -> Iterator[AnyEvent]:
            for event in events:
                yield event
                if event.seq == 4 and not paused.is_set():  # folded: a cuts it back now
                    paused.set()
                    go.wait(30)

        return real_fold(pausing(), state)

    monkeypatch.setattr(timetravel, "fold", fold_pausing)

    def b_reads_as_of_4() -> list[str]:
        return sorted(m.memory_id for m in view(b, as_of=4).list_memories().memories)

    answer, canteen = read_across_a_cut_forget(a, b, second.memory_id, b_reads_as_of_4, paused, go)

    assert answer == sorted([second.memory_id, canteen.memory_id])
    assert b.reloads == 1
    # A past state folded from the cut lines is never served again.
    page = view(b, as_of=4).list_memories()
    assert sorted(m.memory_id for m in page.memories) == answer


def test_a_history_read_that_meets_a_cut_answers_from_the_log_as_it_now_is(
    make_store: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b reads the history of the York memory while a's forget of both versions (seqs 4 and
    5) is cut back by its failed fsync: b listed the two forgets, which the log never held,
    and called York forgotten, though a had written the canteen memory there since."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    first = a.remember("the office is in Leeds", ["office"])
    second = a.correct(first.memory_id, "the office is in York")
    real_touches = core_history._touches
    paused, go = threading.Event(), threading.Event()

    def touches_pausing(event: AnyEvent, *args: object) -> object:
        if event.seq == 4 and not paused.is_set():  # read: a cuts it back now
            paused.set()
            go.wait(30)
        return real_touches(event, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(core_history, "_touches", touches_pausing)

    def b_reads_history() -> core_history.History:
        return core_history.history(b, second.memory_id)

    found, _ = read_across_a_cut_forget(a, b, second.memory_id, b_reads_history, paused, go)

    assert [t.seq for t in found.events] == [2, 3, 3]
    assert [v.status for v in found.versions] == ["superseded", "active"]
    assert found == core_history.history(make_store(home), second.memory_id)


def test_a_changes_read_that_meets_a_cut_answers_from_the_log_as_it_now_is(
    make_store: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the history read above, for `changes`: b called both versions forgotten, by the
    forget the log never held, and left out the canteen memory that took its seq."""
    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    first = a.remember("the office is in Leeds", ["office"])
    second = a.correct(first.memory_id, "the office is in York")
    monkeypatch.setattr(core_history, "_PROGRESS_EVERY", 1)  # told of every event
    paused, go = threading.Event(), threading.Event()

    def progress(done: int, total: int) -> None:
        if done == 4 and not paused.is_set():  # the scan is at the forget: a cuts it back now
            paused.set()
            go.wait(30)

    def b_reads_changes() -> core_history.Changes:
        return core_history.changes(b, progress=progress)

    found, canteen = read_across_a_cut_forget(a, b, second.memory_id, b_reads_changes, paused, go)

    assert found.forgotten == [] and found.until_seq == 4
    assert found.added == [first.memory_id, canteen.memory_id]
    assert found == core_history.changes(make_store(home))


def test_a_reembed_that_listed_lines_cut_back_does_not_claim_their_seqs(
    make_store: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """b's reembed lists its texts when the pears memory (seq 3) is in the log; a cuts it back
    and writes the plums memory at seq 3 with another model. b recorded seq 3 as covered: a
    server's start took the projection for current and built nothing, though plums had no
    row of b's model."""
    home = tmp_path / "store"
    a, b = make_store(home, HashEmbedder(dim=128)), make_store(home)
    a.remember("first fact about apples", ["apple"])
    # b's cache holds every text it will list: the build goes straight to recording.
    b.embed(["first fact about apples", "apple", "second fact about pears", "pear"])
    b.save_vectors()
    recording = threading.Event()
    real_save = b.save_vectors

    def save_vectors(*args: Any, **kwargs: Any) -> None:
        recording.set()  # waits for the lock a holds
        real_save(*args, **kwargs)

    monkeypatch.setattr(b, "save_vectors", save_vectors)
    built: list[reembed.Reembedded] = []
    errors: list[BaseException] = []

    def b_builds() -> None:
        try:
            built.append(reembed.build(b))
        except BaseException as exc:
            errors.append(exc)

    builder = threading.Thread(target=b_builds)

    def b_lists_texts() -> None:
        builder.start()
        assert recording.wait(30)

    with failing("fsync", b_lists_texts), pytest.raises(Exception, match="nothing was recorded"):
        a.remember("second fact about pears", ["pear"])
    assert a.remember("second fact about plums", ["plum"]).seq == 3
    builder.join(30)

    assert not errors, errors
    assert built[0].seq == 3 and built[0].embedded == 0
    fresh = make_store(home)
    assert text_hash("second fact about plums") not in fresh.vectors
    assert not reembed.status(fresh).current


def test_a_history_after_rule_lines_it_found_were_cut_back_and_the_segment_regrew(
    make_store: Make, tmp_path: Path
) -> None:
    """b's history found a's rules.changed line (reads deepen by 0.5) between a's write and its
    failed fsync; a cut it back, then wrote on past where b had searched. b kept the cut line
    for its fold rules (a segment was searched anew only if it had shrunk below that point),
    so its history deepened the read by 0.5, which the log never said."""
    from keytrail.events import FoldRules, RulesChanged

    home = tmp_path / "store"
    a, b = make_store(home), make_store(home)
    told = a.remember("the walrus basks on the ice floe", ["walrus"])

    def b_reads_history() -> None:
        core_history.history(b, told.memory_id)

    b_reads_history()
    with (
        failing("fsync", b_reads_history),
        pytest.raises(Exception, match="nothing was"),
        a.log.lock() as app,  # rules only a hand-made log changes
    ):
        app.append(RulesChanged(rules=FoldRules(depth_step=0.5)))
    a.remember("a longer line than the cut one: " + "the ice floe drifts south " * 8, ["ice"])
    a.read_memory(told.memory_id)
    found = core_history.history(b, told.memory_id)
    assert b.reloads == 1
    assert found == core_history.history(make_store(home), told.memory_id)
    assert found.trajectory[-1].depth != 0.5
