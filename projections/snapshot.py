"""Snapshots of the key graph: the state and the log position it reflects, written atomically.

A snapshot is a cache. A missing, stale or unreadable one costs a longer replay, never data.

File layout (format 2): a 4-byte big-endian length, a small msgpack header (seq, time, log
position), then the msgpack state. The header alone answers "which snapshot is nearest to this
point?" without decoding any state, which time travel asks of every kept snapshot.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import msgspec

from keytrail.events.types import EPOCH

from .keygraph import GraphState, paused_gc

FORMAT = 2
_LENGTH_BYTES = 4
#: Archived snapshots are named by the seq they reflect; the latest one has a fixed name.
_ARCHIVED = re.compile(r"^keygraph-(\d{20})\.msgpack$")


class Header(msgspec.Struct, kw_only=True):
    format: int = FORMAT
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
            store_id=self.store_id,
            seq=self.seq,
            at=self.at,
            segment=self.segment,
            offset=self.offset,
        )


_encoder = msgspec.msgpack.Encoder()
_header_decoder = msgspec.msgpack.Decoder(Header)
_state_decoder = msgspec.msgpack.Decoder(GraphState)


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
    return len(header).to_bytes(_LENGTH_BYTES, "big") + header + _encoder.encode(snapshot.state)


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
    if header.format != FORMAT:
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


def load(path: Path) -> Snapshot | None:
    """The snapshot at `path`, or None when it is missing or unreadable (it is only a cache)."""
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
            state = _state_decoder.decode(body)
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
