"""Faults: kill -9 during appends, and corrupt or deleted cache files. Nothing acknowledged is
ever lost, the store always opens, and what it opens to is exactly a replay of its log."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import rest_of_output

from keytrail.core import HashEmbedder, Settings, Store, tempfiles
from keytrail.core.maintenance import verify
from keytrail.events import EventLog
from keytrail.projections import GraphState, fold
from keytrail.projections.snapshot import materialize
from keytrail.projections.text import TextIndex
from keytrail.projections.vectors import text_hash

WRITER = r"""
import sys
from keytrail.core import HashEmbedder, RememberItem, Settings, Store

home, tag = sys.argv[1], sys.argv[2]
store = Store(Settings(home=home, embedder="hash", snapshot_every=7, segment_bytes=4096),
              embedder=HashEmbedder())
print("ready", flush=True)
i = 0
while True:
    i += 1
    if i % 5 == 0:
        out = store.remember_batch([
            RememberItem(f"{tag} batch {i} item {j} about topic{j}", [f"topic{j}", "batch"])
            for j in range(3)])
        print("batch " + " ".join(o.memory_id for o in out), flush=True)
        continue
    r = store.remember(f"{tag} memory {i}: " + "lorem ipsum " * (i % 40), [f"topic{i % 7}", tag])
    print("mem " + r.memory_id, flush=True)
    if i % 3 == 0:
        store.read_memory(r.memory_id, via_key_id=r.keys[0].key_id)
        print("read " + r.memory_id, flush=True)
"""


def settings(home: Path) -> Settings:
    return Settings(home=home, embedder="hash", snapshot_every=7, segment_bytes=4096)


def encoded(state: GraphState) -> bytes:
    # A state opened from a snapshot holds undecoded nodes until looked at: decode them all.
    return msgspec.msgpack.encode(materialize(state))


def replay(home: Path) -> bytes:
    return encoded(fold(EventLog(home).iter_new()))


def open_and_check(home: Path) -> Store:
    store = Store(settings(home), embedder=HashEmbedder())
    assert encoded(store.state) == replay(home), "opened state differs from a full replay"
    return store


@pytest.mark.slow
def test_kill_9_during_appends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    home = tmp_path / "store"
    rng = random.Random(20250301)
    acked: dict[str, str] = {}  # memory id -> how it was acknowledged
    reads: dict[str, int] = {}
    batches: list[list[str]] = []
    deadline = time.monotonic() + 45
    kills = 0
    torn_seen = 0
    for it in range(25):
        if time.monotonic() > deadline and kills >= 10:
            break
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), f"w{it}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"ready\n", first + proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        out, err = rest_of_output(proc)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        kills += 1
        for line in out.split(b"\n")[:-1]:  # a line without its newline was not acknowledged
            kind, *ids = line.decode().split()
            if kind == "read":
                reads[ids[0]] = reads.get(ids[0], 0) + 1
                continue
            for memory_id in ids:
                acked[memory_id] = kind
            if kind == "batch":
                batches.append(ids)
        report = verify(home)
        if not report.ok:
            # The only acceptable problem: a torn last line the next appender will cut.
            assert len(report.problems) == 1 and "torn last line" in report.problems[0], (
                report.problems
            )
            torn_seen += 1
        store = open_and_check(home)
        memories = store.state.memories
        missing = [m for m in acked if m not in memories]
        assert not missing, f"iteration {it}: acknowledged memories lost: {missing}"
        for memory_id, count in reads.items():
            assert memories[memory_id].access_count >= count, memory_id
        for ids in batches:  # a batch is one event: its memories share one seq
            assert len({memories[m].created_seq for m in ids}) == 1
        store.close()
    assert kills >= 10
    # A last appender cuts any torn tail; afterwards the log verifies cleanly.
    store = open_and_check(home)
    store.remember("after the storm", ["calm"])
    store.close()
    report = verify(home)
    assert report.ok, report.problems
    assert report.events == len(EventLog(home).read_new())
    events = EventLog(home).read_new()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    print(f"kills={kills} acked={len(acked)} reads={sum(reads.values())} torn={torn_seen}")
    assert len(acked) > 20, "the writers hardly wrote anything: the test proves little"


# -- damaged caches --------------------------------------------------------------------------


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    home = tmp_path / "store"
    with Store(settings(home), embedder=HashEmbedder()) as store:
        ids = [
            store.remember(f"fact number {i} about {t}", [t, "fact"]).memory_id
            for i, t in enumerate(["apples", "pears", "tea", "coffee", "rain", "sun"] * 3)
        ]
        store.read_memory(ids[0])
        store.correct(ids[1], "pears are sweet in autumn")
        store.forget(ids[2])
    assert (home / "cache" / "snapshot").exists()
    return home


def vector_dir(home: Path) -> Path:
    (d,) = (home / "cache" / "vectors").iterdir()
    return d


def damage_snapshot_garbage(home: Path) -> None:
    (home / "cache" / "snapshot" / "keygraph.msgpack").write_bytes(os.urandom(3000))


def damage_snapshot_truncated(home: Path) -> None:
    p = home / "cache" / "snapshot" / "keygraph.msgpack"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def damage_snapshot_empty(home: Path) -> None:
    (home / "cache" / "snapshot" / "keygraph.msgpack").write_bytes(b"")


def damage_snapshot_deleted(home: Path) -> None:
    (home / "cache" / "snapshot" / "keygraph.msgpack").unlink()


def damage_snapshot_stale(home: Path) -> None:
    """A snapshot from an earlier moment: valid, just behind the log."""
    snap = home / "cache" / "snapshot" / "keygraph.msgpack"
    old = snap.read_bytes()
    with Store(settings(home), embedder=HashEmbedder()) as store:
        store.remember("one more fact after the snapshot", ["late"])
        store.remember("and yet another", ["late"])
    snap.write_bytes(old)


def damage_snapshot_wrong_json(home: Path) -> None:
    (home / "cache" / "snapshot" / "keygraph.msgpack").write_bytes(
        msgspec.msgpack.encode({"format": 1, "seq": "many"})
    )


def damage_vectors_truncated(home: Path) -> None:
    d = vector_dir(home)
    with open(d / "vectors.f32", "r+b") as f:
        f.truncate(os.path.getsize(d / "vectors.f32") // 2 + 3)  # not a whole row


def damage_hashes_truncated(home: Path) -> None:
    d = vector_dir(home)
    with open(d / "hashes.txt", "r+b") as f:
        f.truncate(33 * 4 + 10)  # four rows and a torn one


def damage_vectors_deleted(home: Path) -> None:
    (vector_dir(home) / "vectors.f32").unlink()


def damage_hashes_deleted(home: Path) -> None:
    (vector_dir(home) / "hashes.txt").unlink()


def damage_cache_deleted(home: Path) -> None:
    shutil.rmtree(home / "cache")


def damage_everything(home: Path) -> None:
    damage_snapshot_garbage(home)
    damage_vectors_truncated(home)
    damage_hashes_truncated(home)


DAMAGE = [
    damage_snapshot_garbage,
    damage_snapshot_truncated,
    damage_snapshot_empty,
    damage_snapshot_deleted,
    damage_snapshot_stale,
    damage_snapshot_wrong_json,
    damage_vectors_truncated,
    damage_hashes_truncated,
    damage_vectors_deleted,
    damage_hashes_deleted,
    damage_cache_deleted,
    damage_everything,
]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__[7:] for d in DAMAGE])
def test_a_damaged_cache_costs_a_replay_never_data(filled: Path, damage: object) -> None:
    log_before = {p: p.read_bytes() for p in (filled / "log").iterdir() if p.is_file()}
    damage(filled)  # type: ignore[operator]
    store = open_and_check(filled)
    # The vectors it serves are the model's, whatever was left on disk.
    contents = [n.content for n in store.state.memories.values() if n.content]
    expected = HashEmbedder().embed(contents)
    assert np.allclose(store.embed(contents), expected, atol=1e-6)
    # It keeps working: decisions that need vectors (dedup) still see the old memories.
    again = store.remember("fact number 3 about coffee", ["coffee", "fact"])
    assert again.deduplicated is not None
    store.close()
    assert encoded(open_and_check(filled).state) == replay(filled)
    for path, data in log_before.items():
        assert path.read_bytes().startswith(data), "the log was rewritten"
    # And the repaired cache files agree with the model row by row.
    d = vector_dir(filled)
    hashes = (d / "hashes.txt").read_text().split()
    rows = np.frombuffer((d / "vectors.f32").read_bytes(), dtype=np.float32).reshape(-1, 256)
    assert len(hashes) == len(rows)
    by_hash = {text_hash(c): v for c, v in zip(contents, expected, strict=True)}
    for h, row in zip(hashes, rows, strict=True):
        if h in by_hash:
            assert np.allclose(row, by_hash[h], atol=1e-6)


def test_a_cache_that_cannot_be_written_does_not_fail_a_recorded_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Once its line is fsynced the command happened: a full disk while keeping the caches
    (vector rows, a snapshot) is logged, not raised, so nobody retries it into a duplicate;
    the rows are written at the next write that can."""
    from keytrail.projections import snapshot as snapshots
    from keytrail.projections.vectors import VectorCache

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash", snapshot_every=1), embedder=HashEmbedder())

    def disk_full(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as full:
        full.setattr(VectorCache, "flush", disk_full)
        full.setattr(snapshots, "save", disk_full)
        told = store.remember("Alice likes green tea", ["tea"])
    assert "a cache was not updated" in caplog.text and "No space left" in caplog.text
    logged = [m.memory_id for e in EventLog(home).read_new() for m in getattr(e, "memories", [])]
    assert logged == [told.memory_id]  # recorded once, and the caller was told so

    store.remember("Bob drinks coffee", ["coffee"])  # the disk has room again
    store.close()
    cache = VectorCache(home / "cache" / "vectors", "hash_v1_256", 256)
    assert text_hash("Alice likes green tea") in cache and text_hash("Bob drinks coffee") in cache
    assert verify(home).ok


def test_a_line_that_cannot_be_applied_stops_the_store_naming_it(tmp_path: Path) -> None:
    """A line that decodes but names something that never existed (a hand edit, a splice from
    another store) is refused with its segment and line, at open and when another process's
    append brings it; the store never goes on without it."""
    from datetime import timedelta

    from keytrail.core import CorruptLog
    from keytrail.events import MemoryRead, encode_line

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    store.remember("Alice likes green tea", ["tea"])
    segment = sorted((home / "log").glob("*.jsonl"))[-1]
    head = store.state
    bad = MemoryRead(seq=head.seq + 1, at=head.at + timedelta(seconds=1), memory_id="m_nowhere")
    with open(segment, "ab") as f:  # as another process would append it
        f.write(encode_line(bad))
    for _ in range(2):  # and again: the cursor is past the line, the refusal stays
        with pytest.raises(CorruptLog) as refused:
            store.recall("tea")
        assert refused.value.segment == segment.name and refused.value.line == 3
        assert "seq 3 cannot be applied" in refused.value.message and "m_nowhere" in str(
            refused.value
        )
    store.close()  # closes its files; writes no snapshot of a state it could not finish
    with pytest.raises(CorruptLog, match="line 3"):
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


@pytest.mark.parametrize("failing", ["pwrite", "fsync"])
def test_a_full_disk_during_an_append_says_which_file_and_that_nothing_was_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """ENOSPC (or EIO) while appending a line: the appender cuts what it wrote and raises. It
    raised the bare OSError, which the command line printed as `[Errno 28] No space left on
    device` (no file, nothing of whether the command happened) and MCP as an internal error.
    It says which segment, that nothing was recorded, and what to do; and the store goes on
    once the disk has room."""
    from keytrail.core import StoreError
    from keytrail.events import log as event_log

    home = tmp_path / "store"
    store = Store(settings(home), embedder=HashEmbedder())
    store.remember("Alice likes green tea", ["tea"])
    segments = {p: p.read_bytes() for p in (home / "log").iterdir() if p.is_file()}

    def disk_full(*_: object) -> int:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as full:
        full.setattr(event_log.os, failing, disk_full)
        with pytest.raises(StoreError) as refused:
            store.remember("Bob drinks coffee", ["coffee"])
    (segment,) = segments
    assert f"log/{segment.name}" in refused.value.message
    assert "No space left on device" in refused.value.message
    assert "nothing was recorded" in refused.value.message
    assert {p: p.read_bytes() for p in (home / "log").iterdir() if p.is_file()} == segments
    again = store.remember("Bob drinks coffee", ["coffee"])  # room again: it goes on
    store.close()
    reopened = Store(settings(home), embedder=HashEmbedder())
    assert again.memory_id in reopened.state.memories
    assert len(reopened.state.memories) == 2
    reopened.close()
    assert verify(home).ok


def test_a_snapshot_that_cannot_be_saved_at_close_fails_no_recorded_command(
    tmp_path: Path,
    hash_cli: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """close() saves a snapshot of what the process folded, a shortcut for the next open. A
    full disk there raised out of close, so `keytrail remember` exited 2 with `[Errno 28] No
    space left on device` after its memory was in the log: reported as failed, it invites a
    retry that records it twice. Like a cache at the write itself, it is logged, not raised."""
    from keytrail.projections import snapshot as snapshots
    from keytrail.server.cli import main

    home = tmp_path / "store"

    def disk_full(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as full:
        full.setattr(snapshots, "save", disk_full)
        code = main(["--home", str(home), "remember", "Alice likes green tea", "-k", "tea"])
    told = capsys.readouterr()
    assert code == 0, told.err
    assert "remembered m_" in told.out
    assert "No space left on device" in caplog.text  # said, as a cache not kept
    with Store(settings(home), embedder=HashEmbedder()) as store:  # replays the log
        assert [n.content for n in store.state.memories.values()] == ["Alice likes green tea"]
    assert verify(home).ok


@pytest.mark.parametrize("snapshot_every", ["10000", "2"])
def test_a_store_that_cannot_be_written_still_answers_what_only_reads(
    tmp_path: Path,
    hash_cli: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    snapshot_every: str,
) -> None:
    """A backup or a mounted snapshot of a store, read-only, without its cache (deleting it
    loses nothing): stats, list, keys answered nothing, `[Errno 30] Read-only file system:
    '.../lock'`, because closing the store took the appenders' lock to save a snapshot, and
    so did the open of a log longer than `snapshot_every` since the last snapshot."""
    import errno

    from keytrail.events import log as event_log
    from keytrail.server.cli import main

    home = tmp_path / "store"
    with Store(settings(home), embedder=HashEmbedder()) as store:
        store.remember("Alice likes green tea", ["tea"])
        store.remember("Bob drinks coffee", ["coffee"])
    shutil.rmtree(home / "cache")
    monkeypatch.setenv("KEYTRAIL_SNAPSHOT_EVERY", snapshot_every)
    before = {str(p): p.read_bytes() for p in home.rglob("*") if p.is_file()}
    real_open = os.open

    def read_only(path: object, flags: int, *args: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as ro:
        ro.setattr(event_log.os, "open", read_only)
        answers = {}
        for verb in ("stats", "list", "keys"):
            code = main(["--home", str(home), verb])
            answers[verb] = capsys.readouterr()
            assert code == 0, (verb, answers[verb].err)
            assert answers[verb].err == ""  # nothing to warn of: a snapshot is a shortcut
    assert "Alice likes green tea" in answers["list"].out
    assert "tea" in answers["keys"].out
    assert {str(p): p.read_bytes() for p in home.rglob("*") if p.is_file()} == before


def test_a_write_to_a_store_that_cannot_be_written_says_so_and_what_still_reads(
    tmp_path: Path,
    hash_cli: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`keytrail read` records the read, so on a read-only copy of a store it cannot work; it
    said only `[Errno 30] Read-only file system: '.../lock'`. The error names the file, says
    the verb writes to the store, and which verbs still answer from one that cannot be written."""
    import errno

    from keytrail.events import log as event_log
    from keytrail.server.cli import main

    home = tmp_path / "store"
    with Store(settings(home), embedder=HashEmbedder()) as store:
        memory_id = store.remember("Alice likes green tea", ["tea"]).memory_id
    real_open = os.open

    def read_only(path: object, flags: int, *args: object) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    with monkeypatch.context() as ro, pytest.raises(SystemExit) as stopped:
        ro.setattr(event_log.os, "open", read_only)
        main(["--home", str(home), "read", memory_id])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert str(home / "lock") in err and "Read-only file system" in err
    assert "`keytrail read` writes to the store" in err
    assert "stats" in err and "export" in err and "verify" in err


def test_a_full_disk_while_saving_vectors_before_a_command_names_the_file(
    tmp_path: Path,
    hash_cli: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`remember` first brings the embedding projection up to the log and saves its rows. On a
    full disk that said only `[Errno 28] No space left on device`: no file, no next step."""
    import errno

    from keytrail.projections import vectors
    from keytrail.server.cli import main

    home = tmp_path / "store"
    with Store(settings(home), embedder=HashEmbedder()) as store:
        store.remember("Alice likes green tea", ["tea"])
    shutil.rmtree(home / "cache" / "vectors")  # derived: the next command embeds it again
    log_before = {p: p.read_bytes() for p in (home / "log").iterdir() if p.is_file()}

    def disk_full(*_: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as full, pytest.raises(SystemExit) as stopped:
        full.setattr(vectors.os, "pwrite", disk_full)
        main(["--home", str(home), "remember", "Bob drinks coffee", "-k", "coffee"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert str(home / "cache" / "vectors") in err and "No space left on device" in err
    assert "make room" in err
    assert {p: p.read_bytes() for p in (home / "log").iterdir() if p.is_file()} == log_before


def leave_temp_files(home: Path) -> list[Path]:
    """The temp files a process killed mid-write leaves, one of each kind the store writes."""
    segment = sorted(p.name for p in (home / "log").glob("*.jsonl"))[0]
    (home / "log" / "torn").mkdir(exist_ok=True)
    left = [
        home / "log" / f".{segment}.redact.tmp",  # a forget's redaction
        home / "log" / "torn" / f".{segment}.10.torn.4242.tmp",  # its scrub of a torn tail
        home / ".forget.pending.4242.tmp",  # its pending record
        home / "cache" / "snapshot" / ".keygraph.msgpack.4242.tmp",  # a snapshot
        vector_dir(home) / "manifest.tmp",  # a vector cache's coverage
    ]
    for path in left:
        path.write_bytes(b"half of a file")
    return left


def not_the_stores(home: Path) -> list[Path]:
    """Files that look like temp files but are none the store writes: never removed."""
    found = [home / ".notes.123.tmp", home / "cache" / "snapshot" / "keygraph.tmp"]
    for path in found:
        path.write_bytes(b"someone else's")
    return found


def test_temp_files_a_killed_writer_left_are_removed_when_the_store_opens(filled: Path) -> None:
    # Left for good otherwise, they ride along with every `cp -a` or `rsync -a` backup, and one
    # a redaction left holds a segment's lines.
    left = leave_temp_files(filled)
    others = not_the_stores(filled)
    report = verify(filled)
    assert report.ok
    assert report.temp_files == sorted(str(p.relative_to(filled)) for p in left)
    open_and_check(filled).close()
    assert [p for p in left if p.exists()] == []
    assert verify(filled).temp_files == []
    # What is not a temp file of the store's own stays.
    assert (filled / "cache" / "snapshot" / "keygraph.msgpack").exists()
    assert (vector_dir(filled) / "hashes.txt").exists()
    assert all(p.exists() for p in others)


def test_temp_files_a_writer_killed_after_the_open_left_are_removed_at_a_snapshot(
    filled: Path,
) -> None:
    # Removed only when a store opened: a server up for weeks kept for good those of every
    # process killed after it opened (a CLI forget, an import), copied by every backup.
    store = open_and_check(filled)
    left = leave_temp_files(filled)
    others = not_the_stores(filled)
    snapshot_seq = store._snapshot_seq
    for i in range(8):  # settings(): a snapshot every 7 events
        store.remember(f"later fact {i}", ["later"])
    assert store._snapshot_seq > snapshot_seq
    assert [p for p in left if p.exists()] == []
    assert all(p.exists() for p in others)
    store.close()


def test_a_temp_file_another_process_is_writing_is_left_to_it(
    filled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's temp files are written only holding the appenders' lock, and the open
    # removes them only holding it: one found while another process holds the lock may be
    # that process's write under way.
    writer = EventLog(filled)  # another process, mid-way through saving a snapshot
    temp = filled / "cache" / "snapshot" / ".keygraph-00000000000000000099.msgpack.4242.tmp"
    final = temp.parent / "keygraph-00000000000000000099.msgpack"
    waiting = threading.Event()
    acquire = EventLog._acquire

    def noting_who_waits(log: EventLog, *args: Any, **kwargs: Any) -> int:
        if log is not writer:
            waiting.set()
        return acquire(log, *args, **kwargs)

    monkeypatch.setattr(EventLog, "_acquire", noting_who_waits)
    errors: list[BaseException] = []

    def open_the_store() -> None:
        try:
            open_and_check(filled).close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    opener = threading.Thread(target=open_the_store)
    with writer.lock():
        temp.write_bytes(b"the first half")
        opener.start()
        assert waiting.wait(30), "the open never asked for the lock"
        assert temp.exists()
        with open(temp, "ab") as f:
            f.write(b" and the second")
        os.replace(temp, final)
    opener.join(30)
    writer.close()
    assert not opener.is_alive() and errors == []
    assert final.read_bytes() == b"the first half and the second"


KILLED_IMPORT = r"""
import os, signal, sys
from keytrail.server import care
from keytrail.server.cli import main

write_staged = care._write_staged

def killed(*args, **kwargs):  # the import is killed once its log is written beside the store
    write_staged(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

care._write_staged = killed
main(["--home", sys.argv[1], "import", sys.argv[2]])
"""

KILLED_REBUILD = r"""
import os, signal, sys
from keytrail.core import HashEmbedder, Settings, Store
from keytrail.projections.text import _Documents

store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
store.text.sync(store.state)  # the index as searches made it
document = _Documents.__call__
written = [0]

def killed(self, node):  # the rebuild is killed halfway through its documents
    written[0] += 1
    if written[0] == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return document(self, node)

_Documents.__call__ = killed
store.text.rebuild(store.state)
"""


def run_killed(script: str, *args: str | Path) -> None:
    child = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        env={**os.environ, "KEYTRAIL_EMBEDDER": "hash"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def test_what_a_killed_import_or_text_index_rebuild_left_is_removed_when_the_store_opens(
    filled: Path, tmp_path: Path
) -> None:
    # An import writes its log in import.partial/ before it takes the appenders' lock, and a
    # text index rebuild writes index/text.new/ under the index's own lock: a process killed
    # meanwhile left them for good (only a later import or rebuild removed them), copied by
    # every backup.
    export = tmp_path / "export.jsonl"
    assert keytrail_cli(filled, "export", "--output", str(export)).returncode == 0
    restored = tmp_path / "restored"
    run_killed(KILLED_IMPORT, restored, export)
    assert list((restored / "import.partial" / "log").glob("*.jsonl"))
    shutil.copytree(restored / "import.partial", tmp_path / "left")  # for verify, below
    open_and_check(restored).close()  # a store made anew, as it would be without the import
    assert not (restored / "import.partial").exists()

    run_killed(KILLED_REBUILD, filled)
    assert (filled / "index" / "text.new").is_dir()
    assert (filled / "index" / "text").is_dir()  # the index searched meanwhile is whole
    shutil.copytree(tmp_path / "left", filled / "import.partial")
    report = verify(filled)
    assert report.ok
    assert report.temp_files == ["import.partial/", "index/text.new/"]
    shown = keytrail_cli(filled, "verify").stdout
    for folder in report.temp_files:  # a build cut short: removed, and no file
        assert (
            f"temp folder left by a write cut short (the next open removes it): {folder}"
        ) in shown, shown
    open_and_check(filled).close()
    assert not (filled / "import.partial").exists()
    assert not (filled / "index" / "text.new").exists()
    assert verify(filled).temp_files == []


KILLED_SWAP = r"""
import os, signal, sys
from pathlib import Path
from keytrail.core import HashEmbedder, Settings, Store

store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
store.text.sync(store.state)
rename = Path.rename

def killed(self, target):  # killed once the index is moved aside, before the new one moves in
    if self.name == "text.new":
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(self, target)

Path.rename = killed
store.text.rebuild(store.state)
"""


@pytest.mark.parametrize("opened", ["after", "before"])
def test_a_text_index_swap_killed_between_its_renames_is_finished_not_built_again(
    filled: Path, opened: str
) -> None:
    # A rebuild (or purge) killed after moving the index aside to text.old, before renaming
    # its finished text.new in: the next open (or a server's next search) threw the finished
    # index away and built one from scratch, a long wait on a big store.
    server = open_and_check(filled) if opened == "before" else None
    run_killed(KILLED_SWAP, filled)
    index = filled / "index"
    assert not (index / "text").exists() and (index / "text.old").is_dir()
    if server is None:
        # verify said of the finished index too that the next open removes it
        shown = keytrail_cli(filled, "verify").stdout
        assert (
            "text index a rebuild finished, not yet in place (the next open renames it to "
            "index/text): index/text.new/"
        ) in shown, shown
        assert (
            "temp folder left by a write cut short (the next open removes it): index/text.old/"
        ) in shown, shown
    built = (index / "text.new").stat().st_ino
    store = server or open_and_check(filled)
    store.catch_up_text_index()
    assert len(store.text.search("coffee", 10)) == 3
    assert (index / "text").stat().st_ino == built  # the finished index, not one built anew
    store.close()
    assert not (index / "text.new").exists() and not (index / "text.old").exists()
    assert verify(filled).temp_files == []


def test_an_import_or_text_index_rebuild_under_way_is_left_to_it(filled: Path) -> None:
    # The open tells a live writer's folders by their locks: removing them would cut an
    # import or a rebuild short under a process that is still writing.
    index = TextIndex(filled / "index" / "text")
    with tempfiles.import_staging(filled) as staging, index.exclusive():
        (staging / "log").mkdir()
        (staging / "log" / "00000000000000000001.jsonl").write_bytes(b"an import under way\n")
        (filled / "index" / "text.new").mkdir()
        assert verify(filled).temp_files == []
        open_and_check(filled).close()
        assert (staging / "log" / "00000000000000000001.jsonl").exists()
        assert (filled / "index" / "text.new").is_dir()
    index.close()
    assert not staging.exists()  # the import removes its own
    assert verify(filled).temp_files == ["index/text.new/"]


def test_an_import_waits_for_one_under_way_instead_of_removing_its_log(
    filled: Path, tmp_path: Path
) -> None:
    # Each import began by removing import.partial/: a second import into the same empty
    # home removed the first one's log as it was being written, and the first moved the
    # second's half-written log into the store.
    export = tmp_path / "export.jsonl"
    assert keytrail_cli(filled, "export", "--output", str(export)).returncode == 0
    home = tmp_path / "restored"
    home.mkdir()
    with tempfiles.import_staging(home) as staging:
        mine = staging / "log" / "00000000000000000001.jsonl"
        mine.parent.mkdir()
        mine.write_bytes(b"the first import's log, half written\n")
        second = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "keytrail.server.cli",
                "--home",
                str(home),
                "import",
                str(export),
            ],
            env={**os.environ, "KEYTRAIL_EMBEDDER": "hash"},
            stderr=subprocess.PIPE,
            text=True,
        )
        assert second.stderr is not None
        told = second.stderr.readline()
        while told.startswith("check export"):  # its progress comes first
            told = second.stderr.readline()
        assert told == f"waiting for another import into {home} to finish\n"
        assert mine.read_bytes() == b"the first import's log, half written\n"
    _, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert verify(home).ok and not (home / "import.partial").exists()


def keytrail_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "--home", str(home), *args],
        env={**os.environ, "KEYTRAIL_EMBEDDER": "hash"},
        capture_output=True,
        text=True,
        timeout=120,
    )
