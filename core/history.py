"""history(memory_id) and changes(since, until): what the log says happened, read back.

Both answer a page: every list they return holds at most `limit` items (at most the store's
`limits.page`, 200) from `offset` on, in log order, beside the total it has, so an answer stays
small however big the store (the whole log's `changes` at 100,000 memories listed every id,
1.7 MB). The whole span is still read to count, and `history`'s depth and weights are folded over
every event before the page is cut, so they are right on every page.

Both scan the log rather than keep an index. `history` finds the lines that mention the
memory's version chain with a byte search over the segments (C speed; only matching lines
are decoded), from the line that told its first version on: no event of a memory comes before
it, and segments are named by their first seq and hold ascending seqs, so the segments before
are skipped and the first one needed is bisected, a small window read per step. Segments are
read a window at a time, never mapped: lines another process cut back under a mapping killed the
process (it costs about 10% over mapping them). Its cost grows with the log written since the
fact was first told, not with the store: under 1 ms for one told a moment ago, about 0.1 s for
one told at the start of a 126 MB, 100,000-memory log (tools/bench_calls.py). The fold rules
lines its private fold starts from are searched once per store (`_RuleLines`). Paging does not
shorten the scan: the total and the trajectory need every event. `changes` decodes the events
between its two points, so its cost grows with that span, not with the store.
"""

from __future__ import annotations

import itertools
import os
import re
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import msgspec

from keytrail.events import (
    AnyEvent,
    EntitiesCreated,
    EntitiesDeleted,
    EventLog,
    GraphImported,
    InvalidInput,
    KeyAliased,
    LinksAdjusted,
    LogCutBack,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    ObservationsDeleted,
    RulesChanged,
    StoreCreated,
    decode_line,
)
from keytrail.events.log import LogPosition
from keytrail.projections import GraphState, apply

from . import validation as check
from .queries import next_offset, preview
from .queries import versions as version_ids
from .timetravel import check_point

if TYPE_CHECKING:
    from .store import Store

_RULE_TAGS = (b'"type":"store.created"', b'"type":"rules.changed"')
#: `changes` reports progress at most about this many times over a scan (and at least every
#: `_PROGRESS_EVERY` events apart), so a scan of millions of events stays a few hundred messages.
_PROGRESS_STEPS = 100
_PROGRESS_EVERY = 1000

T = TypeVar("T")


@dataclass(frozen=True)
class Version:
    memory_id: str
    status: str
    created_seq: int
    created_at: datetime
    valid_from: datetime | None
    supersede_reason: str | None
    preview: str


@dataclass(frozen=True)
class Touch:
    """One event that touched the chain."""

    seq: int
    at: datetime
    type: str
    memory_id: str
    what: str
    via_key_id: str | None = None
    via_key: str | None = None
    query: str | None = None
    reason: str | None = None
    other_id: str | None = None
    deltas: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Trajectory:
    """Depth and link weights (by key label) of one version right after an event."""

    seq: int
    at: datetime
    memory_id: str
    depth: float
    access_count: int
    weights: dict[str, float]


@dataclass(frozen=True)
class History:
    """A memory's versions and a page of the events that touched them.

    `versions` is the whole version chain, oldest first. `events` holds at most `limit` of the
    events that touched any version, from `offset` on, in log order; `events_total` is how many
    there are in all. When `next_offset` is not null there are more: call again with
    offset=next_offset (it is null on the last page). `trajectory` is each version's depth and
    link weights right after the events of this page, folded over the whole history before the
    page was cut, so they are the true values on every page.
    """

    memory_id: str
    versions: list[Version]
    events: list[Touch]
    events_total: int
    offset: int
    next_offset: int | None
    trajectory: list[Trajectory]


@dataclass(frozen=True)
class Correction:
    seq: int
    at: datetime
    old_id: str
    new_id: str


@dataclass(frozen=True)
class ReadCount:
    memory_id: str
    reads: int


@dataclass(frozen=True)
class Merge:
    seq: int
    at: datetime
    key_id: str
    label: str
    alias: str
    similarity: float | None


@dataclass(frozen=True)
class Changes:
    """What changed after `since_seq` up to `until_seq`, a page of each list at a time.

    Each of `added`, `corrected`, `expired`, `forgotten`, `deleted` and `keys_merged` holds at
    most `limit` items from `offset` on, in log order; `<list>_total` (e.g. `added_total`) is
    how many the whole span has, exact however the lists are cut. When `next_offset` is not
    null some list has more: call again with offset=next_offset (null once every list is
    complete).
    `read_most` is not paged: the `top` most-read memories, the same on every page;
    `read_most_total` is how many different memories were read.
    `since_at` and `until_at` are the times of events `since_seq` and `until_seq`; since_seq 0
    is the point before the first event (no `since`, or one before the store existed), and
    its since_at the time of the first event, when the store began.
    """

    since_seq: int
    until_seq: int
    since_at: datetime
    until_at: datetime
    namespace: str | None
    added: list[str]
    added_total: int
    corrected: list[Correction]
    corrected_total: int
    read_most: list[ReadCount]
    read_most_total: int
    expired: list[str]
    expired_total: int
    forgotten: list[str]
    forgotten_total: int
    #: knowledge-graph observations deleted (hidden now, their text kept as history)
    deleted: list[str]
    deleted_total: int
    keys_merged: list[Merge]
    keys_merged_total: int
    offset: int
    next_offset: int | None


class _Cut(Generic[T]):
    """One list of a paged answer: counts every item, keeps those from `offset` on, `limit` of
    them at most."""

    def __init__(self, offset: int, limit: int) -> None:
        self.start, self.end = offset, offset + limit
        self.total = 0
        self.items: list[T] = []

    def add(self, item: T) -> None:
        if self.start <= self.total < self.end:
            self.items.append(item)
        self.total += 1


#: Up to this many versions, `history` searches each segment once per version id (a fast byte
#: search, one read of the segment each). Past it, it reads each segment once per distinct
#: opening of the ids ('"m_') and looks each quoted string that starts so up in a set: a fact
#: corrected hundreds of times would otherwise cost a read of the whole log per version.
_SEARCH_EACH = 8
#: `history` bisects a segment for the first line it needs down to this many bytes, then
#: searches from there (the lines between only cost the byte search).
_BISECT_STOP = 64 * 1024
#: Bytes the bisection reads at a point it looks at (a line's head, with its seq, is in the
#: first few dozen; the search for a line's end reads on, doubling).
_PEEK = 4096
#: Bytes `history` reads of a segment at a time: a window, not the segment, so a call never
#: holds a 64 MiB segment at once, and the search runs over bytes still in the CPU's cache.
_WINDOW = 256 * 1024
_SEQ_AT_START = re.compile(rb'\{"type":"[^"\\]*","seq":(\d+)[,}]')


class _RuleLines:
    """The log's `_RULE_TAGS` lines (the fold rules every history's private fold starts from),
    found once per store: the log only grows, and a forget's redaction keeps every byte outside
    a forgotten content, so each call searches only what was appended since the last one.

    Except that a writer whose append fails cuts its lines back (events/log.py), which later
    appends may grow past where a search ended: `holds` checks the line it ended with."""

    def __init__(self) -> None:
        #: segment name -> (bytes searched, [(offset, line)] found in them)
        self.found: dict[str, tuple[int, list[tuple[int, bytes]]]] = {}
        #: segment name -> the last line searched, with its newline (it ends where they do)
        self.last: dict[str, bytes] = {}

    def search(self, name: str, data: bytes, base: int, end: int) -> None:
        """Search segment `name`'s bytes from `base` on, held whole lines by `data[:end]` (`base`
        at most `done(name)`)."""
        done, lines = self.found.get(name, (0, []))
        if base + end > done:
            lines = list(lines)
            starts = {
                data.rfind(b"\n", 0, at) + 1
                for tag in _RULE_TAGS
                for at in _found(data, tag, max(0, done - base), end)
            }
            for start in sorted(starts):
                lines.append((base + start, data[start : data.find(b"\n", start, end)]))
            self.found[name] = (base + end, lines)
            self.last[name] = data[data.rfind(b"\n", 0, end - 1) + 1 : end]

    def done(self, name: str) -> int:
        """How many bytes of segment `name` (from its start) have been searched."""
        return self.found.get(name, (0, []))[0]

    def holds(self, name: str, fd: int, size: int) -> bool:
        """Whether segment `name`, open as `fd`, of `size` bytes, still holds what was searched
        of it: no shorter, and the last line searched still ends there. Lines cut back and
        others written past that point since end it otherwise (each line has its seq and
        time); a forget's redaction of that very line is taken for a cut (searched anew)."""
        done = self.done(name)
        last = self.last.get(name, b"")
        return size >= done and _read(fd, done - len(last), done) == last


_rule_lines: weakref.WeakKeyDictionary[Store, _RuleLines] = weakref.WeakKeyDictionary()


def _read(fd: int, begin: int, end: int) -> bytes:
    """Bytes `begin` to `end` of the segment open as `fd`: fewer where it ends before.

    Read, never mapped: an appender whose fsync failed cuts the lines it wrote back
    (events/log.py), and touching a mapped page past a segment's new end is a SIGBUS, which
    Python cannot catch: it killed the whole server."""
    return os.pread(fd, end - begin, begin) if end > begin else b""


def _newline(fd: int, start: int, end: int) -> int:
    """Where the first newline at or after `start` and before `end` is (-1: none), read a
    growing window at a time."""
    step = _PEEK
    while start < end:
        window = _read(fd, start, min(end, start + step))
        at = window.find(b"\n")
        if at >= 0:
            return start + at
        if not window:
            return -1  # the segment ends before `end` (cut back meanwhile)
        start += len(window)
        step *= 2
    return -1


def _line_seq(fd: int, start: int, end: int, upcasters: Any) -> int | None:
    """The seq of the line at `start`; None if no whole line starts there before `end`."""
    stop = _newline(fd, start, end)
    if stop < 0:
        return None
    head = _SEQ_AT_START.match(_read(fd, start, min(stop, start + _PEEK)))
    if head is not None:
        return int(head.group(1))
    return decode_line(_read(fd, start, stop), upcasters=upcasters).seq


def _first_needed(fd: int, size: int, seq: int, upcasters: Any) -> int:
    """A line start in the segment open as `fd` (of `size` bytes) at or before the first line
    of seq `seq` or later (0 if none is before it), found by bisection: the seqs of a
    segment's lines go up one by one. Each step reads a window, not the segment."""
    low, high = 0, size
    while high - low > _BISECT_STOP:
        mid = _newline(fd, (low + high) // 2, high) + 1
        if mid <= 0 or mid >= high:
            break
        found = _line_seq(fd, mid, high, upcasters)
        if found is not None and found < seq:
            low = mid
        else:
            high = mid
    return low


def _matching_lines(store: Store, ids: list[str], start_seq: int, end_seq: int) -> Iterator[bytes]:
    """Lines of the log holding any of `ids` as a JSON string, or any of `_RULE_TAGS`, in log
    order (each line once), up to seq `end_seq`; lines holding the ids are looked for only from
    seq `start_seq` on (none is earlier: a memory's events follow its creation)."""
    log = store.log
    rules = _rule_lines.get(store)
    if rules is None:
        rules = _rule_lines[store] = _RuleLines()
    names = log.segments(fresh=True)
    # Where the store's fold stands (it is caught up to `end_seq`): the segments after it hold
    # later events only.
    here = log.position
    bounded = here.segment in names and here.seq == end_seq
    if here.segment is not None and bounded:
        names = names[: names.index(here.segment) + 1]
    for index, name in enumerate(names):
        try:
            fd = os.open(log.dir / name, os.O_RDONLY)
        except FileNotFoundError:
            continue  # removed since listed: a segment an appender started and cut back
        try:
            size = os.fstat(fd).st_size
            if bounded and name == here.segment:
                size = min(size, here.offset)
            # Segments are named by their first seq: one whose successor starts at or before
            # `start_seq` holds no event of the chain, only maybe rule lines, searched once.
            before = index + 1 < len(names) and int(names[index + 1][:20]) <= start_seq
            yield from _segment_lines(fd, name, size, before, ids, start_seq, rules, log.upcasters)
        finally:
            os.close(fd)


def _segment_lines(
    fd: int,
    name: str,
    size: int,
    before: bool,
    ids: list[str],
    start_seq: int,
    rules: _RuleLines,
    upcasters: Any,
) -> Iterator[bytes]:
    """`_matching_lines` of one segment, open as `fd`, of its first `size` bytes; `before`:
    it holds only rule lines wanted (the chain begins in a later segment)."""
    if not rules.holds(name, fd, size):  # cut back since it was searched: search it anew
        del rules.found[name], rules.last[name]
    searched = rules.done(name)
    if before and searched == size:
        yield from (line for _, line in rules.found[name][1])
        return
    begin = 0
    if not before and int(name[:20]) < start_seq:
        begin = _first_needed(fd, size, start_seq, upcasters)
    quoted = [f'"{i}"'.encode() for i in ids]
    lines: dict[int, bytes] = {}  # line start -> line, each line once
    # Read once from where the rule lines or the chain's lines are still to be searched.
    for base, data, end in _windows(fd, searched if before else min(begin, searched), size):
        rules.search(name, data, base, end)
        if before:
            continue
        hits: Iterator[int]
        start = max(0, begin - base)
        if len(ids) <= _SEARCH_EACH:
            hits = itertools.chain.from_iterable(_found(data, n, start, end) for n in quoted)
        else:
            hits = _quoted(data, ids, start, end)
        for at in hits:
            line_start = data.rfind(b"\n", 0, at) + 1
            lines[base + line_start] = data[line_start : data.find(b"\n", at, end)]
    lines.update(rules.found.get(name, (0, []))[1])
    for offset in sorted(lines):
        yield lines[offset]


def _windows(fd: int, begin: int, end: int) -> Iterator[tuple[int, bytes, int]]:
    """The segment open as `fd` from `begin` (a line start) to `end`, a window of whole lines
    at a time, as (offset, data, the length of data's whole lines): each window is read from
    where the last one's whole lines ended; a line longer than `_WINDOW` is read whole. A torn
    last line (or lines cut back meanwhile) ends it."""
    size = _WINDOW
    while begin < end:
        data = _read(fd, begin, min(end, begin + size))
        whole = data.rfind(b"\n") + 1
        if whole == 0:
            if begin + len(data) >= end or len(data) < size:
                return  # no newline up to the end: a torn last line
            size *= 2  # one line longer than a window
            continue
        yield begin, data, whole
        begin += whole
        size = _WINDOW


def _found(data: bytes, needle: bytes, begin: int, end: int) -> Iterator[int]:
    """Where `needle` is in `data[begin:end]`, at most once per line."""
    at = data.find(needle, begin, end)
    while at >= 0:
        yield at
        stop = data.find(b"\n", at, end)
        if stop < 0:
            return
        at = data.find(needle, stop, end)


def _quoted(data: bytes, ids: list[str], begin: int, end: int) -> Iterator[int]:
    """Where one of `ids` is in `data[begin:end]` as a whole JSON string ('"<id>"'), in one
    pass per distinct opening of the ids."""
    wanted: dict[bytes, set[bytes]] = {}
    for ident in ids:
        raw = ident.encode()
        wanted.setdefault(b'"' + raw[:2], set()).add(raw)
    for opening, names in wanted.items():
        at = data.find(opening, begin, end)
        while at >= 0:
            close = data.find(b'"', at + 1, end)
            if close < 0:
                break
            if data[at + 1 : close] in names:
                yield at
            at = data.find(opening, close + 1, end)


def _only(event: AnyEvent, chain: set[str]) -> AnyEvent | None:
    """The part of `event` about the chain's memories (what a private fold of them needs)."""
    if isinstance(event, MemoryRemembered):
        mine = [m for m in event.memories if m.memory_id in chain]
        if not mine:
            return None
        trimmed = [msgspec.structs.replace(m, related_to=[]) for m in mine]
        return msgspec.structs.replace(event, memories=trimmed)
    if isinstance(event, MemoryCorrected):
        if event.old_id in chain and event.memory.memory_id in chain:
            return msgspec.structs.replace(
                event, memory=msgspec.structs.replace(event.memory, related_to=[])
            )
        return None
    if isinstance(event, MemoryReplaced):
        if event.old_id in chain and event.new_id in chain:
            return msgspec.structs.replace(event, related_to=[])
        return None
    if isinstance(event, MemoryRead):
        return event if event.memory_id in chain else None
    if isinstance(event, LinksAdjusted):
        mine_adj = [a for a in event.adjustments if a.memory_id in chain]
        return msgspec.structs.replace(event, adjustments=mine_adj) if mine_adj else None
    if isinstance(event, MemoryForgotten):
        return event if event.memory_id in chain else None
    if isinstance(event, MemoriesExpired):
        ids = [i for i in event.memory_ids if i in chain]
        return msgspec.structs.replace(event, memory_ids=ids) if ids else None
    if isinstance(event, EntitiesCreated):
        mine = [m for m in event.observations if m.memory_id in chain]
        if not mine:
            return None
        return msgspec.structs.replace(event, observations=mine)
    if isinstance(event, GraphImported):
        items = [i for i in event.memories if i.memory.memory_id in chain]
        if not items:
            return None
        kept = [
            msgspec.structs.replace(i, memory=msgspec.structs.replace(i.memory, related_to=[]))
            for i in items
        ]
        return msgspec.structs.replace(event, memories=kept, relations=[])
    if isinstance(event, ObservationsDeleted):
        ids = [i for i in event.memory_ids if i in chain]
        cut = [u for u in event.unlinked if u.memory_id in chain]
        if not ids and not cut:
            return None
        return msgspec.structs.replace(event, memory_ids=ids, unlinked=cut)
    if isinstance(event, EntitiesDeleted):
        gone = [i for i in event.forgotten if i in chain]
        cut = [u for u in event.unlinked if u.memory_id in chain]
        if not gone and not cut:
            return None
        return msgspec.structs.replace(
            event, key_ids=[], forgotten=gone, unlinked=cut, relations=[]
        )
    if isinstance(event, StoreCreated | RulesChanged):
        return event
    return None


def _affected(event: AnyEvent) -> list[str]:
    """Ids of the memories whose depth or links `event` may change (in event order)."""
    if isinstance(event, MemoryRemembered):
        return [i for m in event.memories for i in (m.supersedes, m.memory_id) if i]
    if isinstance(event, MemoryCorrected):
        return [event.old_id, event.memory.memory_id]
    if isinstance(event, MemoryReplaced):
        return [event.old_id, event.new_id]
    if isinstance(event, MemoryRead | MemoryForgotten):
        return [event.memory_id]
    if isinstance(event, LinksAdjusted):
        return list(dict.fromkeys(a.memory_id for a in event.adjustments))
    if isinstance(event, MemoriesExpired):
        return list(event.memory_ids)
    if isinstance(event, EntitiesCreated):
        return [m.memory_id for m in event.observations]
    if isinstance(event, GraphImported):
        return [i.memory.memory_id for i in event.memories]
    if isinstance(event, ObservationsDeleted):
        return [*event.memory_ids, *(u.memory_id for u in event.unlinked)]
    if isinstance(event, EntitiesDeleted):
        return [*event.forgotten, *(u.memory_id for u in event.unlinked)]
    return []


def _touches(event: AnyEvent, chain: set[str], state: GraphState) -> list[Touch]:
    def label(key_id: str | None) -> str | None:
        return _label(state, key_id) if key_id and key_id in state.keys else None

    base: dict[str, Any] = {
        "seq": event.seq,
        "at": event.at,
        "type": type(event).__struct_config__.tag,
    }
    out: list[Touch] = []
    if isinstance(event, MemoryRemembered):
        for new in event.memories:
            if new.memory_id in chain:
                what = "created"
                if new.supersedes is not None:
                    what = f"created, replacing the duplicate {new.supersedes}"
                out.append(
                    Touch(**base, memory_id=new.memory_id, what=what, other_id=new.supersedes)
                )
            else:
                for target in new.related_to:
                    if target in chain:
                        out.append(
                            Touch(
                                **base,
                                memory_id=target,
                                what=f"related to by new memory {new.memory_id}",
                                other_id=new.memory_id,
                            )
                        )
    elif isinstance(event, MemoryCorrected):
        if event.memory.memory_id in chain:
            out.append(
                Touch(
                    **base,
                    memory_id=event.memory.memory_id,
                    what=f"created as the correction of {event.old_id}",
                    other_id=event.old_id,
                )
            )
        if event.old_id in chain:
            out.append(
                Touch(
                    **base,
                    memory_id=event.old_id,
                    what=f"corrected by {event.memory.memory_id} "
                    f"(depth weakened ×{event.weaken_factor:g})",
                    other_id=event.memory.memory_id,
                )
            )
    elif isinstance(event, MemoryReplaced):
        if event.new_id in chain:
            out.append(
                Touch(
                    **base,
                    memory_id=event.new_id,
                    what=f"became the correction of {event.old_id}",
                    other_id=event.old_id,
                )
            )
        if event.old_id in chain:
            out.append(
                Touch(
                    **base,
                    memory_id=event.old_id,
                    what=f"corrected by {event.new_id} (depth weakened ×{event.weaken_factor:g})",
                    other_id=event.new_id,
                )
            )
        for target in event.related_to:
            if target in chain:
                out.append(
                    Touch(
                        **base,
                        memory_id=target,
                        what=f"related to by {event.new_id}, taking on {event.old_id}'s edges",
                        other_id=event.new_id,
                    )
                )
    elif isinstance(event, MemoryRead) and event.memory_id in chain:
        out.append(
            Touch(
                **base,
                memory_id=event.memory_id,
                what="read" + (f" via key {label(event.via_key_id)}" if event.via_key_id else ""),
                via_key_id=event.via_key_id,
                via_key=label(event.via_key_id),
                query=event.query,
            )
        )
    elif isinstance(event, LinksAdjusted):
        per: dict[str, dict[str, float]] = {}
        for adj in event.adjustments:
            if adj.memory_id in chain:
                name = label(adj.key_id) or adj.key_id
                per.setdefault(adj.memory_id, {})[name] = adj.delta
        for memory_id, deltas in per.items():
            out.append(
                Touch(
                    **base,
                    memory_id=memory_id,
                    what="links adjusted by a recall",
                    query=event.query,
                    deltas=deltas,
                )
            )
    elif isinstance(event, MemoryForgotten) and event.memory_id in chain:
        out.append(Touch(**base, memory_id=event.memory_id, what="forgotten", reason=event.reason))
    elif isinstance(event, MemoriesExpired):
        for memory_id in event.memory_ids:
            if memory_id in chain:
                out.append(Touch(**base, memory_id=memory_id, what="expired"))
    elif isinstance(event, EntitiesCreated):
        for new in event.observations:
            if new.memory_id in chain:
                names = ", ".join(filter(None, (label(k.key_id) for k in new.keys)))
                what = "created as an observation" + (f" of {names}" if names else "")
                out.append(Touch(**base, memory_id=new.memory_id, what=what))
    elif isinstance(event, GraphImported):
        for item in event.memories:
            if item.memory.memory_id in chain:
                what = f"imported from {event.format}" + (
                    f" {event.source}" if event.source else ""
                )
                out.append(Touch(**base, memory_id=item.memory.memory_id, what=what))
    elif isinstance(event, ObservationsDeleted):
        for memory_id in event.memory_ids:
            if memory_id in chain:
                out.append(Touch(**base, memory_id=memory_id, what="deleted as an observation"))
        for cut in event.unlinked:
            if cut.memory_id in chain:
                entity = label(cut.key_id) or cut.key_id
                what = f"deleted as an observation of {entity}, kept for its other entities"
                out.append(Touch(**base, memory_id=cut.memory_id, what=what))
    elif isinstance(event, EntitiesDeleted):
        for memory_id in event.forgotten:
            if memory_id in chain:
                out.append(Touch(**base, memory_id=memory_id, what="deleted with its entity"))
        for cut in event.unlinked:
            if cut.memory_id in chain:
                out.append(
                    Touch(
                        **base,
                        memory_id=cut.memory_id,
                        what=f"unlinked from deleted entity {label(cut.key_id) or cut.key_id}",
                    )
                )
    return out


def _beside_the_state(store: Store, read: Callable[[], T]) -> T:
    """`read()`, which reads the log beside the store's state without the lock (holding the
    mutex): again, from a fresh fold, if a writer's failed append cut back lines of the state
    meanwhile. Else the answer mixes the state's cut events with the lines read (the cut ones,
    or those that took their seqs since); the store's next look notices the cut."""
    with store._mutex:
        for _ in range(2):
            store.refresh()
            reloads = store.reloads
            try:
                answer = read()
            except LogCutBack:  # a reader of its own met the cut
                store.refresh()
                continue
            store.refresh()
            if store.reloads == reloads:
                return answer
        return read()


def history(store: Store, memory_id: str, limit: int | None = None, offset: int = 0) -> History:
    """The version chain of a memory and a page of the events that touched any version (at most
    `limit` from `offset` on, in log order, of `events_total`), with each version's depth and
    link weights after those events, folded over the whole history."""
    return _beside_the_state(store, lambda: _history(store, memory_id, limit, offset))


def _history(store: Store, memory_id: str, limit: int | None, offset: int) -> History:
    memory_id = check.text("memory_id", memory_id, 64)
    limit, offset, _ = store._page(limit, offset, None)
    with store._mutex:
        state = store.refresh()
        if memory_id not in state.memories:
            raise store._missing("memory_id", "memory", memory_id)
        chain = version_ids(state.memories, memory_id)
        members = set(chain)
        events: list[Touch] = []
        # Each point of the trajectory with the index of the first event at or after its seq:
        # it goes on the page holding that event (one page, where an event's touches straddle two).
        trajectory: list[tuple[int, Trajectory]] = []
        private = GraphState()
        # No event of the chain comes before its first version, unless an id was told again (a
        # hand-made log: the node's created_seq is then the last telling's).
        start_seq = 0 if state.ids_retold else min(state.memories[m].created_seq for m in chain)
        for line in _matching_lines(store, chain, start_seq, state.seq):
            event = decode_line(line, upcasters=store.log.upcasters)
            if event.seq > state.seq:
                break
            first = len(events)
            events.extend(_touches(event, members, state))
            mine = _only(event, members)
            if mine is None:
                continue
            apply(private, mine)
            if isinstance(mine, StoreCreated | RulesChanged):
                continue
            for mid in _affected(mine):
                node = private.memories.get(mid)
                if node is None:
                    continue
                weights = {
                    _label(state, k): round(private.keys[k].links[mid], 6) for k in node.keys
                }
                point = Trajectory(
                    seq=event.seq,
                    at=event.at,
                    memory_id=mid,
                    depth=round(node.depth, 6),
                    access_count=node.access_count,
                    weights=weights,
                )
                trajectory.append((first, point))
        versions = [
            Version(
                memory_id=m.id,
                status="superseded"
                if m.status == "active" and m.superseded_by is not None
                else m.status,
                created_seq=m.created_seq,
                created_at=m.created_at,
                valid_from=m.valid_from,
                supersede_reason=m.supersede_reason,
                preview=preview(m.content),
            )
            for m in (state.memories[mid] for mid in chain)
        ]
        end, last = offset + limit, len(events) - 1
        return History(
            memory_id=memory_id,
            versions=versions,
            events=events[offset:end],
            events_total=len(events),
            offset=offset,
            next_offset=next_offset(offset, limit, len(events)),
            # A point after the last event that touched the chain goes with that last event.
            trajectory=[point for at, point in trajectory if offset <= min(at, last) < end],
        )


def changes(
    store: Store,
    since: object | None = None,
    until: object | None = None,
    namespace: str | None = None,
    top: int = 10,
    limit: int | None = None,
    offset: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> Changes:
    """What happened between two points (seqs or ISO-8601 times; default: the whole log):
    memories added, corrected, read most, expired, forgotten and deleted (knowledge-graph
    observations), and keys merged; each list a page (at most `limit` from `offset` on, in log
    order) beside its total.

    `progress(done, total)` is told the events scanned of those to scan, from (0, total) to
    (total, total): the whole log of 100,000 memories takes seconds."""
    return _beside_the_state(
        store,
        lambda: _changes(store, since, until, namespace, top, limit, offset, progress),
    )


def _changes(
    store: Store,
    since: object | None,
    until: object | None,
    namespace: str | None,
    top: int,
    limit: int | None,
    offset: int,
    progress: Callable[[int, int], None] | None,
) -> Changes:
    limit, offset, namespace = store._page(limit, offset, namespace)
    top = check.count("top", top, 1, 1000)
    with store._mutex:
        state = store.refresh()
        low = check_point(store, since, "since", from_start=True)
        high = check_point(store, until, "until")
        if type(low) is type(high) and low is not None and high is not None and low > high:  # type: ignore[operator]
            raise InvalidInput("since", f"{since} is after until ({until})")
        memories = state.memories

        def in_ns(memory_id: str) -> bool:
            node = memories.get(memory_id)
            return node is not None and (namespace is None or node.namespace == namespace)

        def before_low(event: AnyEvent) -> bool:
            if low is None:
                return False
            return event.seq <= low if isinstance(low, int) else event.at <= low

        def after_high(event: AnyEvent) -> bool:
            if high is None:
                return False
            return event.seq > high if isinstance(high, int) else event.at > high

        added: _Cut[str] = _Cut(offset, limit)
        corrected: _Cut[Correction] = _Cut(offset, limit)
        reads: Counter[str] = Counter()
        expired: _Cut[str] = _Cut(offset, limit)
        forgotten: _Cut[str] = _Cut(offset, limit)
        deleted: _Cut[str] = _Cut(offset, limit)
        merged: _Cut[Merge] = _Cut(offset, limit)

        def delete(memory_ids: list[str]) -> None:
            for memory_id in memory_ids:
                if in_ns(memory_id):
                    deleted.add(memory_id)

        log = EventLog(store.home, segment_bytes=store.settings.segment_bytes)
        since_seq, since_at = _seek_near(store, log, low)
        until_seq, until_at = since_seq, since_at
        start = since_seq
        total = max(0, (high if isinstance(high, int) else state.seq) - start)
        step = max(_PROGRESS_EVERY, total // _PROGRESS_STEPS)
        told = 0
        if progress is not None:
            progress(0, total)
        for event in log.iter_new():
            if progress is not None and event.seq - start >= told + step:
                told = min(event.seq - start, total)
                progress(told, total)
            if before_low(event):
                since_seq, since_at = until_seq, until_at = event.seq, event.at
                continue
            if after_high(event) or event.seq > state.seq:
                # Past the state refreshed above, events another process appended during the
                # scan: `in_ns` cannot judge them, so they are the next call's (from until_seq).
                break
            until_seq, until_at = event.seq, event.at
            if isinstance(event, MemoryRemembered):
                for new in event.memories:
                    if not in_ns(new.memory_id):
                        continue
                    added.add(new.memory_id)
                    for key in new.keys:
                        if key.resolution == "alias":
                            merged.add(
                                Merge(
                                    seq=event.seq,
                                    at=event.at,
                                    key_id=key.key_id,
                                    label=_label(state, key.key_id),
                                    alias=key.label,
                                    similarity=key.similarity,
                                )
                            )
            elif isinstance(event, MemoryCorrected) and in_ns(event.old_id):
                corrected.add(Correction(event.seq, event.at, event.old_id, event.memory.memory_id))
            elif isinstance(event, MemoryReplaced) and in_ns(event.old_id):
                corrected.add(Correction(event.seq, event.at, event.old_id, event.new_id))
            elif isinstance(event, MemoryRead) and in_ns(event.memory_id):
                reads[event.memory_id] += 1
            elif isinstance(event, MemoriesExpired):
                for memory_id in event.memory_ids:
                    if in_ns(memory_id):
                        expired.add(memory_id)
            elif isinstance(event, MemoryForgotten) and in_ns(event.memory_id):
                forgotten.add(event.memory_id)
            # The knowledge graph's observations are memories too: made with their entities
            # or by an import, and hidden (status deleted, text kept) by its deletes.
            elif isinstance(event, EntitiesCreated):
                for observation in event.observations:
                    if in_ns(observation.memory_id):
                        added.add(observation.memory_id)
            elif isinstance(event, GraphImported):
                for item in event.memories:
                    if in_ns(item.memory.memory_id):
                        added.add(item.memory.memory_id)
            elif isinstance(event, ObservationsDeleted):
                delete(event.memory_ids)
            elif isinstance(event, EntitiesDeleted):
                delete(event.forgotten)
            elif isinstance(event, KeyAliased) and namespace is None:
                merged.add(
                    Merge(
                        seq=event.seq,
                        at=event.at,
                        key_id=event.key_id,
                        label=_label(state, event.key_id),
                        alias=event.alias,
                        similarity=event.similarity,
                    )
                )
        if progress is not None:
            progress(total, total)
        if (isinstance(low, int) and isinstance(high, datetime) and since_at > high) or (
            isinstance(low, datetime) and isinstance(high, int) and since_seq > high
        ):
            # One a seq and the other a time: only the scan placed them (since_at is the time
            # of seq `since`, since_seq the last event at or before time `since`).
            raise InvalidInput("since", f"{since} is after until ({until})")
        if since_seq == 0:
            # Before the first event there is no event to time: the span starts when the store
            # began (a time before that is its beginning too, see `check_point`), not in 1970.
            since_at = store.past.first_at()
        cuts = (added, corrected, expired, forgotten, deleted, merged)
        return Changes(
            since_seq=since_seq,
            until_seq=until_seq,
            since_at=since_at,
            until_at=until_at,
            namespace=namespace,
            added=added.items,
            added_total=added.total,
            corrected=corrected.items,
            corrected_total=corrected.total,
            read_most=[ReadCount(m, n) for m, n in reads.most_common(top)],
            read_most_total=len(reads),
            expired=expired.items,
            expired_total=expired.total,
            forgotten=forgotten.items,
            forgotten_total=forgotten.total,
            deleted=deleted.items,
            deleted_total=deleted.total,
            keys_merged=merged.items,
            keys_merged_total=merged.total,
            offset=offset,
            next_offset=next_offset(offset, limit, *(cut.total for cut in cuts)),
        )


def _label(state: GraphState, key_id: str) -> str:
    key = state.keys.get(key_id)
    # A label a forget erased is blank: the key goes by its id.
    return key.label or key_id if key is not None else key_id


def _seek_near(store: Store, log: EventLog, point: int | datetime | None) -> tuple[int, datetime]:
    """Put `log` at the latest kept snapshot position at or before `point` (else the start);
    returns the seq and time it stands after."""
    if point is not None:
        for _, header in reversed(store.past._snapshot_headers()):
            at_or_before = header.seq <= point if isinstance(point, int) else header.at <= point
            if at_or_before and log.seek(
                LogPosition(header.segment, header.offset, header.seq, header.at)
            ):
                return header.seq, header.at
    start = GraphState()
    log.seek(LogPosition(None, 0, 0, start.at))
    return 0, start.at
