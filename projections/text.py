"""The text projection: a Tantivy BM25 index over memory content and key labels.

Lives in `<home>/index/text/`. Each document is one memory (id, namespace as a raw field,
content, the key labels whose words the content lacks, and the `seq` that created it as a fast
field, so a search can be limited to what existed at a past seq). Each also carries the seq the
index reflected when it was written (`indexed`) and the time of that event (`at`): the newest
document says what the committed index reflects, written in the same commit as the memories it
describes, so the recorded seq and the indexed memories can never disagree, whatever point a
writer is killed at. No separate document records it: replacing one at every catch-up left a
deleted document per commit, which tantivy counts in BM25's statistics (documents, average
length) until a merge drops it, so a long-lived index scored the same log otherwise than a
rebuilt one. A commit that adds no memory records nothing: the next catch-up walks back over
its events again, finding nothing to add. The time tells whether that seq is still the log's: a
writer whose append failed cuts its lines back, and a process that indexed them meanwhile left
an index of events the log no longer holds, whose seq another event may take. Such an index is
rebuilt. Adding a memory deletes any document with its id first, so catching up
twice over the same events is harmless. A knowledge-graph delete that cuts from a memory that
stays a key whose label its content lacks changes that memory's keys field: the catch-up then
writes the whole index anew (`_rewrite`), as one document written anew would leave a deleted one.

The index is derived: when it is missing, unreadable or from another schema it is rebuilt from
the key graph (which the caller folded from the log). Forgotten memories are deleted from it;
`purge` also rewrites the index so their text is physically gone from its files.

Several processes share one index (each server on a store keeps its own handle). Everything that
writes it (catching up, rebuilding, purging, removing) holds an exclusive `flock` on
`<dir>.lock`, beside the directory so removing the index never removes the lock. A process that
finds the index missing or half-built waits for the one building it and then searches the
result, instead of searching an empty index or deleting another process's build. Searching a
committed index takes no lock. A handle tells an index removed and made anew from the one it
opened by a random token each new directory is given (`GENERATION_FILE`), not by its inode
number alone, which a directory made just after another was removed often gets again.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import secrets
import shutil
import unicodedata
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast

import msgspec
import tantivy

from keytrail.events.errors import StoreError
from keytrail.events.types import micros

from .keygraph import GraphState, MemoryNode
from .scripts import UNSPACED, marks, pattern

#: 2: the keys field holds only labels the content does not already contain
#: 3: a knowledge-graph delete keeps its document (as_of searches before it find it); an index
#:    of 2 had dropped it like a forgotten memory's
#: 4: content and labels are indexed in NFC, so a word typed decomposed (e + U+0308) is found;
#:    an `unspaced` field holds each character of scripts written without spaces
#: 5: the meta document holds the time (`at`) of the event of its seq
#: 6: no meta document: each memory's carries the seq and time the index reflected (`indexed`,
#:    `at`) and the schema, so a catch-up deletes nothing (deleted documents skew BM25)
SCHEMA_VERSION = 6
#: Called with (memories indexed so far, memories to index) while an index is written.
IndexProgress = Callable[[int, int], None]
#: Documents between two progress reports.
PROGRESS_EVERY = 2000
#: After a write of at least this many documents, what tantivy's writer freed goes back to the
#: system: glibc keeps it otherwise, for the process's life (180 MiB in a server that indexed
#: 100,000 memories at its first `recall_memories`).
TRIM_AFTER_DOCUMENTS = 1000
#: A random token written into each index directory made (tantivy leaves files it did not make
#: alone): `moved` tells an index made anew from the one a handle opened by it.
GENERATION_FILE = "keytrail.generation"


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # glibc's only
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_memory() -> None:
    """Hand the memory freed blocks hold back to the system where the C library can (glibc)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: A word: letters and digits with the marks that belong to them (a `scripts.pattern`)
_WORD = r"[\w{marks}]+"
#: A run of scripts written without spaces (a `scripts.pattern`, compiled on first use: its
#: large class cost every command's start)
_UNSPACED_RUN = f"([{UNSPACED}]+)"
#: Query words the BM25 path ignores (they match nearly every memory and carry no meaning).
_STOPWORDS_WORDS = """
    a about after again all also am an and any are as at be because been before being both
    but by can could did do does doing done for from had has have having he her here hers him
    his how i if in into is it its just me more most my no nor not of off on once only or other
    our ours out over own same she should so some such than that the their theirs them then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours"""
STOPWORDS = frozenset(_STOPWORDS_WORDS.split())


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", stored=True, tokenizer_name="raw")
    builder.add_text_field("memory_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("namespace", stored=True, tokenizer_name="raw")
    builder.add_text_field("content", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("keys", stored=True, tokenizer_name="en_stem")
    # The content's tokenizer takes a run of such a script for one word, a whole clause
    # ("東京に住んでいる"): here each of its characters is a word, and a query's words of it
    # are searched as phrases.
    builder.add_text_field("unspaced", stored=False, tokenizer_name="unspaced")
    builder.add_integer_field("seq", stored=True, indexed=True, fast=True)
    builder.add_integer_field("schema", stored=True)
    # The seq the index reflected when the document was written, and the time of that event
    # (microseconds since the epoch): the newest document's are the committed index's.
    builder.add_integer_field("indexed", stored=True, indexed=True, fast=True)
    builder.add_integer_field("at", stored=True)
    return builder.build()


#: What says which event the log holds at a seq: its time, or None if it holds no such event.
TimeOf = Callable[[int], datetime | None]


class IndexAhead(StoreError):
    """The committed index reflects a later seq than the state the caller asked it to match."""

    def __init__(self, index_seq: int, state_seq: int) -> None:
        super().__init__(
            f"text index at seq {index_seq}, state at seq {state_seq}",
            index_seq=index_seq,
            state_seq=state_seq,
        )
        self.index_seq = index_seq
        self.state_seq = state_seq


@dataclass(frozen=True)
class TextHit:
    memory_id: str
    score: float


def query_terms(text: str) -> list[str]:
    """The words of a query worth searching for, lower-cased, stopwords dropped, in order.

    NFC and lowercase, as the index holds its words: casefold would rewrite letters Tantivy only
    lowercases ("straße" -> "strasse", a final "ς" -> "σ"), and find no word it indexed. A run
    of a script without spaces gives its overlapping pairs of characters ("東京に" -> "東京",
    "京に"), which the `unspaced` field finds wherever the content says them.
    """
    words: list[str] = []
    for word in pattern(_WORD).findall(_nfc(text).lower()):
        if word in STOPWORDS:
            continue
        for i, part in enumerate(pattern(_UNSPACED_RUN).split(word)):
            if i % 2 == 0:
                words += [part] if part else []
            else:
                words += [part[j : j + 2] for j in range(max(1, len(part) - 1))]
    return list(dict.fromkeys(words))


def _new_labels(content: str, labels: list[str]) -> list[str]:
    """The key labels whose words the content lacks: what the keys field adds to BM25.

    A label the content already says (every extracted key, most names) would only count its
    words twice, so a memory's own speaker or a word it repeats outranks better matches.
    """
    return _lacked(content, labels, _words)


def _lacked(content: str, labels: list[str], words_of: Callable[[str], set[str]]) -> list[str]:
    """`_new_labels`, each label's words found by `words_of` (a build splits each label once)."""
    words = _words(content)
    return [label for label in labels if not words_of(label) <= words]


#: ASCII's bytes with a space for each that is not of a word once lower-cased ([a-z0-9_] are)
_ASCII_WORD_BYTES = bytes(
    c if (c < 128 and chr(c).isalnum()) or c == ord("_") else ord(" ") for c in range(256)
)


def _words(text: str) -> set[str]:
    """The casefolded words (`_WORD`) of `text`, as `_new_labels` compares them."""
    if text.isascii():
        # No mark is ASCII and ASCII's \w is [A-Za-z0-9_]: the same words, in an eighth of the
        # time (the pattern over every memory was a sixth of building the index)
        return set(text.lower().encode().translate(_ASCII_WORD_BYTES).decode().split())
    return set(pattern(_WORD).findall(text.casefold()))


def _nfc(text: str) -> str:
    return text if text.isascii() else unicodedata.normalize("NFC", text)


class _Fields(msgspec.Struct, omit_defaults=True):
    """A memory's document as JSON for `IndexWriter.add_json`: the index's files are the same
    bytes as from a `tantivy.Document` of these fields, which costs three times as much to
    build from Python (0.7 s at 100,000 memories) as this to encode."""

    at: int  # the time of the event of `indexed`
    content: str
    indexed: int  # the seq the index reflects once this is committed
    keys: str
    kind: str
    memory_id: str
    namespace: str
    schema: int
    seq: int
    unspaced: str | None = None  # the content, if it has a script without spaces


_fields_encoder = msgspec.json.Encoder()


def _document(
    memory_id: str,
    namespace: str,
    content: str,
    keys: str,
    seq: int,
    meta: tuple[int, int],
) -> str:
    """A memory's document, as JSON; `meta` is the (seq, time) the index reflects once it is
    committed."""
    # (no script without spaces is ASCII)
    unspaced = not content.isascii() and pattern(_UNSPACED_RUN).search(content) is not None
    fields = _Fields(
        at=meta[1],
        content=content,
        indexed=meta[0],
        keys=keys,
        kind="memory",
        memory_id=memory_id,
        namespace=namespace,
        schema=SCHEMA_VERSION,
        seq=seq,
        unspaced=content if unspaced else None,
    )
    return _fields_encoder.encode(fields).decode()


class _Documents:
    """Memories' documents as of one state, called with each: a key's label is looked up and
    split into words once, not for every memory that links it (400,000 times at 100,000
    memories, each a decode or a Python-level lookup in a lazily loaded state)."""

    def __init__(self, state: GraphState) -> None:
        self.state = state
        self.meta = (state.seq, micros(state.at))
        #: key id -> its label ("" for a key the state lacks: no words, so never added)
        self._labels: dict[str, str] = {}
        #: label -> its words
        self._words: dict[str, set[str]] = {}

    def _label(self, key_id: str) -> str:
        node = self.state.keys.get(key_id)
        label = self._labels[key_id] = "" if node is None else node.label
        return label

    def _words_of(self, label: str) -> set[str]:
        words = self._words.get(label)
        if words is None:
            words = self._words[label] = _words(label)
        return words

    def keys(self, node: MemoryNode) -> str:
        """The document's `keys` field: the labels of `node`'s keys its content lacks."""
        labels = self._labels
        told = [labels[k] if k in labels else self._label(k) for k in node.keys]
        return _nfc(" ; ".join(_lacked(node.content, told, self._words_of)))

    def __call__(self, node: MemoryNode) -> str:
        return _document(
            node.id,
            node.namespace,
            _nfc(node.content),
            self.keys(node),
            node.created_seq,
            self.meta,
        )


def _newest(index: tantivy.Index, since: int = 0) -> tantivy.Document | None:
    """The document written last (the highest `indexed`), looking first among those indexed at
    `since` or later; None in an empty index. ValueError for an index of an older schema (it
    has no `indexed` field)."""
    searcher, query = index.searcher(), tantivy.Query.all_query()
    if since:
        query = tantivy.Query.range_query(
            index.schema, "indexed", tantivy.FieldType.Integer, since, 2**63 - 1
        )
    hits = searcher.search(query, 1, order_by_field="indexed").hits
    if not hits:
        return _newest(index) if since else None
    return searcher.doc(hits[0][1])


def _stored_document(doc: tantivy.Document, meta: tuple[int, int]) -> str:
    """A memory's document written again from what `doc` (its stored one) holds."""
    return _document(
        cast(str, doc.get_first("memory_id")),
        cast(str, doc.get_first("namespace")),
        doc.get_first("content") or "",
        doc.get_first("keys") or "",
        cast(int, doc.get_first("seq")),
        meta,
    )


def _with_tokenizers(index: tantivy.Index) -> tantivy.Index:
    """`index`, able to write and parse its `unspaced` field (registered on every handle)."""
    one_character = tantivy.Tokenizer.regex(f"[{UNSPACED}][{marks()}]*")
    index.register_tokenizer("unspaced", tantivy.TextAnalyzerBuilder(one_character).build())
    return index


def finish_swap(directory: Path) -> bool:
    """Finish a swap (`TextIndex._swap_in`) killed between its two renames, the index at
    `directory` moved aside to `<dir>.old` and the fresh one not yet renamed in from
    `<dir>.new`: renamed in now, if it is whole, instead of the index being built again from
    scratch. Whole means committed: a build's one commit holds every document, each saying
    the schema (a build killed before its commit has none; one of no memories is built again).
    Nothing else leaves `<dir>.new` with no `<dir>` (`remove` takes the index last). Call
    holding the writers' lock; True if it was renamed in (`<dir>.old` is then the caller's to
    remove)."""
    if not swap_to_finish(directory):
        return False
    directory.with_name(f"{directory.name}.new").rename(directory)
    return True


def swap_to_finish(directory: Path) -> bool:
    """Whether `finish_swap` would rename `<dir>.new` in: a whole one with no `<dir>`. Only
    reads (verify says so of it)."""
    new = directory.with_name(f"{directory.name}.new")
    if directory.exists() or not new.is_dir():
        return False
    try:
        index = tantivy.Index.open(str(new))
        index.reload()
        newest = _newest(index)
        return newest is not None and newest.get_first("schema") == SCHEMA_VERSION
    except (ValueError, OSError):
        return False


class TextIndex:
    """BM25 over memories. Not thread-safe: the store calls it under its own mutex."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.schema = _schema()
        self._index: tantivy.Index | None = None
        #: (device, inode, generation) of the directory opened (see `_identity`)
        self._opened: tuple[int, int, bytes] | None = None
        #: the seq the index reflects: the committed one's, or later where this handle found
        #: nothing to add since (a commit adding no memory records no seq)
        self.seq = 0
        self.at = 0  # the time of that event (microseconds since the epoch), 0 with seq 0
        self._disk = (0, 0)  # the (seq, at) the committed index records, as last read
        #: (seq, at) pairs known to be the log's: committed here from a state, or looked up
        self._checked: set[tuple[int, int]] = set()
        self._lock_fd: int | None = None
        self._lock_depth = 0

    # -- the writers' lock -----------------------------------------------------------------

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the index's cross-process write lock (re-entrant within this handle)."""
        if self._lock_fd is None:
            self.dir.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self._sibling("lock"), os.O_RDWR | os.O_CREAT, 0o644)
        if self._lock_depth == 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if self._lock_depth == 0:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextmanager
    def settled(self) -> Iterator[None]:
        """For a reader that must see the index whole, not mid-swap (`keytrail verify`): wait
        for a writer to finish and keep others out meanwhile, creating nothing (no lock file
        means no writer has ever been)."""
        try:
            fd = os.open(self._sibling("lock"), os.O_RDONLY)
        except FileNotFoundError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        if self._index is not None:
            return self._index
        try:
            index = self._open_existing()
        except (ValueError, OSError):
            # Missing, corrupt, of another schema, or being swapped in by another process:
            # under the lock, either the other process has finished (open what it built) or
            # nobody is building it (start it afresh, dropping what an interrupted build left).
            with self.exclusive():
                try:
                    if finish_swap(self.dir):
                        shutil.rmtree(self._sibling("old"), ignore_errors=True)
                    index = self._open_existing()
                except (ValueError, OSError):
                    for leftover in (self._sibling("new"), self._sibling("old")):
                        shutil.rmtree(leftover, ignore_errors=True)
                    _remove_tree(self.dir)  # not on top of what a failed removal left
                    index = self._create(self.dir)
                    self.seq = self.at = 0
                    self._disk = (0, 0)
                    self._opened = self._identity()
        self._index = index
        return index

    def _open_existing(self) -> tantivy.Index:
        identity = self._identity()
        index = _with_tokenizers(tantivy.Index.open(str(self.dir)))
        index.reload()
        self.seq, self.at = self._disk = self._read_meta(index)
        self._opened = identity
        return index

    def moved(self) -> bool:
        """Whether the index was removed or swapped in since this handle opened it (a stat and
        a read of a 32-byte file; the handle's reader follows the path on its own, into a
        half-built index too)."""
        return self._identity() != self._opened

    def drop_if_moved(self) -> bool:
        """Let go of the open handle if the index was removed or swapped in since it was opened
        (call holding the lock); True if it was, and the caller must open it again."""
        if not self.moved():
            return False
        self._index = None
        return True

    def _identity(self) -> tuple[int, int, bytes] | None:
        """The directory's (device, inode) and the generation written into it when it was
        made: a directory removed and made anew often gets the same inode number at once."""
        try:
            st = os.stat(self.dir)
        except FileNotFoundError:
            return None
        try:  # os calls: a text-mode `open` costs several times as much (every search)
            fd = os.open(os.path.join(self.dir, GENERATION_FILE), os.O_RDONLY)
            try:
                generation = os.read(fd, 64)
            finally:
                os.close(fd)
        except FileNotFoundError:
            # Removed since; or made by an older keytrail, or not yet given its generation (it
            # is written holding the lock: a reader that saw it without reopens it once).
            generation = b""
        return st.st_dev, st.st_ino, generation

    def _sibling(self, suffix: str) -> Path:
        return self.dir.with_name(f"{self.dir.name}.{suffix}")

    def _create(self, path: Path) -> tantivy.Index:
        path.mkdir(parents=True, exist_ok=True)
        index = _with_tokenizers(tantivy.Index(self.schema, path=str(path), reuse=False))
        (path / GENERATION_FILE).write_text(secrets.token_hex(16), encoding="ascii")
        return index

    def _read_meta(self, index: tantivy.Index, since: int = 0) -> tuple[int, int]:
        """The (seq, at) the committed index records (`since`: a seq it recorded before, where
        the search for its newest document starts)."""
        doc = _newest(index, since)
        if doc is None:
            return 0, 0
        if doc.get_first("schema") != SCHEMA_VERSION:
            raise ValueError("text index of another schema version")
        return int(doc.get_first("indexed") or 0), int(doc.get_first("at") or 0)

    def forget_checked(self) -> None:
        """Forget which (seq, at) were the log's: lines were cut back since (see the module
        docstring), so the next catch-up checks the index's against the log again; what this
        handle found nothing to add for may be cut too: back to what the index records."""
        self._checked.clear()
        self.seq, self.at = self._disk

    def _of_the_log(self, state: GraphState, time_of: TimeOf | None) -> bool:
        """Whether the event the committed index reflects is the log's (call holding the lock,
        `state` no older than the index): the state's last one, or what `time_of` reads."""
        if self.seq == 0 or (self.seq, self.at) in self._checked:
            return True
        if self.seq == state.seq:
            same = self.at == micros(state.at)
        elif time_of is None:
            return True  # nothing to look it up in: as before the time was recorded
        else:
            at = time_of(self.seq)
            same = at is not None and self.at == micros(at)
        if same:
            self._note_checked(self.seq, self.at)
        return same

    def _note_checked(self, seq: int, at: int) -> None:
        if len(self._checked) >= 16:
            self._checked.clear()
        self._checked.add((seq, at))

    def current_for(self, state: GraphState) -> bool:
        """Whether the committed index reflects exactly `state`'s last event (no catch-up due)."""
        return self.seq == state.seq and self.at == micros(state.at)

    def committed(self) -> tuple[int, set[str]]:
        """The seq and memory ids of the committed index, read without creating or repairing
        anything (for `verify`). Raises ValueError or OSError when it cannot be read."""
        index = tantivy.Index.open(str(self.dir))
        index.reload()
        seq, _ = self._read_meta(index)
        searcher = index.searcher()
        everything = searcher.search(
            tantivy.Query.term_query(self.schema, "kind", "memory"), max(1, searcher.num_docs)
        )
        ids = {str(searcher.doc(address).get_first("memory_id")) for _, address in everything.hits}
        return seq, ids

    # -- catching up -----------------------------------------------------------------------

    def sync(
        self,
        state: GraphState,
        forgotten: Iterable[str] = (),
        progress: IndexProgress | None = None,
        time_of: TimeOf | None = None,
        unlinked: Iterable[str] = (),
    ) -> int:
        """Index every memory created after the index's seq, delete `forgotten`; commit.

        `forgotten` are memories forgotten since the index's seq (the caller observed the
        events), `unlinked` memories a knowledge-graph delete cut keys from since then (their
        keys field may have to lose labels: see `_rewrite`). `time_of(seq)` is the time of the
        log's event `seq` (for an index behind the state). Returns how many documents were
        added or written anew.

        Raises `IndexAhead` when the committed index reflects more of the log than `state`: the
        caller catches its state up and calls again (if the log really is older than the index,
        a restored store, the caller rebuilds). An index whose last event is not the log's (it
        was cut back after the index was written) is rebuilt.
        """
        forgotten, unlinked = list(forgotten), list(unlinked)
        self._open()
        if self.current_for(state) and not forgotten and not unlinked:
            return 0
        with self.exclusive():
            index = self._current()
            if state.seq < self.seq:
                raise IndexAhead(self.seq, state.seq)
            if not self._of_the_log(state, time_of):
                return self.rebuild(state, progress)
            if state.seq == self.seq and not forgotten and not unlinked:
                return 0  # another process indexed what we came to index
            return self._add(index, state, forgotten, progress, unlinked)

    def _current(self) -> tantivy.Index:
        """The committed index as other processes left it (call holding the lock)."""
        index = self._index
        if index is not None and self._identity() == self._opened:
            try:
                index.reload()
                self._disk = self._read_meta(index, self._disk[0])
                # Behind what this handle walked to (finding nothing to add): keep that, or
                # the next catch-up would walk back over those events again, each time.
                if self._disk[0] >= self.seq:
                    self.seq, self.at = self._disk
                return index
            except (ValueError, OSError):
                pass  # rebuilt by a process of another schema, or damaged: open it afresh
        # Removed or swapped in since we opened it: open what is there now (or start afresh).
        self._index = None
        return self._open()

    def _add(
        self,
        index: tantivy.Index,
        state: GraphState,
        forgotten: list[str],
        progress: IndexProgress | None = None,
        unlinked: Iterable[str] = (),
    ) -> int:
        fresh: list[MemoryNode] = []
        for node in reversed(state.memories.values()):  # newest first: stop at the indexed ones
            if node.created_seq <= self.seq:
                break
            fresh.append(node)
        # Only those the index holds: a commit deleting nothing would be for nothing, and
        # (adding no memory) one deleting something must rewrite a document to record its seq.
        searcher = index.searcher()
        forgotten = [m for m in forgotten if self._stored_of(searcher, m) is not None]
        rekeyed = self._rekeyed(searcher, state, unlinked)
        if rekeyed:
            return self._rewrite(index, state, fresh, forgotten, rekeyed, progress)
        if not fresh and not forgotten:
            # Nothing the index holds changed (reads, link weights): no commit. The seq on disk
            # lags, so the next open walks back over these events again, finding nothing.
            self.seq, self.at = state.seq, micros(state.at)
            self._note_checked(self.seq, self.at)
            return 0
        total = len(fresh)
        if progress is not None:
            progress(0, total)
        added = 0
        # Adding no memory, the commit records its seq on the newest one kept, written anew. It
        # leaves a deleted document, as the forgotten do, both counted in BM25's statistics
        # until a merge; that lasts until the forget's purge removes the index.
        carrier = None if any(n.status != "forgotten" for n in fresh) else set(forgotten)
        if carrier is not None:
            newest = searcher.search(
                tantivy.Query.all_query(), len(carrier) + 1, order_by_field="indexed"
            ).hits
            kept = (searcher.doc(a) for _, a in newest)
            carried = next((d for d in kept if d.get_first("memory_id") not in carrier), None)
        document = _Documents(state)
        with index.writer(heap_size=50_000_000, num_threads=1) as writer:
            for done, node in enumerate(reversed(fresh), 1):
                # Even into an empty index. Without them (100,000 of nothing take 110 MiB at
                # the write's peak), writes from scratch left more of glibc's heap held each
                # time, malloc_trim or not (six in one process: 334 -> 478 MiB anonymous, with
                # them 288 -> 293; a server writes one after every forget). Why is not known:
                # with MALLOC_ARENA_MAX=1 or a fixed MALLOC_MMAP_THRESHOLD_ it stays flat too.
                writer.delete_documents_by_term("memory_id", node.id)
                if node.status != "forgotten":
                    writer.add_json(document(node))
                    added += 1
                if progress is not None and done % PROGRESS_EVERY == 0 and done < total:
                    progress(done, total)
            for memory_id in forgotten:
                writer.delete_documents_by_term("memory_id", memory_id)
            if carrier is not None and carried is not None:
                writer.delete_documents_by_term("memory_id", carried.get_first("memory_id"))
                writer.add_json(_stored_document(carried, (state.seq, micros(state.at))))
                added += 1
            writer.commit()
        if added:
            self._disk = (state.seq, micros(state.at))
        if total >= TRIM_AFTER_DOCUMENTS:
            release_freed_memory()
        index.reload()
        self.seq, self.at = state.seq, micros(state.at)
        self._note_checked(self.seq, self.at)
        if progress is not None:
            progress(total, total)
        return len(fresh)

    def _rekeyed(
        self, searcher: tantivy.Searcher, state: GraphState, unlinked: Iterable[str]
    ) -> dict[str, str]:
        """The documents the index holds for memories among `unlinked` whose keys field the
        state now writes otherwise, written anew (by memory id): a key cut from a memory whose
        content says its label changes nothing."""
        rekeyed: dict[str, str] = {}
        document = _Documents(state)
        for memory_id in dict.fromkeys(unlinked):
            node = state.memories.get(memory_id)
            if node is None or node.status == "forgotten" or node.created_seq > self.seq:
                continue  # gone from the index, or a fresh one (written anyway)
            stored = self._stored_of(searcher, memory_id)
            if stored is not None and stored.get_first("keys") != document.keys(node):
                rekeyed[memory_id] = document(node)
        return rekeyed

    def _rewrite(
        self,
        index: tantivy.Index,
        state: GraphState,
        fresh: list[MemoryNode],
        forgotten: list[str],
        rekeyed: dict[str, str],
        progress: IndexProgress | None = None,
    ) -> int:
        """Catch up with memories whose keys field changed: the whole index written anew.

        Writing a document anew deletes its old one, and tantivy counts deleted documents in
        BM25's statistics until a merge drops them, which the Python binding cannot force: the
        same log would score otherwise here than in a rebuilt index, for as long as the segment
        lives. So the stored documents are copied into a fresh index (as `purge` does), the
        changed ones as the state writes them. Only a knowledge-graph delete that cuts a label
        the memory's content lacks pays this (a few seconds at 100,000 memories).
        """
        meta = (state.seq, micros(state.at))
        written = dict(rekeyed)
        document = _Documents(state)
        for node in reversed(fresh):
            if node.status != "forgotten":
                written[node.id] = document(node)
        gone = set(forgotten) | {n.id for n in fresh}
        docs = [*self._stored(index, gone | written.keys(), meta), *written.values()]
        self._swap_in(docs, meta, len(docs), progress)
        self._note_checked(*meta)
        if progress is not None:
            progress(len(docs), len(docs))
        return len(written)

    def _stored(
        self, index: tantivy.Index, skip: Collection[str], meta: tuple[int, int]
    ) -> list[str]:
        """Every stored memory document but those of `skip`, to write anew with `meta`."""
        searcher = index.searcher()
        everything = searcher.search(
            tantivy.Query.term_query(self.schema, "kind", "memory"), max(1, searcher.num_docs)
        )
        docs = (searcher.doc(address) for _, address in everything.hits)
        return [_stored_document(d, meta) for d in docs if d.get_first("memory_id") not in skip]

    def rebuild(self, state: GraphState, progress: IndexProgress | None = None) -> int:
        """Index every memory that is not forgotten from scratch, then swap the index in."""
        nodes = [n for n in state.memories.values() if n.status != "forgotten"]
        with self.exclusive():
            self._swap_in(
                map(_Documents(state), nodes),
                (state.seq, micros(state.at)),
                len(nodes),
                progress,
            )
        if progress is not None:
            progress(len(nodes), len(nodes))
        return len(nodes)

    def _swap_in(
        self,
        docs: Iterable[str],
        meta: tuple[int, int],
        total: int = 0,
        progress: IndexProgress | None = None,
    ) -> None:
        """Write a fresh index beside the live one and rename it into place (holding the lock)."""
        new, old = self._sibling("new"), self._sibling("old")
        # A swap killed before removing its `old` left it, and renaming onto it would fail
        # ("Directory not empty"); a store's open removes it, a long-running server never does.
        for leftover in (new, old):
            shutil.rmtree(leftover, ignore_errors=True)
        index = self._create(new)
        if progress is not None:
            progress(0, total)
        written = 0
        with index.writer(heap_size=50_000_000, num_threads=1) as writer:
            for written, doc in enumerate(docs, 1):
                writer.add_json(doc)
                if progress is not None and written % PROGRESS_EVERY == 0 and written < total:
                    progress(written, total)
            writer.commit()
        if written >= TRIM_AFTER_DOCUMENTS:
            release_freed_memory()
        self._index = None
        if self.dir.exists():
            self.dir.rename(old)
        new.rename(self.dir)
        _remove_tree(old)  # a purge's: it holds the forgotten texts
        self._index = _with_tokenizers(tantivy.Index.open(str(self.dir)))
        self._index.reload()
        self._opened = self._identity()
        self.seq, self.at = meta
        self._disk = meta if written else (0, 0)

    def purge(self, memory_ids: Iterable[str]) -> int:
        """Remove memories so their text is physically gone from the index files.

        Deleting only marks documents; their terms and stored text stay in the segment until
        it is merged. The Python binding cannot force a merge, so the surviving documents are
        rewritten into a fresh index that replaces the old one, whose files are removed.
        Returns how many documents were removed.
        """
        with self.exclusive():
            return self._purge(self._current(), set(memory_ids))

    def _purge(self, index: tantivy.Index, gone: set[str]) -> int:
        searcher = index.searcher()
        removed = sum(self._stored_of(searcher, m) is not None for m in gone)
        self._swap_in(self._stored(index, gone, (self.seq, self.at)), (self.seq, self.at))
        return removed

    def _stored_of(self, searcher: tantivy.Searcher, memory_id: str) -> tantivy.Document | None:
        """The document the index holds for `memory_id`, if any."""
        query = tantivy.Query.term_query(self.schema, "memory_id", memory_id)
        hits = searcher.search(query, 1, count=False).hits
        return searcher.doc(hits[0][1]) if hits else None

    # -- searching -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        namespace: str | None = None,
        max_seq: int | None = None,
    ) -> list[TextHit]:
        """BM25 over content and key labels, best first, filtered before the top-k cut.

        `namespace` keeps one namespace; `max_seq` keeps memories created at or before it (what
        existed at a past seq). Superseded or expired memories are the caller's to filter.
        """
        index = self._open()
        terms = query_terms(query)
        if not terms:
            return []
        text_query, _errors = index.parse_query_lenient(
            " ".join(terms), ["content", "keys", "unspaced"], field_boosts={"keys": 0.5}
        )
        filters = [tantivy.Query.term_query(self.schema, "kind", "memory")]
        if namespace is not None:
            filters.append(tantivy.Query.term_query(self.schema, "namespace", namespace))
        if max_seq is not None:
            filters.append(
                tantivy.Query.range_query(self.schema, "seq", tantivy.FieldType.Integer, 0, max_seq)
            )
        # Filters score nothing, so the score stays plain BM25.
        clauses = [(tantivy.Occur.Must, text_query)] + [
            (tantivy.Occur.Must, tantivy.Query.const_score_query(f, 0.0)) for f in filters
        ]
        searcher = index.searcher()
        # Tantivy reserves room for `limit` hits before it searches: a limit past the documents
        # held (KEYTRAIL_HYBRID_CANDIDATES has no ceiling) aborted the process out of memory.
        held = max(1, searcher.num_docs)
        limit = min(limit, held)
        # Equal scores come in the order of the documents' segments, which is the history of
        # the process that wrote them (and partly chance): ties are put in the log's order,
        # oldest first, and one more hit than asked, or more, shows a tie across the cut.
        combined = tantivy.Query.boolean_query(clauses)
        want = min(limit + 1, held)
        hits = searcher.search(combined, want).hits
        while len(hits) == want < held and hits[-1][0] == hits[limit - 1][0]:
            want = min(want * 4, held)
            hits = searcher.search(combined, want).hits
        if len(hits) > limit:
            hits = [hit for hit in hits if hit[0] >= hits[limit - 1][0]]
        seqs = searcher.fast_field_values("seq", [address for _, address in hits])
        ids = [searcher.doc(address).get_first("memory_id") for _, address in hits]
        ranked = sorted(
            zip(hits, seqs, ids, strict=True), key=lambda hit: (-hit[0][0], hit[1], hit[2])
        )
        return [TextHit(str(mid), float(score)) for (score, _), _, mid in ranked[:limit]]

    def remove(self) -> list[str]:
        """Delete the index's files (and any interrupted build's), so no text of it stays.

        Under the lock, so no other process is writing into what is removed; each process's
        handle notices the directory is gone at its next catch-up and rebuilds it from the log.
        """
        removed: list[str] = []
        with self.exclusive():
            # The index last: killed midway, a finished `text.new` must not be left without
            # it, or `finish_swap` would take it for a swap's and put its text back.
            for directory in (self._sibling("new"), self._sibling("old"), self.dir):
                if directory.exists():
                    _remove_tree(directory)
                    removed.append(str(directory))
        self._index = None
        return removed

    def close(self) -> None:
        self._index = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
            self._lock_depth = 0


def _remove_tree(directory: Path, tries: int = 3) -> None:
    """`shutil.rmtree`, again if the folder was written into while it was emptied.

    Every opened tantivy index (any process's) has a reader that reloads itself from a thread,
    and a reload creates `.tantivy-meta.lock` in the folder by path, without our lock: one
    landing after rmtree emptied the folder fails its rmdir (ENOTEMPTY). Once the folder is
    gone nothing can be created in it, so a second pass ends it."""
    for attempt in range(tries):
        try:
            shutil.rmtree(directory)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY or attempt == tries - 1:
                raise
