"""Snapshots of the key graph: the state and the log position it reflects, written atomically.

A snapshot is a cache. A missing, stale or unreadable one costs a longer replay, never data.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import msgspec

from keytrail.events.types import EPOCH

from .keygraph import GraphState, paused_gc

FORMAT = 1


class Snapshot(msgspec.Struct, kw_only=True):
    format: int = FORMAT
    store_id: str
    seq: int
    at: datetime = EPOCH
    segment: str | None = None
    offset: int = 0
    state: GraphState


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Snapshot)


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: Path, snapshot: Snapshot) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, _encoder.encode(snapshot))


def load(path: Path) -> Snapshot | None:
    """The snapshot at `path`, or None when it is missing or unreadable (it is only a cache)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        with paused_gc():
            snap = _decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return snap if snap.format == FORMAT else None
