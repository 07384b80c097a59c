"""Time travel: the key graph as it stood right after any event, and reads answered from it.

`as_of` (record time: what the store believed) is a log seq or an ISO-8601 time; `valid_at`
(valid time: what was true in the world) is an ISO-8601 time. `state_as_of` builds the past state
from the nearest kept snapshot at or before the point plus a short tail of the log, so it never
replays from the start on a store with snapshots. `TimeView` runs the ordinary queries over that
state; it never appends (a past read is not a read that happened) and never reinforces.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from keytrail.events import EventLog, InvalidInput, LogCutBack, NotFound
from keytrail.events.log import LogPosition
from keytrail.projections import GraphState, MemoryNode, VectorSet, fold
from keytrail.projections import snapshot as snapshots
from keytrail.projections.keygraph import erase_labels
from keytrail.projections.snapshot import Header

from . import validation as check
from .queries import Queries, _PastTally, valid_at_time, versions, visible
from .results import MemoryView, ProjectionState

if TYPE_CHECKING:
    from keytrail.projections.vectors import Matrix

    from .reembed import Need
    from .store import Store

logger = logging.getLogger("keytrail")
T = TypeVar("T")

#: Past states kept in memory per store are bounded by their size: the nodes (keys, memories,
#: relations, conversation turns) they hold together, about 1 KB each once decoded, so this is
#: about 40 MB. The most recently read are kept; the one just read always is, whatever its size
#: (a repeated read of one point stays fast). A store of 10,500 memories (18,000 nodes) keeps
#: two states; one of 1,000 keeps `PAST_STATES_CACHED`. (BENCHMARKS.md, time travel.)
PAST_STATES_BUDGET = 40_000
#: ... and by count: each point read adds a state, however small the store.
PAST_STATES_CACHED = 16
#: Record times whose seq is remembered, so a time asked again is not folded to again.
TIMES_REMEMBERED = 1024
#: Valid times whose counts are kept per state, the most recently read. Each holds a dict of
#: every memory (about 14 MB at 100,000 memories), so few: an agent asks about one or two.
VALID_TIMES_KEPT = 2


def state_size(state: GraphState) -> int:
    """What keeping `state` in memory costs, in nodes (see `PAST_STATES_BUDGET`)."""
    turns = sum(map(len, state.conversations.values()))
    return len(state.keys) + len(state.memories) + len(state.relations) + turns


def read_again_after_cuts(read: Callable[[], T], what: str, tries: int = 3) -> T:
    """`read()`, again (up to `tries` in all) while a writer's failed append cuts back lines
    under it (LogCutBack); the last try's error is raised."""
    for _ in range(tries - 1):
        try:
            return read()
        except LogCutBack as cut:
            logger.warning("keytrail: %s; reading %s again", cut.message, what)
    return read()


def parse_time(field: str, value: object) -> datetime:
    """An aware UTC datetime from an ISO-8601 string or a datetime (naive means UTC)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        if len(value) > check.TIME_CHARS:  # before fromisoformat, which reads endless zeros
            raise InvalidInput(
                field,
                f"{check.quoted(value)} is longer than any ISO-8601 time",
                limit=f"{check.TIME_CHARS} characters",
            )
        text = value.strip()
        if text[-1:] in ("Z", "z"):  # RFC 3339 allows either case for UTC
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInput(
                field,
                f"{check.quoted(value)} is not an ISO-8601 time",
                limit="e.g. 2026-03-01T09:00:00Z",
            ) from None
    else:
        raise InvalidInput(field, f"must be an ISO-8601 time, not {type(value).__name__}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # a valid local time whose UTC instant is before year 1 or past 9999
        raise InvalidInput(
            field,
            f"{check.quoted(value)} is outside the years 1 to 9999 in UTC",
            limit="0001 to 9999 UTC",
        ) from None


def parse_optional_time(field: str, value: object | None) -> datetime | None:
    return None if value is None else parse_time(field, value)


def parse_as_of(value: object | None, field: str = "as_of") -> int | datetime | None:
    """A log seq (an int, or a string of digits) or an ISO-8601 time; None for the present."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInput(field, "must be a log seq or an ISO-8601 time, not a boolean")
    if isinstance(value, int):
        return value
    # ASCII digits only: int() also reads other scripts' digits ("٣" is 3), which no one
    # typing a seq means.
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        digits = value.strip()
        try:
            return int(digits)
        except ValueError:  # over the 4,300 digits int() reads: no log holds such a seq
            raise InvalidInput(field, f"a seq of {len(digits)} digits is outside the log") from None
    return parse_time(field, value)


@dataclass(frozen=True)
class Point:
    """A resolved moment: the state right after event `seq`, read at record time `now`."""

    seq: int
    now: datetime


class PastStates:
    """Builds and caches past key-graph states of one store (snapshot + tail)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._headers: dict[Path, tuple[int, Header | None]] = {}
        self._cache: OrderedDict[int, GraphState] = OrderedDict()
        #: seq of a cached state -> its `state_size` when cached
        self._sizes: dict[int, int] = {}
        #: seq of a cached state -> how many of the store's `forgets_folded` and
        #: `labels_erased_folded` it has blanked
        self._blanked: dict[int, tuple[int, int]] = {}
        #: seq of a cached state -> valid time (None: none) -> the counts time views of it keep
        #: (see `tally`)
        self._tallies: dict[int, OrderedDict[datetime | None, _PastTally]] = {}
        #: ... and of the store's present state, read at another time or a valid time
        self._present_tallies: OrderedDict[datetime | None, _PastTally] = OrderedDict()
        #: a record time read before -> the seq of the last event at or before it. That never
        #: changes once the log has an event after the time: later events come at later times.
        self._seq_at: OrderedDict[datetime, int] = OrderedDict()
        self._lock = threading.Lock()
        self._first_at: datetime | None = None

    def first_at(self) -> datetime:
        """The time of the store's first event (the earliest moment one can ask about)."""
        if self._first_at is None:
            log = EventLog(self._store.home, segment_bytes=self._store.settings.segment_bytes)
            self._first_at = next(iter(log.iter_new())).at
        return self._first_at

    def _snapshot_headers(self) -> list[tuple[Path, Header]]:
        """Readable snapshot headers, oldest first (re-read only when a file changed)."""
        found: list[tuple[Path, Header]] = []
        headers: dict[Path, tuple[int, Header | None]] = {}
        for path in self._store.snapshot_files():
            try:
                mtime = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            cached = self._headers.get(path)
            if cached is None or cached[0] != mtime:
                cached = (mtime, snapshots.read_header(path))
            headers[path] = cached
            if cached[1] is not None:
                found.append((path, cached[1]))
        # Only the files there now: snapshots thinned out or rebuilt leave no entry behind in
        # a server that runs for months.
        self._headers = headers
        found.sort(key=lambda ph: ph[1].seq)
        return found

    def state(self, point: Point | int | datetime) -> GraphState:
        """The state right after the last event at or before `point` (a seq or a record time).

        The result is shared with later callers: treat it as read-only.
        """
        seq_limit = point.seq if isinstance(point, Point) else point
        keep: LogPosition | None = None
        with self._lock:
            if isinstance(seq_limit, datetime) and seq_limit in self._seq_at:
                # Else every read as of a time folds its tail again, only to find the seq.
                seq_limit = self._seq_at[seq_limit]
            if isinstance(seq_limit, int) and seq_limit in self._cache:
                self._cache.move_to_end(seq_limit)
                state = self._cache[seq_limit]
            else:
                state, keep = self._build(seq_limit)
                if isinstance(seq_limit, datetime) and seq_limit < self._store.state.at:
                    self._seq_at[seq_limit] = state.seq
                    if len(self._seq_at) > TIMES_REMEMBERED:
                        self._seq_at.popitem(last=False)
                if state.seq in self._cache:
                    # A time that falls on a seq read before: the same state, so keep the one
                    # held (and the counts kept with it, see `tally`).
                    state, keep = self._cache[state.seq], None
                    self._cache.move_to_end(state.seq)
                else:
                    self._cache[state.seq] = state
                    self._blanked[state.seq] = (0, 0)
                    self._tallies.pop(state.seq, None)
                    self._sizes[state.seq] = state_size(state)
                    self._evict()
            self._blank(state)
        if keep is not None:
            # Outside our lock: keeping takes the store's mutex and log lock, and a caller may
            # hold that mutex while it asks for a past state. Only a shortcut: a store that
            # cannot be written (a read-only backup) or a full disk still has its answer.
            try:
                self._keep(state, keep)
            except OSError as exc:
                self._store._snapshot_unsaved(exc)
        return state

    def _evict(self) -> None:
        """Drop the least recently read states until the rest fit `PAST_STATES_BUDGET` and
        `PAST_STATES_CACHED`, keeping the last one read. Hold `_lock`."""
        total = sum(self._sizes[seq] for seq in self._cache)
        while len(self._cache) > 1 and (
            total > PAST_STATES_BUDGET or len(self._cache) > PAST_STATES_CACHED
        ):
            seq, _ = self._cache.popitem(last=False)
            self._blanked.pop(seq, None)
            self._tallies.pop(seq, None)
            total -= self._sizes.pop(seq)

    def tally(
        self,
        state: GraphState,
        present: GraphState,
        forgotten: Callable[[MemoryNode], bool],
        shown: Callable[[MemoryNode, datetime], bool],
        valid_at: datetime | None,
        hub_min: int,
        now: datetime,
        build: bool,
    ) -> _PastTally | None:
        """The counts kept with `state` (a state this cache holds, or the store's present state)
        for `valid_at`, brought up to `now` and to what `present` (whose forgets hide memories
        of the past too) noted since; counted afresh if `build` where none is kept or it cannot
        be brought up; else None, as for a state not held here. The caller holds the store's
        mutex, as every query does."""

        def kept_for() -> OrderedDict[datetime | None, _PastTally] | None:
            if state is self._store.state:
                present_tallies = self._present_tallies
                if any(t.state is not state for t in present_tallies.values()):
                    present_tallies.clear()  # the store's state was replaced (a reload)
                return present_tallies
            if self._cache.get(state.seq) is not state:
                return None
            return self._tallies.setdefault(state.seq, OrderedDict())

        with self._lock:
            table = kept_for()
            if table is None:
                return None
            kept = table.get(valid_at)
        if (
            kept is not None
            and kept.state is state
            and kept.caught_up(present, forgotten, shown, hub_min, now)
        ):
            with self._lock:
                if table.get(valid_at) is kept:
                    table.move_to_end(valid_at)
            return kept
        if not build:
            return None
        kept = _PastTally(state, present, forgotten, shown, valid_at, hub_min, now)
        with self._lock:
            if kept_for() is table:
                table[valid_at] = kept
                table.move_to_end(valid_at)
                while len(table) > VALID_TIMES_KEPT:
                    table.popitem(last=False)
        return kept

    def blank(self, state: GraphState) -> None:
        """`_blank` a state handed out before: the store may have folded forgets since."""
        with self._lock:
            self._blank(state)

    def _blank(self, state: GraphState) -> None:
        """Empty the content of memories forgotten since `state` was built or last blanked.

        A forget redacts the line that created the memory, so a fresh replay of any prefix has
        its content empty: a state built before the forget (cached, or folded from the log or a
        snapshot the forget was still purging) must say the same. Hold `_lock`.
        """
        folded, erased = self._store.forgets_folded, self._store.labels_erased_folded
        done, labels_done = self._blanked.get(state.seq, (0, 0))
        for memory_id, _ in folded[done:]:
            node = state.memories.get(memory_id)
            if node is not None and node.content:
                node.content = ""
        # The labels a forget erased likewise: a replay has them blank.
        erase_labels(state, erased[labels_done:])
        if self._cache.get(state.seq) is state:
            self._blanked[state.seq] = (len(folded), len(erased))

    def _build(self, limit: int | datetime) -> tuple[GraphState, LogPosition | None]:
        """The state at `limit`, and the position to keep it at as a snapshot (None: don't),
        folded from the log as it is when the fold ends."""
        return read_again_after_cuts(lambda: self._fold_log(limit), "the past state")

    def _fold_log(self, limit: int | datetime) -> tuple[GraphState, LogPosition | None]:
        """`_build`, once: LogCutBack if lines it folded were cut back before it ended."""

        def before(header: Header) -> bool:
            return header.seq <= limit if isinstance(limit, int) else header.at <= limit

        log = EventLog(self._store.home, segment_bytes=self._store.settings.segment_bytes)
        state: GraphState | None = None
        start = 0
        for path, header in reversed(self._snapshot_headers()):
            if not before(header):
                continue
            position = LogPosition(header.segment, header.offset, header.seq, header.at)
            if not log.seek(position):
                continue
            snap = snapshots.load(path, lazy=True)
            if snap is not None and snap.seq == header.seq:
                state, start = snap.state, snap.seq
                break
        if state is None:
            log.seek(LogPosition(None, 0, 0, GraphState().at))
            state = GraphState()
        reached = log.position

        def tail() -> object:
            nonlocal reached
            for event in log.iter_new():
                if event.seq > limit if isinstance(limit, int) else event.at > limit:
                    return
                yield event
                reached = log.position  # right after this event's line

        state = fold(tail(), state)  # type: ignore[arg-type]
        # Folded without the lock: a failed append may have cut back lines it read, and the
        # line of its last event still there (a cut takes the log's end) says none was.
        if not log.seek(reached):
            raise LogCutBack(
                reached.segment or "", reached.offset, reached.seq, None, "gone after the read"
            )
        spacing = self._store.snapshot_spacing(self._store.state.seq)
        if state.seq - start >= spacing and reached.seq == state.seq:
            # A long tail means no kept snapshot near here (e.g. an imported log): keep this
            # state, so the next read around this point starts from it.
            return state, reached
        return state, None

    def _keep(self, state: GraphState, position: LogPosition) -> None:
        """Save `state` as an archived snapshot, holding the log lock and caught up: a forget
        by another process since the fold then is folded here and blanked before the save, and
        one after it purges this file like any other snapshot."""
        store = self._store
        folder = store.snapshot_path.parent
        with store._mutex, store._locked():
            # Folded without the lock: from lines a failed append may have cut back since.
            probe = EventLog(store.home)
            try:
                if not probe.seek(position):
                    return
            finally:
                probe.close()
            with self._lock:
                self._blank(state)
            # At the cap one more would only make the next thinning delete one, maybe this
            # one: a snapshot written per past read for nothing. Files no read can start from
            # (an older keytrail's) do not count.
            store.drop_unreadable_snapshots()
            if store.archived_snapshots() >= store.settings.snapshot_keep:
                return
            snapshots.save(
                folder / snapshots.archived_name(state.seq),
                snapshots.Snapshot.of(state, position.segment, position.offset),
            )


class TimeView(Queries):
    """The read queries answered from a past state and/or at a valid time. Appends nothing."""

    def __init__(
        self,
        store: Store,
        state: GraphState,
        now: datetime,
        valid_at: datetime | None = None,
        present: bool = False,
        forgotten_by: GraphState | None = None,
    ) -> None:
        """`forgotten_by`: the state whose forgets hold in this view too (default: the store's
        present state, so that a memory forgotten since is hidden from the past as well). Only
        forgets: a knowledge-graph delete since hides nothing here, since the deleted text is
        history, kept in the log and the state."""
        self._store = store
        self._present = present
        self.state = state
        self._seq = state.seq  # the point answered from (see refresh)
        self.settings = store.settings
        self.log = store.log
        self.embedder = store.embedder
        self.thresholds = store.thresholds
        self._mutex = store._mutex
        self.valid_at = valid_at
        self._shown_then = self._valid_then if valid_at is not None else visible
        # Memories are never dropped from a state, so the present knows every past memory.
        self._forgotten_by = store.refresh() if forgotten_by is None else forgotten_by
        self._visible = self._shown
        self._now = now
        self.clock = self._clock

    def _shown(self, node: MemoryNode, now: datetime) -> bool:
        return not self._forgotten(node) and self._shown_then(node, now)

    def _forgotten(self, node: MemoryNode) -> bool:
        # Forgotten then or since. A memory deleted since (status "deleted" now) is not: the
        # past shows it as it was.
        if node.status == "forgotten":
            return True
        later = self._forgotten_by.memories.get(node.id)
        return later is not None and later.status == "forgotten"

    _EXPIRED = "it had expired"

    def _clock(self) -> datetime:
        return self._now

    def _missing(self, field: str, kind: str, ident: str) -> NotFound:
        # An id the present holds (the state whose forgets hold here too) but this past state
        # does not came later: say so.
        present = self._forgotten_by
        held: dict[str, Mapping[str, object]] = {
            "key": present.keys,
            "memory": present.memories,
            "session": present.conversations,
        }
        later = ident in held[kind]
        if later:
            return NotFound(field, kind, ident, "not at that point in time")
        return super()._missing(field, kind, ident)

    def _past_tally(self, now: datetime, build: bool = True) -> _PastTally | None:
        return self._store.past.tally(
            self.state,
            self._forgotten_by,
            self._forgotten,
            self._shown,
            self.valid_at,
            self.settings.hub_min,
            now,
            build,
        )

    def _valid_then(self, node: MemoryNode, now: datetime) -> bool:
        assert self.valid_at is not None
        return valid_at_time(node, self.state.memories, now, self.valid_at)

    def refresh(self) -> GraphState:
        if self._present:
            self.state = self._store.refresh()
        elif self.state.seq != self._seq:
            # The state asked for was the store's own, latest then, which folds in place: a
            # write since (this process's or another's) must not leak into the past answer.
            self.state = self._store.past.state(self._seq)
        elif self.state is not self._store.state:
            # The store's catch-ups since this state was handed out (ours at construction, a
            # wait for vectors) may have folded another process's forget: its erased labels
            # left the store's label rows, which `key_vectors` lines up with ours.
            self._store.past.blank(self.state)
        return self.state

    def embed(self, texts: Sequence[str], digests: list[str] | None = None) -> Matrix:
        # Content vectors are addressed by text hash: the past reuses them, nothing re-embeds.
        return self._store.embed(texts, digests)

    def key_vectors(self) -> VectorSet:
        """The store's label rows cut to the labels that existed then.

        Labels are only ever appended to `state.labels` (insertion-ordered), and the store's
        rows follow that order, so the past's labels are exactly the first rows. (A forget's
        erased labels leave both the past's labels and the store's rows: the order holds.)
        """
        present = self._store.key_vectors()
        if self._store.state.labels_dropped == 0:
            return _prefix(present, len(self.state.labels))
        # A learned alias was dropped since (key.unaliased): labels no longer only grow, so
        # build the past's rows from its own labels (cached vectors: nothing re-embeds).
        past = VectorSet(present.dim)
        labels = list(self.state.labels.items())
        past.add([key_id for _, key_id in labels], self._store.embed([lb for lb, _ in labels]))
        return past

    def memory_vectors(self) -> VectorSet:
        """Content rows of the memories that existed then (a prefix, as for key labels)."""
        return _prefix(self._store.memory_vectors(), len(self.state.memories))

    def wait_for_vectors(
        self, need: Need = "all", progress: Callable[[int, int], None] | None = None
    ) -> None:
        # The past reads the store's rows (every past label and content is among them).
        self._store.wait_for_vectors(need, progress)

    def projection_state(self) -> ProjectionState:
        return self._store.projection_state()

    def read_memory(
        self,
        memory_id: str,
        via_key_id: str | None = None,
        query: str | None = None,
        namespace: str | None = None,
    ) -> MemoryView:
        """The memory as it was then. Records no read, deepens nothing, strengthens no link.

        With a valid time, the version of its chain true then, as read_key and list_memories
        show it (`asked_id` says which id was asked for when that is another version); NotFound
        naming valid_at when no version was true then.
        """

        if query is not None:
            check.text("query", query, self.settings.limits.query_chars)
        namespace = check.optional_namespace(namespace)
        with self._mutex:
            self.refresh()
            node = self._visible_memory("memory_id", memory_id, self._now)
            self.check_read(node, namespace, via_key_id)
            if self.valid_at is None:
                return self.memory_view(node)
            true_then = self._version_true_then(node)
            shown = self.memory_view(true_then)
            return shown if true_then is node else replace(shown, asked_id=node.id)

    def _related_start(self, node: MemoryNode) -> MemoryNode:
        # As read_memory answers: the version true then, or NotFound naming valid_at.
        return node if self.valid_at is None else self._version_true_then(node)

    def _version_true_then(self, node: MemoryNode) -> MemoryNode:
        """The version of `node`'s chain shown at `valid_at`, or NotFound saying when the fact
        was true: from the earliest valid_from of the versions a read by id may show, until
        (when it ended with no version shown after it) the last end of one begun by then."""
        assert self.valid_at is not None
        now, valid_at, memories = self._now, self.valid_at, self.state.memories
        chain = [memories[v] for v in versions(memories, node.id)]
        for version in chain:
            if self._visible(version, now):
                return version
        # A version holds until the earliest valid_from of the versions after it (None: on).
        ends: list[datetime | None] = []
        earliest: datetime | None = None
        for version in reversed(chain):
            ends.append(earliest)
            begins = version.valid_since()
            earliest = begins if earliest is None else min(earliest, begins)
        ends.reverse()
        # When each version a read by id may show (`_visible_memory`; node is one) was true.
        held = [
            (version.valid_since(), end)
            for version, end in zip(chain, ends, strict=True)
            if not self._forgotten(version)
            and version.status == "active"
            and (version.expires_at is None or version.expires_at > now)
        ]
        since = min(begins for begins, _ in held)
        if valid_at < since:
            detail = f"not yet true at {valid_at.isoformat()} (true from {since.isoformat()})"
        else:
            ends_then = [end for begins, end in held if begins <= valid_at and end is not None]
            ended = max(ends_then, default=since)
            detail = (
                f"no longer true at {valid_at.isoformat()} "
                f"(true from {since.isoformat()} until {ended.isoformat()})"
            )
        raise NotFound("valid_at", "memory", node.id, detail)


def check_point(
    store: Store, value: object | None, field: str = "as_of", *, from_start: bool = False
) -> int | datetime | None:
    """`value` parsed and checked against the log: a seq in 1..head, or a time from the store's
    first event up to now. None stays None (the present). Builds no state.

    With `from_start` (the start of a span, `changes(since=...)`), a time before the store
    existed is its beginning, None: "since January" of a store made in March is all of it; so
    is seq 0, the point before the first event (what `changes` answers as its `since_seq`).
    """
    parsed = parse_as_of(value, field)
    if parsed is None:
        return None
    head = store.refresh()
    if isinstance(parsed, int):
        if parsed == 0 and from_start:
            return None
        if parsed < 1 or parsed > head.seq:
            low = 0 if from_start else 1
            raise InvalidInput(
                field,
                f"{check.number(parsed, 'seq')} is outside the log",
                limit=f"{low} to {head.seq}",
                value=parsed,
            )
        return parsed
    now = store.clock()
    if parsed > now:
        raise InvalidInput(
            field, f"{parsed.isoformat()} is in the future", limit=f"up to {now.isoformat()}"
        )
    first = store.past.first_at()
    if parsed < first and from_start:
        return None
    if parsed < first:
        # A question about the world back then ("where did Dana live in 2023?") reaches for
        # as_of, which is what the store knew: say which argument answers it.
        then = (
            "; as_of is what the store knew then (nothing yet): for what was true in the world "
            "at that time pass valid_at"
            if field == "as_of"
            else ""
        )
        raise InvalidInput(
            field,
            f"{parsed.isoformat()} is before the store existed{then}",
            limit=f"from {first.isoformat()}",
        )
    return parsed


def _prefix(rows: VectorSet, count: int) -> VectorSet:
    """The first `count` rows of `rows`, sharing its matrix (a VectorSet reads only the first
    len(ids) rows, so nothing is copied)."""
    if count >= len(rows):
        return rows
    past = VectorSet(rows.dim)
    past.ids = rows.ids[:count]
    past._matrix = rows._matrix
    return past


def resolve(store: Store, as_of: object | None, field: str = "as_of") -> Point | None:
    """The moment `as_of` names (see `check_point`), with the seq it falls on.

    A time after the last event answers the present state read at that time; a time in the
    future, before the store existed, or a seq outside the log is InvalidInput.
    """
    parsed = check_point(store, as_of, field)
    if parsed is None:
        return None
    head = store.state
    if isinstance(parsed, int):
        if parsed == head.seq:
            return Point(seq=head.seq, now=head.at)
        return Point(seq=parsed, now=store.past.state(parsed).at)
    if parsed >= head.at:
        return Point(seq=head.seq, now=parsed)
    return Point(seq=store.past.state(parsed).seq, now=parsed)


def view(store: Store, as_of: object | None = None, valid_at: object | None = None) -> Queries:
    """The queries to answer with: the store itself, or a `TimeView` of the past/valid time."""
    point = resolve(store, as_of)
    valid = parse_optional_time("valid_at", valid_at)
    if point is None and valid is None:
        return store
    if point is None:
        return TimeView(store, store.refresh(), store.clock(), valid, present=True)
    state = store.state if point.seq == store.state.seq else store.past.state(point.seq)
    return TimeView(store, state, point.now, valid)


def read_memory_at(
    store: Store,
    memory_id: str,
    via_key_id: str | None = None,
    query: str | None = None,
    namespace: str | None = None,
    as_of: object | None = None,
    valid_at: object | None = None,
) -> MemoryView:
    """`read_memory` now (recorded, deepens), or as of / valid at a time (records nothing)."""
    queries = view(store, as_of, valid_at)
    if isinstance(queries, TimeView):
        return queries.read_memory(memory_id, via_key_id, query, namespace)
    return store.read_memory(memory_id, via_key_id, query, namespace)
