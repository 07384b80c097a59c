"""Snapshots of the key graph: the state and the log position it reflects, written atomically.

A snapshot is a cache. A missing, stale or unreadable one costs a longer replay, never data.

File layout (format 2): a 4-byte big-endian length, a small msgpack header (seq, time, log
position), then the msgpack state. The header alone answers "which snapshot is nearest to this
point?" without decoding any state, which time travel asks of every kept snapshot.
"""

from __future__ import annotations

import hashlib
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from keytrail.events.errors import StoreError
from keytrail.events.types import EPOCH, FoldRules

from .keygraph import GraphState, KeyNode, MemoryNode, Turn, paused_gc

FORMAT = 2
_LENGTH_BYTES = 4
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


class Snapshot(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    store_id: str
    seq: int
    at: datetime = EPOCH
    segment: str | None = None
    offset: int = 0
    state: GraphState

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


class _Body(msgspec.Struct, array_like=True, gc=False):
    """The state as stored: keys and memories (nodes as arrays) and, in `rest`, everything else
    of GraphState, whatever fields it grows."""

    rest: GraphState
    keys: dict[str, KeyNode]
    memories: dict[str, MemoryNode]


class _RawBody(msgspec.Struct, array_like=True, gc=False):
    """The same bytes, nodes left undecoded (see `LazyNodes`)."""

    rest: GraphState
    keys: dict[str, msgspec.Raw]
    memories: dict[str, msgspec.Raw]


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(Header)
_body_decoder = msgspec.msgpack.Decoder(_Body)
_raw_body_decoder = msgspec.msgpack.Decoder(_RawBody)
_key_decoder = msgspec.msgpack.Decoder(KeyNode)
_memory_decoder = msgspec.msgpack.Decoder(MemoryNode)


class LazyNodes(dict[str, Any]):
    """id -> node, each decoded from its snapshot bytes the first time it is looked at.

    A past state answers a recall by touching a few keys and the memories they link to, so
    building every node of a large graph first would cost far more than the answer. Bulk views
    (`values`, `items`, `copy`) decode everything once and then behave as a plain dict. The
    undecoded bytes encode as they are, so a lazy state snapshots byte-identically.
    """

    __slots__ = ("_decode",)

    def __init__(self, raw: dict[str, msgspec.Raw], decode: Any) -> None:
        super().__init__(raw)
        self._decode = decode

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) is msgspec.Raw:
            value = self._decoded(value)
            dict.__setitem__(self, key, value)
        return value

    def _decoded(self, raw: msgspec.Raw) -> Any:
        try:
            return self._decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
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
        for key, value in dict.items(self):
            if type(value) is msgspec.Raw:
                dict.__setitem__(self, key, self._decoded(value))

    def values(self) -> Any:
        self.materialize()
        return dict.values(self)

    def items(self) -> Any:
        self.materialize()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self.materialize()
        return dict(dict.items(self))

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = self[key]
            dict.__delitem__(self, key)
            return value
        return dict.pop(self, key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        dict.__setitem__(self, key, default)
        return default

    def __reversed__(self) -> Any:
        return dict.__reversed__(self)


def _encode_state(state: GraphState) -> bytes:
    rest = msgspec.structs.replace(state, keys={}, memories={})
    return _encoder.encode(_Body(rest=rest, keys=state.keys, memories=state.memories))


def _decode_state(body: memoryview, lazy: bool = False) -> GraphState:
    if lazy:
        raw = _raw_body_decoder.decode(body)
        state = raw.rest
        state.keys = LazyNodes(raw.keys, _key_decoder.decode)
        state.memories = LazyNodes(raw.memories, _memory_decoder.decode)
        return state
    decoded = _body_decoder.decode(body)
    state = decoded.rest
    state.keys, state.memories = decoded.keys, decoded.memories
    return state


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode(snapshot: Snapshot) -> bytes:
    header = _encoder.encode(snapshot.header)
    return len(header).to_bytes(_LENGTH_BYTES, "big") + header + _encode_state(snapshot.state)


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
    except (msgspec.DecodeError, msgspec.ValidationError):
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


def load(path: Path, *, lazy: bool = False) -> Snapshot | None:
    """The snapshot at `path`, or None when it is missing or unreadable (it is only a cache).

    `lazy`: keys and memories decode on first access (`LazyNodes`); a damaged node then
    surfaces only when it is read, so use it for read-mostly past states, not the live one.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    split = _split(data)
    if split is None:
        return None
    header, body = split
    try:
        with paused_gc():
            state = _decode_state(body, lazy)
    except (msgspec.DecodeError, msgspec.ValidationError):
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
