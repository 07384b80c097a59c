"""Snapshots of the key graph: the state and the log position it reflects, written atomically.

A snapshot is a cache. A missing, stale or unreadable one costs a longer replay, never data.

File layout (format 4): a 4-byte big-endian length, a small msgpack header (seq, time, log
position, CRC-32 of the body), then the msgpack state. The header alone answers "which
snapshot is nearest to this point?" without decoding any state, which time travel asks of every
kept snapshot. Keys and memories are stored by column (ids, then every node's bytes back to
back), so a lazy load builds an id index and decodes a node only when it is looked at
(`LazyNodes`).

The body's checksum is checked at every load, before anything decoded from it is used. A lazy
load decodes a node only when a query or a fold first reads it, so without the checksum a
damaged node (the framing intact) would surface half-way through a fold, long after the open
trusted the file. With it, a damaged snapshot is a cache miss like any unreadable one: a
replay, not an answer. zlib's crc32 runs at a few GB/s, a small part of the lazy open it
guards. A snapshot of another format (3 had no checksum) is a cache miss: a replay.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import os
import re
import sys
import threading
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from keytrail.events.durable import outdate, sync_dir, sync_file
from keytrail.events.errors import StoreError
from keytrail.events.types import EPOCH, FoldRules

from .keygraph import GraphState, KeyNode, MemoryNode, Turn, paused_gc, share_key, share_memory

#: Format 4 added the body's checksum. Format 3 files are no longer read: every one was
#: written before a change of the state's layout (`SCHEMA`), so none could be read anyway.
FORMAT = 4
_LENGTH_BYTES = 4
#: `write_atomic` writes `.<name>.<pid>.tmp` beside the file, then renames it over the file
TEMP_SUFFIX = ".tmp"
#: Archived snapshots are named by the seq they reflect; the latest one has a fixed name.
_ARCHIVED = re.compile(r"^keygraph-(\d{20})\.msgpack$")


def _schema() -> str:
    """A digest of the state's shape: nodes encode as arrays, so any change of their fields
    (or of GraphState's) must make older snapshots unreadable rather than misread."""
    parts = []
    for cls in (GraphState, KeyNode, MemoryNode, Turn, FoldRules):
        fields = ",".join(f"{f.name}:{f.type!r}" for f in msgspec.structs.fields(cls))
        parts.append(f"{cls.__name__}({fields})")
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:16]


SCHEMA = _schema()


class Header(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    schema: str = SCHEMA
    store_id: str
    seq: int
    at: datetime = EPOCH
    segment: str | None = None
    offset: int = 0
    #: CRC-32 of the body (everything after the header)
    body_crc: int = 0


class Snapshot(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    store_id: str
    seq: int
    at: datetime = EPOCH
    segment: str | None = None
    offset: int = 0
    state: GraphState

    @classmethod
    def of(cls, state: GraphState, segment: str | None, offset: int) -> Snapshot:
        """A snapshot of `state`, which the log reflects up to `offset` in `segment`."""
        return cls(
            store_id=state.store_id,
            seq=state.seq,
            at=state.at,
            segment=segment,
            offset=offset,
            state=state,
        )

    @property
    def header(self) -> Header:
        return Header(
            format=self.format,
            schema=SCHEMA,
            store_id=self.store_id,
            seq=self.seq,
            at=self.at,
            segment=self.segment,
            offset=self.offset,
        )


class _Columns(msgspec.Struct, array_like=True, gc=False):
    """Nodes by column: their ids in dict order, then every node's array encoding back to back
    in `blob`, node i ending at byte `ends[i]` (little-endian uint64). Loading one builds the
    id index and nothing else; a node decodes from its slice when first looked at."""

    ids: list[str]
    ends: memoryview
    blob: memoryview


class _Body(msgspec.Struct, array_like=True, gc=False):
    """The state as stored: keys and memories by column and, in `rest`, everything else of
    GraphState, whatever fields it grows."""

    rest: GraphState
    keys: _Columns
    memories: _Columns


#: How many bytes of nodes `LazyNodes.peek_holding` lower-cases at a time (a copy of all the
#: columns would hold another 30 MB at 100,000 memories)
SCAN_BYTES = 1 << 20

_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(Header)
_body_decoder = msgspec.msgpack.Decoder(_Body)
_key_decoder = msgspec.msgpack.Decoder(KeyNode)
_memory_decoder = msgspec.msgpack.Decoder(MemoryNode)


def _offsets(ends: memoryview) -> array[int]:
    offsets = array("Q")
    if len(ends) % offsets.itemsize:
        raise msgspec.ValidationError("snapshot column offsets are cut short")
    offsets.frombytes(ends)
    if sys.byteorder == "big":
        offsets.byteswap()
    return offsets


class LazyNodes(dict[str, Any]):
    """id -> node, each decoded from its snapshot bytes the first time it is looked at.

    Until then the dict holds the node's index into the snapshot's columns (a plain int), so
    opening a large graph builds one dict entry per node and no node. Anything that reads
    values goes through `__getitem__` or a bulk view (`values`, `items`, `copy`, `==`), which
    decode what they return; bulk views decode everything once, after which the columns are
    let go. Never hand one to an encoder directly: `encode` writes undecoded nodes from their
    bytes, and `materialize` makes it a dict of nodes.
    """

    __slots__ = ("_blob", "_decode", "_ends", "_share")

    def __init__(self, columns: _Columns, decode: Any, share: Any) -> None:
        ends = _offsets(columns.ends)
        if len(ends) != len(columns.ids) or (ends and ends[-1] != len(columns.blob)):
            raise msgspec.ValidationError("snapshot columns do not line up")
        super().__init__(zip(columns.ids, range(len(ends)), strict=True))
        self._blob: memoryview | None = columns.blob
        self._ends = ends
        self._decode = decode
        #: makes a decoded node hold objects shared with other nodes (see `materialize`)
        self._share = share

    def _slice(self, index: int) -> memoryview:
        assert self._blob is not None  # an int value means the columns are still held
        return self._blob[self._ends[index - 1] if index else 0 : self._ends[index]]

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) is int:
            value = self._decoded(self._slice(value))
            dict.__setitem__(self, key, value)
        return value

    def _decoded(self, raw: memoryview, decode: Any = None) -> Any:
        try:
            return (decode or self._decode)(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
            # The framing was checked when the file loaded; a node inside it is damaged.
            raise StoreError(
                f"a key-graph snapshot is damaged ({exc}); delete cache/snapshot/ "
                "(it is only a cache) and retry"
            ) from exc

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def materialize(self) -> None:
        if self._blob is None:
            return
        decoded, share = self._decoded, self._share
        # Each node decoded on its own holds its own copy of every id it repeats: a store of
        # 100,000 memories held 800,000 copies of key and memory ids (47 MiB). Shared here,
        # once, not node by node as queries decode them: it doubles a node's decoding, which a
        # first query would wait for. The dict keeps its own key strings (6 MiB): replacing
        # them would empty the dict for a moment, and it is never seen in a state of less.
        with paused_gc():  # as a load: many new acyclic containers would run it over and over
            nodes = [
                (key, share(decoded(self._slice(value)) if type(value) is int else value))
                for key, value in dict.items(self)
            ]
            for key, node in nodes:
                dict.__setitem__(self, key, node)
        self._blob, self._ends = None, array("Q")

    def peek(self, key: str, decode: Callable[[memoryview], Any]) -> Any:
        """The node `key`, or what `decode` reads of its stored bytes if it is undecoded, kept
        undecoded: a look at every node must not decode them one by one (each would hold its
        own copy of every id it repeats, which `materialize` shares)."""
        value = dict.__getitem__(self, key)
        return self._decoded(self._slice(value), decode) if type(value) is int else value

    def peek_values(self, decode: Callable[[memoryview], Any]) -> Iterator[Any]:
        """`peek` of every node, in order: one walk with nothing looked up per node."""
        blob, ends, decoded = self._blob, self._ends, self._decoded
        for value in dict.values(self):
            if type(value) is int:
                assert blob is not None  # an int value means the columns are still held
                yield decoded(blob[ends[value - 1] if value else 0 : ends[value]], decode)
            else:
                yield value

    def peek_holding(
        self, words: Sequence[bytes], most: int, decode: Callable[[memoryview], Any]
    ) -> Iterator[Any] | None:
        """`peek_values`, less the undecoded nodes whose stored bytes do not hold every one of
        `words` (lower case) in some ASCII case: a look for one text that reads the columns
        for the first word, not each node. None if more than `most` nodes hold the first."""
        blob, ends = self._blob, self._ends
        assert blob is not None  # see `raw_held`
        first, *rest = words
        holding: set[int] = set()
        start, count, found = 0, len(ends), 0
        while start < count:  # a run of whole nodes at a time, lower-cased
            begin = ends[start - 1] if start else 0
            stop = min(bisect.bisect_left(ends, begin + SCAN_BYTES, start), count - 1)
            run = blob[begin : ends[stop]].tobytes().lower()
            at = run.find(first)
            while at >= 0:
                found += 1
                if found > most:
                    return None
                index = bisect.bisect_right(ends, begin + at, start, stop + 1)
                end = ends[index] - begin
                if all(word in run[ends[index - 1] - begin if index else 0 : end] for word in rest):
                    holding.add(index)
                at = run.find(first, end)
            start = stop + 1
        return self._peek_held(holding, decode)

    def _peek_held(self, held: set[int], decode: Callable[[memoryview], Any]) -> Iterator[Any]:
        blob, ends, decoded = self._blob, self._ends, self._decoded
        for value in dict.values(self):
            if type(value) is not int:
                yield value
            elif value in held:
                assert blob is not None  # an int value means the columns are still held
                yield decoded(blob[ends[value - 1] if value else 0 : ends[value]], decode)

    def raw_held(self) -> bool:
        """Whether the snapshot's columns are still held (`materialize` lets them go)."""
        return self._blob is not None

    def raw(self, key: str) -> memoryview | None:
        """The stored bytes of an undecoded node (None once decoded): what `encode` copies."""
        value = dict.__getitem__(self, key)
        return self._slice(value) if type(value) is int else None

    def __iter__(self) -> Iterator[str]:
        # Defined here so dict(lazy), {**lazy} and update(lazy) go through __getitem__.
        return dict.__iter__(self)

    def values(self) -> Any:
        self.materialize()
        return dict.values(self)

    def items(self) -> Any:
        self.materialize()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self.materialize()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self.materialize()
        if isinstance(other, LazyNodes):
            other.materialize()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            return value
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, Any]:
        key = next(reversed(self))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def __reversed__(self) -> Any:
        return dict.__reversed__(self)


class MemoryText(msgspec.Struct, array_like=True, gc=False):
    """A stored `MemoryNode`'s fields up to its status (the same names, in the same places),
    those between left as bytes: its text and its hash, when it was made and whether it is
    current, read without decoding the rest (`peek_text`)."""

    id: str
    namespace: str
    content: str
    content_hash: str
    created_at: msgspec.Raw
    created_seq: int
    keys: msgspec.Raw
    depth: msgspec.Raw
    access_count: msgspec.Raw
    last_read_at: msgspec.Raw
    expires_at: msgspec.Raw
    session_id: msgspec.Raw
    source: msgspec.Raw
    related_to: msgspec.Raw
    related_from: msgspec.Raw
    supersedes: msgspec.Raw
    superseded_by: str | None
    supersede_reason: msgspec.Raw
    status: str

    def current(self) -> bool:
        return self.status == "active" and self.superseded_by is None


def peek_text(memories: dict[str, MemoryNode], memory_id: str) -> MemoryNode | MemoryText:
    """The memory `memory_id`, or its `MemoryText` if a lazy load left it undecoded (it stays
    so): for a look at every memory's text that must not decode a whole snapshot's nodes."""
    if isinstance(memories, LazyNodes):
        found: MemoryNode | MemoryText = memories.peek(memory_id, _view_decoder(MemoryText).decode)
        return found
    return memories[memory_id]


def peek_namespace(memories: dict[str, MemoryNode], memory_id: str) -> str:
    """The namespace of the memory `memory_id`, read without decoding it if a lazy load left it
    undecoded (it stays so): a walk of a hub's links must not decode its memories."""
    if isinstance(memories, LazyNodes):
        found: MemoryNamespace = memories.peek(memory_id, _view_decoder(MemoryNamespace).decode)
        return found.namespace
    return memories[memory_id].namespace


def made_since(memories: dict[str, MemoryNode], seq: int) -> Iterator[MemoryNode | MemoryText]:
    """The memories made after `seq`, newest first, each as `peek_text` reads it: memories
    stand in the order they were made (unless an id was told again, `ids_retold`), so the
    walk back stops at the first one made before."""
    newest = (peek_text(memories, memory_id) for memory_id in reversed(memories))
    return itertools.takewhile(lambda node: node.created_seq > seq, newest)


class MemoryNamespace(msgspec.Struct, array_like=True, gc=False):
    """A stored `MemoryNode`'s id and namespace, the rest not read (`peek_namespace`)."""

    id: str
    namespace: str


class MemoryStatus(msgspec.Struct, array_like=True, gc=False):
    """A stored `MemoryNode`'s fields up to its status (the same names, in the same places),
    those a count of what is shown does not read left as bytes (`peek_all`)."""

    id: str
    namespace: str
    content: msgspec.Raw
    content_hash: msgspec.Raw
    created_at: msgspec.Raw
    created_seq: msgspec.Raw
    keys: msgspec.Raw
    depth: msgspec.Raw
    access_count: msgspec.Raw
    last_read_at: msgspec.Raw
    expires_at: datetime | None
    session_id: msgspec.Raw
    source: msgspec.Raw
    related_to: msgspec.Raw
    related_from: msgspec.Raw
    supersedes: msgspec.Raw
    superseded_by: str | None
    supersede_reason: msgspec.Raw
    status: str


class MemoryHash(msgspec.Struct, array_like=True, gc=False):
    """A stored `MemoryNode`'s fields up to its status (the same names, in the same places),
    all but its id, namespace, content hash and status left as bytes (`peek_all`)."""

    id: str
    namespace: str
    content: msgspec.Raw
    content_hash: str
    created_at: msgspec.Raw
    created_seq: msgspec.Raw
    keys: msgspec.Raw
    depth: msgspec.Raw
    access_count: msgspec.Raw
    last_read_at: msgspec.Raw
    expires_at: msgspec.Raw
    session_id: msgspec.Raw
    source: msgspec.Raw
    related_to: msgspec.Raw
    related_from: msgspec.Raw
    supersedes: msgspec.Raw
    superseded_by: msgspec.Raw
    supersede_reason: msgspec.Raw
    status: str


class KeyLinks(msgspec.Struct, array_like=True, gc=False):
    """A stored `KeyNode`'s fields up to its links, those between left as bytes."""

    id: str
    label: msgspec.Raw
    type: msgspec.Raw
    aliases: msgspec.Raw
    links: dict[str, float]


class KeyLabels(msgspec.Struct, array_like=True, gc=False):
    """A stored `KeyNode`'s fields up to its aliases, its type left as bytes."""

    id: str
    label: str
    type: msgspec.Raw
    aliases: list[str]


_Node = TypeVar("_Node")
_View = TypeVar("_View", bound=msgspec.Struct)


@functools.cache
def _view_decoder(view: type[msgspec.Struct]) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(view)


def peek_holding(
    nodes: Mapping[str, _Node], words: Sequence[bytes], view: type[_View]
) -> Iterator[_Node | _View] | None:
    """`peek_all` of the nodes that may hold every one of `words` (lower-case ASCII, held in
    any case): those decoded, and those a lazy load left undecoded whose stored bytes hold
    them. None where no lazy load's columns are held (nothing to read but every node), or
    where more than an eighth of the nodes (and 1,024) hold the first word: reading them costs
    as much as reading every node, once."""
    if isinstance(nodes, LazyNodes) and nodes.raw_held():
        return nodes.peek_holding(words, max(len(nodes) // 8, 1024), _view_decoder(view).decode)
    return None


def peek_all(nodes: Mapping[str, _Node], view: type[_View]) -> Iterator[_Node | _View]:
    """Every node, in order, those a lazy load left undecoded read as `view` (they stay so):
    one of the views above, whose fields are the node's leading ones with what a walk of every
    node does not read left as bytes, so that the walk does not decode a whole snapshot."""
    if isinstance(nodes, LazyNodes):
        return nodes.peek_values(_view_decoder(view).decode)
    return iter(nodes.values())


def _columns(nodes: dict[str, Any]) -> _Columns:
    if isinstance(nodes, LazyNodes) and nodes._blob is not None:
        return _lazy_columns(nodes, nodes._blob)
    encode = _encoder.encode
    parts = [encode(node) for node in dict.values(nodes)]
    ends = array("Q", itertools.accumulate(len(p) for p in parts))
    if sys.byteorder == "big":
        ends.byteswap()
    return _Columns(
        ids=list(nodes), ends=memoryview(ends.tobytes()), blob=memoryview(b"".join(parts))
    )


def _lazy_columns(nodes: LazyNodes, blob: memoryview) -> _Columns:
    """`_columns` of nodes a lazy load left mostly undecoded: each run of undecoded nodes that
    stand together in the loaded blob is copied as one slice, its ends moved by arithmetic,
    and only the decoded ones are encoded (a slice and an end per node took 0.4 s of every
    writing command's close at 100,000 memories)."""
    encode = _encoder.encode
    old = nodes._ends
    parts: list[bytes | memoryview] = []
    ends = array("Q")
    size = 0  # bytes written so far
    first = last = -1  # the old indices of the run of undecoded nodes being gathered

    def copy_run() -> None:
        nonlocal size
        start = old[first - 1] if first else 0
        parts.append(blob[start : old[last]])
        ends.extend(end - start + size for end in old[first : last + 1])
        size += old[last] - start

    for value in dict.values(nodes):
        if type(value) is int:
            if value == last + 1 and first >= 0:
                last = value
                continue
            if first >= 0:
                copy_run()
            first = last = value
        else:
            if first >= 0:
                copy_run()
                first = last = -1
            part = encode(value)
            parts.append(part)
            size += len(part)
            ends.append(size)
    if first >= 0:
        copy_run()
    if sys.byteorder == "big":
        ends.byteswap()
    return _Columns(
        ids=list(nodes), ends=memoryview(ends.tobytes()), blob=memoryview(b"".join(parts))
    )


def _encode_state(state: GraphState) -> bytes:
    rest = msgspec.structs.replace(state, keys={}, memories={})
    return _encoder.encode(
        _Body(rest=rest, keys=_columns(state.keys), memories=_columns(state.memories))
    )


def _decode_state(body: memoryview, lazy: bool = False) -> GraphState:
    decoded = _body_decoder.decode(body)
    state = decoded.rest
    keys = LazyNodes(decoded.keys, _key_decoder.decode, share_key)
    memories = LazyNodes(decoded.memories, _memory_decoder.decode, share_memory)
    if lazy:
        state.keys, state.memories = keys, memories
    else:
        state.keys, state.memories = keys.copy(), memories.copy()
    return state


def materialize(state: GraphState) -> GraphState:
    """Decode every node of a state loaded lazily (a no-op for one folded from events)."""
    for nodes in (state.keys, state.memories):
        if isinstance(nodes, LazyNodes):
            nodes.materialize()
    return state


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never half.

    A file it replaces with one of the same size leaves it a later mtime (see `outdate`): a
    forget rewrites snapshots and torn tails so.
    """
    try:
        replaced = os.stat(path)
    except FileNotFoundError:
        replaced = None
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TEMP_SUFFIX}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if replaced is not None and replaced.st_size == len(data):
            outdate(f.fileno(), replaced.st_mtime_ns)
        sync_file(f.fileno())
    os.replace(tmp, path)
    sync_dir(path.parent)


def encode(snapshot: Snapshot) -> bytes:
    body = _encode_state(snapshot.state)
    stamped = msgspec.structs.replace(snapshot.header, format=FORMAT, body_crc=zlib.crc32(body))
    header = _encoder.encode(stamped)
    return len(header).to_bytes(_LENGTH_BYTES, "big") + header + body


def save(path: Path, snapshot: Snapshot) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, encode(snapshot))


def _split(data: bytes | memoryview) -> tuple[Header, memoryview] | None:
    view = memoryview(data)
    if len(view) < _LENGTH_BYTES:
        return None
    length = int.from_bytes(view[:_LENGTH_BYTES], "big")
    end = _LENGTH_BYTES + length
    if end > len(view):
        return None
    try:
        header = _header_decoder.decode(view[_LENGTH_BYTES:end])
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None
    if header.format != FORMAT or header.schema != SCHEMA:
        return None
    return header, view[end:]


def read_header(path: Path) -> Header | None:
    """The header of the snapshot at `path` (reads a few hundred bytes), or None if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(4096)
    except FileNotFoundError:
        return None
    split = _split(data)
    return None if split is None else split[0]


#: Bodies at least this big are checksummed in a thread while the main one decodes the framing
_CRC_IN_THREAD_BYTES = 1 << 22


def _checksum(body: memoryview) -> Callable[[], int]:
    """The body's CRC-32, as a call that returns it. zlib lets go of the GIL while it sums a
    large buffer, so a big body is summed in a thread beside the decode and the check adds
    little to the open; a small one is summed at once."""
    if len(body) < _CRC_IN_THREAD_BYTES:
        crc = zlib.crc32(body)
        return lambda: crc
    result: list[int] = []
    summing = threading.Thread(target=lambda: result.append(zlib.crc32(body)), daemon=True)
    summing.start()

    def wait() -> int:
        summing.join()
        return result[0]

    return wait


def damaged(path: Path) -> bool:
    """Whether the snapshot at `path` has a readable header but a body that fails its checksum."""
    try:
        split = _split(path.read_bytes())
    except FileNotFoundError:
        return False
    return split is not None and not _intact(split[0], zlib.crc32(split[1]))


def _intact(header: Header, crc: int) -> bool:
    return crc == header.body_crc


#: What a body that is not a snapshot makes the decode raise
_UNDECODABLE = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, StoreError)


def load(path: Path, *, lazy: bool = False) -> Snapshot | None:
    """The snapshot at `path`, or None when it is missing, unreadable or damaged (it is only a
    cache).

    `lazy`: keys and memories decode on first access (`LazyNodes`). The body's checksum was
    checked first, so a node that then fails to decode means memory, not the file, went bad.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    split = _split(data)
    if split is None:
        return None
    header, body = split
    checksum = _checksum(body)
    failure: Exception | None = None
    try:
        with paused_gc():
            state = _decode_state(body, lazy)
    except Exception as exc:
        failure = exc
    finally:
        crc = checksum()
    if not _intact(header, crc):
        # Whatever decoded from it, or whatever the damage made the decoder raise (invalid
        # UTF-8 is a UnicodeDecodeError, not a DecodeError), is dropped unseen.
        return None
    if failure is not None:
        # StoreError: an eager load decodes every node, and one of them is damaged.
        if isinstance(failure, _UNDECODABLE):
            return None
        raise failure
    if (state.store_id, state.seq, state.at) != (header.store_id, header.seq, header.at):
        # The checksum covers the body only; the header's copy of where the state stands is
        # what the open seeks by, and at the log's end no next line can contradict it.
        return None
    return Snapshot(
        format=header.format,
        store_id=header.store_id,
        seq=header.seq,
        at=header.at,
        segment=header.segment,
        offset=header.offset,
        state=state,
    )


def archived_name(seq: int) -> str:
    return f"keygraph-{seq:020d}.msgpack"


def archived_seq(name: str) -> int | None:
    match = _ARCHIVED.match(name)
    return int(match.group(1)) if match else None
