"""The care verbs (rebuild, reembed, verify, export, import, forget, cleanup-expired) while
servers are live on the same store: each finishes correctly, or fails with a clear message and
leaves the store usable; no server answers wrongly because a verb replaced files under it.

The interleavings are driven explicitly here (a server's Store in this process holding the
appenders' lock at the moment that matters); tools/live_care_drive.py drives the same with two
real `keytrail serve` processes.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_multi_server import waiters_on

from keytrail.core import HashEmbedder, Settings, Store, forgetting, maintenance
from keytrail.core.maintenance import drop_cache, verify
from keytrail.events import AnyEvent
from keytrail.projections import GraphState, vectors
from keytrail.projections import snapshot as snapshots


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_rebuild_drops_the_cache_only_between_other_processes_writes(tmp_path: Path) -> None:
    """A server writes its vector rows (and snapshots, and a forget's purges) into cache/
    holding the appenders' lock. rebuild's drop_cache removed cache/ without it: a server's
    write landing in the middle of the removal made it fail ("Directory not empty") or left
    the server's rows half in files being deleted. It must wait for the lock."""
    home = tmp_path / "store"
    server = open_store(home)
    try:
        first = server.remember("Dana lives in Lyon", ["Lyon"])
        server.memory_vectors()
        server.save_vectors()
        server.embed(["a query embedded since the last write"])  # unsaved: flushed next write

        outcome: list[BaseException | None] = []

        def rebuild_drop() -> None:
            try:
                drop_cache(home)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        dropper = threading.Thread(target=rebuild_drop)
        with server.log.lock():  # the server, mid-way through a write
            dropper.start()
            while not outcome and waiters_on(home / "lock") == 0:
                dropper.join(0.02)
            assert not outcome, "drop_cache went on while another process held the lock"
            server.vectors.flush()  # the server's write, as it does under the lock
        dropper.join(60)
        assert outcome == [None]
        # Nothing derived is left (the build locks' folder stays, if a builder made one).
        assert [p.name for p in (home / "cache").iterdir() if p.name != "building"] == []

        # The server goes on answering from the log; the store verifies.
        second = server.remember("Noor lives in Oslo", ["Oslo"])
        found = server.recall_memories("Oslo").memories
        assert second.memory_id in [m.memory_id for m in found]
        assert server.read_memory(first.memory_id).content == "Dana lives in Lyon"
    finally:
        server.close()
    assert verify(home).ok


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_verify_reads_the_text_index_only_between_another_processs_writes_of_it(
    tmp_path: Path,
) -> None:
    """A server swaps a new text index in (a purge, a rebuild) holding the index's lock.
    verify read it without that lock: caught mid-swap, a sound index was reported as
    "unreadable", a cache ignored. It must wait for the writer and check what it left."""
    home = tmp_path / "store"
    server = open_store(home)
    try:
        server.remember("Dana lives in Lyon", ["Lyon"])
        server.index_text()
        index = home / "index" / "text"
        reports: list[maintenance.VerifyReport] = []
        checker = threading.Thread(target=lambda: reports.append(verify(home)))
        with server.text.exclusive():  # the server, mid-way through a swap
            index.rename(home / "index" / "text.aside")
            index.mkdir()  # what a reader finds in its place: a folder with no index yet
            checker.start()
            lock = home / "index" / "text.lock"
            while not reports and waiters_on(lock) == 0:
                checker.join(0.02)
            assert not reports, "verify read the index while another process was writing it"
            # Moved away, not rmdir'd: a tantivy reader reloads in a thread of its own soon
            # after it is opened (index_text's was) or sees a commit, and one that read the
            # index's meta.json before the rename creates `.tantivy-meta.lock` in this folder.
            empty = index.rename(home / "index" / "text.empty")
            (home / "index" / "text.aside").rename(index)
            shutil.rmtree(empty)  # no reader looks here: its path is not the index's
        checker.join(60)
    finally:
        server.close()
    report = reports[0]
    assert report.ok and report.caches_ignored == [], report.caches_ignored
    assert any(c.startswith("index/text (seq 2, 1 memory)") for c in report.caches_checked)


def test_verify_is_clean_when_a_server_replaces_the_snapshot_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify notes each snapshot's seq when it starts and loads the file when its fold
    reaches that seq. A server that wrote a newer keygraph.msgpack in between (every
    snapshot_every events, and at close) made verify report "differs from the log": only
    another process's work, not a problem."""
    home = tmp_path / "store"
    store = open_store(home)
    store.remember("Dana lives in Lyon", ["Lyon"])
    store.close()  # writes cache/snapshot/keygraph.msgpack

    read_header = snapshots.read_header
    replaced: list[int] = []

    def header_then_a_server_writes(path: Path) -> snapshots.Header | None:
        header = read_header(path)
        if not replaced:  # verify has noted the seq; now a live server moves the snapshot on
            replaced.append(header.seq if header else 0)  # once (the server reads headers too)
            server = open_store(home)
            server.remember("Noor lives in Oslo", ["Oslo"])
            server.close()
            replaced.append(server.state.seq)
        return header

    monkeypatch.setattr(maintenance.snapshots, "read_header", header_then_a_server_writes)
    report = verify(home)
    assert replaced[1] > replaced[0]
    assert report.ok, report.cache_problems
    assert any(c.startswith("cache/snapshot/keygraph.msgpack") for c in report.caches_checked)


def test_verify_is_clean_when_another_process_forgets_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify reads the text index's memories when it starts and judges them against the log
    at its end. A forget by another process in between (its event folded by verify, its
    purge of the index done after verify's read) is not a forgotten text left indexed."""
    home = tmp_path / "store"
    store = open_store(home)
    gone = store.remember("The door code is 4711", ["door"])
    store.remember("Dana lives in Lyon", ["Lyon"])
    store.index_text()
    store.close()

    settled = maintenance.TextIndex.settled
    forgot: list[str] = []

    @contextmanager
    def read_then_a_forget(index: maintenance.TextIndex) -> Iterator[None]:
        with settled(index):  # verify reads the index in here
            yield
        if not forgot:  # and the other process's forget comes right after
            forgot.append(gone.memory_id)
            other = open_store(home)
            other.forget(gone.memory_id)
            other.close()

    monkeypatch.setattr(maintenance.TextIndex, "settled", read_then_a_forget)
    report = verify(home)
    assert forgot
    assert report.ok, report.cache_problems


def test_verify_is_clean_when_a_forget_blanks_a_snapshot_it_has_not_reached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget by another process blanks the memory's content in every snapshot. verify
    that had already folded the memory's line (content and all) and reached an archived
    snapshot only then saw a blanked copy: only another process's forget, not a problem."""
    home = tmp_path / "store"
    store = open_store(home)
    gone = store.remember("The door code is 4711", ["door"])
    created = store.state.seq
    store.close()  # a snapshot at `created`, archived by the next close
    store = open_store(home)
    store.remember("Dana lives in Lyon", ["Lyon"])
    store.close()

    apply = maintenance.apply
    forgot: list[str] = []

    def apply_then_a_forget(state: GraphState, event: AnyEvent) -> None:
        apply(state, event)
        if event.seq == created and not forgot:  # verify has folded the content
            forgot.append(gone.memory_id)
            other = open_store(home)
            other.forget(gone.memory_id)
            other.close()

    monkeypatch.setattr(maintenance, "apply", apply_then_a_forget)
    report = verify(home)
    assert forgot
    assert report.ok, report.cache_problems


def test_verify_is_clean_when_it_reaches_a_snapshot_a_forget_has_not_purged_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget redacts the memory's log line, then blanks it in the snapshots, holding the
    lock. verify (which does not take it) that read the line redacted and reached an archived
    snapshot in between saw the content there: "differs from the log", though the forget was
    only half way (test_care_race's rebuild run met this on a loaded machine). It must judge
    the snapshot once the forget is done, and still report content a purge left there."""
    home = tmp_path / "store"
    store = open_store(home)
    gone = store.remember("The door code is 4711", ["door"])
    store.close()  # a snapshot holding the content, blanked by the forget where it stands
    other = open_store(home)
    other.remember("Dana lives in Lyon", ["Lyon"])

    purge_snapshots = forgetting.purge_snapshots
    redacted, checked = threading.Event(), threading.Event()

    def purge_snapshots_once_verify_looked(*args: Any, **kwargs: Any) -> list[str]:
        redacted.set()  # the log line is redacted; verify now reads it and the snapshots
        assert checked.wait(60)
        return purge_snapshots(*args, **kwargs)

    monkeypatch.setattr(forgetting, "purge_snapshots", purge_snapshots_once_verify_looked)
    forgetter = threading.Thread(target=other.forget, args=(gone.memory_id,))
    list_snapshots = maintenance._Derived._snapshots
    check_snapshot = maintenance._Derived._snapshot

    def forget_then_list(derived: maintenance._Derived, at: Path) -> None:
        forgetter.start()  # after verify read forget.pending (none yet)
        assert redacted.wait(60)
        list_snapshots(derived, at)

    def check_then_let_the_forget_go_on(derived: maintenance._Derived, *args: Any) -> None:
        check_snapshot(derived, *args)
        checked.set()

    monkeypatch.setattr(maintenance._Derived, "_snapshots", forget_then_list)
    monkeypatch.setattr(maintenance._Derived, "_snapshot", check_then_let_the_forget_go_on)
    try:
        report = verify(home)
        forgetter.join(60)
    finally:
        checked.set()
        other.close()
    assert report.ok, report.cache_problems
    assert f"cache/snapshot/keygraph.msgpack (seq {gone.seq})" in report.caches_checked

    # A purge that left the content in that snapshot (archived by the close since) is still
    # reported.
    path = home / "cache" / "snapshot" / snapshots.archived_name(gone.seq)
    snap = snapshots.load(path)
    assert snap is not None
    snap.state.memories[gone.memory_id].content = "The door code is 4711"
    snapshots.save(path, snap)
    monkeypatch.setattr(maintenance._Derived, "_snapshots", list_snapshots)
    report = verify(home)
    assert not report.ok
    assert any(gone.memory_id in p and path.name in p for p in report.cache_problems)


def test_verify_is_clean_when_it_reads_a_vector_row_a_forget_has_half_erased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget erases a vector row in two steps, holding the lock: the hash line dashed, then
    the vector zeroed. verify that read the cache in between saw an erased row "whose vector
    was not zeroed", though the forget was only half way. It must look again once it is done."""
    home = tmp_path / "store"
    other = open_store(home)
    gone = other.remember("The door code is 4711", ["door"])
    other.remember("Dana lives in Lyon", ["Lyon"])
    (cache,) = (home / "cache" / "vectors").iterdir()
    paused, go = threading.Event(), threading.Event()
    forgetter = threading.Thread(target=other.forget, args=(gone.memory_id,))

    class PausingOs:
        """os, but the forget stops right after it has dashed a hash line."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        def fsync(self, fd: int) -> None:
            os.fsync(fd)
            erased = b"---" in (cache / "hashes.txt").read_bytes()
            if threading.current_thread() is forgetter and erased and not paused.is_set():
                paused.set()
                assert go.wait(60)

    monkeypatch.setattr(vectors, "os", PausingOs())
    check_cache = maintenance.check_cache

    def check_while_a_forget_erases(folder: Path) -> vectors.CacheCheck | None:
        if not forgetter.is_alive() and not paused.is_set():  # after forget.pending was read
            forgetter.start()
            assert paused.wait(60)
            found = check_cache(folder)
            go.set()
            return found
        return check_cache(folder)

    monkeypatch.setattr(maintenance, "check_cache", check_while_a_forget_erases)
    try:
        report = verify(home)
        forgetter.join(60)
    finally:
        go.set()
        other.close()
    assert paused.is_set()
    assert report.ok, report.cache_problems


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_rebuild_counts_the_text_index_while_another_process_forgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rebuild ends by counting the memories of the text index it brought up to date. It read
    the index's files without the index's lock: another process's forget, which removes the
    index under that lock, made the read fail (ValueError, "NotADirectory" or "Data
    corrupted") and the rebuild end in a traceback. The count must wait for the lock."""
    from keytrail.projections.text import TextIndex
    from keytrail.server.cli import main

    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    home = tmp_path / "store"
    other = open_store(home)
    gone = other.remember("The door code is 4711", ["door"])
    other.remember("Dana lives in Lyon", ["Lyon"])

    committed = TextIndex.committed
    forgot: list[BaseException | None] = []

    def forget() -> None:
        try:
            other.forget(gone.memory_id)
        except BaseException as exc:
            forgot.append(exc)

    forgetter = threading.Thread(target=forget)

    def committed_while_a_forget(index: TextIndex) -> tuple[int, set[str]]:
        if not forgot:  # rebuild has caught the index up; now another process forgets
            forgot.append(None)
            forgetter.start()
            # It removes the index, or waits for the lock the count holds.
            lock = home / "index" / "text.lock"
            while forgetter.is_alive() and waiters_on(lock) == 0:
                forgetter.join(0.02)
        return committed(index)

    monkeypatch.setattr(TextIndex, "committed", committed_while_a_forget)
    try:
        assert main(["rebuild", "--home", str(home)]) == 0
        forgetter.join(60)
        assert forgot == [None]
        assert other.list_memories().total == 1
    finally:
        other.close()
    report = verify(home)
    assert report.ok, (report.problems, report.cache_problems)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
def test_a_second_import_into_one_home_waits_for_the_first_and_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two imports into one empty home (a restore run twice) shared `import.partial/`: the
    second removed the first's staging under way and wrote its own there, so the first failed
    with a bare "[Errno 2] No such file or directory", or its new segments landed among the
    second's and a store that said "imported" failed verify (`seq 2153 follows 0`). The second
    must wait for the first and then be refused: the store is the first's export, whole."""
    from keytrail.events.log import Appender
    from keytrail.server.cli import main

    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    exports = []
    for name in ("a", "b"):
        with open_store(tmp_path / name) as source:
            for i in range(5):
                source.remember(f"{name} fact {i}", [f"{name} topic"])
        exports.append(tmp_path / f"{name}.jsonl")
        assert main(["export", "--home", str(tmp_path / name), "-o", str(exports[-1])]) == 0
    home = tmp_path / "restored"
    second: list[BaseException | int | None] = []

    def import_b() -> None:
        try:
            second.append(main(["import", "--home", str(home), str(exports[1])]))
        except BaseException as exc:
            second.append(exc)

    importer = threading.Thread(target=import_b)
    append = Appender.append

    def append_while_another_imports(self: Appender, event: AnyEvent, **options: Any) -> Any:
        if not importer.is_alive() and not second and event.seq == 3:  # the first, mid-way
            importer.start()
            # It writes its own import, or waits for this one.
            while importer.is_alive() and waiters_on(home / "import.partial") == 0:
                importer.join(0.02)
        return append(self, event, **options)

    monkeypatch.setattr(Appender, "append", append_while_another_imports)
    capsys.readouterr()
    assert main(["import", "--home", str(home), str(exports[0])]) == 0
    importer.join(60)
    monkeypatch.undo()
    assert len(second) == 1 and isinstance(second[0], SystemExit), second
    assert "import needs an empty store" in capsys.readouterr().err
    assert not (home / "import.partial").exists()
    assert verify(home).ok
    restored = main(["export", "--home", str(home), "-o", str(tmp_path / "again.jsonl")])
    assert restored == 0
    assert (tmp_path / "again.jsonl").read_bytes() == exports[0].read_bytes()


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux /proc/locks")
@pytest.mark.parametrize("inode", ["new", "reused"])
def test_a_server_searches_the_text_index_a_rebuild_wrote_not_the_one_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inode: str
) -> None:
    """rebuild removes the text index, makes an empty one in its place and fills it, holding
    the index's writers' lock. A server whose state the rebuild did not change searched on
    through its handle of the removed index, which tantivy reloads from the path on its own
    (every half second): caught on the empty index, recall_memories answered without a single
    BM25 hit while the rebuild filled it and for up to half a second after. The server must
    search the index now at the path, waiting for the writer filling it; also when the new
    directory took the removed one's inode number, as a delete-then-create often does."""
    from keytrail.projections import text
    from keytrail.projections.text import TextIndex

    home = tmp_path / "store"
    server = open_store(home)
    try:
        server.remember("The walrus basks on the ice floe", ["walrus"])
        server.remember("Dana lives in Lyon", ["Lyon"])
        before = server.recall_memories("ice floe", learn=False)
        assert "bm25" in before.memories[0].found_by  # the index is built and searched

        directory = home / maintenance.TEXT_INDEX_DIR
        # Held open, so that the new directory cannot take the removed one's inode number.
        removed = os.open(directory, os.O_RDONLY)
        if inode == "reused":
            first, real_stat = os.stat(directory), os.stat

            def same_inode(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
                found = real_stat(path, *args, **kwargs)
                if Path(path) != directory:
                    return found
                return os.stat_result((found[0], first.st_ino, first.st_dev, *found[3:10]))

            monkeypatch.setattr(text.os, "stat", same_inode)
        rebuild = TextIndex(directory)  # what `keytrail rebuild` does, in another process
        answers: list[Any] = []
        searcher = threading.Thread(
            target=lambda: answers.append(server.recall_memories("ice floe", learn=False))
        )
        try:
            with rebuild.exclusive():
                rebuild.remove()
                rebuild._open()  # the empty index, not yet filled
                # The reload tantivy's watcher makes of the path within half a second.
                server.text._index.reload()  # type: ignore[union-attr]
                searcher.start()
                lock = directory.with_name("text.lock")
                while searcher.is_alive() and waiters_on(lock) == 0:
                    searcher.join(0.02)
                rebuild.sync(server.state)
            searcher.join(60)
        finally:
            rebuild.close()
            os.close(removed)
        [after] = answers
        assert [m.memory_id for m in after.memories] == [m.memory_id for m in before.memories]
        assert "bm25" in after.memories[0].found_by
    finally:
        server.close()
