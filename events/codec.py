"""One event per line: encoding, checksums and schema upcasting.

A line is the event's JSON object with a CRC-32 of everything before it appended as the last
field, `,"crc":"xxxxxxxx"}`. The checksum sits at a fixed distance from the end, so checking it
costs one crc32 call and no search. Lines without it (hand-written fixtures) are accepted.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import msgspec

from .errors import InvalidInput, KeytrailError
from .types import BY_TAG, CURRENT_VERSION, AnyEvent, Event

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyEvent)  # type: ignore[arg-type]
_raw_decoder = msgspec.json.Decoder(dict[str, Any])

_CRC_PREFIX = b',"crc":"'
_PREFIX_LEN = len(_CRC_PREFIX)
_CRC_LEN = _PREFIX_LEN + 8 + 2  # prefix, 8 hex digits, closing quote and brace

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _observations_deleted_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    # v1 forgot every memory it named; v2 also names observations only unlinked from an entity.
    raw["unlinked"] = []
    return raw


#: (type tag, from version) -> pure function turning a decoded vN object into vN+1.
#: Every entry must come with golden lines of the old version in tests/golden/.
UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("observations.deleted", 1): _observations_deleted_v1_to_v2,
}


#: event class -> the version new lines of it are written with (the hot path skips the tag)
_VERSION_OF: dict[type[Event], int] = {cls: CURRENT_VERSION[tag] for tag, cls in BY_TAG.items()}


class DecodeError(KeytrailError):
    """A line is not a valid event (bad JSON, bad checksum, unknown type or version)."""


def _crc(body: bytes | memoryview) -> str:
    return f"{zlib.crc32(b'}', zlib.crc32(body)):08x}"


def encode_line(event: Event) -> bytes:
    """The event as one complete log line, newline included.

    Text no line can hold (a lone surrogate that no input check caught) is refused as
    InvalidInput before anything is written, not raised as a UnicodeEncodeError."""
    try:
        body = _encoder.encode(event)
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            "text", f"is not valid Unicode text ({exc.reason}); nothing was written"
        ) from None
    return b'%s%s%s"}\n' % (body[:-1], _CRC_PREFIX, _crc(memoryview(body)[:-1]).encode())


def has_checksum(line: bytes) -> bool:
    """Whether `line` (without its newline) ends in the checksum every written line carries."""
    return len(line) > _CRC_LEN and line[-_CRC_LEN : -_CRC_LEN + _PREFIX_LEN] == _CRC_PREFIX


def _check_crc(line: bytes) -> None:
    # On the replay path for every line: compare bytes, build no str unless it fails.
    if len(line) > _CRC_LEN and line[-_CRC_LEN : -_CRC_LEN + _PREFIX_LEN] == _CRC_PREFIX:
        expected = line[-10:-2]
        if b"%08x" % zlib.crc32(b"}", zlib.crc32(memoryview(line)[:-_CRC_LEN])) != expected:
            raise DecodeError("checksum mismatch", expected=expected.decode("ascii", "replace"))


def decode_line(
    line: bytes, *, upcasters: dict[tuple[str, int], Upcaster] | None = None
) -> AnyEvent:
    """Decode one line (without its newline), upcasting older schema versions."""
    _check_crc(line)
    try:
        event: AnyEvent = _decoder.decode(line)
    except msgspec.DecodeError:
        # Possibly an older version whose shape no longer fits the current class.
        return _decode_slow(line, upcasters if upcasters is not None else UPCASTERS)
    if event.v != _VERSION_OF[type(event)]:
        return _decode_slow(line, upcasters if upcasters is not None else UPCASTERS)
    return event


def _tag(event: Event) -> str:
    return str(type(event).__struct_config__.tag)


def _decode_slow(line: bytes, upcasters: dict[tuple[str, int], Upcaster]) -> AnyEvent:
    try:
        raw = _raw_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a JSON object: {exc}") from None
    raw.pop("crc", None)
    return upcast(raw, upcasters)


#: Said of a line of a type or version this code does not know: whole lines of those are what
#: a newer keytrail writes, and the cure is an upgrade, not a backup.
_NEWER = " (written by a newer keytrail? upgrade keytrail to read this log)"


def upcast(raw: dict[str, Any], upcasters: dict[tuple[str, int], Upcaster]) -> AnyEvent:
    """Walk a decoded object up the vN -> vN+1 chain to the current version, then type it."""
    tag = raw.get("type")
    if not isinstance(tag, str):
        raise DecodeError(f"unknown event type {tag!r}", type=tag)
    if tag not in BY_TAG:
        raise DecodeError(f"unknown event type {tag!r}{_NEWER}", type=tag)
    version = raw.get("v", 1)
    current = CURRENT_VERSION[tag]
    if isinstance(version, int) and version > current:
        raise DecodeError(f"{tag}: unsupported version {version!r} (current {current}){_NEWER}")
    if not isinstance(version, int) or version < 1:
        raise DecodeError(f"{tag}: unsupported version {version!r} (current {current})")
    while version < current:
        step = upcasters.get((tag, version))
        if step is None:
            raise DecodeError(f"{tag}: no upcaster from v{version}")
        raw = step(dict(raw))
        version += 1
        raw["v"] = version
    try:
        return msgspec.convert(raw, BY_TAG[tag], strict=False)  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        raise DecodeError(f"{tag} v{version}: {exc}") from None


def encode_event(event: Event) -> bytes:
    """Plain JSON for an event (no checksum, no newline): for export and display."""
    return _encoder.encode(event)


def event_tag(event: Event) -> str:
    return _tag(event)
