"""PinnedLog: the log as it stood when pinned, over several segments, a torn tail, appends and
rolls after the pin, and a segment replaced (as a forget's redaction does) after the pin.

It is what export and log read (core/forgetting.settled_log), so it must read exactly what a
plain reader would have read at the pin, and never more than a chunk of a segment at a time.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keytrail.events import EventLog, PinnedLog, TurnRecorded
from keytrail.events import log as log_module


def turn(i: int) -> TurnRecorded:
    return TurnRecorded(session_id="s1", turn=i, role="user", content=f"turn number {i:04d}")


def append(log: EventLog, start: int, n: int) -> None:
    with log.lock() as app:
        for i in range(start, start + n):
            app.append(turn(i))


def segments(root: Path) -> list[Path]:
    return sorted((root / "log").glob("*.jsonl"))


def contents(log: EventLog) -> list[tuple[int, str]]:
    return [(e.seq, e.content) for e in log.iter_new() if isinstance(e, TurnRecorded)]


def test_a_pin_over_several_segments_and_a_torn_tail_reads_what_was_there(
    tmp_path: Path,
) -> None:
    writer = EventLog(tmp_path, segment_bytes=400)
    append(writer, 0, 12)
    assert len(segments(tmp_path)) >= 3
    with open(segments(tmp_path)[-1], "ab") as f:
        f.write(b'{"type":"turn.recorded","seq":13,')  # a writer caught mid-line
    expected = contents(EventLog(tmp_path))
    assert [seq for seq, _ in expected] == list(range(1, 13))

    pinned = PinnedLog(tmp_path)
    try:
        # After the pin: the torn tail is cut by the next appender, more lines roll new
        # segments, and the first segment is replaced by a same-size file whose first line
        # fails its checksum: read through the path, it would stop the read as corrupt.
        append(writer, 12, 12)
        first = segments(tmp_path)[0]
        original = first.read_bytes()
        copy = first.with_suffix(".tmp")
        copy.write_bytes(original.replace(b"turn number 0000", b"turn number XXXX"))
        os.replace(copy, first)
        assert pinned.replaced()
        assert contents(pinned) == expected
        assert pinned.position.seq == 12
    finally:
        pinned.close()
    first.write_bytes(original)
    assert [seq for seq, _ in contents(EventLog(tmp_path))] == list(range(1, 25))


def test_a_pinned_segment_is_read_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Export holds no whole segment in memory (64 MiB by default, more if configured): a
    pinned segment is read in the same chunks a plain reader uses."""
    chunk = 1024
    monkeypatch.setattr(log_module, "_READ_CHUNK", chunk)
    writer = EventLog(tmp_path)  # one segment, many chunks long
    append(writer, 0, 200)
    (segment,) = segments(tmp_path)
    assert segment.stat().st_size > 10 * chunk
    expected = contents(EventLog(tmp_path))

    asked: list[int] = []
    real_pread = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        asked.append(length)
        return real_pread(fd, length, offset)

    monkeypatch.setattr(os, "pread", pread)
    pinned = PinnedLog(tmp_path)
    try:
        assert contents(pinned) == expected
    finally:
        pinned.close()
    assert asked and max(asked) <= chunk


def test_a_pinned_segment_has_the_size_it_had_when_pinned(tmp_path: Path) -> None:
    """What export's progress bar counts: the bytes the pinned reader will read, not what
    other processes appended (or a forget rewrote) since."""
    writer = EventLog(tmp_path)
    append(writer, 0, 3)
    (segment,) = segments(tmp_path)
    size = segment.stat().st_size
    pinned = PinnedLog(tmp_path)
    try:
        append(writer, 3, 5)
        assert segment.stat().st_size > size
        assert pinned.segment_size(segment.name) == size
        assert writer.segment_size(segment.name) == segment.stat().st_size
        assert len(contents(pinned)) == 3 and pinned.position.offset == size
    finally:
        pinned.close()
