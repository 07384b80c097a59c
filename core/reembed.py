"""Building a model's embedding projection by replaying history into it.

The log never changes when the model does: every decision that used a similarity (merges, dedups,
contradictions) is already in it with the fingerprint that measured it, so nothing is re-decided.
What a new model needs is a vector for every key label and memory content the graph holds. This
module finds the ones its cache lacks, embeds them in batches, flushes each batch under the log
lock (so an interrupted build resumes where it stopped) and records the seq it reflects in the
fingerprint's manifest. An earlier model's cache is kept, so switching back embeds nothing.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from keytrail.events import KeytrailError, StoreError
from keytrail.projections import text_hash
from keytrail.projections.snapshot import MemoryText, peek_all
from keytrail.projections.vectors import VECTORS_DIR, cached_fingerprints

from .embedders import name_of
from .results import ProjectionState
from .store import Store

#: Texts per model call while building: large enough that the per-call cost vanishes next to the
#: model's, small enough that an interrupt loses little and progress moves.
BUILD_BATCH = 512

#: How often a process waiting for another's build looks at the rows it flushed (seconds).
WAIT_POLL_S = 0.5

#: Called with (texts embedded so far, texts to embed).
Progress = Callable[[int, int], None]
#: What a caller waits for: every key label's vector (recall), or every vector.
Need = Literal["keys", "all"]


class StoreClosed(StoreError):
    """The store was closed while its projection was being built (the server is stopping)."""

    def __init__(self, home: str) -> None:
        super().__init__(f"the store at {home} was closed", path=home)


class ProjectionUnavailable(StoreError):
    """The embedding projection a call needs could not be built; the message says why."""

    def __init__(self, fingerprint: str, cause: str) -> None:
        super().__init__(
            f"the embedding projection for {fingerprint} could not be built: {cause}. "
            "Tools that read no vectors still answer; this one needs them, and the next such "
            "call tries the build again",
            fingerprint=fingerprint,
            cause=cause,
        )
        self.cause = cause


@dataclass(frozen=True)
class ProjectionStatus:
    """Where a store's projection for its current embedder stands."""

    fingerprint: str
    store_seq: int
    #: seq the manifest records as fully embedded (None: never built, or the cache was lost)
    covered_seq: int | None

    @property
    def current(self) -> bool:
        return self.covered_seq is not None and self.covered_seq >= self.store_seq


@dataclass(frozen=True)
class Reembedded:
    """The outcome of building a projection."""

    fingerprint: str
    seq: int
    #: distinct texts (key labels and memory contents) the projection holds
    texts: int
    #: of those, embedded now by the model; the rest came from the cache
    embedded: int
    key_rows: int
    memory_rows: int
    seconds: float


def status(store: Store) -> ProjectionStatus:
    state = store.refresh()
    manifest = store.vectors.manifest()
    covered = manifest.seq if manifest is not None and manifest.store_id == state.store_id else None
    return ProjectionStatus(store.embedder.fingerprint, state.seq, covered)


def needed_texts(store: Store) -> list[str]:
    """Every distinct text the projection needs: key labels and aliases (the first
    `len(store.state.labels)`, so recall can answer as soon as they are in), then memory
    contents. Call holding the store's mutex."""
    state = store.state
    # Peeked, not decoded: values() decoded a lazily loaded state whole. A forgotten memory's
    # content is blank and needs no row (`Store.memory_vectors` gives it zeros).
    contents = (node.content for node in peek_all(state.memories, MemoryText) if node.content)
    return list(dict.fromkeys([*state.labels, *contents]))


def cover_since_recorded(store: Store) -> bool:
    """Record the projection current without a build when everything told since its recorded
    seq already has a row: the contents of the memories made since (walked back from the
    newest) and every key label. Another process's `remember` embeds and saves its rows but
    records no seq, so each one-shot command after one found the projection behind and ran a
    build, which lists and hashes every text of the store (2-5 s at 100,000 memories) to embed
    nothing. False where a text lacks a row, nothing was recorded, or an id was told again (a
    memory replaced in place keeps its place: the walk back would stop before it): `build`."""
    with store._mutex:
        state = store.refresh()
        manifest = store.vectors.manifest()
        if manifest is None or manifest.store_id != state.store_id or state.ids_retold:
            return False
        if manifest.seq >= state.seq:
            return True
        if not store._every_row_since_recorded():
            return False
        store.save_vectors(covered=(state.store_id, state.seq), listed_at=store.reloads)
        return True


#: The folder of the build locks, one a model (`build_lock_path`); `keytrail rebuild` keeps it.
BUILDING_DIR = Path("cache") / "building"


def build_lock_path(store: Store) -> Path:
    """The file a builder of the store's projection for its model holds a flock on: beside
    cache/vectors/, whose entries are each a model's cache folder (tools and tests list them)."""
    folder = store.vectors.dir
    assert folder is not None  # a store's cache always lives under its home
    return store.home / BUILDING_DIR / f"{folder.name}.lock"


@contextmanager
def _builder_lock(store: Store, waited: Callable[[], None]) -> Iterator[None]:
    """Hold the build lock of the store's model for the whole build (not the appenders' lock:
    writers go on). A process that finds another building waits for it, calling `waited`
    between looks, instead of embedding the same texts beside it; the kernel drops the lock of
    a builder that dies, and the next one resumes from the rows it flushed."""
    path = build_lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited()
                time.sleep(WAIT_POLL_S)
        yield
    finally:
        os.close(fd)  # closing the file releases its flock


def _check_open(store: Store) -> None:
    """Stop a build whose store was closed under it (a server shutting down). Hold the mutex."""
    if store._closing:
        raise StoreClosed(str(store.home))


def build(
    store: Store,
    progress: Progress | None = None,
    batch: int = BUILD_BATCH,
    keys_ready: Callable[[], None] | None = None,
) -> Reembedded:
    """Embed what the store's projection lacks (resumable), record its seq, load its matrices.

    The key labels go first: `keys_ready()` is called once every one has its vector (recall
    reads nothing else). When another process is building the same projection, wait for it
    (reporting the rows it flushes as progress) and then embed only what it left. The store's
    mutex is held a step at a time, never while the model runs: queries wait at most a step.
    """
    started = time.perf_counter()
    with store._mutex:
        _check_open(store)
        state = store.refresh()
        seq, store_id = state.seq, state.store_id
        reloads = store.reloads
        texts = needed_texts(store)
        labels = len(state.labels)
        forgets_seen = len(store.forgets_folded)
    digests = {t: text_hash(t) for t in texts}  # hashed once, outside the mutex
    cache = store.vectors

    def missing() -> tuple[list[str], list[str]]:
        """The labels and the contents without a row (another builder may have flushed some)."""
        with store._mutex:
            _check_open(store)
            cache.refresh()
            left = [t for t in texts if digests[t] not in cache]
        split = sum(1 for t in left if t in needed_labels)
        return left[:split], left[split:]

    needed_labels = set(texts[:labels])
    missing_labels, missing_contents = missing()
    total = len(missing_labels) + len(missing_contents)
    texts = missing_labels + missing_contents  # from here on, what is left to look for
    if progress is not None:
        progress(0, total)
    told = False

    def keys_in() -> None:
        nonlocal told
        if keys_ready is not None and not told:
            told = True
            keys_ready()

    if not missing_labels:
        keys_in()

    def waited() -> None:
        labels_left, contents_left = missing()
        if progress is not None:
            progress(total - len(labels_left) - len(contents_left), total)
        if not labels_left:
            keys_in()

    with _builder_lock(store, waited):
        missing_labels, missing_contents = missing()
        done = total - len(missing_labels) - len(missing_contents)
        if progress is not None and done:
            progress(done, total)
        embedded = 0
        for part in (missing_labels, missing_contents):
            for start in range(0, len(part), batch):
                chunk = part[start : start + batch]
                vectors = store.embedder.embed(chunk)  # outside the lock: other writers go on
                with store._mutex:
                    _check_open(store)
                    # A text forgotten since the list was made must not be cached after its
                    # purge.
                    gone = {digest for _, digest in store.forgets_folded[forgets_seen:]}
                    rows = [digests[t] for t in chunk]
                    kept = [i for i, digest in enumerate(rows) if digest not in gone]
                    cache.put_many([rows[i] for i in kept], vectors[kept])
                    store.save_vectors()
                done += len(chunk)
                embedded += len(chunk)
                if progress is not None:
                    progress(done, total)
            keys_in()  # after the labels, the first part
    with store._mutex:
        _check_open(store)
        keys, memories = store.key_vectors(), store.memory_vectors()
        store.save_vectors(covered=(store_id, seq), listed_at=reloads)
    return Reembedded(
        fingerprint=store.embedder.fingerprint,
        seq=seq,
        texts=len(digests),
        embedded=embedded,  # by this process: none of what another builder did
        key_rows=len(keys),
        memory_rows=len(memories),
        seconds=time.perf_counter() - started,
    )


def _cause(exc: BaseException) -> str:
    return exc.message if isinstance(exc, KeytrailError) else f"{type(exc).__name__}: {exc}"


class BackgroundBuild:
    """A build of a store's projection in a daemon thread, which the store's queries and
    commands that read vectors wait for (`Store.wait_for_vectors`) while the rest answer.

    Started by `build_in_background`. A build that fails is kept as failed, its cause told to
    whoever waits; the next wait tries it again (an endpoint that was down may be back).
    """

    def __init__(
        self,
        store: Store,
        progress: Progress | None = None,
        batch: int = BUILD_BATCH,
        then: Callable[[], object] | None = None,
        failed: Callable[[BaseException], object] | None = None,
    ) -> None:
        self.store = store
        self._listener = progress
        self._batch = batch
        self._then = then
        self._failed = failed
        self._changed = threading.Condition()
        self._done = self._total = 0
        self._keys_ready = self._finished = False
        self._error: BaseException | None = None
        self._attempt = 0
        self.result: Reembedded | None = None
        #: the thread of the latest attempt (None before `start`)
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        """Run the build (again) in a new daemon thread: a finished one too, when the store
        finds its projection far behind again (see `Store.wait_for_vectors`)."""
        with self._changed:
            self._done = self._total = 0
            self._keys_ready = self._finished = False
            self.result = None
            self._start()

    @property
    def finished(self) -> bool:
        """Whether the latest attempt has built everything (not: failed, or still building)."""
        with self._changed:
            return self._finished

    def _start(self) -> None:
        self._attempt += 1
        self._error = None
        self.thread = threading.Thread(target=self._run, name="keytrail-projection", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            if status(self.store).current:  # the usual start of a server: nothing to build
                result = None
            else:
                result = build(self.store, self._progress, self._batch, self._keys_in)
        except BaseException as exc:  # a daemon thread has no caller: whoever waits is told
            with self._changed:
                self._error = exc
                self._changed.notify_all()
            if self._failed is not None and not isinstance(exc, StoreClosed):
                self._failed(exc)
            return
        with self._changed:
            self.result = result
            self._keys_ready = self._finished = True
            self._changed.notify_all()
        if self._then is not None:
            self._then()

    def _progress(self, done: int, total: int) -> None:
        with self._changed:
            self._done, self._total = done, total
            self._changed.notify_all()
        if self._listener is not None:
            self._listener(done, total)

    def _keys_in(self) -> None:
        with self._changed:
            self._keys_ready = True
            self._changed.notify_all()

    def _ready(self, need: Need) -> bool:
        return self._finished or (need == "keys" and self._keys_ready)

    def wait(self, need: Need = "all", progress: Progress | None = None) -> None:
        """Return once what `need` names is built; meanwhile tell `progress(done, total)` each
        change of how far the build is (from the calling thread, holding no lock). Raises
        ProjectionUnavailable, naming the cause, if the build fails; one that had failed
        before this call is tried again first. Call without holding the store's mutex: the
        build needs it between its steps."""
        heard: tuple[int, int] | None = None
        with self._changed:
            retry = self._error is not None
            attempt = self._attempt
        while True:
            ready = False
            with self._changed:
                while True:
                    now = (self._done, self._total)
                    if self._ready(need):
                        # Say how far it got first: a waiter woken once after several steps
                        # would otherwise end on an old figure (36 of 68) and never say 68.
                        ready = True
                        break
                    if self._error is not None:
                        closed = isinstance(self._error, StoreClosed) or self.store._closing
                        if retry and self._attempt == attempt and not closed:
                            self._start()
                            continue
                        raise ProjectionUnavailable(
                            name_of(self.store.embedder), _cause(self._error)
                        ) from self._error
                    if progress is not None and self._total and now != heard:
                        break
                    self._changed.wait()
            if ready:
                if progress is not None and heard is not None and now != heard:
                    progress(*now)
                return
            heard = now
            assert progress is not None
            progress(*now)

    def state(self) -> ProjectionState:
        with self._changed:
            if self._finished:
                status_ = "ready"
            elif self._error is not None:
                status_ = "failed"
            else:
                status_ = "building"
            return ProjectionState(
                status=status_,
                embedded=self._done,
                to_embed=self._total,
                keys_ready=self._keys_ready,
                error=None if self._error is None else _cause(self._error),
            )


def build_in_background(
    store: Store,
    progress: Progress | None = None,
    batch: int = BUILD_BATCH,
    then: Callable[[], object] | None = None,
    failed: Callable[[BaseException], object] | None = None,
) -> BackgroundBuild:
    """Bring the store's projection up to the log in a daemon thread (if it is behind), for a
    server that answers meanwhile: from now on the store's calls that read vectors wait for it
    (see `Store.wait_for_vectors`). `progress(done, total)` hears the build as it goes, `then()`
    runs in its thread once it is done, `failed(exc)` if it fails."""
    background = BackgroundBuild(store, progress, batch, then, failed)
    store._background_build = background  # before it starts: no call may miss it
    background.start()
    return background


def list_projections(home: Path) -> list[tuple[str, int, int | None]]:
    """(fingerprint, rows, recorded seq) of every model cache under the store at `home`."""
    return cached_fingerprints(home / VECTORS_DIR)
