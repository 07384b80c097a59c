"""The append-only, segmented JSONL event log: the only source of truth of a store.

Layout under a store directory::

    log/00000000000000000001.jsonl   segments, named by the seq of their first line
    log/torn/                        torn tails cut off by an appender, kept for inspection
    lock                             flock(2) target for appenders

Writers serialise on an exclusive flock of `lock`. Under the lock a writer first reads every line
other processes appended (so its decision sees them), then appends, then fsyncs before anyone is
told the command happened. Readers never lock: they read complete lines past their cursor, and a
partial last line (a write in progress, or a crashed writer's torn tail) is simply not there yet.

A whole line can still go: an appender whose write or fsync fails cuts its lines back, and a
reader may have folded them in between. So a reader keeps the last line it folded and reads each
time from that line's start: if the file no longer holds that line there (shorter, or another
line, not the same one redacted in place), it raises `LogCutBack` rather than read on from the
middle of a line, or write past the end of the file. Where nothing changed, a query pays no read:
a stat of the segment taken before the last read, long after its last change, that still
shows the same inode, size and times says no line was appended or cut since (`_RACY_NS`).

A writer keeps the lock file and the segment it appends to open between commands. Whether anyone
else touched the log since is two `stat`s under the lock: the cursor's segment still has the
inode and the size this process last saw, and no segment starts at the next seq. Anything else
(another writer, a torn tail, a forget that rewrote the segment by rename) takes the full path.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, Protocol

import msgspec

from .codec import DecodeError, Upcaster, decode_line, encode_line
from .durable import sync_dir, sync_file, sync_path
from .errors import CorruptLog, LockBusy, LogCutBack, NoStore, StoreError
from .types import EPOCH, AnyEvent, Event

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_READ_CHUNK = 16 * 1024 * 1024
#: How much older than the moment a reader looked a segment's mtime and ctime must be for a
#: later look to trust that an unchanged stat means unchanged lines: a file's times are only
#: as fine as the kernel's tick (or the file system's: whole seconds, two on FAT), so a cut back
#: and a regrowth to the same size right after the look may leave them as they were ("racy
#: git"). Two seconds is more than any of those.
_RACY_NS = 2_000_000_000
#: The wall clock the stat shortcut compares file times with (not the log's clock, which only
#: stamps events and may be any clock in tests).
_now_ns = time.time_ns
_SEGMENT_RE = re.compile(r"^(\d{20})\.jsonl$")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def segment_name(first_seq: int) -> str:
    return f"{first_seq:020d}.jsonl"


def require_log(root: Path | str) -> Path:
    """`root`, if it holds a store's log: a log/ directory of segments, the first of which
    holds at least one complete line when it is the only one.

    Otherwise NoStore, saying what is there instead. It only looks, so refusing a mistyped home
    leaves nothing behind (EventLog itself creates log/). A first segment with no complete line
    is a first open that died before its store.created was whole: only a writer may finish it,
    and a reader of the bare log (export, log, verify) would otherwise answer "0 events".
    """
    root = Path(root)
    if not root.exists():
        reason = "no such directory"
    elif not root.is_dir():
        reason = "not a directory"
    elif not (root / "log").is_dir():
        reason = "no log/ directory in it"
    else:
        segments = sorted(name for name in os.listdir(root / "log") if _SEGMENT_RE.match(name))
        if not segments:
            reason = "its log/ directory holds no segment"
        elif len(segments) == 1 and not _holds_a_line(root / "log" / segments[0]):
            # Several segments are a log that was written: what is wrong with it, the reader
            # says (an empty first segment followed by others is damage, not a missing store).
            reason = "its log holds no complete event"
        else:
            return root
    raise NoStore(str(root), reason)


def enclosing_store(root: Path | str) -> Path | None:
    """The store whose directory holds `root` (at any depth), if one does."""
    for parent in Path(root).absolute().parents:
        try:
            return require_log(parent)
        except (NoStore, OSError):  # OSError: a parent we may not read is no store of ours
            continue
    return None


def refuse_nested_store(root: Path | str) -> None:
    """Raise StoreError, before anything is made, if a new store at `root` would sit inside
    another store's directory: `--home ~/.keytrail/cache` is a typo, not a place for a store,
    and a rebuild or purge of the outer store would delete it."""
    if (Path(root) / "log").is_dir():
        return  # a store already, or someone's log/: made before this check existed
    outer = enclosing_store(root)
    if outer is not None:
        raise StoreError(
            f"will not make a store at {root}: it is inside the keytrail store at {outer}; "
            "choose a home outside it",
            path=str(root),
            store=str(outer),
        )


def _line_ending_at(f: Any, offset: int) -> bytes:
    """The line (without its newline) whose newline is the byte before `offset` in file `f`."""
    window = 4096
    while True:
        start = max(0, offset - 1 - window)
        f.seek(start)
        data: bytes = f.read(offset - 1 - start)
        cut = data.rfind(b"\n")
        if cut >= 0:
            return data[cut + 1 :]
        if start == 0:
            return data
        window *= 16


def _line_back(f: Any, end: int, skip: int) -> bytes | None:
    """The line (without its newline) `skip` lines before the one whose newline ends at `end`
    in file `f`, read backwards in windows; None if the file holds fewer lines there."""
    newlines: list[int] = []  # positions of the newlines met, from `end` back
    pos = end
    while pos > 0 and len(newlines) < skip + 2:
        start = max(0, pos - (1 << 20))
        f.seek(start)
        data: bytes = f.read(pos - start)
        if len(data) != pos - start:
            return None  # shorter than the cursor: cut back
        found = len(data)
        while len(newlines) < skip + 2:
            found = data.rfind(b"\n", 0, found)
            if found < 0:
                break
            newlines.append(start + found)
        pos = start
    if len(newlines) < skip + 1 or newlines[0] != end - 1:
        return None
    stop = newlines[skip]
    begin = newlines[skip + 1] + 1 if len(newlines) > skip + 1 else 0
    f.seek(begin)
    line: bytes = f.read(stop - begin)
    return line


def _same_event(line: bytes, other: bytes) -> bool:
    """Whether `other`, of `line`'s length, is `line` redacted in place (events/redact.py: the
    same seq, time and type, other content and checksum), not another event."""
    try:
        was, now = decode_line(line), decode_line(other)
    except DecodeError:
        return False
    return type(now) is type(was) and now.seq == was.seq and now.at == was.at


def _holds_a_line(path: Path) -> bool:
    """Whether the file holds a newline: reads only up to the first one."""
    with open(path, "rb") as f:
        while chunk := f.read(64 * 1024):
            if b"\n" in chunk:
                return True
    return False


@dataclass(frozen=True)
class LogPosition:
    """Where a reader stands: after `seq`, at byte `offset` of `segment`."""

    segment: str | None
    offset: int
    seq: int
    at: datetime


class SegmentFile(Protocol):
    """What reading a segment needs of its file: a plain file, or a pinned one."""

    def __enter__(self) -> SegmentFile: ...
    def __exit__(self, *exc: Any) -> Any: ...
    def seek(self, pos: int, /) -> int: ...
    def read(self, n: int, /) -> bytes: ...
    def readline(self) -> bytes: ...


class EventLog:
    """Reads and appends the log of one store directory."""

    def __init__(
        self,
        root: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        clock: Clock = utc_now,
        upcasters: dict[tuple[str, int], Upcaster] | None = None,
    ) -> None:
        self.root = Path(root)
        self.dir = self.root / "log"
        refuse_nested_store(self.root)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.lock_path = self.root / "lock"
        self.segment_bytes = segment_bytes
        self.clock = clock
        self.upcasters = upcasters
        self._segment: str | None = None  # segment the cursor is in
        self._offset = 0
        self._seq = 0
        self._at = EPOCH
        #: the line (without its newline) that ends at the cursor, the last one folded; None at
        #: a segment's start. Every read starts at it, to see that it is still there.
        self._last: bytes | None = None
        #: (segment, offset, last line) where the cursor left the segment before its own, for
        #: as long as it stands at its segment's start (see `_check_previous`)
        self._previous: tuple[str, int, bytes] | None = None
        self._dir_mtime = -1
        self._segments: list[str] = []
        self._dir_str = str(self.dir)
        self._lock_str = str(self.lock_path)
        #: serialises lock() between threads: the flock is per open file, which they would share
        self._threads = threading.Lock()
        #: (fd, inode, pid) of the lock file, kept open across commands
        self._lock_file: tuple[int, int, int] | None = None
        #: (segment, inode) the cursor stands at the end of, as of this process's last look
        #: under the lock: if both still hold, no other writer has appended since
        self._tail: tuple[str, int] | None = None
        #: (segment, inode, fd) this process appends to, kept open across commands
        self._writer: tuple[str, int, int] | None = None
        #: (segment, offset) of the cursor as the lock holder checked it: whole lines, the
        #: last one the one it folded. An Appender writes only there.
        self._verified: tuple[str, int] | None = None
        #: (segment, (device, inode, size, mtime, ctime)) of the segment the cursor stands at
        #: the end of, as stat saw it before the read that reached that end, taken long enough
        #: after its last change to trust (`_RACY_NS`): while a stat still says so, and no
        #: segment follows, nothing was appended or cut and `iter_new` reads nothing
        self._quiet: tuple[str, tuple[int, int, int, int, int]] | None = None

    # -- reading ---------------------------------------------------------------------------

    @property
    def position(self) -> LogPosition:
        return LogPosition(self._segment, self._offset, self._seq, self._at)

    def appended(self) -> bool:
        """Whether lines may have been appended past the cursor, by a stat or two and no read:
        for a caller that only needs to know whether to look (`iter_new` reads a chunk of the
        segment, to check the line folded last, unless a stat proves nothing changed)."""
        if self._segment is None:
            return True
        try:
            size = self.segment_size(self._segment)
        except FileNotFoundError:
            return True
        return size != self._offset or os.path.exists(
            f"{self._dir_str}/{segment_name(self._seq + 1)}"
        )

    def segments(self, *, fresh: bool = False) -> list[str]:
        """Segment file names in seq order (cached until the directory changes).

        A directory mtime is only as fine as the kernel's tick: a segment created in the same
        tick as the cached listing leaves it unchanged. Whoever must not miss one asks `fresh`.
        """
        mtime = os.stat(self.dir).st_mtime_ns
        if fresh or mtime != self._dir_mtime:
            self._segments = sorted(n for n in os.listdir(self.dir) if _SEGMENT_RE.match(n))
            self._dir_mtime = mtime
        return self._segments

    def seek(self, position: LogPosition) -> bool:
        """Put the cursor right after `position.seq` if the hint still points there.

        Returns False (cursor at the start) when the hint is stale, e.g. after a log rewrite.
        """
        self._reset()
        if position.seq == 0 or position.segment is None:
            return position.seq == 0
        path = self.dir / position.segment
        last: bytes | None = None
        try:
            with open(path, "rb") as f:
                if position.offset > 0:
                    f.seek(position.offset - 1)
                    if f.read(1) != b"\n":
                        return False
                    # The line the hint stands after must be the event it names (a writer's
                    # failed append may have cut it back and another been written there).
                    last = _line_ending_at(f, position.offset)
                    try:
                        before = decode_line(last, upcasters=self.upcasters)
                    except DecodeError:
                        return False
                    if before.seq != position.seq or before.at != position.at:
                        return False
                    f.seek(position.offset)
                nxt = f.readline()
        except FileNotFoundError:
            return False
        if nxt.endswith(b"\n"):
            try:
                following = decode_line(nxt[:-1], upcasters=self.upcasters)
            except DecodeError:
                return False
            if following.seq != position.seq + 1:
                return False
        self._segment, self._offset, self._last = position.segment, position.offset, last
        self._seq, self._at = position.seq, position.at
        self._previous = None
        return True

    def time_of(self, seq: int) -> datetime | None:
        """The time of event `seq` as the log holds it now, read back from the cursor (at the
        cursor's seq or before it); None if the log holds no such line there. Reads the lines
        between it and the cursor's (or its segment's) end."""
        if not 0 < seq <= self._seq or self._segment is None:
            return None
        segments = self.segments(fresh=True)
        firsts = [int(name[:20]) for name in segments]
        i = bisect.bisect_right(firsts, seq) - 1
        if i < 0 or self._segment not in segments:
            return None
        name = segments[i]
        try:
            if name == self._segment:
                end, end_seq = self._offset, self._seq
            elif segments.index(self._segment) > i:
                end, end_seq = self.segment_size(name), firsts[i + 1] - 1
            else:
                return None
            with self._open_segment(name) as f:
                line = _line_back(f, end, end_seq - seq)
        except FileNotFoundError:
            return None
        if line is None:
            return None
        try:
            event = decode_line(line, upcasters=self.upcasters)
        except DecodeError:
            return None
        return event.at if event.seq == seq else None

    def rewind(self) -> None:
        """Put the cursor back at the start of the log, for another pass over it."""
        self._reset()

    def _reset(self) -> None:
        self._segment, self._offset, self._seq, self._at = None, 0, 0, EPOCH
        self._last = self._previous = self._quiet = None

    def read_new(self) -> list[AnyEvent]:
        """Every complete line appended since the cursor, decoded; advances the cursor."""
        return list(self.iter_new())

    def iter_new(self) -> Iterator[AnyEvent]:
        if self._quiet is not None:
            if self._unchanged(*self._quiet):
                return  # without reading: what the read would check, the stat proves
            self._quiet = None
        segments = self.segments()
        if not segments or (self._segment is not None and self._segment not in segments):
            segments = self.segments(fresh=True)  # the cached listing may be a tick old
        if not segments:
            return
        if self._segment is None:
            self._segment, self._offset, self._last = segments[0], 0, None
        index = segments.index(self._segment) if self._segment in segments else -1
        if index < 0:
            # Only a failed batch's cut removes a segment (a redaction renames over it).
            raise LogCutBack(self._segment, self._offset, self._seq, None, "the segment is gone")
        while True:
            if self._offset == 0 and self._previous is not None:
                self._check_previous()
            seen = self._stat_before_read(self._segment)
            yield from self._read_segment(self._segment)
            if self._offset == 0 and self._segment != segment_name(self._seq + 1):
                # The appender writes the next line into an empty segment it stands at: one
                # named for another seq would hold its lines under the wrong name.
                raise CorruptLog(
                    self._segment,
                    1,
                    f"it holds no line and is named for seq {int(self._segment[:20])}, though "
                    f"the log's next event is seq {self._seq + 1}",
                )
            if index + 1 >= len(segments):
                # Segments are named by their first seq: one more stat shows whether the
                # listing missed a segment started within the same mtime tick.
                if not (self.dir / segment_name(self._seq + 1)).exists():
                    if seen is not None and seen[2] == self._offset:
                        self._quiet = (self._segment, seen)
                    return
                segments = self.segments(fresh=True)
                if index + 1 >= len(segments):
                    return
            if self.segment_size(self._segment) != self._offset:
                self._refuse_cut_short(self._segment)
                return  # the line read partially was being written: the next read has it
            if self._offset == 0:
                # An appender starts a segment only once the one before holds its line: the
                # next line would go past this one into the last, read by no one from here.
                raise CorruptLog(
                    self._segment,
                    1,
                    f"it holds no line, though segment {segments[index + 1]} follows it",
                )
            index += 1
            if self._last is not None:
                self._previous = (self._segment, self._offset, self._last)
            self._segment, self._offset, self._last = segments[index], 0, None

    def _stat_before_read(self, name: str) -> tuple[int, int, int, int, int] | None:
        """Segment `name`'s (device, inode, size, mtime, ctime), taken before reading it, if its
        times are old enough to trust (`_RACY_NS`); else None. Any change after this stat gets
        later times, so a stat that still says the same later means the lines read are there."""
        now = _now_ns()
        try:
            st = os.stat(f"{self._dir_str}/{name}")
        except FileNotFoundError:
            return None
        if max(st.st_mtime_ns, st.st_ctime_ns) >= now - _RACY_NS:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def _unchanged(self, name: str, seen: tuple[int, int, int, int, int]) -> bool:
        """Whether the cursor still stands at the end of segment `name` as `seen` (by
        `_stat_before_read`) and no segment follows it: two stats, no read."""
        if name != self._segment or seen[2] != self._offset:
            return False
        try:
            st = os.stat(f"{self._dir_str}/{name}")
        except FileNotFoundError:
            return False
        return (
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,
        ) == seen and not os.path.exists(f"{self._dir_str}/{segment_name(self._seq + 1)}")

    def _open_segment(self, name: str) -> SegmentFile:
        return open(self.dir / name, "rb")

    def segment_size(self, name: str) -> int:
        """The size of segment `name` as this reader reads it."""
        return os.path.getsize(self.dir / name)

    def _read_segment(self, name: str) -> Iterator[AnyEvent]:
        path = self.dir / name
        upcasters = self.upcasters
        with self._open_segment(name) as f:
            while True:
                base = self._offset
                # From the start of the line folded last, in the same read: that it is still
                # there is checked at no extra call (see the module docstring).
                last = self._last
                back = len(last) + 1 if last is not None else 0
                f.seek(base - back)
                want = max(_READ_CHUNK, back + 1)
                chunk = f.read(want)
                if last is not None and not (
                    chunk.startswith(last) and chunk[back - 1 : back] == b"\n"
                ):
                    self._tail_changed(name, chunk, back)
                full = len(chunk) == want
                end = chunk.rfind(b"\n")
                if end < back:
                    if not full:
                        return
                    chunk += f.readline()  # one line longer than a chunk
                    if not chunk.endswith(b"\n"):
                        return
                    end = len(chunk) - 1
                # The checks inline: this loop is the whole replay's per-line overhead, so it
                # keeps to locals and plain comparisons. Each line is found with `find` (memchr)
                # rather than by one split of the chunk, whose byte-by-byte scan cost a tenth
                # of a replay's instructions; like a split, it yields the lines between the
                # newlines, empty ones included, up to `end`.
                seq, at = self._seq, self._at
                find = chunk.find
                start = back
                while True:
                    stop = find(b"\n", start, end)
                    if stop < 0:
                        stop = end
                    line = chunk[start:stop]
                    offset = base - back + start  # of the line in the segment
                    try:
                        event = decode_line(line, upcasters=upcasters)
                    except DecodeError as exc:
                        raise CorruptLog(
                            path.name, self._line_number(path, offset), exc.message
                        ) from None
                    if event.seq != seq + 1 or event.at < at:
                        self._refuse(event, path, offset)
                    seq, at = event.seq, event.at
                    offset += len(line) + 1
                    # Advance per line, so a consumer that stops early resumes exactly here.
                    self._seq, self._at, self._offset, self._last = seq, at, offset, line
                    yield event
                    if stop == end:
                        break
                    start = stop + 1
                if not full:
                    return

    def _tail_changed(self, name: str, data: bytes, back: int) -> None:
        """`data`, read from where the line folded last began (`back` bytes before the cursor),
        does not start with that line: accept it if it is that line redacted in place (a
        forget keeps its length, seq, time and type: events/redact.py), else the line was cut
        back (LogCutBack)."""
        last = self._last
        assert last is not None
        if len(data) >= back and data[back - 1 : back] == b"\n":
            line = data[: back - 1]
            if _same_event(last, line):
                self._last = line
                return
        try:
            size: int | None = self.segment_size(name)
        except FileNotFoundError:
            size = None
        if size is not None and size < self._offset:
            reason = f"it ends at byte {size}, before the seq {self._seq} this reader folded"
        else:
            reason = f"the line of seq {self._seq} is no longer there: another took its place"
        raise LogCutBack(name, self._offset, self._seq, size, reason)

    def _check_previous(self) -> None:
        """At its segment's start, the cursor has folded no line of it: check that the segment
        before still ends with the line folded last there. A batch that started this segment
        and failed removed it and cut that one back; another writer may have started a
        segment of the same name since, after other lines."""
        assert self._previous is not None
        name, offset, last = self._previous
        back = len(last) + 1
        try:
            with self._open_segment(name) as f:
                f.seek(offset - back)
                data = f.read(back + 1)
        except FileNotFoundError:
            raise LogCutBack(name, offset, self._seq, None, "the segment is gone") from None
        if data == last + b"\n":
            return
        if len(data) == back and data.endswith(b"\n") and _same_event(last, data[:-1]):
            self._previous = (name, offset, data[:-1])  # redacted in place
            return
        raise LogCutBack(
            name,
            offset,
            self._seq,
            None,
            f"the line of seq {self._seq} is no longer where this reader left the segment",
        )

    def _verify_tail(self) -> None:
        """Under the lock, caught up by the shortcut (`_untouched`: same file, same size): the
        segment still ends with the line folded last. A cut and a regrowth to the same size
        leave inode and size as they were; appending after a line that is not the one folded
        would record a command decided on events the log does not hold."""
        last = self._last
        if last is None:
            # At a segment's start, whose size (0) `_untouched` saw.
            if self._offset == 0 and self._previous is not None:
                self._check_previous()
            return
        back = len(last) + 1
        start = self._offset - back
        writer = self._writer
        if writer is not None and writer[0] == self._segment and writer[:2] == self._tail:
            data = os.pread(writer[2], back + 1, start)
        else:
            fd = os.open(f"{self._dir_str}/{self._segment}", os.O_RDONLY)
            try:
                data = os.pread(fd, back + 1, start)
            finally:
                os.close(fd)
        if len(data) != back or not (data.startswith(last) and data.endswith(b"\n")):
            assert self._segment is not None
            self._tail_changed(self._segment, data, back)
            if len(data) != back:  # a redacted last line, but not at the end: never here
                raise LogCutBack(
                    self._segment, self._offset, self._seq, None, "the segment grew meanwhile"
                )

    def _refuse_cut_short(self, name: str) -> None:
        """Raise if segment `name`, which later segments follow, ends in a partial line.

        Only the last segment can have a torn tail (an appender cuts it before writing on,
        and starts a segment only after its line in the one before is whole), so a partial
        line here is damage: reading on would skip its event and the appender would write its
        seq again, over the damaged segment."""
        with self._open_segment(name) as f:  # as it is read: a pinned log, through its pin
            f.seek(self._offset)
            rest = f.read(self.segment_size(name) - self._offset)
        if rest and b"\n" not in rest:
            raise CorruptLog(
                name,
                self._line_number(self.dir / name, self._offset),
                f"a partial line ({len(rest)} bytes) ends this segment, though later segments "
                "follow",
            )

    def _refuse(self, event: AnyEvent, path: Path, offset: int) -> NoReturn:
        line = self._line_number(path, offset)
        if event.seq != self._seq + 1:
            reason = f"seq {event.seq} follows {self._seq} (the log must be gap-free)"
            if offset == 0 and event.seq > self._seq + 1 and self._seq > 0:
                # A segment's first line: most likely the segment before it went missing.
                first = segment_name(self._seq + 1)
                reason += (
                    f"; seq {self._seq + 1} to {event.seq - 1} are missing: is segment "
                    f"{first} (or one after it) gone?"
                )
            raise CorruptLog(path.name, line, reason)
        raise CorruptLog(
            path.name,
            line,
            f"time {event.at.isoformat()} is before {self._at.isoformat()}",
        )

    @staticmethod
    def _line_number(path: Path, offset: int) -> int:
        with open(path, "rb") as f:
            return f.read(offset).count(b"\n") + 1

    # -- appending -------------------------------------------------------------------------

    @contextmanager
    def lock(self, *, wait: bool = True) -> Iterator[Appender]:
        """Hold the appenders' lock: cut a torn tail, catch up, then append as often as needed.

        With `wait=False`, raise `LockBusy` at once if another process holds it (the caller
        can then wait with `wait_for_lock` while holding nothing of its own).
        """
        with self._threads:
            fd = self._acquire(wait)
            try:
                if self._untouched():
                    pending: list[AnyEvent] = []
                    self._verify_tail()
                else:
                    self._cut_torn_tail()
                    pending = self.read_new()  # checks the line folded last as it reads
                    self._note_tail()
                if self._segment is not None:
                    self._verified = (self._segment, self._offset)
                yield Appender(self, pending)
            finally:
                self._verified = None
                fcntl.flock(fd, fcntl.LOCK_UN)

    def wait_for_lock(self, check: Callable[[], bool] | None = None) -> bool:
        """Block until no other process holds the appenders' lock, without keeping it.

        Through a file of its own: this process's kept-open lock file may be held by another
        of its threads, which would not make this wait. `check`, if given, runs in the moment
        the lock is held (no writer is mid-way); its answer is returned.
        """
        fd = os.open(self._lock_str, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return check() if check is not None else True
        finally:
            os.close(fd)  # closing the file releases its flock

    def _acquire(self, wait: bool = True) -> int:
        """flock the lock file (opened once per process, again if replaced); return its fd."""
        while True:
            held = self._lock_file
            if held is None or held[2] != os.getpid():
                # A forked child must not share its parent's open file: the flock would be shared.
                fd = os.open(self._lock_str, os.O_RDWR | os.O_CREAT, 0o644)
                held = self._lock_file = (fd, os.fstat(fd).st_ino, os.getpid())
            fd, inode, _ = held
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise LockBusy(self._lock_str) from None
            try:
                if os.stat(self._lock_str).st_ino == inode:
                    return fd
            except FileNotFoundError:
                pass
            # Someone replaced the lock file: a lock on the old one excludes nobody.
            self._lock_file = None
            os.close(fd)

    def _untouched(self) -> bool:
        """Under the lock: nobody appended, cut or rewrote the log since this process looked."""
        tail = self._tail
        if tail is None or tail[0] != self._segment:
            return False
        try:
            st = os.stat(f"{self._dir_str}/{tail[0]}")
        except FileNotFoundError:
            return False
        return (
            st.st_ino == tail[1]
            and st.st_size == self._offset
            and not os.path.exists(f"{self._dir_str}/{segment_name(self._seq + 1)}")
        )

    def _note_tail(self) -> None:
        """Under the lock, caught up: remember which file the cursor stands at the end of."""
        self._tail = None
        if self._segment is not None:
            with suppress(FileNotFoundError):
                self._tail = (self._segment, os.stat(self.dir / self._segment).st_ino)

    def _writer_fd(self, name: str, create: bool) -> int:
        """An fd for appending to segment `name` (the cursor's, checked under the lock)."""
        writer = self._writer
        if (
            writer is not None
            and not create
            and writer[0] == name
            and self._tail is not None
            and self._tail == writer[:2]
        ):
            return writer[2]
        self._close_writer()
        # Read too: the lock's shortcut reads the last line back through it (`_verify_tail`).
        fd = os.open(self.dir / name, os.O_RDWR | os.O_CREAT, 0o644)
        inode = os.fstat(fd).st_ino
        self._writer = (name, inode, fd)
        self._tail = (name, inode)
        return fd

    def _close_writer(self) -> None:
        if self._writer is not None:
            fd = self._writer[2]
            self._writer = None
            os.close(fd)

    def segment_replaced(self, name: str) -> None:
        """Segment `name` was rewritten (by rename): forget its open file and its inode."""
        if self._tail is not None and self._tail[0] == name:
            self._tail = None
        if self._writer is not None and self._writer[0] == name:
            self._close_writer()

    def close(self) -> None:
        """Close the files kept open for appending (they reopen on the next lock)."""
        with self._threads:
            self._close_writer()
            if self._lock_file is not None:
                fd, _, pid = self._lock_file
                self._lock_file = None
                if pid == os.getpid():
                    os.close(fd)

    def __del__(self) -> None:
        with suppress(Exception):  # at interpreter shutdown, or half-built
            self.close()

    def _cut_torn_tail(self) -> None:
        segments = self.segments(fresh=True)
        if not segments:
            return
        path = self.dir / segments[-1]
        size = os.path.getsize(path)
        if size == 0:
            return
        with open(path, "r+b") as f:
            # The usual case, on every append: the segment ends with a complete line.
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            back = min(size, 1 << 20)
            while True:
                f.seek(size - back)
                tail = f.read(back)
                cut = tail.rfind(b"\n")
                if cut >= 0 or back == size:
                    break
                back = min(size, back * 4)
            keep = (size - back) + cut + 1 if cut >= 0 else 0
            if keep == size:
                return
            f.seek(keep)
            torn = f.read()
            torn_dir = self.dir / "torn"
            torn_dir.mkdir(exist_ok=True)
            side = torn_dir / f"{segments[-1]}.{keep}.torn"
            with open(side, "wb") as s:
                s.write(torn)
                s.flush()
                sync_file(s.fileno())
            f.truncate(keep)
            f.flush()
            sync_file(f.fileno())


class Appender:
    """Appends events while its `EventLog.lock()` is held."""

    def __init__(self, log: EventLog, pending: list[AnyEvent]) -> None:
        self._log = log
        #: Events other processes appended since this process last read: fold them first.
        self.pending = pending
        self.at = max(log.clock(), log._at)

    @property
    def next_seq(self) -> int:
        return self._log._seq + 1

    def append(self, event: Event, *, sync: bool = True) -> AnyEvent:
        """Stamp `event` with the next seq and the record time, write it, fsync, return it.

        `sync=False` leaves the fsync out: only for a log no one reads yet (an import's
        staging), whose writer syncs it whole (`sync_log`) before anyone may read it, and for
        `append_all`, which syncs before it returns.
        """
        log = self._log
        at = max(self.at, log._at)
        stamped: AnyEvent = msgspec.structs.replace(event, seq=log._seq + 1, at=at)  # type: ignore[assignment]
        line = encode_line(stamped)
        # The lock holder is caught up, so the cursor stands at the end of the last segment.
        name = log._segment
        new_segment = name is None or (
            log._offset > 0 and log._offset + len(line) > log.segment_bytes
        )
        if new_segment:
            name = segment_name(stamped.seq)
        offset = 0 if new_segment else log._offset
        assert name is not None
        if log._segment is not None and log._verified != (log._segment, log._offset):
            # Never write after lines that are not the ones this process folded and checked
            # under the lock: past the end of a file cut back, that leaves a hole.
            raise LogCutBack(
                log._segment,
                log._offset,
                log._seq,
                None,
                "the appender's cursor was not checked under the lock",
            )
        fd = log._writer_fd(name, new_segment)
        written = 0
        try:
            while written < len(line):
                written += os.pwrite(fd, line[written:], offset + written)
            if sync:
                sync_file(fd)
        except BaseException as exc:
            # Never leave half a line behind a failed write: the command did not happen.
            try:
                os.ftruncate(fd, offset)
            except OSError:
                log._verified = None  # a partial line may follow the cursor
                if isinstance(exc, OSError):
                    raise _append_failed(name, exc, cut=False) from exc
                raise
            if isinstance(exc, OSError):  # a full disk, an I/O error: say where, and what now
                raise _append_failed(name, exc, cut=True) from exc
            raise
        if new_segment and sync:
            sync_dir(log.dir)
        log._segment, log._offset, log._last = name, offset + len(line), line[:-1]
        log._seq, log._at = stamped.seq, stamped.at
        log._verified = (name, log._offset)
        return stamped

    def append_all(self, events: Sequence[Event]) -> list[AnyEvent]:
        """Append `events` as `append` does, with one fsync per segment written, not one per
        event: all of them are recorded, or (the write or the sync failed) none.

        A failure cuts every segment back to where the first event began (a segment they
        started is removed) and raises as `append` does; until the sync, a reader may see
        lines that are then cut, as it may between `append`'s write and its fsync.
        """
        log = self._log
        start = (log._segment, log._offset, log._seq, log._at)
        start_last, start_verified = log._last, log._verified
        written: list[str] = []  # segments written to, in order
        stamped: list[AnyEvent] = []
        try:
            for event in events:
                stamped.append(self.append(event, sync=False))
                assert log._segment is not None
                if not written or written[-1] != log._segment:
                    written.append(log._segment)
            for name in written:
                sync_path(log.dir / name)
            if written and written[-1] != start[0]:
                sync_dir(log.dir)
        except BaseException as exc:
            cut = self._cut_back(start)
            log._last, log._verified = start_last, start_verified if cut else None
            # A failed write raised append's own StoreError, true of its line alone: whether
            # the lines before it are gone is only known here.
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if isinstance(cause, OSError) and (cause is exc or not cut):
                where = written[-1] if written else start[0] or segment_name(start[2] + 1)
                raise _append_failed(where, cause, cut=cut) from cause
            raise
        return stamped

    def _cut_back(self, start: tuple[str | None, int, int, datetime]) -> bool:
        """Undo an `append_all` that failed: cut the segment it began in back to its offset,
        remove the segments it started, and put the cursor back. Whether that worked."""
        log = self._log
        log._close_writer()
        # The cursor goes back whatever happens: the next lock reads from there what the files
        # hold, so a cut that failed folds the lines it left rather than skip them.
        log._tail = None
        log._segment, log._offset, log._seq, log._at = start
        name, offset, seq = start[0], start[1], start[2]
        try:
            for started in log.segments(fresh=True):
                if int(started.split(".")[0]) > seq:  # named by its first seq: one of ours
                    os.unlink(log.dir / started)
            if name is not None:
                os.truncate(log.dir / name, offset)
        except OSError:
            return False
        return True


def sync_log(root: Path) -> None:
    """Make every segment of the log under `root`, and their directory, durable."""
    log_dir = Path(root) / "log"
    for path in sorted(log_dir.iterdir()):
        if _SEGMENT_RE.match(path.name):
            sync_path(path)
    sync_dir(log_dir)


def _append_failed(segment: str, exc: OSError, *, cut: bool) -> StoreError:
    """What a failed append tells its caller: the file, the cause, whether it happened."""
    where = f"log/{segment}"
    if cut:
        outcome = (
            f"nothing was recorded ({where} is as it was): make room or mend the disk, "
            "then run it again"
        )
    else:
        outcome = (
            "nor could the partial line be cut, so whether it was recorded is unknown: see "
            "`keytrail log` before running it again (a partial line is cut by the next writer)"
        )
    return StoreError(
        f"could not append to {where}: {exc.strerror or exc}; {outcome}",
        segment=segment,
        errno=exc.errno,
    )


class PinnedLog(EventLog):
    """The log as it stood when this was made, for a reader that must not see it change.

    Every segment is opened at once and read through that file, up to the size it had then: a
    segment a forget later redacts (its copy is renamed over it) still reads as it was, and
    nothing appended afterwards is read. Close it to let go of the files. Never appends.
    """

    def __init__(self, root: Path, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        #: segment name -> (fd, inode, size) of the file as it was pinned
        self._pinned: dict[str, tuple[int, int, int]] = {}
        try:
            for name in super().segments(fresh=True):
                fd = os.open(self.dir / name, os.O_RDONLY)
                st = os.fstat(fd)
                self._pinned[name] = (fd, st.st_ino, st.st_size)
        except BaseException:
            self.close()
            raise

    def segments(self, *, fresh: bool = False) -> list[str]:
        return list(self._pinned)

    def _open_segment(self, name: str) -> SegmentFile:
        fd, _, size = self._pinned[name]
        return _PinnedFile(fd, size)

    def segment_size(self, name: str) -> int:
        return self._pinned[name][2]

    def replaced(self) -> bool:
        """Whether a segment has been replaced (redacted by a forget) since it was pinned."""
        for name, (_, inode, _) in self._pinned.items():
            try:
                if os.stat(self.dir / name).st_ino != inode:
                    return True
            except FileNotFoundError:
                return True
        return False

    def close(self) -> None:
        super().close()
        pinned, self._pinned = getattr(self, "_pinned", {}), {}
        for fd, _, _ in pinned.values():
            os.close(fd)


class _PinnedFile:
    """A pinned segment as `_read_segment` reads it (seek, read, readline), through the pinned
    descriptor and never past the pinned size. Reads as it is asked to, a chunk at a time: a
    whole segment is never held in memory. Leaves the descriptor open (PinnedLog closes it)."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._size, self._pos = fd, size, 0

    def __enter__(self) -> _PinnedFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def seek(self, pos: int) -> int:
        self._pos = pos
        return pos

    def read(self, n: int) -> bytes:
        data = os.pread(self._fd, max(0, min(n, self._size - self._pos)), self._pos)
        self._pos += len(data)
        return data

    def readline(self) -> bytes:
        parts: list[bytes] = []
        while piece := self.read(_LINE_PIECE):
            end = piece.find(b"\n")
            if end >= 0:
                parts.append(piece[: end + 1])
                self._pos -= len(piece) - end - 1
                break
            parts.append(piece)
        return b"".join(parts)


#: How much a pinned segment's readline reads at a time (it is only used for lines longer
#: than a whole read chunk).
_LINE_PIECE = 64 * 1024
