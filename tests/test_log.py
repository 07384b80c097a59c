"""The segmented event log: gap-free seqs, ordered time, segments, torn tails, corruption."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from keytrail.core import Store
from keytrail.core.maintenance import verify
from keytrail.events import (
    CorruptLog,
    EventLog,
    FoldRules,
    LogCutBack,
    LogPosition,
    MemoryRead,
    StoreCreated,
    StoreError,
    TurnRecorded,
    encode_line,
    require_log,
    segment_name,
)
from keytrail.events import log as event_log

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def event(i: int) -> TurnRecorded:
    return TurnRecorded(session_id="s1", turn=i, role="user", content=f"turn number {i}")


#: The longest line `event(i)` makes once stamped (two-digit seq and turn, microseconds).
LINE = len(
    encode_line(
        msgspec.structs.replace(
            event(99), seq=99, at=datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
        )
    )
)


def created(log: EventLog) -> None:
    """Start a log the way a store does, so `verify` accepts it."""
    with log.lock() as app:
        app.append(StoreCreated(store_id="test", rules=FoldRules()))


def append(log: EventLog, n: int, start: int = 0) -> list[int]:
    seqs = []
    with log.lock() as app:
        for i in range(n):
            seqs.append(app.append(event(start + i)).seq)
    return seqs


def segment_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "log").iterdir() if p.suffix == ".jsonl")


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def ticking(start: datetime = T0, step: timedelta = timedelta(seconds=1)) -> Iterator[datetime]:
    t = start
    while True:
        yield t
        t += step


# -- order -----------------------------------------------------------------------------------


def test_seq_is_gap_free_from_one_across_lock_sessions_and_logs(tmp_path: Path) -> None:
    a, b = EventLog(tmp_path), EventLog(tmp_path)
    got = append(a, 3) + append(b, 2) + append(a, 4) + append(b, 1)
    assert got == list(range(1, 11))
    events = EventLog(tmp_path).read_new()
    assert [e.seq for e in events] == list(range(1, 11))
    assert [e.turn for e in events] == [0, 1, 2, 0, 1, 0, 1, 2, 3, 0]  # type: ignore[union-attr]


def test_lock_reports_what_others_appended(tmp_path: Path) -> None:
    a, b = EventLog(tmp_path), EventLog(tmp_path)
    append(a, 2)
    with b.lock() as app:
        assert [e.seq for e in app.pending] == [1, 2]
        assert app.next_seq == 3
    append(a, 1)
    with b.lock() as app:
        assert [e.seq for e in app.pending] == [3]


def test_record_time_never_goes_backwards(tmp_path: Path) -> None:
    times = iter(
        [
            T0 + timedelta(hours=5),
            T0 + timedelta(hours=1),
            T0 + timedelta(hours=7),
            T0,
            T0 + timedelta(hours=6),
        ]
    )
    log = EventLog(tmp_path, clock=lambda: next(times))
    for i in range(5):
        append(log, 1, i)
    ats = [e.at for e in EventLog(tmp_path).read_new()]
    assert ats == [T0 + timedelta(hours=h) for h in (5, 5, 7, 7, 7)]
    # A second process whose clock is behind also cannot go back in time.
    late = EventLog(tmp_path, clock=lambda: T0)
    append(late, 1)
    assert EventLog(tmp_path).read_new()[-1].at == T0 + timedelta(hours=7)


def test_record_time_keeps_microseconds_and_utc(tmp_path: Path) -> None:
    t = datetime(2025, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
    append(EventLog(tmp_path, clock=lambda: t), 1)
    (e,) = EventLog(tmp_path).read_new()
    assert e.at == t and e.at.utcoffset() == timedelta(0)
    raw = json.loads(segment_files(tmp_path)[0].read_bytes())
    assert raw["at"] == "2025-06-01T12:00:00.123456Z"


# -- segments --------------------------------------------------------------------------------


def test_segments_roll_and_are_named_by_their_first_seq(tmp_path: Path) -> None:
    line = LINE
    log = EventLog(tmp_path, segment_bytes=3 * line)
    follower = EventLog(tmp_path)
    seen = []
    for i in range(20):
        append(log, 1, i)
        if i % 3 == 0:
            seen += follower.read_new()
    seen += follower.read_new()
    files = segment_files(tmp_path)
    assert len(files) == 7  # 3 lines per segment
    for f in files:
        first = json.loads(lines_of(f)[0])
        assert f.name == segment_name(first["seq"])
        assert f.stat().st_size <= 3 * line
    assert [e.seq for e in EventLog(tmp_path).read_new()] == list(range(1, 21))
    assert [e.seq for e in seen] == list(range(1, 21))


def test_a_missing_segment_is_named_where_the_gap_begins(tmp_path: Path) -> None:
    """A segment gone from the middle of the log shows as a gap at the next segment's first
    line: the error says which seqs are missing and names the segment that held the first."""
    log = EventLog(tmp_path, segment_bytes=3 * LINE)
    append(log, 9)
    files = segment_files(tmp_path)
    assert [f.name for f in files[:3]] == [segment_name(s) for s in (1, 4, 7)]
    files[1].unlink()
    with pytest.raises(CorruptLog) as caught:
        EventLog(tmp_path).read_new()
    assert (caught.value.segment, caught.value.line) == (segment_name(7), 1)
    assert caught.value.reason == (
        f"seq 7 follows 3 (the log must be gap-free); seq 4 to 6 are missing: is segment "
        f"{segment_name(4)} (or one after it) gone?"
    )


def test_a_line_longer_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log = EventLog(tmp_path, segment_bytes=50)
    append(log, 3)
    files = segment_files(tmp_path)
    assert [len(lines_of(f)) for f in files] == [1, 1, 1]
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]


def test_reader_sees_a_new_segment_even_if_the_directory_mtime_did_not_change(
    tmp_path: Path,
) -> None:
    """Directory mtimes are coarse (a kernel tick): a segment created in the same tick as the
    reader's last listing must not be missed, by readers or by appenders."""
    line = LINE
    reader = EventLog(tmp_path, segment_bytes=2 * line)
    writer = EventLog(tmp_path, segment_bytes=2 * line)
    append(writer, 2)
    assert len(reader.read_new()) == 2
    stamp = os.stat(tmp_path / "log").st_mtime_ns
    append(writer, 2)  # rolls into segment 3
    os.utime(tmp_path / "log", ns=(stamp, stamp))  # as if it all happened in one tick
    assert [e.seq for e in reader.read_new()] == [3, 4]
    append(reader, 1)
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3, 4, 5]


def test_appender_in_a_stale_listing_does_not_overwrite_a_segment(tmp_path: Path) -> None:
    line = LINE
    a = EventLog(tmp_path, segment_bytes=2 * line)
    b = EventLog(tmp_path, segment_bytes=2 * line)
    append(a, 2)
    a.read_new()  # a's listing is now as fresh as the directory's mtime
    stamp = os.stat(tmp_path / "log").st_mtime_ns
    append(b, 1)  # seq 3 in a new segment
    os.utime(tmp_path / "log", ns=(stamp, stamp))
    assert append(a, 1) == [4]
    assert [(e.seq, e.turn) for e in EventLog(tmp_path).read_new()] == [  # type: ignore[union-attr]
        (1, 0),
        (2, 1),
        (3, 0),
        (4, 0),
    ]


# -- torn tails and partial lines -------------------------------------------------------------


def test_reader_ignores_a_partial_last_line_until_it_is_complete(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    append(log, 2)
    reader = EventLog(tmp_path)
    assert len(reader.read_new()) == 2
    seg = segment_files(tmp_path)[0]
    line = encode_line(MemoryRead(seq=3, at=T0 + timedelta(days=999), memory_id="m_x"))
    with open(seg, "ab") as f:
        f.write(line[:25])
    assert reader.read_new() == []
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2]
    assert reader.position.seq == 2
    with open(seg, "ab") as f:
        f.write(line[25:])
    assert [e.seq for e in reader.read_new()] == [3]


def test_torn_tail_is_cut_by_the_next_appender_and_kept_aside(tmp_path: Path) -> None:
    created(EventLog(tmp_path))
    append(EventLog(tmp_path), 2)
    seg = segment_files(tmp_path)[0]
    good_size = seg.stat().st_size
    torn = encode_line(event(99))[:-7]
    with open(seg, "ab") as f:
        f.write(torn)
    report = verify(tmp_path)
    assert not report.ok and "torn" in report.problems[0]
    assert report.events == 3
    assert append(EventLog(tmp_path), 2) == [4, 5]
    side = tmp_path / "log" / "torn" / f"{seg.name}.{good_size}.torn"
    assert side.read_bytes() == torn
    assert seg.read_bytes().endswith(b"\n")
    events = EventLog(tmp_path).read_new()
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    report = verify(tmp_path)
    assert report.ok, report.problems
    assert report.torn_files == [side.name]


def test_torn_first_line_of_a_new_segment_is_cut(tmp_path: Path) -> None:
    line = LINE
    log = EventLog(tmp_path, segment_bytes=2 * line)
    append(log, 2)
    # A writer died while starting segment 3.
    (tmp_path / "log" / segment_name(3)).write_bytes(encode_line(event(5))[:30])
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2]
    assert append(EventLog(tmp_path, segment_bytes=2 * line), 3) == [3, 4, 5]
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3, 4, 5]
    assert (tmp_path / "log" / "torn" / f"{segment_name(3)}.0.torn").exists()
    for f in segment_files(tmp_path):
        assert f.name == segment_name(json.loads(lines_of(f)[0])["seq"])


def test_an_empty_segment_left_by_a_crash_is_used(tmp_path: Path) -> None:
    line = LINE
    created(EventLog(tmp_path))
    append(EventLog(tmp_path, segment_bytes=2 * line), 1)
    (tmp_path / "log" / segment_name(3)).write_bytes(b"")
    assert append(EventLog(tmp_path, segment_bytes=2 * line), 1) == [3]
    assert verify(tmp_path).ok
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]


def test_empty_segments_keytrail_never_leaves_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Two empty segments (by hand: keytrail starts a segment only after the one before holds
    a line): the appender wrote store.created, seq 1, into the last, segment 2, and every
    reader then refused the store as holding "no complete event" (its first segment held
    none). The reader, and with it the appender, refuses such a log, naming the segment."""
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    for seq in (1, 2):
        (log_dir / segment_name(seq)).write_bytes(b"")
    with pytest.raises(CorruptLog) as caught:
        created(EventLog(tmp_path))
    assert caught.value.segment == segment_name(1)
    assert f"though segment {segment_name(2)} follows it" in caught.value.reason
    assert [p.stat().st_size for p in segment_files(tmp_path)] == [0, 0]
    assert require_log(tmp_path) == tmp_path  # readers get as far and say the same
    with pytest.raises(CorruptLog):
        EventLog(tmp_path).read_new()
    # One empty segment named for a later seq than the log's next: never written into.
    (log_dir / segment_name(1)).unlink()
    with pytest.raises(CorruptLog) as caught:
        created(EventLog(tmp_path))
    assert caught.value.segment == segment_name(2)
    assert "the log's next event is seq 1" in caught.value.reason
    assert [p.stat().st_size for p in segment_files(tmp_path)] == [0]


def test_an_empty_segment_named_for_the_next_seq_is_still_written_into(tmp_path: Path) -> None:
    """What a first open or a rollover that died before its line was whole leaves."""
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / segment_name(1)).write_bytes(b"")
    created(EventLog(tmp_path))
    assert [json.loads(lines_of(f)[0])["seq"] for f in segment_files(tmp_path)] == [1]
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1]


def test_a_failed_write_leaves_no_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = EventLog(tmp_path)
    append(log, 2)
    size = segment_files(tmp_path)[0].stat().st_size

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StoreError, match="No space left on device"), log.lock() as app:
        app.append(event(7))
    monkeypatch.undo()
    assert segment_files(tmp_path)[0].stat().st_size == size
    assert append(log, 1) == [3]
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]


def test_an_append_is_flushed_to_the_drive_where_fsync_is_not_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On macOS fsync(2) leaves the line in the drive's cache, which a power cut can lose:
    an acknowledged append asks for F_FULLFSYNC there (plain fsync where it is refused)."""
    import fcntl

    log = EventLog(tmp_path)
    append(log, 1)
    calls: list[str] = []
    monkeypatch.setattr(fcntl, "F_FULLFSYNC", 51, raising=False)  # its value on macOS
    real_fcntl = fcntl.fcntl

    def fcntl_(fd: int, cmd: int, *args: object) -> object:
        if cmd == 51:
            calls.append("full")
            return 0
        return real_fcntl(fd, cmd, *args)

    monkeypatch.setattr(fcntl, "fcntl", fcntl_)
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync"))
    append(log, 1)
    assert calls == ["full"]

    def refused(fd: int, cmd: int, *args: object) -> object:
        if cmd == 51:
            raise OSError(45, "Operation not supported")  # ENOTSUP: some network filesystems
        return real_fcntl(fd, cmd, *args)

    monkeypatch.setattr(fcntl, "fcntl", refused)
    calls.clear()
    append(log, 1)
    assert calls == ["fsync"]
    monkeypatch.undo()
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]


# -- corruption ------------------------------------------------------------------------------


def _three_segments(tmp_path: Path) -> list[Path]:
    line = LINE
    append(EventLog(tmp_path, segment_bytes=4 * line + 4), 12)
    files = segment_files(tmp_path)
    assert len(files) == 3
    return files


def _rewrite_line(path: Path, index: int, new: bytes) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[index] = new
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda line: line.replace(b"turn number", b"turn numbeR"), "checksum"),
        (lambda line: line[: len(line) // 2], "checksum|JSON"),
        (lambda line: b"\x00\x01garbage", "JSON"),
        (lambda line: b"", "JSON"),  # a blank line is a line, not a gap between two
        (
            lambda line: line.replace(b'"type":"turn.recorded"', b'"type":"turn.exploded"'),
            "checksum|unknown",
        ),
    ],
)
def test_a_corrupt_line_in_the_middle_stops_open_naming_segment_and_line(
    tmp_path: Path, damage: object, reason: str
) -> None:
    files = _three_segments(tmp_path)
    victim = files[1]
    _rewrite_line(victim, 2, damage(lines_of(victim)[2]))  # type: ignore[operator]
    reader = EventLog(tmp_path)
    with pytest.raises(CorruptLog, match=reason) as info:
        reader.read_new()
    assert info.value.segment == victim.name
    assert info.value.line == 3
    assert victim.name in str(info.value) and "line 3" in str(info.value)
    assert reader.position.seq == 6  # it stopped right before the bad line
    report = verify(tmp_path)
    assert not report.ok and f"{victim.name} line 3" in report.problems[0]


def test_a_checksum_mismatch_with_valid_json_is_corruption(tmp_path: Path) -> None:
    files = _three_segments(tmp_path)
    line = lines_of(files[0])[1]
    _rewrite_line(files[0], 1, line.replace(b'"turn":1', b'"turn":9'))
    with pytest.raises(CorruptLog, match="checksum") as info:
        EventLog(tmp_path).read_new()
    assert (info.value.segment, info.value.line) == (files[0].name, 2)


def test_a_store_refuses_to_open_a_corrupt_log(tmp_path: Path) -> None:
    from keytrail.core import HashEmbedder, Settings

    settings = Settings(home=tmp_path, embedder="hash")
    with Store(settings, embedder=HashEmbedder()) as s:
        s.remember("the sky is blue", ["sky"])
        s.remember("grass is green", ["grass"])
    import shutil

    shutil.rmtree(tmp_path / "cache")  # no snapshot: open must read every line
    seg = segment_files(tmp_path)[0]
    _rewrite_line(seg, 1, lines_of(seg)[1].replace(b"the sky", b"the SKY"))
    with pytest.raises(CorruptLog) as info:
        Store(settings, embedder=HashEmbedder())
    assert (info.value.segment, info.value.line) == (seg.name, 2)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        ("gap", "gap-free"),
        ("dup", "gap-free"),
        ("time", "before"),
    ],
)
def test_a_well_formed_line_out_of_order_is_corruption(
    tmp_path: Path, mutate: str, reason: str
) -> None:
    log = EventLog(tmp_path, clock=ticking().__next__)
    append(log, 4)
    seg = segment_files(tmp_path)[0]
    lines = lines_of(seg)
    if mutate == "gap":
        del lines[2]
    elif mutate == "dup":
        lines.insert(2, lines[1])
    else:
        lines[2] = encode_line(
            TurnRecorded(
                seq=3, at=T0 - timedelta(days=1), session_id="s1", turn=2, role="user", content="x"
            )
        )[:-1]
    seg.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CorruptLog, match=reason) as info:
        EventLog(tmp_path).read_new()
    assert info.value.line == 3


def test_a_line_without_newline_before_other_lines_is_not_a_torn_tail(tmp_path: Path) -> None:
    files = _three_segments(tmp_path)
    data = files[0].read_bytes()
    files[0].write_bytes(data[:-1] + b"\n")  # still fine
    lines = lines_of(files[0])
    files[0].write_bytes(lines[0] + b"\n" + lines[1][:20] + lines[2] + b"\n" + lines[3] + b"\n")
    with pytest.raises(CorruptLog) as info:
        EventLog(tmp_path).read_new()
    assert (info.value.segment, info.value.line) == (files[0].name, 2)


# -- seeking ---------------------------------------------------------------------------------


def test_seek_resumes_exactly_after_a_position(tmp_path: Path) -> None:
    line = LINE
    append(EventLog(tmp_path, segment_bytes=3 * line), 8)
    reader = EventLog(tmp_path)
    it = reader.iter_new()
    for _ in range(5):
        next(it)
    pos = reader.position
    assert pos.seq == 5
    fresh = EventLog(tmp_path)
    assert fresh.seek(pos)
    assert [e.seq for e in fresh.read_new()] == [6, 7, 8]


def test_seek_rejects_a_stale_position(tmp_path: Path) -> None:
    append(EventLog(tmp_path), 4)
    reader = EventLog(tmp_path)
    reader.read_new()
    good = reader.position
    fresh = EventLog(tmp_path)
    assert not fresh.seek(LogPosition(good.segment, good.offset - 3, good.seq, good.at))
    assert not fresh.seek(LogPosition(good.segment, good.offset + 100, good.seq, good.at))
    assert not fresh.seek(LogPosition(segment_name(99), 0, 98, good.at))
    # A position whose seq does not match the next line (log rewritten) is stale too.
    first = EventLog(tmp_path)
    it = first.iter_new()
    next(it)
    p1 = first.position
    assert not fresh.seek(LogPosition(p1.segment, p1.offset, 2, p1.at))
    assert fresh.seek(p1) and [e.seq for e in fresh.read_new()] == [2, 3, 4]


def fractional() -> datetime:
    """Now, never on a whole second: such a time is written without its fraction, shorter."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond or 1)


@pytest.mark.parametrize("regrown", ["nothing", "shorter", "longer", "same length"])
def test_lines_a_reader_folded_and_a_writer_cut_back_are_noticed_never_written_past(
    tmp_path: Path, regrown: str
) -> None:
    """A writer's failed append cuts back lines a lock-free reader already folded. The reader
    raises LogCutBack, reading and under the lock, whatever was written there since; it read
    on from the middle of a line (CorruptLog), kept the cut line, or wrote past the end of
    the file, leaving a hole of NUL bytes that no process could read again."""
    writer, reader = EventLog(tmp_path, clock=fractional), EventLog(tmp_path, clock=fractional)
    append(writer, 2)
    reader.read_new()
    append(reader, 1)  # the reader has written: its lock may take the shortcut
    (segment,) = segment_files(tmp_path)
    size = segment.stat().st_size
    append(writer, 1, start=2)
    assert [e.seq for e in reader.read_new()] == [4]
    folded_end = reader.position.offset
    os.truncate(segment, size)  # what the failed append does
    if regrown != "nothing":
        content = {"shorter": "t", "longer": "a much longer turn", "same length": "turn number 2"}
        with EventLog(tmp_path, clock=fractional).lock() as app:
            app.append(TurnRecorded(session_id="s1", turn=2, role="user", content=content[regrown]))
        assert (segment.stat().st_size == folded_end) == (regrown == "same length")
    before = segment.read_bytes()

    with pytest.raises(LogCutBack) as cut:
        reader.read_new()
    assert (cut.value.segment, cut.value.seq) == (segment.name, 4)
    with pytest.raises(LogCutBack), reader.lock() as app:
        app.append(event(9))
    assert segment.read_bytes() == before  # nothing written, no hole
    assert b"\0" not in before


def test_a_segment_a_cut_batch_started_and_another_writer_started_again_is_noticed(
    tmp_path: Path,
) -> None:
    """A batch wrote seq 2 at the end of the first segment and started the next (named 3), then
    failed: both cut. The reader had read seq 2 and stood at the start of segment 3. Another
    writer's seq 2 filled the first segment and its seq 3 started a segment 3 again: the reader
    read on from there, keeping the cut seq 2."""
    times = ticking()
    writer = EventLog(tmp_path, segment_bytes=2 * LINE, clock=lambda: next(times))
    reader = EventLog(tmp_path, segment_bytes=2 * LINE)
    append(writer, 1)
    (first,) = segment_files(tmp_path)
    kept = first.stat().st_size
    append(writer, 1, start=1)
    (tmp_path / "log" / segment_name(3)).touch()  # the batch's next segment, before its line
    assert [e.seq for e in reader.read_new()] == [1, 2]
    assert reader.position.segment == segment_name(3)
    os.truncate(first, kept)  # the batch's cut
    (tmp_path / "log" / segment_name(3)).unlink()
    again = EventLog(tmp_path, segment_bytes=2 * LINE, clock=lambda: next(times))
    assert append(again, 2, start=1) == [2, 3]
    assert [p.name for p in segment_files(tmp_path)] == [first.name, segment_name(3)]

    with pytest.raises(LogCutBack):
        reader.read_new()
    with pytest.raises(LogCutBack), reader.lock() as app:
        app.append(event(9))


def test_a_line_redacted_in_place_is_not_taken_for_a_cut(tmp_path: Path) -> None:
    """A forget rewrites a line at the same length, seq and time (events/redact.py): the
    reader whose last line it is reads on, and writes on."""
    writer, reader = EventLog(tmp_path), EventLog(tmp_path)
    append(writer, 3)
    reader.read_new()
    (segment,) = segment_files(tmp_path)
    data = segment.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1]
    was = EventLog(tmp_path).read_new()[-1]
    blanked = msgspec.structs.replace(was, content=" " * len(was.content))  # type: ignore[union-attr]
    line = encode_line(blanked)[:-1]
    assert len(line) == len(last)
    replaced = tmp_path / "replaced"
    replaced.write_bytes(data[: len(data) - len(last) - 1] + line + b"\n")
    os.replace(replaced, segment)  # as apply_redaction does

    assert reader.read_new() == []
    append(writer, 1, start=3)
    assert [e.seq for e in reader.read_new()] == [4]
    assert append(reader, 1, start=4) == [5]


def counting_opens(log: EventLog, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The segments `log` opens to read, from now on."""
    opened: list[str] = []
    real = log._open_segment

    def counted(name: str) -> event_log.SegmentFile:
        opened.append(name)
        return real(name)

    monkeypatch.setattr(log, "_open_segment", counted)
    return opened


def test_a_reader_reads_nothing_while_a_stat_shows_the_log_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query's refresh read the end of the segment every time (to check the line folded last)
    even when no one had written: a few hundred microseconds of each call. A stat taken long
    enough after the segment's last change says whether anything could have changed; what did
    is still read, a cut back regrown to the same size included."""
    now = event_log._now_ns
    monkeypatch.setattr(event_log, "_now_ns", lambda: now() + 10 * event_log._RACY_NS)
    writer = EventLog(tmp_path, segment_bytes=4 * LINE, clock=fractional)
    reader = EventLog(tmp_path, segment_bytes=4 * LINE)
    append(writer, 2)
    opened = counting_opens(reader, monkeypatch)
    assert [e.seq for e in reader.read_new()] == [1, 2]
    assert len(opened) == 1

    assert reader.read_new() == [] and reader.read_new() == []
    assert len(opened) == 1  # two stats each, no read

    append(writer, 1, start=2)
    assert [e.seq for e in reader.read_new()] == [3]
    append(writer, 2, start=3)  # the second starts the next segment
    assert [e.seq for e in reader.read_new()] == [4, 5]
    assert reader.position.segment == segment_name(5)
    assert reader.read_new() == []
    opened.clear()
    assert reader.read_new() == [] and opened == []

    # Cut back and regrown to the same size: only the file's times say so.
    segment = segment_files(tmp_path)[-1]
    st = segment.stat()
    os.truncate(segment, 0)
    with EventLog(tmp_path, segment_bytes=4 * LINE, clock=fractional).lock() as app:
        app.append(TurnRecorded(session_id="s1", turn=9, role="user", content="turn number 9"))
    assert segment.stat().st_size == st.st_size
    os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # a later tick than the stat's
    with pytest.raises(LogCutBack):
        reader.read_new()


def test_a_stat_taken_soon_after_the_segment_changed_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file's times are only as fine as a tick: a cut back and a regrowth to the same size
    in the tick of the reader's look leave its stat as it was. Only a stat taken well after
    the last change (`_RACY_NS`) lets the next read be skipped."""
    writer, reader = EventLog(tmp_path), EventLog(tmp_path)
    append(writer, 2)
    (segment,) = segment_files(tmp_path)
    st = segment.stat()
    changed = max(st.st_mtime_ns, st.st_ctime_ns)
    monkeypatch.setattr(event_log, "_now_ns", lambda: changed + event_log._RACY_NS // 2)
    opened = counting_opens(reader, monkeypatch)
    reader.read_new()
    assert reader.read_new() == [] and reader.read_new() == []
    assert len(opened) == 3  # each read checks the line folded last
    monkeypatch.setattr(event_log, "_now_ns", lambda: changed + 2 * event_log._RACY_NS)
    assert reader.read_new() == [] and reader.read_new() == []
    assert len(opened) == 4


def test_seek_rejects_a_position_whose_line_was_cut_back_and_written_again(
    tmp_path: Path,
) -> None:
    """A snapshot's position after seq 3, whose line a failed append cut back and another
    writer then wrote again (another event at seq 3): the snapshot holds the cut event, so
    the position is stale, though the byte before it is a newline and nothing follows."""
    times = ticking()
    append(EventLog(tmp_path, clock=lambda: next(times)), 3)
    reader = EventLog(tmp_path)
    reader.read_new()
    position = reader.position
    (segment,) = segment_files(tmp_path)
    os.truncate(segment, len(b"".join(line + b"\n" for line in lines_of(segment)[:2])))
    append(EventLog(tmp_path, clock=lambda: next(times)), 1, start=2)
    assert segment.stat().st_size == position.offset
    assert not EventLog(tmp_path).seek(position)


# -- a writer keeps its files open between commands -------------------------------------------


def test_a_writer_that_keeps_its_segment_open_still_cuts_a_torn_tail(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    append(log, 2)
    seg = segment_files(tmp_path)[0]
    good_size = seg.stat().st_size
    with open(seg, "ab") as f:  # another process died mid-line
        f.write(encode_line(event(99))[:-7])
    assert append(log, 1) == [3]
    assert (tmp_path / "log" / "torn" / f"{seg.name}.{good_size}.torn").exists()
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]
    assert verify(tmp_path).events == 3


def test_a_segment_rewritten_by_rename_gets_the_next_line(tmp_path: Path) -> None:
    # What a forget in another process does to the segment this writer holds open.
    log = EventLog(tmp_path)
    append(log, 2)
    seg = segment_files(tmp_path)[0]
    copy = seg.with_name(".rewrite")
    copy.write_bytes(seg.read_bytes())
    os.replace(copy, seg)
    assert append(log, 1) == [3]
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3]


def test_a_writer_sees_a_segment_another_started_with_the_old_one_unchanged(
    tmp_path: Path,
) -> None:
    a = EventLog(tmp_path, segment_bytes=3 * LINE)
    b = EventLog(tmp_path, segment_bytes=3 * LINE)
    assert append(a, 3) == [1, 2, 3]
    assert append(b, 1) == [4]  # rolled: the segment `a` holds open has not changed
    assert len(segment_files(tmp_path)) == 2
    with a.lock() as app:
        assert [e.seq for e in app.pending] == [4]
        assert app.append(event(5)).seq == 5
    assert [e.seq for e in EventLog(tmp_path).read_new()] == [1, 2, 3, 4, 5]


def test_threads_sharing_one_log_append_without_gaps_or_repeats(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    got: list[int] = []

    def work() -> None:
        for i in range(40):
            got.extend(append(log, 1, i))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 161))
    assert [e.seq for e in EventLog(tmp_path).read_new()] == list(range(1, 161))


def test_closing_a_log_releases_its_files_and_it_appends_again(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    append(log, 1)
    log.close()
    assert append(log, 1) == [2]
    log.close()
