"""The Store: a key graph folded from an event log, with the memory commands on top.

Every command follows the same path: validate (nothing written on bad input), embed outside
the lock, take the log lock, fold what other processes appended, decide, append one event,
fsync, fold it. Every query first folds what other processes appended, so no answer is older
than the log was when it was asked.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import logging
import os
import secrets
import threading
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
import numpy as np

import keytrail
from keytrail.events import (
    AnyEvent,
    Appender,
    CorruptLog,
    EntitiesDeleted,
    EventLog,
    InvalidInput,
    LockBusy,
    LogCutBack,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    NewMemory,
    NoStore,
    NotFound,
    ObservationsDeleted,
    StoreCreated,
    StoreError,
    TurnRecorded,
    refuse_nested_store,
    require_log,
    utc_now,
)
from keytrail.events.log import Clock, LogPosition
from keytrail.events.redact import SegmentRedaction
from keytrail.projections import GraphState, MemoryNode, VectorCache, VectorSet, fold, text_hash
from keytrail.projections import snapshot as snapshots
from keytrail.projections.snapshot import MemoryText
from keytrail.projections.text import TextIndex
from keytrail.projections.vectors import Matrix

from . import aliases, forgetting, tempfiles
from . import validation as check
from .config import Settings
from .decide import Batch, LinksByNamespace, SameTexts
from .embedders import Embedder, make_embedder
from .extract import extract_keys
from .hybrid import HybridQueries
from .profiles import Thresholds, profile_for
from .queries import Queries, versions
from .results import (
    PROJECTION_READY,
    Corrected,
    Expired,
    Forgotten,
    KeyOutcome,
    MemoryView,
    ProjectionState,
    Remembered,
    TurnSaved,
)
from .timetravel import PastStates, parse_optional_time, read_again_after_cuts

if TYPE_CHECKING:
    from .reembed import BackgroundBuild, Need

T = TypeVar("T")
logger = logging.getLogger("keytrail")
#: errno values of a store this process may read but not write
READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)
SNAPSHOT_FILE = "keygraph.msgpack"
#: A close saves a snapshot once the events folded since the last one are at least one in this
#: many of the log's: a snapshot is the whole graph (45 MB, 0.3 s with its fsync at 100,000
#: memories), which every one-shot writing command rewrote for its one event, while the next
#: open folds a tail of 0.5% of the log in about 1% of a full replay (its events decode the
#: nodes they touch: about twice a replayed event's cost).
CLOSE_SNAPSHOT_SHARE = 200
TURN_ROLES = ("user", "assistant", "system", "tool")
#: Called while opening with (bytes of the log folded so far, total bytes).
OpenProgress = Callable[[int, int], None]
#: Called during long work with (units done, units in all).
Progress = Callable[[int, int], None]
#: Texts a progress-reporting embed hands the model at a time
EMBED_CHUNK = 64
#: Texts without a vector (labels and contents other processes added: an import, a batch of
#: thousands, writes under another model) that a call needing vectors embeds inline, as part of
#: its own work. Past this many it has the projection built first (a server's in the
#: background, as at its start) and waits for that, hearing its progress (see
#: `wait_for_vectors`): embedded inline, thousands of texts took seconds under the mutex, or a
#: remember's under the log lock, holding up every other call and process, and told the
#: caller nothing.
INLINE_EMBED_MAX = 256
#: How long `close` waits for a background build's model call to end (one chunk of texts)
CLOSE_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class RememberItem:
    """One memory to remember (the arguments of `remember`, for `remember_batch`)."""

    content: str
    keys: Sequence[str] | None = None
    key_types: dict[str, str] | None = None
    namespace: str | None = None
    ttl_seconds: int | None = None
    related_to: Sequence[str] | None = None
    session_id: str | None = None
    source: str | None = None
    #: when it became true in the world (ISO-8601 or datetime); default: when it is told
    valid_from: datetime | str | None = None


@dataclass(frozen=True)
class _Checked:
    content: str
    keys: list[check.KeySpec]
    namespace: str
    ttl: int | None
    related_to: list[str]
    session_id: str | None
    source: str | None
    valid_from: datetime | None = None
    #: the keys were extracted from the content (none were given)
    extracted: bool = False


def content_hash(content: str) -> str:
    """What a memory's `content_hash` holds: checks an export's text, names forgotten text."""
    return "sha256:" + hashlib.sha256(content.encode("utf-8")).hexdigest()


def check_item(settings: Settings, item: RememberItem, prefix: str = "") -> _Checked:
    """`item` checked as `remember` checks it before reading the store: what it can refuse
    without a store (all but `related_to` naming a memory that exists), so a caller about to
    make a store for it (`keytrail remember` on a new home) can refuse first."""
    limits = settings.limits
    content = check.text(prefix + "content", item.content, limits.content_chars)
    keys = check.keys(item.keys, item.key_types, limits, field=prefix + "keys", required=False)
    return _Checked(
        content=content,
        keys=keys or extract_keys(content, limits.keys_per_memory, limits.key_chars),
        extracted=not keys,
        namespace=check.namespace(item.namespace, settings.default_namespace, prefix + "namespace"),
        ttl=check.ttl(item.ttl_seconds, limits, prefix + "ttl_seconds"),
        related_to=check.id_list(prefix + "related_to", item.related_to, limits.related_to),
        session_id=check.session_id(item.session_id, prefix + "session_id"),
        source=None
        if item.source is None
        else check.text(prefix + "source", item.source, limits.source_chars),
        valid_from=parse_optional_time(prefix + "valid_from", item.valid_from),
    )


class Store(Queries, HybridQueries):
    """One store directory, opened by one process (several processes may open the same one)."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        home: Path | str | None = None,
        embedder: Embedder | None = None,
        clock: Clock = utc_now,
        progress: OpenProgress | None = None,
        create: bool = True,
    ) -> None:
        """Open the store at `home` (default: the settings' home).

        With `create` (the default) a missing store is made: the directory and a
        `store.created` event. Without it, a home that holds no store raises NoStore before
        anything is written or an embedder is loaded (see `open_existing`).
        """
        self.settings = settings or Settings.from_env()
        self.home = Path(home if home is not None else self.settings.home)
        if create:
            refuse_nested_store(self.home)  # before mkdir: a refused home stays absent
        else:
            require_log(self.home)
        # Before the home is made: an embedder refused (a dimension its model does not make)
        # leaves nothing behind.
        self.embedder = embedder or make_embedder(
            self.settings.embedder,
            self.settings.model,
            self.settings.model_path,
            self.settings.embed_dim,
            self.settings.embed_threads,
        )
        if create:
            self.home.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.log = EventLog(self.home, segment_bytes=self.settings.segment_bytes, clock=clock)
        self.thresholds: Thresholds = profile_for(
            self.embedder.model_id, self.settings.threshold_overrides
        )
        # Loaded on first use (see `vectors`), as are the matrices: none may ask the embedder
        # its dimension at open, which an endpoint that is down cannot answer (see name_of).
        self._vector_cache: VectorCache | None = None
        self._key_vectors: VectorSet | None = None
        self._labels_embedded = 0
        self._labels_dropped = 0
        #: key label -> its text_hash, for the labels of `state.labels` hashed so far: close's
        #: coverage check (`_every_row_since_recorded`) looks up every label `key_vectors`
        #: hashed moments before (~45-90 ms at 20,000 labels). An erased label leaves it.
        self._label_digests: dict[str, str] = {}
        self._label_digests_dropped = 0  # `state.labels_dropped` when it was last pruned
        self._memory_vectors: VectorSet | None = None
        self._memories_embedded = 0
        #: labels and memories (counts, in fold order) known to have a vector in the cache, or
        #: few enough missing to embed inline: `wait_for_vectors` looks past them only
        self._labels_checked = self._contents_checked = 0
        self._mutex = threading.RLock()
        self._snapshot_seq = 0
        #: rows were saved since this process last recorded the vector cache's coverage: close
        #: records it where every text has a row (a server's remembers recorded none)
        self._rows_unrecorded = False
        #: Vector keys of contents another process forgot, to erase at our next write: rows we
        #: embedded (from the log, before its redaction) but had not saved would otherwise be
        #: written after that forget's purge.
        self._forgotten_digests: set[str] = set()
        #: the lengths of those contents: only a memory of one of them may share the text
        self._forgotten_lengths: set[int] = set()
        self._forgotten_unindexed: list[str] = []
        #: memories a knowledge-graph delete cut keys from, for the text index's next catch-up
        self._unlinked_unindexed: list[str] = []
        self._unfoldable: CorruptLog | None = None  # a line that cannot be applied (see _folded)
        self._pending_purge = str(forgetting.pending_path(self.home))  # checked on every write
        #: (memory id, text_hash of its content) of every forget folded since open, in order:
        #: work that read contents before a forget (past states, a reembed) checks it. The
        #: hash is "" for a memory whose content the state no longer held.
        self.forgets_folded: list[tuple[str, str]] = []
        #: keys whose labels a forget folded since open erased, in order (past states check it)
        self.labels_erased_folded: list[str] = []
        #: memory id -> text_hash of its content, for memories compared with new ones (dedup),
        #: and the state's `ids_retold` when it was filled
        self._content_digests: dict[str, str] = {}
        self._digests_retold = 0
        #: past key-graph states for `as_of` reads (see core/timetravel.py)
        self.past = PastStates(self)
        self.links_by_namespace = LinksByNamespace()
        self.same_texts = SameTexts()
        self._closing = False  # set by close: a warm-up still running stops
        #: a build of the projection in the background (a server's), which the calls that
        #: read vectors wait for: see `wait_for_vectors` and core/reembed.py
        self._background_build: BackgroundBuild | None = None
        self.state = self._open_state(progress)
        #: how often a writer's failed append cut back lines this process had folded, which it
        #: then folded the log afresh for (see `_reload_after_cut`)
        self.reloads = 0
        if self.state.seq == 0:
            if not create:
                # Segments but not one complete line: a first open that died before its
                # store.created was whole. Only a writer may finish making the store.
                self.log.close()
                raise NoStore(str(self.home), "its log holds no complete event")
            self._create()
        # The text index catches up lazily, when a query needs it (see HybridQueries).
        self.text = TextIndex(self.home / "index" / "text")
        self._text_observed_from = self.state.seq
        # A forget folded just now is not in `forgets_folded` (nor in the other records of
        # `_noting_forgets`), and its purge may still be running: past states built from
        # snapshots or log lines not yet purged would keep its content. Waiting here for the
        # purge (`_tidy` takes the lock it holds; forget.pending exists until it ends) means
        # everything this process reads after its open is already purged. tests/
        # test_forget_race.py holds a forget before each purge step and opens the store.
        if forgetting.pending_path(self.home).exists():
            self._tidy()
        elif (
            self.state.seq - self._snapshot_seq >= self.settings.snapshot_every
            # Temp files a writer killed mid-write left (looked for without the lock, which is
            # taken only when there are some; see core/tempfiles.py).
            or tempfiles.leftovers(self.home)
        ):
            try:
                self._tidy()
            except OSError as exc:  # only a shortcut was due: see _save_at_close
                self._snapshot_unsaved(exc)

    @classmethod
    def open_existing(cls, settings: Settings | None = None, **kwargs: Any) -> Store:
        """Open a store that must already exist; NoStore, with nothing written, if it does not.

        For whoever only looks at a store: a mistyped home must be refused, not answered from
        a new empty store made there.
        """
        return cls(settings, create=False, **kwargs)

    # -- opening ---------------------------------------------------------------------------

    @property
    def vectors(self) -> VectorCache:
        """The embedding cache of this store's model, read from disk on first use: opening a
        store to answer from the key graph should not first index every vector it has."""
        cache = self._vector_cache
        if cache is None:
            with self._mutex:
                if self._vector_cache is None:
                    loaded = VectorCache(
                        self.home / "cache" / "vectors",
                        self.embedder.fingerprint,
                        self.embedder.dim,
                    )
                    # Forgets folded before it was read: their rows may be mid-purge.
                    for digest in self._forgotten_digests:
                        loaded.forget_saved(digest)
                    self._vector_cache = loaded
                cache = self._vector_cache
        return cache

    @property
    def snapshot_path(self) -> Path:
        return self.home / "cache" / "snapshot" / SNAPSHOT_FILE

    def snapshot_files(self) -> list[Path]:
        """Every key-graph snapshot kept under cache/snapshot/, oldest first (the latest last).

        All are derived and deletable; whoever rewrites the log must rewrite or drop them all.
        """
        folder = self.snapshot_path.parent
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        archived = sorted(
            (seq, name) for name in names if (seq := snapshots.archived_seq(name)) is not None
        )
        files = [folder / name for _, name in archived]
        if SNAPSHOT_FILE in names:
            files.append(self.snapshot_path)
        return files

    def _open_state(self, progress: OpenProgress | None = None) -> GraphState:
        return read_again_after_cuts(lambda: self._read_state(progress), "the log")

    def _read_state(self, progress: OpenProgress | None = None) -> GraphState:
        """The state the newest snapshot that matches the log and the log after it fold to."""
        state = GraphState()
        self.log.seek(LogPosition(None, 0, 0, state.at))
        # The newest readable snapshot that still matches the log; older ones are fallbacks.
        # Loaded lazily: a node is decoded when something first looks at it, so an open costs
        # an id index, not the whole graph.
        for path in reversed(self.snapshot_files()):
            snap = snapshots.load(path, lazy=True)
            if snap is not None and self.log.seek(
                LogPosition(snap.segment, snap.offset, snap.seq, snap.at)
            ):
                state = snap.state
                self._snapshot_seq = snap.seq
                break
        else:
            self.log.seek(LogPosition(None, 0, 0, state.at))
        events: Iterable[AnyEvent] = self.log.iter_new()
        if progress is not None:
            events = self._reporting(events, progress)
        return self._folded(events, state)

    def _tidy(self) -> None:
        """Under the lock: finish an interrupted forget, remove temp files left by a writer
        killed mid-write, save a due snapshot."""
        with self._mutex, self._locked():
            self._finish_forgetting()
            self._remove_leftovers()
            if self.state.seq - self._snapshot_seq >= self.settings.snapshot_every:
                self._save_snapshot(self.state)

    def _remove_leftovers(self) -> None:
        """Remove temp files left by writers killed mid-write (hold the lock)."""
        for path in tempfiles.remove_leftovers(self.home):
            logger.info("keytrail: removed %s, left by a write cut short", path)

    def _reporting(self, events: Iterable[AnyEvent], progress: OpenProgress) -> Iterator[AnyEvent]:
        sizes = {name: (self.log.dir / name).stat().st_size for name in self.log.segments()}
        total = sum(sizes.values())
        names = list(sizes)

        def done() -> int:
            pos = self.log.position
            if pos.segment not in sizes:
                return 0
            return sum(sizes[n] for n in names[: names.index(pos.segment)]) + pos.offset

        progress(done(), total)
        for i, event in enumerate(events, 1):
            yield event
            if i % 2000 == 0:
                progress(done(), total)
        progress(total, total)

    def _create(self) -> None:
        with self._mutex, self._locked() as app:
            if self.state.seq == 0:
                self._append(
                    app,
                    StoreCreated(
                        store_id=secrets.token_hex(8),
                        rules=self.settings.rules,
                        software=f"keytrail {keytrail.__version__}",
                    ),
                )

    def warm_up(self, memory_vectors: bool = False) -> threading.Thread:
        """Build now, in a background thread, what the first queries would otherwise build.

        An open from a snapshot leaves nodes undecoded and the key vectors for first use, so a
        server's first `recall` pays for them (0.1-0.3 s at 20,000 memories, 0.4 s at 100,000).
        A server calls this right after opening, with `memory_vectors` when it offers
        `recall_memories`, whose first call would build them (they hold a copy of every content
        vector, so not otherwise). Last come the columns `read_key` of each big key (a hub)
        ranks from, which its first page would build. Each step holds the store's mutex, as
        the query that needed it would: a query arriving meanwhile waits for that step instead
        of doing the same work itself. A step that fails is left to the first query that needs
        it, which reports the error to its caller.
        """

        def run() -> None:
            # Not the text index: catching it up after a large import elsewhere can take
            # seconds under the mutex, which a plain recall that never needs it would wait on.
            steps: list[Callable[[], object]] = [self.key_vectors, self._decode_nodes]
            if memory_vectors:
                steps.append(self.memory_vectors)
            for step in steps:
                if not self._warm_step(step):
                    return
            # read_key of a hub ranks from kept columns, which its first page would build
            # (0.3 s at 100,000 links once nodes are decoded): one key per hold of the mutex.
            big: list[str] = []
            if not self._warm_step(lambda: big.extend(self.biggest_keys())):
                return
            for key_id in big:
                if not self._warm_step(functools.partial(self._warm_columns_of, key_id)):
                    return

        thread = threading.Thread(target=run, name="keytrail-warm-up", daemon=True)
        thread.start()
        return thread

    def _warm_step(self, step: Callable[[], object]) -> bool:
        with self._mutex:
            if self._closing:
                return False
            try:
                self.refresh()
                step()
            except Exception:  # a background thread has no caller to raise to
                name = getattr(step, "__name__", repr(step))
                logger.warning("warm-up stopped at %s", name, exc_info=True)
                return False
        return True

    def _warm_columns_of(self, key_id: str) -> None:
        key = self.state.keys.get(key_id)
        if key is not None:
            self._columns_of(key)

    def _decode_nodes(self) -> None:
        snapshots.materialize(self.state)

    def close(self) -> None:
        # Snapshots are written holding the lock and caught up: one written from a state older
        # than a forget would bring the forgotten content back to disk.
        with self._mutex:
            self._closing = True
            try:
                if self._unfoldable is None and (
                    self._snapshot_due_at_close()
                    or self._rows_unrecorded
                    or (self._vector_cache is not None and self._vector_cache.unsaved)
                ):
                    self._save_at_close()
            finally:
                self.log.close()
        # A build in the background stops at its next step (StoreClosed), but one inside a
        # model call runs on: a process that exits meanwhile aborts in the model's runtime
        # ("terminate called without an active exception", status 134). Wait for that call.
        build = self._background_build
        thread = None if build is None else build.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_WAIT_SECONDS)

    def _save_at_close(self) -> None:
        """Save a snapshot of what this process folded, for the next open to start from, when
        one is due (`_snapshot_due_at_close`), and the vector rows it embedded but has not
        saved: a server that only read (other processes' memories, embedded for its searches)
        saved them at no write, and every start embedded them again (seconds per thousand with
        a real model). And the vector cache's coverage, where rows were saved since it was last
        recorded and every text has one now (not waited for: the next close records it).

        Only shortcuts, so a store that cannot be written (a read-only backup: even the lock
        file cannot be opened) or a full disk costs the next open a replay, not this
        process's command: it is in the log already, and reported as failed it would be
        run again."""
        # Only the coverage to record is not worth waiting for another writer (a long import).
        wait = self._snapshot_due_at_close() or (
            self._vector_cache is not None and self._vector_cache.unsaved > 0
        )
        try:
            with self._locked(wait=wait):
                self._persist_vectors()
                if self._rows_unrecorded and self._every_row_since_recorded():
                    # So `verify` and `reembed --list` say the cache covers the log's end, and
                    # the next open checks nothing before it.
                    self.vectors.record(self.state.store_id, self.state.seq)
                if self._snapshot_due_at_close():
                    self._save_snapshot(self.state)
        except LockBusy:
            pass  # the next build, or close, records it
        except OSError as exc:
            self._snapshot_unsaved(exc)

    def _snapshot_due_at_close(self) -> bool:
        """Whether the tail folded since the last snapshot is long enough to save one at close
        (`CLOSE_SNAPSHOT_SHARE`); a shorter one is left for the next open to fold."""
        tail = self.state.seq - self._snapshot_seq
        return tail > 0 and tail * CLOSE_SNAPSHOT_SHARE >= self.state.seq

    def _snapshot_unsaved(self, exc: OSError) -> None:
        level = logging.INFO if exc.errno in READ_ONLY_ERRNOS else logging.WARNING
        logger.log(level, "keytrail: no snapshot saved at seq %d: %s", self.state.seq, exc)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _save_snapshot(self, state: GraphState) -> None:
        pos = self.log.position
        if pos.seq != state.seq:
            return
        self._archive_latest_snapshot(state.seq)
        snapshots.save(self.snapshot_path, snapshots.Snapshot.of(state, pos.segment, pos.offset))
        self._snapshot_seq = state.seq

    def archived_snapshots(self) -> int:
        """How many snapshots are kept for time travel (all but the latest)."""
        return sum(1 for p in self.snapshot_files() if p != self.snapshot_path)

    def snapshot_spacing(self, head_seq: int) -> int:
        """How far apart, in events, kept snapshots stand in a log of `head_seq` events:
        `snapshot_every`, or wider once `snapshot_keep` of those would not cover the log."""
        keep = self.settings.snapshot_keep
        return max(self.settings.snapshot_every, -(-head_seq // keep))

    def _archive_latest_snapshot(self, next_seq: int) -> None:
        """Keep the current latest snapshot under its seq (time travel starts from those)."""
        latest = self.snapshot_path
        header = snapshots.read_header(latest)
        if header is None or header.seq >= next_seq:
            return
        try:
            os.replace(latest, latest.with_name(snapshots.archived_name(header.seq)))
        except FileNotFoundError:  # another process archived it first
            return
        self.thin_snapshots(next_seq)

    def thin_snapshots(self, next_seq: int) -> None:
        """Delete archived snapshots so the rest stand about `snapshot_spacing` apart, at most
        `snapshot_keep` of them, before a snapshot at `next_seq`. Hold the log lock.

        Of three in a row closer than the spacing, the middle one goes (frequent closes would
        otherwise pile them up). Past the cap, the one whose going leaves the smallest gap goes
        (the oldest of equals), so they stay evenly spread over the whole log and a past read
        folds at most about two spacings of it, whatever its length. Without the cap, disk grew
        with the graph's size times the number of intervals.
        """
        latest = self.snapshot_path
        self.drop_unreadable_snapshots()
        kept = [p for p in self.snapshot_files() if p != latest]
        seqs = [snapshots.archived_seq(p.name) or 0 for p in kept] + [next_seq]
        spacing = self.snapshot_spacing(next_seq)
        while len(seqs) >= 3 and seqs[-1] - seqs[-3] < spacing:
            kept.pop(-1).unlink(missing_ok=True)
            seqs.pop(-2)
        while len(kept) > self.settings.snapshot_keep:
            # seqs[i] is kept[i]; the log's start (0) and next_seq bound the gaps at the ends.
            bounds = [0, *seqs]
            gone = min(range(len(kept)), key=lambda i: bounds[i + 2] - bounds[i])
            kept.pop(gone).unlink(missing_ok=True)
            seqs.pop(gone)

    def drop_unreadable_snapshots(self) -> None:
        """Delete the archived snapshots this version cannot read: of another format or state
        layout (all an older keytrail kept, once an upgrade changes the layout) or damaged. No
        past read starts from one, yet each holds a whole graph and counts against
        `snapshot_keep`, so past reads could no longer keep their states. Hold the log lock."""
        for path in self.snapshot_files():
            if path != self.snapshot_path and snapshots.read_header(path) is None:
                path.unlink(missing_ok=True)
                logger.info("keytrail: removed %s, a snapshot this version cannot read", path)

    # -- staying current -------------------------------------------------------------------

    def _fold(self, events: Iterable[AnyEvent]) -> None:
        if self._unfoldable is not None:
            raise self._unfoldable
        self._folded(self._noting_forgets(events), self.state)

    def _folded(self, events: Iterable[AnyEvent], state: GraphState) -> GraphState:
        """`fold`, refusing a line that decodes but cannot be applied (it names something that
        never existed: a log edited by hand, or spliced from another store). The log's cursor is
        past that line by then, so the store refuses every later fold too rather than go on
        without it."""
        try:
            return fold(events, state)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            at = self.log.position
            path = self.log.dir / (at.segment or "")
            with open(path, "rb") as f:
                line = f.read(at.offset).count(b"\n")
            reason = f"seq {at.seq} cannot be applied: it refers to missing {exc}"
            self._unfoldable = CorruptLog(at.segment or "", line, reason)
            raise self._unfoldable from None

    def _noting_forgets(self, events: Iterable[AnyEvent]) -> Iterator[AnyEvent]:
        """Pass events through to the fold, noting each forget on the way (one pass), and the
        memories each knowledge-graph delete cuts keys from (their text documents change)."""
        for event in events:
            if type(event) is EntitiesDeleted or type(event) is ObservationsDeleted:
                self._unlinked_unindexed += [link.memory_id for link in event.unlinked]
            elif type(event) is MemoryForgotten:
                # Folded lazily: the state holds every earlier event, content included. The
                # content's vector rows are erased at our next write; the text index drops
                # the memory on its next catch-up.
                node = self.state.memories.get(event.memory_id)
                if node is not None:
                    # A memory deleted as an observation still holds its content here (status
                    # "deleted"), as its log line and past states do until now.
                    digest = text_hash(node.content) if node.content else ""
                    if digest:
                        self._forgotten_digests.add(digest)
                        self._forgotten_lengths.add(len(node.content))
                        # A purge (here, or another process's already) zeroes its saved row,
                        # which the mapped cache would read for a memory sharing the text.
                        if self._vector_cache is not None:
                            self._vector_cache.forget_saved(digest)
                    self.forgets_folded.append((event.memory_id, digest))
                # Erased labels: rows of them embedded here are not saved, those saved erased
                # (unless a label or content still holds the text) at our next write.
                for key_id in event.erased_keys:
                    key = self.state.keys.get(key_id)
                    for text in () if key is None else (key.label, *key.aliases):
                        for form in filter(None, (text, text.casefold())):
                            self._label_digests.pop(form, None)  # no forgotten text lingers
                            label_digest = text_hash(form)
                            self._forgotten_digests.add(label_digest)
                            self._forgotten_lengths.add(len(form))
                            if self._vector_cache is not None:
                                self._vector_cache.forget_saved(label_digest)
                self.labels_erased_folded += event.erased_keys
                if event.erased_keys and self._key_vectors is not None:
                    # Their rows go; the labels after them were embedded in order, so the
                    # count embedded drops by as many (one row per entry of `labels`).
                    self._labels_embedded -= self._key_vectors.drop(set(event.erased_keys))
                self._content_digests.pop(event.memory_id, None)
                if self._memory_vectors is not None:
                    # Its content's row goes as the content does (see `memory_vectors`).
                    self._memory_vectors.zero(event.memory_id)
                self._forgotten_unindexed.append(event.memory_id)
            yield event

    def refresh(self) -> GraphState:
        """Fold every event other processes appended since the last look; return the state."""
        with self._mutex:
            try:
                self._fold(self.log.iter_new())
            except LogCutBack as cut:
                self._reload_after_cut(cut)
            return self.state

    @contextmanager
    def _locked(self, *, wait: bool = True) -> Iterator[Appender]:
        """The log lock, with the events other processes appended folded (call holding the
        mutex). If lines this process folded were cut back, it folds the log afresh first."""
        for attempt in range(3):
            entered = False
            try:
                with self.log.lock(wait=wait) as app:
                    entered = True
                    self._fold(app.pending)
                    yield app
                return
            except LogCutBack as cut:
                if entered or attempt == 2:  # cut again after two fresh folds: say so
                    raise
                self._reload_after_cut(cut)

    def _reload_after_cut(self, cut: LogCutBack) -> None:
        """Fold the log afresh, as an open does, after a writer whose append failed (a full
        disk, an I/O error) cut back lines this process had folded: its state holds events the
        log does not, and nothing derived from that state may stay (call holding the mutex)."""
        logger.warning("keytrail: %s; folding the log afresh", cut.message)
        self.reloads += 1
        self._snapshot_seq = 0
        try:
            self.state = self._open_state()
        except BaseException:
            # Never fold on top of the cut state from where the failed read left the cursor:
            # the next call folds the whole log instead.
            self.log.rewind()
            self.state = GraphState()
            raise
        finally:
            self._forget_derived()

    def _forget_derived(self) -> None:
        """Drop what was derived from a state the log no longer holds (see `_reload_after_cut`).

        Kept between calls and only topped up, not keyed by the state object (those that are
        see the new one): they may hold the cut events' labels, memories and ids."""
        self._key_vectors = self._memory_vectors = None
        self._labels_embedded = self._memories_embedded = self._labels_dropped = 0
        self._labels_checked = self._contents_checked = 0
        self._content_digests.clear()
        self._label_digests.clear()
        for cls in type(self).__mro__:  # each query mixin names the caches it keeps
            for name in vars(cls).get("_KEPT_BETWEEN_CALLS", ()):
                setattr(self, name, None)
        self.past = PastStates(self)  # past states folded from the cut lines
        self.links_by_namespace = LinksByNamespace()
        self.same_texts = SameTexts()
        # A cut forget's memories are not forgotten: the text index must not drop them. Those
        # forgotten since the index's seq are found in the state (`text_index`); an index
        # written from the cut events is rebuilt there (TextIndex.sync checks its last event).
        self._forgotten_unindexed = []
        self._unlinked_unindexed = []
        self._text_observed_from = self.state.seq
        text: TextIndex | None = getattr(self, "text", None)  # None: a cut during the open
        if text is not None:
            text.forget_checked()

    def _append(self, app: Appender, event: Any) -> AnyEvent:
        stamped = app.append(event)
        self._fold((stamped,))
        return stamped

    def _write(self, decide: Callable[[Appender], T]) -> T:
        """Run `decide` under the log lock, caught up; then persist new vectors, maybe snapshot.

        While another process holds the lock (a long import), wait for it without holding this
        store's mutex, so that this process's reads go on answering meanwhile.
        """
        while True:
            try:
                return self._write_now(decide)
            except LockBusy:
                self.log.wait_for_lock()

    def _write_now(self, decide: Callable[[Appender], T]) -> T:
        """`_write`, or `LockBusy` at once if another process holds the log lock."""
        with self._mutex:
            with self._locked(wait=False) as app:
                result = decide(app)
                # From here the command is in the log, fsynced: what follows only keeps caches.
                # A failure (a full disk) must not tell the caller the command failed, which
                # invites a retry that records it twice; unsaved rows and erasures are retried
                # at the next write, and a snapshot is only a shortcut.
                try:
                    self._persist_vectors()
                    if os.path.exists(self._pending_purge):
                        # Under the lock no forget is under way: this is one whose process
                        # died mid-purge. Finish it now, not at the next forget or open, which
                        # a server left running may not see for days.
                        self._finish_forgetting()
                    if self.state.seq - self._snapshot_seq >= self.settings.snapshot_every:
                        self._save_snapshot(self.state)
                        # Rare work under the lock, as at open: also what processes killed
                        # since this one opened left, which a server up for weeks kept.
                        self._remove_leftovers()
                except OSError as exc:
                    logger.warning(
                        "keytrail: seq %d recorded, but a cache was not updated: %s",
                        self.state.seq,
                        exc,
                    )
            return result

    def _persist_vectors(self) -> None:
        """Under the lock, caught up: append unsaved rows, then erase those of contents other
        processes forgot (rows embedded from the log before its redaction). Unsaved rows of
        those are dropped first, not written and then erased: a kill in between would keep
        them, with no pending purge left to finish the job."""
        if self._vector_cache is None:
            # Nothing embedded, so nothing to save; forgets noted meanwhile are dropped from
            # the cache when it is read (see `vectors`) and erased at the next write after.
            return
        held: set[str] = set()
        if self._forgotten_digests:
            # A text another memory or a key label still holds is no secret, and a row saved
            # for it since the forget's own purge is theirs: other processes may map it, and
            # would read zeros if it were erased again (its dedup would miss the memory), and
            # recorded coverages count it. Only texts of a forgotten one's length are hashed.
            lengths = self._forgotten_lengths
            held = {
                digest
                for node in self.state.memories.values()
                if len(node.content) in lengths
                and (digest := text_hash(node.content)) in self._forgotten_digests
            } | self._labels_among(self._forgotten_digests, lengths)
            self.vectors.discard_unsaved(self._forgotten_digests - held)
        self._rows_unrecorded |= self.vectors.unsaved > 0
        self.vectors.flush()
        if self._forgotten_digests:
            self.vectors.purge(self._forgotten_digests - held)
            self._forgotten_digests.clear()
            self._forgotten_lengths.clear()

    def _labels_among(
        self, digests: Collection[str], lengths: Collection[int] | None = None
    ) -> set[str]:
        """Those of `digests` (text hashes) that are the text of a key label or alias, whose
        vector every model needs (a memory may hold just "bees", the key's label). With
        `lengths`, only labels of those lengths are looked at (hashed once per process)."""
        labels = self.state.labels
        if lengths is not None:
            labels = {label: key_id for label, key_id in labels.items() if len(label) in lengths}
        return {digest for digest in self._label_hashes(labels) if digest in digests}

    # -- embeddings ------------------------------------------------------------------------

    def wait_for_vectors(self, need: Need = "all", progress: Progress | None = None) -> None:
        """Return once the vectors `need` names ("keys": every key label's, which recall reads;
        "all": every label's and content's) can be read without embedding the projection,
        while a server builds it in the background (`reembed.build_in_background`); at once
        otherwise. `progress(done, total)` hears the build move. Raises ProjectionUnavailable,
        naming the cause, if the build fails.

        Every query and command that reads vectors calls this before it takes the mutex, so
        it waits for the builder (which holds the mutex only a step at a time) instead of
        embedding every missing text itself under the mutex, where every other call would
        wait with it, hearing nothing.

        Not only at a server's start: when more than INLINE_EMBED_MAX of those texts have no
        vector (other processes wrote them since: an import, a big batch, another model's
        writes), the server's build is started again and waited for here, before the caller
        takes the mutex or a remember the log lock. A store used directly (a library, tests;
        the command line builds at open, see server/embed_cli.py) builds it here instead, in
        the caller's thread, as `keytrail reembed` does: `progress` hears it, rows are saved
        and the coverage recorded, no lock is held while the model runs, and no thread is left
        embedding when the caller is done (a process exiting under a model call aborts), at
        the cost of a recall waiting for the contents too. Fewer are embedded inline by the
        call that reads them, as before.
        """
        background = self._background_build
        if background is None or background.finished:  # a build under way is waited for
            with self._mutex:
                background = self._background_build
                behind = (background is None or background.finished) and self._far_behind(need)
                if behind and background is not None:
                    background.start()  # again, with the server's bar and warm-up
            if behind and background is None:
                from . import reembed  # lazily: reembed imports this module

                reembed.build(self, progress)
                return
        if background is not None:
            background.wait(need, progress)

    def _far_behind(self, need: Need) -> bool:
        """Whether more than INLINE_EMBED_MAX of the texts `need` names lack a vector (hold the
        mutex). Cheap when nothing is behind: only the labels and memories folded since the
        last look are counted, and hashed only when they are many."""
        # Not folded again when nothing was appended: the caller folds anyway, and a fold reads.
        state = self.refresh() if self.log.appended() else self.state
        labels, memories = state.labels, state.memories
        new_labels = len(labels) - max(self._labels_embedded, self._labels_checked)
        new_contents = (
            0
            if need == "keys"
            else len(memories) - max(self._memories_embedded, self._contents_checked)
        )
        if max(new_labels, 0) + max(new_contents, 0) <= INLINE_EMBED_MAX:
            return False
        cache = self.vectors
        manifest = cache.manifest()
        # What a build recorded as having every vector (the log up to its seq) is not looked up
        # again: a server's memories since its start are what its first remember hashes.
        covered = (
            manifest.seq if manifest is not None and manifest.store_id == state.store_id else 0
        )
        if covered < state.seq:
            texts = list(itertools.islice(reversed(labels), max(new_labels, 0)))
            # Peeked, not decoded: values() decoded a lazily loaded state whole (a first recall
            # after an open paid ~1 s for it at 100,000 memories).
            since = snapshots.made_since(memories, covered)
            texts += [n.content for n in itertools.islice(since, max(new_contents, 0)) if n.content]
            digests = [text_hash(text) for text in dict.fromkeys(texts)]
            if len(cache.missing(digests)) > INLINE_EMBED_MAX:
                cache.refresh()  # another process may have embedded them meanwhile
                if len(cache.missing(digests)) > INLINE_EMBED_MAX:
                    return True
        self._labels_checked = len(labels)
        if need == "all":
            self._contents_checked = len(memories)
        return False

    def projection_state(self) -> ProjectionState:
        """How far a build of the projection in the background is (`memory_stats`)."""
        background = self._background_build
        return PROJECTION_READY if background is None else background.state()

    def embed(
        self,
        texts: Sequence[str],
        digests: list[str] | None = None,
        progress: Progress | None = None,
    ) -> Matrix:
        """Unit vectors for `texts`, from the cache where possible (each text embedded once).

        `digests`, when the caller knows them, are the texts' `text_hash`es. `progress(done,
        total)` hears of the texts the model embeds, `EMBED_CHUNK` at a time (each chunk is
        cached as it comes, so work already done survives an interruption).
        """
        if digests is None:
            digests = [text_hash(t) for t in texts]
        if not digests:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        found = self.vectors.rows_if_all(digests)
        if found is not None:
            return found
        if self.vectors.missing(digests):
            self.vectors.refresh()  # another process may have embedded them meanwhile
            missing = {digests[i]: texts[i] for i in self.vectors.missing(digests)}
            keys, values = list(missing), list(missing.values())
            total = len(keys)
            # One model call unless someone is listening; then a chunk at a time.
            step = EMBED_CHUNK if progress is not None else max(total, 1)
            if progress is not None and total:
                progress(0, total)
            for start in range(0, total, step):
                end = min(start + step, total)
                self.vectors.put_many(keys[start:end], self.embedder.embed(values[start:end]))
                if progress is not None:
                    progress(end, total)
        return self.vectors.rows(digests)

    def embed_contents(
        self, contents: Mapping[str, str], hashed: Mapping[str, str] | None = None
    ) -> Matrix:
        """Unit vectors of memory contents, given by memory id (each one hashed only once).

        Only memories of the log are remembered: an id decided in a command that then failed
        was never written, and could come again with another content. `hashed`: the
        text_hash of contents the caller knows (a command's own new memories).
        """
        memo, known = self._content_digests, self.state.memories
        if self.state.ids_retold != self._digests_retold:
            # A memory told again under its id (a hand-made log) may hold another text now.
            memo.clear()
            self._digests_retold = self.state.ids_retold
        digests: list[str | None] = list(map(memo.get, contents))  # most were compared before
        if not all(digests):  # a digest is never empty: some are None
            for i, (memory_id, content) in enumerate(contents.items()):
                if digests[i] is not None:
                    continue
                digest = hashed.get(memory_id) if hashed else None
                if digest is None:
                    digest = text_hash(content)
                    if memory_id in known:
                        memo[memory_id] = digest
                digests[i] = digest
        return self.embed(list(contents.values()), digests)  # type: ignore[arg-type]

    def key_vectors(self) -> VectorSet:
        """Rows for every label and alias of every key ever created (filtered by type on use)."""
        labels = self.state.labels
        if self._key_vectors is None or self._labels_dropped != self.state.labels_dropped:
            # A learned alias was dropped: rebuild from the cache (no model call) without it.
            self._key_vectors = VectorSet(self.embedder.dim)
            self._labels_embedded = 0
            self._labels_dropped = self.state.labels_dropped
        if self._labels_embedded < len(labels):
            # Labels are only ever added (erased ones took their rows along, in
            # `_noting_forgets`), so the new ones are the dict's tail: read it backwards.
            tail = itertools.islice(reversed(labels.items()), len(labels) - self._labels_embedded)
            fresh = list(tail)[::-1]
            texts = [label for label, _ in fresh]
            self._key_vectors.add(
                [key_id for _, key_id in fresh], self.embed(texts, self._label_hashes(texts))
            )
            self._labels_embedded = len(labels)
        return self._key_vectors

    def _label_hashes(self, labels: Iterable[str]) -> list[str]:
        """The text_hash of each of `labels` (labels of `state.labels`), each hashed once per
        process (see `_label_digests`)."""
        memo, found = self._label_digests, []
        if self._label_digests_dropped != self.state.labels_dropped:
            # A learned alias was dropped from the labels: its text leaves the memo too.
            held = self.state.labels
            memo = self._label_digests = {label: memo[label] for label in memo if label in held}
            self._label_digests_dropped = self.state.labels_dropped
        for label in labels:
            digest = memo.get(label)
            if digest is None:
                digest = memo[label] = text_hash(label)
            found.append(digest)
        return found

    def memory_vectors(self) -> VectorSet:
        """One row per memory ever created, keyed by memory id (filter by status on use).

        Memories are only ever added to `state.memories`, so like key labels the new ones are the
        dict's tail; their contents are embedded once through the cache.
        """
        memories = self.state.memories
        if self._memory_vectors is None:
            self._memory_vectors = VectorSet(self.embedder.dim)
        if self._memories_embedded < len(memories):
            tail = itertools.islice(
                reversed(memories.values()), len(memories) - self._memories_embedded
            )
            fresh = list(tail)[::-1]
            # A forgotten memory's content is blank: a zero row, as its row becomes where the
            # forget is folded after (`_noting_forgets`), so that every process has the same
            # rows (the dense signal is scaled by their mean) and "" is never embedded.
            told = [i for i, node in enumerate(fresh) if node.content]
            vectors = np.zeros((len(fresh), self.embedder.dim), dtype=np.float32)
            if told:
                vectors[told] = self.embed([fresh[i].content for i in told])
            self._memory_vectors.add([node.id for node in fresh], vectors)
            self._memories_embedded = len(memories)
        return self._memory_vectors

    def save_vectors(
        self, covered: tuple[str, int] | None = None, listed_at: int | None = None
    ) -> None:
        """Append unsaved cache rows to disk under the log lock.

        With `covered` (store id, seq): also record that every label and content up to that seq
        has a row (see core/reembed.py). `listed_at`: the store's `reloads` when those texts
        were listed; if it has folded afresh since, nothing is recorded (lines a failed append
        cut back may have been some of them, and others have taken their seqs).
        """
        with self._mutex, self._locked():
            # A forget folded just now may name a text embedded before it (a reembed batch):
            # its row must not reach the disk after that forget's purge.
            self._persist_vectors()
            if covered is not None and listed_at in (None, self.reloads):
                self.vectors.record(*covered)
                self._rows_unrecorded = False

    def _every_row_since_recorded(self) -> bool:
        """Whether every key label, and the content of every memory made since the seq the
        vector cache records, has a row: then it covers the whole log folded (hold the mutex,
        caught up). False where nothing was recorded or an id was told again (a memory
        replaced in place keeps its place: the walk back would stop before it)."""
        state, cache = self.state, self.vectors
        manifest = cache.manifest()
        if manifest is None or manifest.store_id != state.store_id or state.ids_retold:
            return False
        since = snapshots.made_since(state.memories, manifest.seq)
        # Empty content is the redaction mark: a forgotten memory's row was erased.
        contents = dict.fromkeys(node.content for node in since if node.content)
        cache.refresh()  # rows other processes saved since this one opened
        # Labels by the memo: `key_vectors` hashed them in this process already.
        return all(d in cache for d in self._label_hashes(state.labels)) and all(
            text_hash(text) in cache for text in contents
        )

    # -- commands --------------------------------------------------------------------------

    def _check_item(self, item: RememberItem, prefix: str = "") -> _Checked:
        return check_item(self.settings, item, prefix)

    def remember(
        self,
        content: str,
        keys: Sequence[str] | None = None,
        key_types: dict[str, str] | None = None,
        namespace: str | None = None,
        ttl_seconds: int | None = None,
        related_to: Sequence[str] | None = None,
        session_id: str | None = None,
        source: str | None = None,
        valid_from: datetime | str | None = None,
    ) -> Remembered:
        """Store one memory reachable through `keys`. See `remember_batch`."""
        return self.remember_batch(
            [
                RememberItem(
                    content,
                    keys,
                    key_types,
                    namespace,
                    ttl_seconds,
                    related_to,
                    session_id,
                    source,
                    valid_from,
                )
            ],
            _single=True,
        )[0]

    def remember_batch(
        self,
        items: Sequence[RememberItem],
        *,
        progress: Progress | None = None,
        _single: bool = False,
    ) -> list[Remembered]:
        """Store several memories as one event: all of them or, on any bad input, none.

        `progress(done, total)` hears how far embedding the new contents and labels has got
        (the long part of a big batch with a real model); nothing when all were embedded before.
        """
        limits = self.settings.limits
        if isinstance(items, str) or not isinstance(items, Sequence):
            got = type(items).__name__
            raise InvalidInput("items", f"must be a list of RememberItem, got {got}")
        if not items:
            raise InvalidInput(
                "items", "must hold at least one memory", limit=f"1 to {limits.batch_items} items"
            )
        if len(items) > limits.batch_items:
            raise InvalidInput(
                "items", f"has {len(items)} memories", limit=f"{limits.batch_items} items"
            )
        for i, item in enumerate(items):
            if not isinstance(item, RememberItem):  # its fields are read next
                got = type(item).__name__
                raise InvalidInput(f"items[{i}]", f"must be a RememberItem, got {got}")
        checked = [
            self._check_item(it, "" if _single else f"items[{i}].") for i, it in enumerate(items)
        ]
        # Alias merges, dedup and contradictions read key labels and contents of the graph.
        self.wait_for_vectors("all")
        # Embed before taking the log lock: a model call must not block other processes' writes.
        with self._mutex:
            vectors = self.embed(
                [c.content for c in checked]
                + [k.label for c in checked for k in c.keys if k.type == "concept"],
                progress=progress,
            )
        return self._write(lambda app: self._decide_remember(app, checked, vectors, _single))

    def _decide_remember(
        self, app: Appender, checked: list[_Checked], vectors: Matrix, single: bool
    ) -> list[Remembered]:
        """Decide each item in turn; `vectors` starts with one row per item's content."""
        batch = Batch(self, app.at)
        batch.match_labels(k for item in checked for k in item.keys)
        news: list[NewMemory] = []
        outcomes: list[Remembered] = []
        for i, item in enumerate(checked):
            prefix = "" if single else f"items[{i}]."
            for j, target in enumerate(item.related_to):
                batch.check_related(f"{prefix}related_to[{j}]", target, item.namespace)
            links, key_outcomes = batch.resolve_keys(item.keys, promote=not item.extracted)
            if item.extracted:
                links = [msgspec.structs.replace(lk, extracted=True) for lk in links]
            memory_id = batch.new_memory_id()
            vector = vectors[i]
            duplicate, contradictions = batch.compare(
                item.namespace, item.content, vector, [link.key_id for link in links]
            )
            related_to, source = item.related_to, item.source
            if duplicate is not None:
                # ... and what it was said to relate to: the edges of both tellings hold; and
                # where it came from, unless the retelling says (as a correction keeps it).
                related_to = related_to + [
                    m for m in batch.related_of(duplicate.memory_id) if m not in related_to
                ]
                if source is None:
                    source = batch.source_of(duplicate.memory_id)
                # The same fact told again keeps what reading built up (the fold keeps depth
                # and reads): every link of the old version at its weight, named again or not.
                earned = {lk.key_id: lk for lk in batch.inherited_links(duplicate.memory_id, [])}
                named = {lk.key_id for lk in links}
                links = [
                    msgspec.structs.replace(lk, weight=earned[lk.key_id].weight)
                    if lk.key_id in earned
                    else lk
                    for lk in links
                ] + [lk for key_id, lk in earned.items() if key_id not in named]
            new = NewMemory(
                memory_id=memory_id,
                namespace=item.namespace,
                content=item.content,
                content_hash=content_hash(item.content),
                keys=links,
                related_to=related_to,
                expires_at=None if item.ttl is None else app.at + timedelta(seconds=item.ttl),
                session_id=item.session_id,
                source=source,
                supersedes=duplicate.memory_id if duplicate else None,
                supersede_reason="duplicate" if duplicate else None,
                duplicate_of=duplicate,
                contradicts=contradictions,
                valid_from=item.valid_from,
            )
            batch.add_memory(new, vector)
            news.append(new)
            outcomes.append(
                Remembered(
                    memory_id=memory_id,
                    namespace=item.namespace,
                    seq=app.next_seq,  # the one event of this command, appended below
                    keys=key_outcomes,
                    expires_at=new.expires_at,
                    deduplicated=batch.flag(duplicate) if duplicate else None,
                    possible_contradictions=[batch.flag(c) for c in contradictions],
                )
            )
        event = self._append(app, MemoryRemembered(memories=news))
        assert event.seq == outcomes[0].seq
        return outcomes

    def correct(
        self,
        memory_id: str,
        content: str | None = None,
        keys: Sequence[str] | None = None,
        key_types: dict[str, str] | None = None,
        related_to: Sequence[str] | None = None,
        source: str | None = None,
        valid_from: datetime | str | None = None,
        by_memory_id: str | None = None,
    ) -> Corrected:
        """Replace a memory with a new version. The old one is kept (weakened) as history.

        `valid_from` dates the new version in the world (it may be before it was told).

        With `by_memory_id` instead of `content`, that memory (told on its own, most often the
        remember that flagged this one as a possible contradiction) becomes the new version:
        no second memory of the same text is made. It takes none of the other arguments
        (they describe new content); see `_replace` for what it must be.
        """
        if by_memory_id is not None:
            if content is not None:
                raise InvalidInput(
                    "by_memory_id", "give content or by_memory_id, not both", value=by_memory_id
                )
            given = {
                "keys": keys,
                "key_types": key_types,
                "related_to": related_to,
                "source": source,
                "valid_from": valid_from,
            }
            for field, value in given.items():
                # An empty list or map is "not given", as it is with content (clients may send
                # every argument with its default).
                if value is not None and not (isinstance(value, (list, tuple, dict)) and not value):
                    raise InvalidInput(
                        field,
                        "describes new content: with by_memory_id the new version is that "
                        "memory as it was told",
                    )
            return self._replace(memory_id, by_memory_id)
        if content is None:
            raise InvalidInput(
                "content",
                "is required: the new version's text (or by_memory_id: a memory that is it)",
            )
        limits = self.settings.limits
        valid = parse_optional_time("valid_from", valid_from)
        content = check.text("content", content, limits.content_chars)
        specs = check.keys(keys, key_types, limits, required=False)
        related = (
            None
            if related_to is None
            else check.id_list("related_to", related_to, limits.related_to)
        )
        source = None if source is None else check.text("source", source, limits.source_chars)
        if any(k.type == "concept" for k in specs):
            # A new concept key may merge into an alias: that reads every key label's vector
            # (no content's: a correction is not compared with other memories).
            self.wait_for_vectors("keys")
        with self._mutex:
            self.embed([content] + [k.label for k in specs if k.type == "concept"])

        def decide(app: Appender) -> Corrected:
            old = self._current_memory("memory_id", memory_id, app.at)
            batch = Batch(self, app.at)
            chain = set(versions(self.state.memories, old.id))
            for j, target in enumerate(related or []):
                if target in chain:
                    # Edges follow current versions: it would tie the new version to itself.
                    raise InvalidInput(
                        f"related_to[{j}]", f"{target!r} is a version of the memory corrected"
                    )
                batch.check_related(f"related_to[{j}]", target, old.namespace)
            if specs:
                links, outcomes = batch.resolve_keys(specs)
            else:  # no keys given: the new version is reached the way the old one was
                # through the same keys, its links starting afresh like its depth: the weights
                # reading earned stay with the old version (as when the keys are given).
                initial = self.state.rules.link_initial
                links = [
                    msgspec.structs.replace(lk, weight=initial)
                    for lk in batch.inherited_links(old.id, [])
                ]
                outcomes = [KeyOutcome(lk.key_id, lk.label, lk.type, "existing") for lk in links]
            rules = self.state.rules
            factor = (
                rules.weaken_deep if old.depth >= rules.weaken_threshold else rules.weaken_shallow
            )
            new = NewMemory(
                memory_id=batch.new_memory_id(),
                namespace=old.namespace,
                content=content,
                content_hash=content_hash(content),
                keys=links,
                related_to=related if related is not None else list(old.related_to),
                expires_at=old.expires_at,
                session_id=old.session_id,
                source=source if source is not None else old.source,
                valid_from=valid,
            )
            old_depth = old.depth
            event = self._append(
                app, MemoryCorrected(old_id=old.id, memory=new, weaken_factor=factor)
            )
            return Corrected(
                memory_id=new.memory_id,
                old_id=old.id,
                seq=event.seq,
                keys=outcomes,
                old_depth=old_depth,
                weaken_factor=factor,
            )

        return self._write(decide)

    def _replace(self, memory_id: str, by_memory_id: str) -> Corrected:
        """`by_memory_id` becomes the next version of `memory_id`: one `memory.replaced`.

        It must be shown now (not expired, forgotten or deleted), current, in the same
        namespace and a fact told once (no version before it), so a chain stays one line:
        each version replaces at most one and is replaced by at most one.
        """
        if by_memory_id == memory_id:
            raise InvalidInput(
                "by_memory_id", "is the memory corrected: name another", value=by_memory_id
            )

        def decide(app: Appender) -> Corrected:
            old = self._current_memory("memory_id", memory_id, app.at)
            new = self._visible_memory("by_memory_id", by_memory_id, app.at)
            if new.superseded_by is not None:
                newer = self.state.memories.get(new.superseded_by)
                # Said as for memory_id (`_current_memory`): a forgotten successor is a dead end.
                gone = (
                    f", which was {newer.status}"
                    if newer is not None and newer.status in ("forgotten", "deleted")
                    else ""
                )
                raise InvalidInput(
                    "by_memory_id",
                    f"memory {by_memory_id!r} was already replaced by {new.superseded_by!r}" + gone,
                    value=by_memory_id,
                )
            if new.supersedes is not None:
                raise InvalidInput(
                    "by_memory_id",
                    f"memory {by_memory_id!r} is already a newer version of "
                    f"{new.supersedes!r}: only a fact told once can become another's new "
                    "version (correct with content instead)",
                    value=by_memory_id,
                )
            if new.namespace != old.namespace:
                raise InvalidInput(
                    "by_memory_id",
                    f"memory {by_memory_id!r} is in namespace {new.namespace!r}, not "
                    f"{old.namespace!r} (versions of a fact share a namespace)",
                    value=by_memory_id,
                )
            rules = self.state.rules
            factor = (
                rules.weaken_deep if old.depth >= rules.weaken_threshold else rules.weaken_shallow
            )
            # As a correction naming no related_to keeps the old version's edges (versions of
            # the new one's fact, itself, are no edge of it).
            carried = [
                target
                for target in dict.fromkeys(old.related_to)
                if target not in new.related_to and target not in (old.id, new.id)
            ]
            old_depth = old.depth
            event = self._append(
                app,
                MemoryReplaced(
                    old_id=old.id, new_id=new.id, weaken_factor=factor, related_to=carried
                ),
            )
            keys = self.state.keys
            return Corrected(
                memory_id=new.id,
                old_id=old.id,
                seq=event.seq,
                keys=[
                    KeyOutcome(k, keys[k].label, keys[k].type, "existing")
                    for k in new.keys
                    if k in keys
                ],
                old_depth=old_depth,
                weaken_factor=factor,
            )

        return self._write(decide)

    def read_memory(
        self,
        memory_id: str,
        via_key_id: str | None = None,
        query: str | None = None,
        namespace: str | None = None,
    ) -> MemoryView:
        """Read a memory in full. Deepens it; strengthens the link from `via_key_id` if given.

        With `namespace`, a memory of another namespace is not found (nothing is recorded).
        """
        if query is not None:
            query = check.text("query", query, self.settings.limits.query_chars)
            # As labels are (validation.label): an accent typed as a combining mark is the
            # same query, counts towards the same alias and names the same key.
            query = unicodedata.normalize("NFC", query)
        namespace = check.optional_namespace(namespace)

        def decide(app: Appender) -> MemoryView:
            node = self._visible_memory("memory_id", memory_id, app.at)
            self.check_read(node, namespace, via_key_id)
            event = self._append(
                app, MemoryRead(memory_id=node.id, via_key_id=via_key_id, query=query)
            )
            if via_key_id is not None:
                key = self.state.keys[via_key_id]
                for learned in aliases.decide(self.state, self.settings, key, query):
                    self._append(app, learned)
            return self.memory_view(node, seq=event.seq)

        return self._write(decide)

    def forget(self, memory_id: str, reason: str = "", all_versions: bool = False) -> Forgotten:
        """Forget a memory for good: hidden from every read, its content removed from every
        file of the store (see core/forgetting.py). The log keeps an audit record.

        With `all_versions`, every version of it (what it corrected or deduplicated, and what
        replaced it) is forgotten too, one `memory.forgotten` event each, synced together.
        """
        reason = check.text("reason", reason, self.settings.limits.source_chars, allow_empty=True)

        def content(node: MemoryNode) -> str | None:
            """What there is to erase of `node`: its content (a knowledge-graph delete keeps
            it, hidden), or None if nothing is left."""
            if node.status != "forgotten":
                return node.content
            # Forgotten, yet its line may hold the text again (a segment put back from a
            # backup, which verify reports): erased again.
            return forgetting.content_in_log(self.log, node.id, node.created_seq)

        def decide(app: Appender) -> Forgotten:
            node = self.state.memories.get(check.ident("memory_id", memory_id))
            if node is None:
                raise self._missing("memory_id", "memory", memory_id)
            chain = versions(self.state.memories, node.id) if all_versions else [node.id]
            found = [(n, content(n)) for n in (self.state.memories[m] for m in chain)]
            nodes = [n for n, text in found if text is not None]
            if not nodes:
                # With all_versions the id may name a version forgotten already: the others
                # still holding their text are what is asked for.
                raise NotFound("memory_id", "memory", memory_id, "already forgotten")
            entries = {
                n.id: forgetting.PendingPurge(
                    memory_id=n.id, created_seq=n.created_seq, vector_digest=text_hash(text)
                )
                for n, text in found
                if text is not None
            }
            # Labels written only in the lines of these (and earlier forgotten) memories go
            # with them; the rest are named in the answer.
            # One walk of every memory, none decoded: those forgotten before, and those holding
            # the same text.
            hashes = {n.content_hash for n in nodes}
            scan = forgetting.scan_memories(self.state, hashes)
            forgotten = scan.forgotten
            labels = forgetting.erasable_labels(self.log, self.state, list(entries), scan)
            for key_id, linked in labels.erased.items():
                for m in linked:
                    entry = entries.get(m) or forgetting.PendingPurge(
                        memory_id=m,
                        created_seq=self.state.memories[m].created_seq,
                        vector_digest="",  # forgotten before: its content is gone already
                    )
                    entries[m] = msgspec.structs.replace(entry, keys=[*entry.keys, key_id])
            # A damaged line could not be redacted once the forget is written: refuse first.
            plans = forgetting.check_redactable(self.log, entries.values())
            # The rows of the labels as the lines wrote them too (a key named in another case).
            # Those erasable_labels judged already are not looked up again (a walk of every
            # memory's text).
            keys = self.state.keys
            judged = {
                form
                for k in labels.erased
                for t in (keys[k].label, *keys[k].aliases)
                for form in (t, t.casefold())
            }
            typed = [
                t
                for plan in plans.values()
                for t in plan.removed_labels
                if not {t, t.casefold()} <= judged
            ]
            gone = {m for m, e in entries.items() if e.vector_digest} | forgotten
            digests = sorted({*labels.digests, *forgetting.label_digests(self.state, gone, typed)})
            if digests:
                first = next(iter(entries))
                entries[first] = msgspec.structs.replace(entries[first], label_digests=digests)
            # Recorded before the events, so a crash anywhere after is finished on next open.
            forgetting.write_pending(
                self.home, [*forgetting.read_pending(self.home), *entries.values()]
            )
            # One fsync for the whole chain, not one per version (3,000 versions took ~10 s):
            # all its events are recorded before the caller hears of any, or none are. The last
            # erases the labels: from then on the keys lead to forgotten memories only.
            erased_keys = sorted(labels.erased)
            events = app.append_all(
                [
                    MemoryForgotten(
                        memory_id=n.id,
                        content_hash=n.content_hash,
                        reason=reason,
                        erased_keys=erased_keys if n is nodes[-1] else [],
                    )
                    for n in nodes
                ]
            )
            self._fold(events)
            try:
                if self._vector_cache is not None:
                    self._vector_cache.flush()
                purged = self._finish_forgetting(
                    {text_hash(text): text for _, text in found if text is not None},
                    plans,
                    scan.holding,
                )
            except OSError as exc:
                # The forget happened (its events are fsynced): say so, and who finishes it.
                raise StoreError(
                    f"forgot {node.id} (seq {events[-1].seq}), but erasing its content "
                    f"stopped: {exc}. forget.pending keeps the work: the next command that "
                    "opens the store (or writes to it) finishes it once the disk allows",
                    memory_id=node.id,
                    seq=events[-1].seq,
                ) from exc
            return Forgotten(
                memory_id=node.id,
                seq=events[-1].seq,
                purged=purged,
                other_versions=[n.id for n in nodes if n.id != node.id],
                same_text_in=sorted(
                    {m for h in hashes for m in scan.holding[h]} - {n.id for n in nodes}
                ),
                labels_erased=erased_keys,
                labels_kept=labels.kept,
            )

        return self._write(decide)

    def _finish_forgetting(
        self,
        texts: Mapping[str, str] | None = None,
        plans: Mapping[str, SegmentRedaction] | None = None,
        holding: Mapping[str, list[str]] | None = None,
    ) -> list[str]:
        """Purge the content of every forgotten memory listed as pending. Hold the lock.

        `texts`: the forgotten texts by vector digest, where the caller knows them (a forget
        of this process); a purge another process left pending is finished without them.
        `plans`: the redactions that forget planned under this hold of the lock, by segment.
        `holding`: the memories that forget found holding each forgotten content hash (before
        its fold), so that those are looked at, not every memory."""
        entries = forgetting.read_pending(self.home)
        if not entries:
            if os.path.exists(self._pending_purge):
                # Written atomically, so only a hand edit leaves one that reads as nothing:
                # nothing can be resumed from it, and kept it would send every open to the
                # lock. A content it left unerased is named by `verify`; `forget` erases it.
                logger.warning(
                    "keytrail: %s could not be read and was removed; `keytrail verify` names "
                    "any forgotten memory whose content is still in the log",
                    self._pending_purge,
                )
                forgetting.write_pending(self.home, [])
            return []
        # An entry whose memory is not forgotten is a forget that crashed before its event.
        done = [
            e
            for e in entries
            if (node := self.state.memories.get(e.memory_id)) is not None
            and node.status == "forgotten"
        ]
        # The latest snapshot is blanked where it stands, as the archived ones are (only the
        # nodes blanked are decoded), not replaced by one of our state: that saved every node
        # of a state a recall had decoded (0.6 s at 100,000 memories), and archived the old
        # latest, which then had to be blanked as well, all while every writer waited.
        # The purge deletes the text index directory; drop our handle so the next query
        # rebuilds it from the (now redacted) log instead of reading deleted files.
        self.text.close()
        # A text another memory (two entities with one observation) or a key label still holds
        # is no secret: its vector row is theirs, and erasing it made recorded coverages untrue.
        memories = self.state.memories
        gone = {
            memories[e.memory_id].content_hash: e.vector_digest for e in done if e.vector_digest
        }
        if holding is not None and gone.keys() <= holding.keys():
            others: Iterable[MemoryNode | MemoryText] = (
                memories[m] for h in gone for m in holding[h]
            )
        else:  # a purge another process left pending
            others = snapshots.peek_all(memories, snapshots.MemoryText)
        held = {
            digest
            for m in others
            if m.content
            and (digest := gone.get(m.content_hash)) is not None
            and text_hash(m.content) == digest
        }
        # A key label holding the text: looked up by the text where it is known; a purge left
        # pending by another process hashes the labels instead.
        known = texts or {}
        labels = self.state.labels
        held |= {digest for digest in gone.values() if known.get(digest) in labels}
        if unknown := set(gone.values()) - known.keys():
            held |= self._labels_among(unknown)
        purged = forgetting.purge(
            self.home,
            self.log,
            done,
            self._vector_cache,
            keep_vectors=held,
            plans=plans,
        )
        # Erased just now (the rows of erased labels too).
        self._forgotten_digests -= {e.vector_digest for e in done}
        self._forgotten_digests -= {d for e in done for d in e.label_digests}
        forgetting.write_pending(self.home, [])
        return purged

    def record_turn(self, session_id: str, role: str, content: str) -> TurnSaved:
        """Append one turn to a session's conversation log (turns are numbered from 1)."""
        checked_session = check.name("session_id", session_id, check.SESSION_CHARS)
        if role not in TURN_ROLES:
            raise InvalidInput(
                "role", f"unknown role {check.quoted(role)}", limit=" | ".join(TURN_ROLES)
            )
        content = check.text("content", content, self.settings.limits.content_chars)

        def decide(app: Appender) -> TurnSaved:
            turn = len(self.state.conversations.get(checked_session, ())) + 1
            event = self._append(
                app, TurnRecorded(session_id=checked_session, turn=turn, role=role, content=content)
            )
            return TurnSaved(session_id=checked_session, turn=turn, seq=event.seq)

        return self._write(decide)

    def cleanup_expired(self, limit: int | None = None) -> Expired:
        """Mark every memory whose TTL has passed as expired (one event; none if nothing is).

        All of them are expired, however many; the answer counts them and lists the first
        `limit` (at most `limits.page`), in log order. `changes(since=seq - 1, until=seq)`
        pages through every one."""
        limits = self.settings.limits
        limit = check.count(
            "limit", limits.default_page() if limit is None else limit, 1, limits.page
        )

        def decide(app: Appender) -> Expired:
            ids = [
                m.id
                for m in self.state.memories.values()
                if m.status == "active" and m.expires_at is not None and m.expires_at <= app.at
            ]
            if not ids:
                return Expired(count=0, memory_ids=[], seq=None)
            event = self._append(app, MemoriesExpired(memory_ids=ids))
            return Expired(count=len(ids), memory_ids=ids[:limit], seq=event.seq)

        return self._write(decide)

    # -- helpers shared with queries -------------------------------------------------------

    def _current_memory(self, field: str, memory_id: str, now: datetime) -> MemoryNode:
        node = self._visible_memory(field, memory_id, now)
        newer = self.state.memories.get(node.superseded_by) if node.superseded_by else None
        if newer is not None and newer.status in ("forgotten", "deleted"):
            # A version has one successor, so the chain cannot fork here: the fact is told anew.
            raise InvalidInput(
                field,
                f"memory {memory_id!r} was replaced by {newer.id!r}, which was {newer.status}; "
                "remember the fact again",
                value=memory_id,
            )
        if node.superseded_by is not None:
            raise InvalidInput(
                field,
                f"memory {memory_id!r} was already replaced by "
                f"{node.superseded_by!r}; correct the current version",
                value=memory_id,
            )
        return node


def open_store(home: Path | str | None = None, **kwargs: Any) -> Store:
    """Open (creating if needed) the store at `home` (default: settings' KEYTRAIL_HOME)."""
    try:
        return Store(home=home, **kwargs)
    except OSError as exc:
        where = check.quoted(str(home), check.PATH_CHARS)
        raise StoreError(
            f"cannot open store at {where}: {check.os_error_text(exc)}", path=str(home)
        ) from exc
