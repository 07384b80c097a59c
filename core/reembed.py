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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from keytrail.projections import text_hash
from keytrail.projections.vectors import VECTORS_DIR, cached_fingerprints

from .store import Store

#: Texts per model call while building: large enough that the per-call cost vanishes next to the
#: model's, small enough that an interrupt loses little and progress moves.
BUILD_BATCH = 512

#: How often a process waiting for another's build looks at the rows it flushed (seconds).
WAIT_POLL_S = 0.5

#: Called with (texts embedded so far, texts to embed).
Progress = Callable[[int, int], None]


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
    """Every distinct text the projection needs: memory contents, then key labels and aliases."""
    state = store.state
    contents = (node.content for node in state.memories.values())
    return list(dict.fromkeys([*contents, *state.labels]))


def build_lock_path(store: Store) -> Path:
    """The file a builder of the store's projection for its model holds a flock on: beside
    cache/vectors/, whose entries are each a model's cache folder (tools and tests list them)."""
    folder = store.vectors.dir
    assert folder is not None  # a store's cache always lives under its home
    return store.home / "cache" / "building" / f"{folder.name}.lock"


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


def build(store: Store, progress: Progress | None = None, batch: int = BUILD_BATCH) -> Reembedded:
    """Embed what the store's projection lacks (resumable), record its seq, load its matrices.

    When another process is building the same projection, wait for it (reporting the rows it
    flushes as progress) and then embed only what it left.
    """
    started = time.perf_counter()
    with store._mutex:
        state = store.refresh()
        seq, store_id = state.seq, state.store_id
        texts = needed_texts(store)
        cache = store.vectors
        cache.refresh()
        missing = [t for t in texts if text_hash(t) not in cache]
        forgets_seen = len(store.forgets_folded)
    total = len(missing)
    if progress is not None:
        progress(0, total)

    digests = {t: text_hash(t) for t in missing}  # hashed once, not at every look

    def still_missing() -> list[str]:
        with store._mutex:
            cache.refresh()  # rows the other builder flushed
            return [t for t in missing if digests[t] not in cache]

    def waited() -> None:
        if progress is not None:
            progress(total - len(still_missing()), total)

    with _builder_lock(store, waited):
        missing = still_missing()
        done = total - len(missing)
        if progress is not None and done:
            progress(done, total)
        for start in range(0, len(missing), batch):
            chunk = missing[start : start + batch]
            vectors = store.embedder.embed(chunk)  # outside the lock: other writers go on
            with store._mutex:
                # A text forgotten since the list was made must not be cached after its purge.
                gone = {digest for _, digest in store.forgets_folded[forgets_seen:]}
                rows = [digests[t] for t in chunk]
                kept = [i for i, digest in enumerate(rows) if digest not in gone]
                cache.put_many([rows[i] for i in kept], vectors[kept])
                store.save_vectors()
            if progress is not None:
                progress(done + start + len(chunk), total)
    with store._mutex:
        keys, memories = store.key_vectors(), store.memory_vectors()
        store.save_vectors(covered=(store_id, seq))
    return Reembedded(
        fingerprint=store.embedder.fingerprint,
        seq=seq,
        texts=len(texts),
        embedded=len(missing),  # by this process: none of what another builder did
        key_rows=len(keys),
        memory_rows=len(memories),
        seconds=time.perf_counter() - started,
    )


def list_projections(home: Path) -> list[tuple[str, int, int | None]]:
    """(fingerprint, rows, recorded seq) of every model cache under the store at `home`."""
    return cached_fingerprints(home / VECTORS_DIR)
