"""Forgetting for good: the content leaves every file, the audit record stays, the store still
verifies and replays, readers are undisturbed, and an interrupted purge is finished."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from keytrail.core import HashEmbedder, NotFound, RememberItem, Settings, Store, forgetting
from keytrail.core.history import history
from keytrail.core.maintenance import verify
from keytrail.core.timetravel import read_memory_at, view
from keytrail.events import (
    DecodeError,
    EventLog,
    KeyAliased,
    KeyRetyped,
    MemoryForgotten,
    MemoryRemembered,
    NewMemory,
    decode_line,
    encode_line,
    redact,
)
from keytrail.events.redact import apply_redaction, plan_redaction, redact_line, without_content
from keytrail.projections import GraphState, fold
from keytrail.projections import snapshot as snapshots
from keytrail.projections.snapshot import materialize
from keytrail.projections.vectors import VectorCache, text_hash
from keytrail.server.care import summary

SECRET = 'my bank PIN is "7391" — tell nobody\nnot even über-admins'


def settings(home: Path, **over: object) -> Settings:
    base: dict[str, object] = dict(home=home, embedder="hash", snapshot_every=4, segment_bytes=3000)
    base.update(over)
    return Settings(**base)  # type: ignore[arg-type]


def open_store(home: Path, **over: object) -> Store:
    return Store(settings(home, **over), embedder=HashEmbedder())


def encoded(state: GraphState) -> bytes:
    # A state opened from a snapshot holds undecoded nodes until looked at: decode them all.
    return msgspec.msgpack.encode(materialize(state))


def replay(home: Path) -> GraphState:
    return fold(EventLog(home).iter_new())


def forms(content: str) -> list[bytes]:
    """The ways content can sit in a file: raw UTF-8 and as a JSON string body."""
    return [content.encode(), msgspec.json.encode(content)[1:-1]]


def files_holding(home: Path, content: str) -> list[str]:
    """Every file under `home` whose bytes contain the content (a byte search of the store)."""
    needles = forms(content)
    found = []
    for root, _dirs, names in os.walk(home):
        for name in names:
            data = (Path(root) / name).read_bytes()
            if any(n in data for n in needles):
                found.append(str((Path(root) / name).relative_to(home)))
    return found


def fill(store: Store, count: int, tag: str = "filler") -> list[str]:
    return [
        store.remember(f"{tag} fact {i} " + "x" * 40, [f"topic{i % 3}"]).memory_id
        for i in range(count)
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_forget_removes_the_content_from_every_file(home: Path) -> None:
    # A second model's vector cache, from an earlier open with another embedder.
    with Store(settings(home), embedder=HashEmbedder(dim=64)) as other_model:
        other_model.remember("warm up the 64-dim cache", ["warm"])
    store = open_store(home)
    fill(store, 5)
    batch = store.remember_batch(
        [RememberItem(SECRET, ["bank", "PIN"]), RememberItem("the sibling stays", ["sibling"])]
    )
    secret, sibling = batch[0].memory_id, batch[1].memory_id
    store.read_memory(secret, query="what is my PIN")
    old = store.remember("Dana lives in Lyon", ["Dana"], {"Dana": "name"}).memory_id
    moved = store.correct(old, "Dana moved to Oslo", ["Dana"], {"Dana": "name"}).memory_id
    fill(store, 8)
    store.close()
    # The content also reached a second model's cache, the text index and a torn tail.
    with Store(settings(home), embedder=HashEmbedder(dim=64)) as other_model:
        other_model.embed([SECRET])
        other_model.vectors.flush()
    (home / "index" / "text").mkdir(parents=True)
    (home / "index" / "text" / "segment.idx").write_bytes(SECRET.encode())
    (home / "log" / "torn").mkdir()
    torn = home / "log" / "torn" / "00000000000000000009.jsonl.10.torn"
    torn.write_bytes(b'{"type":"memory.remembered","content":"' + forms(SECRET)[1][:20])
    (home / "log" / "torn" / "other.torn").write_bytes(b"x" + forms(SECRET)[1] + b"y")
    assert {"cache/snapshot/keygraph.msgpack", "index/text/segment.idx"} <= set(
        files_holding(home, SECRET)
    )
    assert files_holding(home, "Dana moved to Oslo")

    store = open_store(home)
    listed_before = {m.memory_id for m in store.list_memories(limit=100).memories}
    gone = store.forget(secret, reason="user asked")
    gone_too = store.forget(moved, reason="moved again")

    assert files_holding(home, SECRET) == []
    assert files_holding(home, "Dana moved to Oslo") == []
    assert any(p.startswith("log/") for p in gone.purged)
    assert "index/text" in gone.purged and "cache/snapshot/keygraph.msgpack" in gone.purged
    # Only the forgotten memory's content went: its batch sibling and the old version stay.
    assert files_holding(home, "the sibling stays") and files_holding(home, "Dana lives in Lyon")
    assert torn.stat().st_size == len(b'{"type":"memory.remembered","content":"') + 20
    # Every model's matrix lost the row, on disk and in the open cache.
    for dim in (256, 64):
        cache = VectorCache(home / "cache" / "vectors", f"hash:v1:{dim}", dim)
        assert text_hash(SECRET) not in cache
        rows = np.fromfile(cache.dir / "vectors.f32", dtype=np.float32).reshape(-1, dim)  # type: ignore[operator]
        assert (rows == 0).all(axis=1).sum() >= 1  # erased, not removed: row numbers hold
    assert text_hash(SECRET) not in store.vectors

    # The audit record: id, content hash, time, reason; the log shows the memory forgotten.
    events = EventLog(home).read_new()
    record = next(e for e in events if isinstance(e, MemoryForgotten) and e.memory_id == secret)
    assert record.reason == "user asked" and record.content_hash.startswith("sha256:")
    created = next(e for e in events if e.seq == store.state.memories[secret].created_seq)
    assert "[content forgotten]" in summary(created) and "the sibling stays" in summary(created)
    assert store.state.memories[sibling].content == "the sibling stays"
    assert gone.seq == record.seq and gone_too.seq == record.seq + 1

    report = verify(home)
    assert report.ok, report.problems
    assert sorted(report.redacted) == sorted([secret, moved])
    # Replay of the redacted log, and a reopen (from the rewritten snapshot), equal the live state.
    assert encoded(replay(home)) == encoded(store.state)
    store.close()
    reopened = open_store(home)
    assert encoded(reopened.state) == encoded(replay(home))
    assert reopened.state.memories[secret].status == "forgotten"
    listed = {m.memory_id for m in reopened.list_memories(limit=100).memories}
    assert listed == listed_before - {secret, moved}
    # The store keeps working: new appends after the rewritten segment.
    reopened.remember("life goes on", ["calm"])
    reopened.close()
    assert verify(home).ok


def test_a_redacted_line_keeps_its_length_and_decodes_without_the_content() -> None:
    memories = [
        NewMemory(memory_id="m_a", namespace="n", content=SECRET, content_hash="h", keys=[]),
        NewMemory(memory_id="m_b", namespace="n", content="keep me", content_hash="h", keys=[]),
    ]
    event = MemoryRemembered(seq=7, memories=memories)
    line = encode_line(event)[:-1]
    redacted = redact_line(line, {"m_a"})
    assert redacted is not None and len(redacted) == len(line)
    assert decode_line(redacted) == without_content(event, {"m_a"})
    assert decode_line(redacted).memories[1].content == "keep me"  # type: ignore[union-attr]
    assert not any(f in redacted for f in forms(SECRET))
    assert redact_line(redacted, {"m_a"}) is None  # already redacted: nothing to do
    assert redact_line(line, {"m_other"}) is None
    # A damaged redaction would not pass the checksum.
    with pytest.raises(DecodeError):
        decode_line(redacted.replace(b"keep me", b"keep mE"))
    # A hand-written line (no checksum, \u escapes) is re-encoded and padded to the same length.
    hand = (
        b'{"type":"memory.remembered","seq":7,"memories":[{"memory_id":"m_a","namespace":"n",'
        b'"content":"caf\\u00e9 secret","content_hash":"h","keys":[]}]}'
    )
    redacted = redact_line(hand, {"m_a"})
    assert redacted is not None and len(redacted) == len(hand) and b"secret" not in redacted
    assert decode_line(redacted).memories[0].content == ""  # type: ignore[union-attr]


def test_an_incremental_backup_sees_every_file_a_forget_rewrote_as_changed(home: Path) -> None:
    # `rsync -a` onto an earlier backup (like `cp -u`) skips a file whose size and mtime, in
    # whole seconds, are those it copied. A redaction keeps the size; left in the same second
    # as the copy (a segment synced, then a forget within that second), the backup would keep
    # the content for good. The files' times are set ahead, so that this does not depend on
    # when the clock's second turns.
    # One line a segment: the forget's own line goes to a new one, and the redacted segment
    # keeps its size.
    store = open_store(home, snapshot_every=10**6, segment_bytes=1)
    memory_id = store.remember(SECRET, ["bank"]).memory_id
    (home / "log" / "torn").mkdir()
    torn = home / "log" / "torn" / "00000000000000000003.jsonl.10.torn"
    torn.write_bytes(b"x" + forms(SECRET)[1] + b"y")
    # The vector cache erases the content's row in place too: same sizes.
    (vectors,) = (home / "cache" / "vectors").iterdir()
    rewritten = [
        home / "log" / "00000000000000000002.jsonl",
        torn,
        vectors / "hashes.txt",
        vectors / "vectors.f32",
    ]
    ahead = (int(time.time()) + 30) * 10**9 + 500_000_000
    for path in rewritten:
        os.utime(path, ns=(ahead, ahead))
    seen = {path: path.stat() for path in rewritten}
    store.forget(memory_id, reason="user asked")
    assert files_holding(home, SECRET) == []
    for path in rewritten:
        now = path.stat()
        assert now.st_size == seen[path].st_size
        # A later second than the copy saw: the clock's own may still be the copy's second.
        assert now.st_mtime_ns // 10**9 > seen[path].st_mtime_ns // 10**9, path.name


def test_readers_are_undisturbed_by_a_rewrite(home: Path) -> None:
    writer = open_store(home)
    early = writer.remember(SECRET, ["bank"]).memory_id
    fill(writer, 12)
    # Readers at different places: before the secret's line, and past it mid-segment.
    behind = EventLog(home)
    ahead = EventLog(home)
    mark = ahead.read_new()[-1].seq
    other = open_store(home)  # another process's store, open across the forget
    other.read_memory(early)
    writer.forget(early)
    fill(writer, 3, "after")
    seen_behind = behind.read_new()
    seen_ahead = ahead.read_new()
    assert [e.seq for e in seen_behind] == list(range(1, writer.state.seq + 1))
    assert [e.seq for e in seen_ahead] == list(range(mark + 1, writer.state.seq + 1))
    assert not any(f in encode_line(e) for e in seen_behind for f in forms(SECRET))
    # The other store folds the forget and the later appends, and keeps working.
    assert encoded(other.refresh()) == encoded(writer.state)
    other.remember("written by the other store after the rewrite", ["other"])
    writer.refresh()
    assert encoded(writer.state) == encoded(other.state)
    # Its snapshot is written caught up, under the lock: it cannot bring the content back.
    other.close()
    writer.close()
    assert files_holding(home, SECRET) == []
    assert verify(home).ok


class Killed(BaseException):
    """Stands for a kill -9: nothing after it runs."""


def crash_after_the_event(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make the purge die right after memory.forgotten is durable, as a kill -9 would."""

    def die(*args: object, **kwargs: object) -> list[str]:
        raise Killed

    monkeypatch.setattr(forgetting, "purge", die)

    def undo() -> None:
        monkeypatch.undo()

    return undo


def test_an_interrupted_purge_is_finished_by_the_next_open(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(home)
    secret = store.remember(SECRET, ["bank", "Zorblax vault"]).memory_id
    store.remember("the bank opens at nine", ["bank"])
    fill(store, 6)
    store.embed(["Zorblax vault", "zorblax vault"])
    store.close()
    store = open_store(home)
    undo = crash_after_the_event(monkeypatch)
    with pytest.raises(Killed):
        store.forget(secret)
    undo()
    assert forgetting.read_pending(home)[0].memory_id == secret
    assert files_holding(home, SECRET)  # forgotten in the log, content not yet purged
    assert label_files(home, "Zorblax vault")  # and its label too
    assert verify(home).ok  # an unredacted line before its forget is a valid log
    reopened = open_store(home)
    assert files_holding(home, SECRET) == []
    assert label_files(home, "Zorblax vault") == []  # the label of its key alone went too
    assert reopened.state.key_for_label("bank") is not None
    assert not forgetting.pending_path(home).exists()
    assert encoded(reopened.state) == encoded(replay(home))
    report = verify(home)
    assert report.redacted == [secret] and len(report.labels_erased) == 1


def test_an_interrupted_purge_is_finished_by_the_next_forget(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(home)
    secret = store.remember(SECRET, ["bank"]).memory_id
    later = store.remember("a later secret", ["later"]).memory_id
    fill(store, 6)
    undo = crash_after_the_event(monkeypatch)
    with pytest.raises(Killed):
        store.forget(secret)
    undo()
    assert files_holding(home, SECRET)
    gone = store.forget(later)  # the same process goes on: its next forget finishes both
    assert files_holding(home, SECRET) == [] and files_holding(home, "a later secret") == []
    assert any(p.startswith("log/") for p in gone.purged)
    assert sorted(verify(home).redacted) == sorted([secret, later])


def test_a_forget_that_died_before_its_event_leaves_the_memory(home: Path) -> None:
    store = open_store(home)
    kept = store.remember(SECRET, ["bank"])
    # As if a forget crashed after recording its intent but before appending the event.
    forgetting.write_pending(
        home,
        [
            forgetting.PendingPurge(
                memory_id=kept.memory_id, created_seq=kept.seq, vector_digest=text_hash(SECRET)
            )
        ],
    )
    store.close()
    reopened = open_store(home)
    assert reopened.state.memories[kept.memory_id].content == SECRET
    assert not forgetting.pending_path(home).exists()
    assert "log/00000000000000000001.jsonl" in files_holding(home, SECRET)


def test_verify_flags_a_redaction_that_forget_did_not_make(home: Path) -> None:
    store = open_store(home)
    memory_id = store.remember(SECRET, ["bank"]).memory_id
    store.close()
    segment = home / "log" / "00000000000000000001.jsonl"
    apply_redaction(plan_redaction(segment, {memory_id}))  # an edit behind forget's back
    report = verify(home)
    assert not report.ok
    assert "never forgotten" in report.problems[0] and memory_id in report.problems[0]


def test_snapshots_of_any_kind_are_purged(home: Path) -> None:
    store = open_store(home)
    secret = store.remember(SECRET, ["bank"]).memory_id
    fill(store, 5)
    store.close()
    snap_dir = home / "cache" / "snapshot"
    # An interval snapshot of the same format (kept, content blanked) and a file of a format
    # this code cannot read (deleted: derived).
    main_snapshot = (snap_dir / "keygraph.msgpack").read_bytes()
    (snap_dir / "interval").mkdir()
    (snap_dir / "interval" / "seq-3.msgpack").write_bytes(main_snapshot)
    (snap_dir / "interval" / "other.bin").write_bytes(b"zz" + SECRET.encode())
    store = open_store(home)
    store.forget(secret)
    store.close()
    assert files_holding(home, SECRET) == []
    kept = snapshots.load(snap_dir / "interval" / "seq-3.msgpack")
    assert kept is not None and kept.state.memories[secret].content == ""
    assert not (snap_dir / "interval" / "other.bin").exists()


def test_a_forget_blanks_each_snapshot_decoding_only_the_nodes_it_blanks(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget decoded every snapshot whole and encoded it again, and replaced the latest by
    one of its own state (archiving the old one, blanked in turn): 2-8 s at 100,000 memories,
    holding the lock every writer waits on. Each snapshot is blanked where it stands, only the
    forgotten memory's node decoded, and still equals the redacted log folded to its seq."""
    store = open_store(home, snapshot_every=1000)
    secret = store.remember(SECRET, ["bank"]).memory_id
    fill(store, 5)
    store.close()
    store = open_store(home, snapshot_every=1000)
    fill(store, 3, tag="later")
    store.close()  # archives the first snapshot: two hold the secret
    snap_dir = home / "cache" / "snapshot"
    before = sorted(p.name for p in snap_dir.iterdir())
    assert len(before) == 2
    loaded: list[snapshots.Snapshot] = []
    load = snapshots.load

    def kept_load(path: Path, **kwargs: Any) -> snapshots.Snapshot | None:
        snap = load(path, **kwargs)
        if snap is not None:
            loaded.append(snap)
        return snap

    store = open_store(home, snapshot_every=1000)
    monkeypatch.setattr(snapshots, "load", kept_load)
    gone = store.forget(secret)
    monkeypatch.setattr(snapshots, "load", load)
    assert sorted(p.name for p in snap_dir.iterdir()) == before
    assert {p for p in gone.purged if p.startswith("cache/snapshot/")} == {
        f"cache/snapshot/{name}" for name in before
    }
    assert len(loaded) == 2
    for snap in loaded:
        memories = snap.state.memories
        assert [m for m, v in dict.items(memories) if type(v) is not int] == [secret]
    store.close()
    assert files_holding(home, SECRET) == []
    report = verify(home)  # every snapshot equals the redacted log folded to its seq
    assert report.ok, report.cache_problems


def test_a_forget_leaves_a_lazily_loaded_state_undecoded(home: Path) -> None:
    """A forget walks every memory (those forgotten before, the same text elsewhere) and, when a
    label may go, every key: through `values()`, which decodes a lazily loaded state whole
    (1-1.5 s at 100,000 memories, under the lock). The walks read what they need undecoded."""
    store = open_store(home)
    secret = store.remember(SECRET, ["bank", "vault 17"]).memory_id
    fill(store, 5)
    earlier = store.remember("an earlier secret", ["topic0"]).memory_id
    store.forget(earlier)
    store.close()
    store = open_store(home)
    memories, keys = store.state.memories, store.state.keys
    assert isinstance(memories, snapshots.LazyNodes) and isinstance(keys, snapshots.LazyNodes)
    gone = store.forget(secret)
    assert gone.labels_erased  # "vault 17" led to the secret alone: every key was looked at
    assert [m for m, v in dict.items(memories) if type(v) is not int] == [secret]
    assert [k for k, v in dict.items(keys) if type(v) is not int] == memories[secret].keys
    store.close()
    assert files_holding(home, SECRET) == [] and files_holding(home, "vault 17") == []
    assert verify(home).ok


def test_forgetting_all_versions_erases_the_whole_chain(home: Path) -> None:
    store = open_store(home)
    seoul = store.remember("user lives in Seoul", ["home"]).memory_id
    busan = store.correct(seoul, "user moved to Busan", ["home"]).memory_id
    store.read_memory(busan)
    other = store.remember("user likes tea", ["tea"]).memory_id
    gone = store.forget(busan, reason="forget where I live", all_versions=True)
    assert gone.other_versions == [seoul]
    assert files_holding(home, "Seoul") == [] and files_holding(home, "Busan") == []
    assert files_holding(home, "user likes tea")
    assert {m: store.state.memories[m].status for m in (seoul, busan, other)} == {
        seoul: "forgotten",
        busan: "forgotten",
        other: "active",
    }
    report = verify(home)
    assert report.ok and sorted(report.redacted) == sorted([seoul, busan])
    records = [e for e in EventLog(home).read_new() if isinstance(e, MemoryForgotten)]
    assert [(r.memory_id, r.reason) for r in records] == [
        (seoul, "forget where I live"),
        (busan, "forget where I live"),
    ]
    assert gone.seq == records[-1].seq
    assert encoded(replay(home)) == encoded(store.state)


def test_forgetting_a_long_chain_syncs_the_log_once_not_once_per_version(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """all_versions wrote one fsynced `memory.forgotten` per version: a 3,000-version fact took
    about 10 s under the lock. The chain's events are written, then synced once before the
    caller is told: a forget of 2 versions and of 25 make the same number of fsyncs."""

    def fsyncs_to_forget(versions: int, tag: str) -> int:
        store = open_store(home / tag, segment_bytes=1 << 20, snapshot_every=10_000)
        memory_id = store.remember(f"{tag} version 0", ["fact"]).memory_id
        for i in range(1, versions):
            memory_id = store.correct(memory_id, f"{tag} version {i}").memory_id
        calls: list[int] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            calls.append(fd)
            real_fsync(fd)

        with monkeypatch.context() as counting:
            counting.setattr(os, "fsync", fsync)
            gone = store.forget(memory_id, all_versions=True)
        assert len(gone.other_versions) == versions - 1
        forgotten = [
            e.memory_id for e in EventLog(home / tag).read_new() if isinstance(e, MemoryForgotten)
        ]
        assert sorted(forgotten) == sorted([memory_id, *gone.other_versions])
        assert files_holding(home / tag, f"{tag} version") == []
        assert encoded(replay(home / tag)) == encoded(store.state)
        store.close()
        return len(calls)

    assert fsyncs_to_forget(25, "long") == fsyncs_to_forget(2, "short")


def test_a_chain_is_found_in_its_segment_in_one_pass_not_one_search_per_version(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning the redaction of a chain searched the segment once per version: after its
    fsyncs were one, a 3,000-version forget still spent ~15 s of its ~16 s in those searches
    (check_redactable and the purge plan it each). It finds the same lines in one pass."""
    store = open_store(home, segment_bytes=1 << 20)
    memory_id = store.remember("user lives in Seoul", ["home"]).memory_id
    chain = [memory_id]
    for i in range(40):
        memory_id = store.correct(memory_id, f"user moved, move {i}", ["home"]).memory_id
        chain.append(memory_id)
    store.remember(f"a note that names {chain[3]} in its text", ["note"])
    store.close()
    (segment,) = sorted((home / "log").glob("*.jsonl"))
    one_by_one = [plan_redaction(segment, {m}) for m in chain]

    searches: list[bytes] = []

    class Segment(bytes):
        def find(self, sub: bytes, *args: int) -> int:  # type: ignore[override]
            if sub != b"\n":  # looking for a line's end is no search for an id
                searches.append(sub)
            return super().find(sub, *args)

    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: Segment(read_bytes(self)))
    plan = plan_redaction(segment, set(chain))
    assert len(searches) < len(chain)
    assert plan.lines == {k: v for p in one_by_one for k, v in p.lines.items()}
    assert plan.contents == {k: v for p in one_by_one for k, v in p.contents.items()}
    assert len(plan.contents) == len(chain)


def test_a_memory_many_items_relate_to_is_found_once_per_line(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line found naming the memory is not searched back to its start again for each
    naming: a memory 1,500 items of three batch lines related to (10 MB each, contents of
    20,000 characters) held the lock 1.5 s to forget, most of it in those searches. One id
    and a chain (found in one pass) plan the same lines as before."""
    store = open_store(home, segment_bytes=1 << 20)
    memory_id = store.remember("user lives in Seoul", ["home"]).memory_id
    chain = [memory_id]
    for i in range(20):
        memory_id = store.correct(memory_id, f"user moved, move {i}", ["home"]).memory_id
        chain.append(memory_id)
    store.remember_batch(
        [RememberItem(f"visit {i}", ["trip"], related_to=chain) for i in range(50)]
    )
    store.close()
    (segment,) = sorted((home / "log").glob("*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    made_at = {}  # the offset of the line that made each version (the one to redact)
    offset = 0
    for line in lines:
        for version in chain:
            if b'"memory_id":"' + version.encode() + b'","namespace"' in line:
                made_at[version] = offset
        offset += len(line)
    searches_back: list[int] = []

    class Segment(bytes):
        def rfind(self, sub: bytes, *args: int) -> int:  # type: ignore[override]
            searches_back.append(1)
            return super().rfind(sub, *args)

    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: Segment(read_bytes(self)))
    for ids in ({chain[0]}, set(chain)):
        searches_back.clear()
        plan = plan_redaction(segment, ids)
        assert len(searches_back) <= len(lines)  # not once per naming (50 per id here)
        assert set(plan.lines) == {made_at[m] for m in ids}
        assert set(plan.contents) == ids


def test_a_forget_plans_its_redaction_once_and_decodes_the_line_once(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the write and the purge after it each planned the redaction, each
    plan decoding the line that made the memory twice: for one item of a large batch (one
    line of megabytes) that held every writer back 0.4-0.6 s. The check's plan is the purge's,
    and the line is decoded once (and its redaction once, to check it)."""
    store = open_store(home, segment_bytes=1 << 20)
    made = store.remember_batch(
        [RememberItem(f"item {i} " + "y" * 200, [f"t{i}"]) for i in range(20)]
    )
    fill(store, 3)
    (segment,) = sorted((home / "log").glob("*.jsonl"))
    (line,) = [li for li in segment.read_bytes().splitlines() if b"item 7 " in li]
    plans: list[object] = []
    decodes: list[bytes] = []
    plan = forgetting.plan_redaction
    decode = redact.decode_line
    monkeypatch.setattr(forgetting, "plan_redaction", lambda *a: plans.append(a) or plan(*a))
    monkeypatch.setattr(redact, "decode_line", lambda li: decodes.append(li) or decode(li))
    gone = store.forget(made[7].memory_id)
    assert f"log/{segment.name}" in gone.purged
    assert len(plans) == 1
    assert decodes.count(line) == 1
    assert len([li for li in decodes if len(li) == len(line)]) == 2  # the line, its redaction
    assert files_holding(home, "item 7 ") == []
    assert open_store(home).read_memory(made[8].memory_id).content.startswith("item 8 ")


@pytest.mark.parametrize("failing", ["sync", "fifth write"])
def test_a_failed_sync_of_a_chains_forget_records_nothing_and_tells_so(
    home: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """The chain's events are synced once, after all are written: if that sync fails, or a
    write before it, none of them is kept (a new segment they started included), the caller
    is told nothing was recorded, the store still holds every version, and a retry forgets
    them."""
    from keytrail.core import StoreError
    from keytrail.events import log as event_log

    store = open_store(home, segment_bytes=1200)
    memory_id = store.remember("user lives in Seoul", ["home"]).memory_id
    for city in ("Busan", "Incheon", "Daegu", "Daejeon", "Gwangju"):
        memory_id = store.correct(memory_id, f"user moved to {city}", ["home"]).memory_id
    before = {p.name: p.read_bytes() for p in (home / "log").glob("*.jsonl")}
    state = encoded(store.state)

    writes: list[int] = []
    pwrite = os.pwrite

    def sync_failed(path: object) -> None:
        raise OSError(5, "Input/output error")

    def fifth_write_failed(fd: int, data: bytes, offset: int) -> int:
        writes.append(offset)
        if len(writes) == 5:  # the fifth of six lines, in the segment the fourth started
            raise OSError(28, "No space left on device")
        return pwrite(fd, data, offset)

    with monkeypatch.context() as broken:
        if failing == "sync":
            broken.setattr(event_log, "sync_path", sync_failed)
        else:
            broken.setattr(os, "pwrite", fifth_write_failed)
        with pytest.raises(StoreError, match="nothing was recorded"):
            store.forget(memory_id, all_versions=True)
    assert {p.name: p.read_bytes() for p in (home / "log").glob("*.jsonl")} == before
    assert encoded(store.state) == state
    assert files_holding(home, "user moved to Gwangju")
    gone = store.forget(memory_id, all_versions=True)  # the disk is well again
    assert len(gone.other_versions) == 5
    assert files_holding(home, "Seoul") == [] and files_holding(home, "Gwangju") == []
    assert not forgetting.pending_path(home).exists()
    assert encoded(replay(home)) == encoded(store.state)
    store.close()
    assert verify(home).ok


def test_forgetting_one_version_keeps_the_others(home: Path) -> None:
    store = open_store(home)
    seoul = store.remember("user lives in Seoul", ["home"]).memory_id
    busan = store.correct(seoul, "user moved to Busan", ["home"]).memory_id
    gone = store.forget(busan)
    assert gone.other_versions == []
    assert files_holding(home, "Busan") == [] and files_holding(home, "Seoul")
    assert store.state.memories[seoul].content == "user lives in Seoul"


def test_a_version_never_names_a_forgotten_version_as_its_neighbour(home: Path) -> None:
    """A correction forgotten leaves the version it replaced superseded (the user said it was
    wrong; forgetting the correction does not make it true again), but `superseded_by` named
    the forgotten one: "read that one" led to a refusal. Past a forgotten version each side
    names the nearest one not forgotten, or none; as of the past too (a forget holds there)."""
    store = open_store(home)
    seoul = store.remember("user lives in Seoul", ["home"]).memory_id
    busan = store.correct(seoul, "user moved to Busan", ["home"]).memory_id
    before_forget = store.state.seq
    store.forget(busan)
    old = store.read_memory(seoul)
    assert (old.status, old.superseded_by, old.supersedes) == ("superseded", None, None)
    assert read_memory_at(store, seoul, as_of=before_forget).superseded_by is None
    assert store.list_memories().total == 0  # the fact has no current version to show

    first = store.remember("the team meets on Monday", ["meeting"]).memory_id
    second = store.correct(first, "the team meets on Tuesday", ["meeting"]).memory_id
    third = store.correct(second, "the team meets on Friday", ["meeting"]).memory_id
    store.forget(second)
    assert store.read_memory(first).superseded_by == third
    assert store.read_memory(third).supersedes == first
    assert read_memory_at(store, third, as_of=store.state.seq - 1).supersedes == first
    # The audit record keeps every version.
    assert [v.memory_id for v in history(store, first).versions] == [first, second, third]


def test_a_read_names_no_forgotten_memory_in_related_to(home: Path) -> None:
    """`related_to` is what the memory was told to relate to; one of them forgotten was still
    named by `read_memory`, whose answer an agent follows to a refusal (`related` hid it).
    A forget holds in the past too (its words are gone from the log), as of before it."""
    store = open_store(home)
    flight = store.remember("Dana's flight lands at 9", ["flight"]).memory_id
    hotel = store.remember("Dana's hotel is near the station", ["hotel"]).memory_id
    pickup = store.remember("Pick Dana up", ["airport"], related_to=[flight, hotel]).memory_id
    before_forget = store.state.seq
    store.forget(flight)
    assert store.read_memory(pickup).related_to == [hotel]
    assert read_memory_at(store, pickup, as_of=before_forget).related_to == [hotel]


def test_a_forget_names_the_memories_that_still_hold_the_same_text(home: Path) -> None:
    """The same fact told again is a new version holding the same words (dedup), and a fact
    may be told in two namespaces: forgetting one answered as if the words were gone, while
    they were still stored and read elsewhere."""
    store = open_store(home)
    first = store.remember("the door code is 4711", ["door"]).memory_id
    retold = store.remember("the door code is 4711", ["door"])
    assert retold.deduplicated is not None and retold.deduplicated.memory_id == first
    other = store.remember("the door code is 4711", ["door"], namespace="work").memory_id
    gone = store.forget(first)
    assert gone.same_text_in == sorted([retold.memory_id, other])
    assert gone.other_versions == []
    # Forgetting all of them leaves none to name, and the words are gone from every file.
    assert store.forget(retold.memory_id, all_versions=True).same_text_in == [other]
    assert store.forget(other).same_text_in == []
    assert files_holding(home, "door code is 4711") == []


def test_all_versions_through_a_version_forgotten_already_takes_the_rest(home: Path) -> None:
    """Forgetting one version, then the whole fact by the id one holds (the one forgotten):
    all_versions takes every version still holding its text, not a refusal that the id given
    was forgotten already. With nothing left anywhere in the chain it is refused, writing
    nothing."""
    store = open_store(home)
    seoul = store.remember("user lives in Seoul", ["home"]).memory_id
    busan = store.correct(seoul, "user moved to Busan", ["home"]).memory_id
    store.forget(seoul)
    gone = store.forget(seoul, reason="all of it", all_versions=True)
    assert gone.memory_id == seoul and gone.other_versions == [busan]
    assert files_holding(home, "Busan") == []
    assert store.state.memories[busan].status == "forgotten"
    assert verify(home).ok

    written = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    with pytest.raises(NotFound, match="already forgotten"):
        store.forget(busan, all_versions=True)
    with pytest.raises(NotFound, match="already forgotten"):
        store.forget(seoul)
    assert b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl"))) == written


def test_another_process_never_saves_a_vector_of_forgotten_content(home: Path) -> None:
    a = open_store(home)
    # Another process with another model: its cache rows are its own, saved at its next write.
    b = Store(settings(home), embedder=HashEmbedder(dim=64))
    secret = a.remember(SECRET, ["bank"]).memory_id
    b.refresh()
    b.memory_vectors()  # b embedded the content (a recall does this) and has not saved the row
    a.forget(secret)
    b.remember("b writes after the forget", ["other"])  # b saves its unsaved rows now
    hashes = (b.vectors.dir / "hashes.txt").read_text()  # type: ignore[operator]
    assert text_hash("b writes after the forget") in hashes
    assert text_hash(SECRET) not in hashes
    b.close()


def test_forgetting_knowledge_graph_observations_and_imports(home: Path) -> None:
    from keytrail.core.importers import import_text
    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph

    store = open_store(home)
    fixture = Path(__file__).parent / "fixtures" / "memory.jsonl"
    import_text(store, fixture.read_text(), str(fixture))
    KnowledgeGraph(store).create_entities(
        [EntityInput("Mara", "person", [SECRET, "Mara plays the cello"])]
    )

    def memory_with(content: str) -> str:
        return next(m.id for m in store.state.memories.values() if m.content == content)

    observed, imported = memory_with(SECRET), memory_with("Speaks fluent Spanish")
    store.forget(observed)
    store.forget(imported)

    for content in (SECRET, "Speaks fluent Spanish"):
        assert files_holding(home, content) == []
    # Their neighbours in the same lines stay.
    assert files_holding(home, "Mara plays the cello")
    assert files_holding(home, "Prefers morning meetings")
    report = verify(home)
    assert report.ok, report.problems
    assert sorted(report.redacted) == sorted([observed, imported])
    assert encoded(replay(home)) == encoded(store.state)
    store.close()


def label_files(home: Path, *labels: str) -> list[str]:
    """Every file under `home` holding one of `labels`, as typed or case-folded."""
    return sorted(
        {f for label in labels for t in {label, label.casefold()} for f in files_holding(home, t)}
    )


def test_forget_erases_the_labels_of_keys_that_lead_to_nothing_else(home: Path) -> None:
    """Forgetting "I was treated at the Mayo Clinic for Lyme disease" left "Mayo Clinic" (a key
    extracted from the text) and an agent's label used by it alone in the log, the snapshots,
    the label vector rows and history. Keys leading to nothing but forgotten memories lose
    their labels; a key shared with a current memory keeps its own, and the answer says so."""
    with Store(settings(home), embedder=HashEmbedder(dim=64)) as other_model:
        other_model.remember("warm up the 64-dim cache", ["warm"])
    store = open_store(home)
    fill(store, 5)
    treated = store.remember("I was treated at the Mayo Clinic for Lyme disease").memory_id
    links = store.remember("my bank PIN is 7391", ["bank", "Zorblax code"]).memory_id
    shared = store.remember("the bank opens at nine", ["bank"]).memory_id
    keys = {
        store.state.keys[k].label: k for m in (treated, links) for k in store.state.memories[m].keys
    }
    assert store.state.keys[keys["Mayo Clinic"]].label == "Mayo Clinic"
    fill(store, 6, tag="after")
    secret_labels = ("Mayo Clinic", "Lyme", "Zorblax code")
    # Every label's vector row, in both models' caches.
    store.embed([t for label in secret_labels for t in (label, label.casefold())])
    store.vectors.flush()
    store.close()
    with Store(settings(home), embedder=HashEmbedder(dim=64)) as other_model:
        other_model.embed([t for label in secret_labels for t in (label, label.casefold())])
        other_model.vectors.flush()
    assert "cache/snapshot/keygraph.msgpack" in label_files(home, "Mayo Clinic")

    store = open_store(home)
    gone = store.forget(treated, reason="user asked")
    assert sorted(gone.labels_erased) == sorted(
        keys[label] for label in ("Mayo Clinic", "Lyme", "treated", "disease")
    )
    assert gone.labels_kept == []
    gone_too = store.forget(links)
    assert gone_too.labels_erased == [keys["Zorblax code"]]
    assert [(k.key_id, k.label, k.reason) for k in gone_too.labels_kept] == [
        (keys["bank"], "bank", f"also a key of {shared}")
    ]

    assert label_files(home, *secret_labels) == []
    for dim in (256, 64):
        cache = VectorCache(home / "cache" / "vectors", f"hash:v1:{dim}", dim)
        for label in secret_labels:
            assert text_hash(label) not in cache and text_hash(label.casefold()) not in cache
    assert text_hash("bank") in store.vectors  # the shared key's label keeps its row
    assert store.state.keys[keys["bank"]].label == "bank"
    assert store.state.key_for_label("Mayo Clinic") is None and "" not in store.state.labels
    # The store answers as before: the erased keys lead to no memory shown.
    erased = set(gone.labels_erased + gone_too.labels_erased)
    for query in ("Mayo Clinic", "Lyme", "Zorblax code", ""):
        found = store.recall(query) if query else None
        shown = [] if found is None else found.keys + found.nearest
        assert all(k.label and k.key_id not in erased for k in shown)
    assert all(k.label for k in store.browse_keys(limit=100).keys)
    store.memory_stats()
    # history names the keys by id; the log shows no label.
    weights = history(store, treated).trajectory[-1].weights
    assert set(weights) == {keys[label] for label in ("Mayo Clinic", "Lyme", "treated", "disease")}
    report = verify(home)
    assert report.ok, report.problems
    assert report.labels_erased == sorted(gone.labels_erased + gone_too.labels_erased)
    assert encoded(replay(home)) == encoded(store.state)
    store.close()
    reopened = open_store(home)
    assert encoded(reopened.state) == encoded(replay(home))
    # A new memory may name "Mayo Clinic" again: a new key, and nothing breaks.
    again = reopened.remember("the Mayo Clinic is in Rochester").memory_id
    assert reopened.state.key_for_label("Mayo Clinic") is not None
    assert reopened.state.key_for_label("Mayo Clinic").id != keys["Mayo Clinic"]  # type: ignore[union-attr]
    assert again in {m.memory_id for m in reopened.list_memories(limit=100).memories}
    reopened.close()
    assert verify(home).ok


def test_a_label_another_event_names_is_kept_and_said(home: Path) -> None:
    """A key named by a key.aliased or key.retyped event (or one whose label another key has)
    keeps its label; the forget lists it as kept, with the event."""
    store = open_store(home)
    made = store.remember("the Quokka Lodge booking", ["Quokka Lodge", "booking ref", "stay"])
    keys = {store.state.keys[k].label: k for k in store.state.memories[made.memory_id].keys}
    aliased = KeyAliased(key_id=keys["Quokka Lodge"], alias="QL")
    retyped = KeyRetyped(key_id=keys["booking ref"], key_type="name")
    store._write(lambda app: store._append(app, aliased))
    store._write(lambda app: store._append(app, retyped))
    other = store.remember("a trip to remember", ["journey"]).memory_id
    store._write(
        lambda app: store._append(
            app, KeyAliased(key_id=store.state.memories[other].keys[0], alias="stay")
        )
    )
    seqs = {
        e.key_id: e.seq for e in EventLog(home).read_new() if isinstance(e, KeyAliased | KeyRetyped)
    }
    gone = store.forget(made.memory_id)
    assert gone.labels_erased == []
    journey = store.state.memories[other].keys[0]
    assert sorted((k.label, k.reason) for k in gone.labels_kept) == [
        ("Quokka Lodge", f"named by key.aliased at seq {seqs[keys['Quokka Lodge']]}"),
        ("booking ref", f"named by key.retyped at seq {seqs[keys['booking ref']]}"),
        ("stay", f"{journey} has the same label or alias"),
    ]
    assert label_files(home, "Quokka Lodge", "booking ref")
    assert verify(home).ok
    assert encoded(replay(home)) == encoded(store.state)
    store.close()


def test_a_kept_label_names_the_newest_memory_its_key_still_leads_to_and_counts_the_rest(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason counts the key's other memories not forgotten (superseded ones too). With
    one namespace in the store, no link's namespace is read (a hub's are 100,000)."""

    def refuse(*args: Any) -> str:
        raise AssertionError("a link's namespace was read")

    monkeypatch.setattr(snapshots, "peek_namespace", refuse)
    store = open_store(home)
    b1, b2, b3, pin = (
        store.remember(text, ["bank"]).memory_id
        for text in ("the bank opens at nine", "the bank is on Elm St", "a bank loan", "PIN 7391")
    )
    bank = store.state.key_for_label("bank").id  # type: ignore[union-attr]
    gone = store.forget(pin)  # 1 forgotten, 4 links
    assert [(k.key_id, k.reason) for k in gone.labels_kept] == [
        (bank, f"also a key of {b3} and 2 more")
    ]
    for text in ("a note aside", "another note aside"):
        store.forget(store.remember(text, ["aside"]).memory_id)
    gone = store.forget(b1)  # 4 forgotten, 4 links
    assert [(k.key_id, k.reason) for k in gone.labels_kept] == [
        (bank, f"also a key of {b3} and 1 more")
    ]
    assert b2 in store.state.keys[bank].links
    store.close()


def test_a_kept_label_names_and_counts_memories_of_the_forgotten_ones_namespace_only(
    home: Path,
) -> None:
    """Keys are shared across namespaces: a forget in one names no memory of another, nor
    says how many there are, only that some exist (from a lazily loaded state too)."""
    store = open_store(home)
    store.remember("the bank opens at nine", ["bank"], namespace="home")
    elm = store.remember("the bank is on Elm St", ["bank"], namespace="home").memory_id
    loan, other_loan = (
        store.remember(text, ["bank", "loan"], namespace="work").memory_id
        for text in ("a bank loan", "another bank loan")
    )
    pin = store.remember("PIN 7391", ["bank", "PIN"], namespace="home").memory_id
    bank = store.state.key_for_label("bank").id  # type: ignore[union-attr]
    gone = store.forget(pin)
    assert [(k.key_id, k.reason) for k in gone.labels_kept] == [
        (bank, f"also a key of {elm} and 1 more and of memories in other namespaces")
    ]
    gone = store.forget(other_loan)
    assert [k.reason for k in gone.labels_kept] == [
        f"also a key of {loan} and of memories in other namespaces",
        f"also a key of {loan}",
    ]
    store.close()
    store = open_store(home)
    assert isinstance(store.state.memories, snapshots.LazyNodes)
    gone = store.forget(loan)
    assert [(k.key_id, k.reason) for k in gone.labels_kept] == [
        (bank, "also a key of memories in other namespaces")
    ]
    store.close()


def test_an_erasing_forget_drops_the_label_rows_of_its_keys_and_embeds_no_label_again(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a forget that erases labels, the label rows (now and as of a past point) are
    those of a build from scratch, without the erased ones, and no label is embedded again:
    every later recall, and every past read, re-embedded all the labels (~100 ms at 20,000)."""
    store = open_store(home)
    fill(store, 4)
    past = store.state.seq
    secret = store.remember("my bank PIN is 7391", ["Zorblax code", "bank"]).memory_id
    store.remember("the bank opens at nine", ["bank"])
    store.recall("bank")  # the label rows, built
    before = view(store, past).recall("bank")  # a past state kept, and its rows
    zorblax = store.state.key_for_label("Zorblax code").id  # type: ignore[union-attr]
    assert store.forget(secret).labels_erased == [zorblax]
    embedded: list[str] = []
    embed = store.embed

    def spy(texts: list[str], *args: Any, **kwargs: Any) -> Any:
        embedded.extend(texts)
        return embed(texts, *args, **kwargs)

    monkeypatch.setattr(store, "embed", spy)
    rows = store.key_vectors()
    past_rows = view(store, past).key_vectors()
    assert view(store, past).recall("bank") == before
    assert embedded == []
    monkeypatch.setattr(store, "embed", embed)
    store.remember("the cat sleeps all day", ["Mittens"])  # a label after the erased one
    rows = store.key_vectors()
    assert rows.ids[-1] == store.state.key_for_label("Mittens").id  # type: ignore[union-attr]
    store._key_vectors = None  # from scratch
    fresh = store.key_vectors()
    assert rows.ids == fresh.ids and np.array_equal(rows.matrix, fresh.matrix)
    assert "Zorblax code".casefold() not in store.state.labels
    assert past_rows.ids == fresh.ids[: len(past_rows.ids)]
    store.close()


def test_a_past_view_across_another_process_erasing_a_label_answers_as_a_fresh_one(
    home: Path,
) -> None:
    """A view of a past point taken just before another process's forget erased a label its
    state held: the query's catch-up folds the forget, which drops the label's rows from the
    store's, while the view's state still held the label. Lined up one off, the rows named a
    key made after the point (KeyError in the past state) or the erased label's words matched."""
    store = open_store(home)
    fill(store, 3)
    secret = store.remember("my bank PIN is 7391", ["Zorblax code", "bank"]).memory_id
    past = store.state.seq
    for i in range(3):  # keys made after the point, whose rows follow the erased one
        store.remember(f"the cat {i} sleeps all day", [f"Mittens {i}", "cat"])
    store.recall("bank")  # the label rows, built
    then = view(store, past)
    other = open_store(home)
    assert other.forget(secret).labels_erased
    other.close()
    answers = [then.recall(q) for q in ("Zorblax code", "bank", "cat sleeps")]
    fresh = view(store, past)
    assert answers == [fresh.recall(q) for q in ("Zorblax code", "bank", "cat sleeps")]
    assert all(k.label != "Zorblax code" for a in answers for k in [*a.keys, *a.nearest])
    store.close()


def test_forgetting_one_version_keeps_the_labels_the_other_still_uses(home: Path) -> None:
    store = open_store(home)
    old = store.remember("Dana lives in Lyon", ["Dana", "Lyon"], {"Dana": "name"}).memory_id
    new = store.correct(old, "Dana moved to Oslo", ["Dana", "Oslo"], {"Dana": "name"}).memory_id
    dana = store.state.key_for_label("Dana").id  # type: ignore[union-attr]
    oslo = store.state.key_for_label("Oslo").id  # type: ignore[union-attr]
    gone = store.forget(new)
    assert gone.labels_erased == [oslo]
    assert [(k.key_id, k.reason) for k in gone.labels_kept] == [(dana, f"also a key of {old}")]
    assert label_files(home, "Oslo") == [] and label_files(home, "Dana")
    # Forgetting the other version too: Dana leads to forgotten memories only, and goes; the
    # line of the version forgotten first loses it as well.
    rest = store.forget(old)
    assert sorted(rest.labels_erased) == sorted([dana, store.state.memories[old].keys[1]])
    assert label_files(home, "Dana", "Lyon") == []
    report = verify(home)
    assert report.ok, report.problems
    assert encoded(replay(home)) == encoded(store.state)
    store.close()
    assert encoded(open_store(home).state) == encoded(replay(home))


def test_a_label_named_in_another_case_loses_its_row_too(home: Path) -> None:
    """A memory that named an existing key in another case ("ZORBLAX CODE") wrote that
    spelling in its line and embedded it: the forget erases both."""
    store = open_store(home)
    first = store.remember("the vault code is 4412", ["Zorblax code"]).memory_id
    second = store.remember("the vault code changed to 9921", ["ZORBLAX CODE"]).memory_id
    store.vectors.flush()
    assert text_hash("ZORBLAX CODE") in store.vectors
    assert store.forget(first).labels_erased == []
    (key,) = store.forget(second).labels_erased
    assert store.state.keys[key].label == ""
    assert label_files(home, "Zorblax code", "ZORBLAX CODE") == []
    cache = VectorCache(home / "cache" / "vectors", "hash:v1:256", 256)
    for text in ("Zorblax code", "ZORBLAX CODE", "zorblax code"):
        assert text_hash(text) not in cache
    assert verify(home).ok
    assert encoded(replay(home)) == encoded(store.state)
    store.close()


def test_read_key_marks_a_label_a_forget_erased(home: Path) -> None:
    """read_key of a key whose label went with its memories answered `label: ""` and nothing
    said why (the CLI says "label erased by a forget"): `label_erased` says it, over MCP too,
    now and as of before the forget."""
    import anyio

    from keytrail.server.mcp_server import build_server

    with open_store(home) as store:
        secret = store.remember("my bank PIN is 7391", ["PIN", "bank"]).memory_id
        store.remember("the bank opens at nine", ["bank"])
        bank = store.state.key_for_label("bank").id  # type: ignore[union-attr]
        (pin,) = store.forget(secret).labels_erased
        for page in (store.read_key(pin), view(store, 2).read_key(pin)):
            assert (page.label, page.label_erased, page.total) == ("", True, 0)
        assert store.read_key(bank).label_erased is False

        async def answers() -> list[Any]:
            server = build_server(store)
            got = []
            for key_id in (pin, bank):
                result = await server.call_tool("read_key", {"key_id": key_id})
                got.append(result.structured_content)
            return got

        erased, kept = anyio.run(answers)
    assert (erased["label"], erased["label_erased"]) == ("", True)
    assert (kept["label"], kept["label_erased"]) == ("bank", False)


def test_a_key_id_given_for_a_memory_says_its_label_was_erased(home: Path) -> None:
    """A key id where a memory id goes names the key by its label; one whose label a forget
    erased was named as the key '' (read_memory, history, related, as of before it too)."""
    store = open_store(home)
    secret = store.remember("my PIN is 7391", ["PIN"]).memory_id
    (key,) = store.forget(secret).labels_erased
    for ask in (
        lambda: store.read_memory(key),
        lambda: history(store, key),
        lambda: store.related(key),
        lambda: read_memory_at(store, key, as_of=2),
    ):
        with pytest.raises(NotFound) as refused:
            ask()
        assert refused.value.field == "memory_id"
        assert "''" not in refused.value.message
        assert "label a forget erased" in refused.value.message
    store.close()


def test_the_forget_description_says_what_is_kept(home: Path) -> None:
    """The description said "Only the id, a hash of the content, the time and reason are kept",
    but history of a forgotten memory still shows its key labels and link weights, and the log
    still holds its session, source and the queries that read it. It says what is kept."""
    import anyio

    from keytrail.server.mcp_server import build_server

    with open_store(home) as store:
        made = store.remember(
            "Anna has a peanut allergy", ["peanuts", "allergy"], session_id="s1", source="chat"
        )
        store.read_memory(made.memory_id, query="what is Anna allergic to")
        store.forget(made.memory_id, reason="user asked")
        weights = history(store, made.memory_id).trajectory[-1].weights
        # Keys of that memory alone lose their labels with it: history names them by id.
        assert weights == {k: 1.0 for k in store.state.memories[made.memory_id].keys}
        kept = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
        for survivor in (b'"chat"', b'"s1"', b"what is Anna allergic to"):
            assert survivor in kept
        assert b'"peanuts"' not in kept
        assert files_holding(home, "Anna has a peanut allergy") == []

        async def described() -> str:
            tools = await build_server(store).list_tools()
            return next(t.description or "" for t in tools if t.name == "forget")

        text = " ".join(anyio.run(described).split())
    assert "Only the id, a hash of the content" not in text
    for said in ("key labels", "labels_kept", "link weights", "session", "source", "queries"):
        assert said in text, said


def test_the_files_a_forget_names_are_relative_to_a_home_given_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`keytrail --home s5 forget ...` named the log segment relative to the store
    (`log/...`) but every other file with the home in front (`s5/cache/...`)."""
    monkeypatch.chdir(tmp_path)
    store = open_store(Path("s5"))
    secret = store.remember(SECRET, ["bank"]).memory_id
    store.remember("the bank opens at nine", ["bank"])
    store.close()
    store = open_store(Path("s5"))
    gone = store.forget(secret)
    store.close()
    assert any(p.startswith("log/") for p in gone.purged)
    assert "cache/snapshot/keygraph.msgpack" in gone.purged
    assert all((tmp_path / "s5" / p).exists() for p in gone.purged), gone.purged
