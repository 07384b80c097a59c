"""Redaction: blank a forgotten memory's content in the log line that created it, keeping sizes.

A redacted line keeps its byte length. The content's JSON string becomes `""` followed by as many
spaces (JSON whitespace) as it had bytes, and the checksum is recomputed. Offsets never move, so
a reader's position (segment, offset), a snapshot's position and every later line stay valid:
readers and followers in other processes are not disturbed by the rewrite. Empty content is the
mark of a redacted memory: remember and correct refuse empty content, so it means nothing else.

A segment is rewritten whole: the redacted copy is written to a temporary file (a name readers
ignore), fsynced and renamed over the original, then the directory is fsynced. A crash leaves
the old segment or the new one. A reader that has the old file open keeps reading the old bytes;
one that opens it afterwards reads the new bytes at the same offsets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import msgspec

from .codec import _CRC_LEN, _CRC_PREFIX, DecodeError, _crc, decode_line
from .durable import outdate, sync_dir, sync_file
from .errors import CorruptLog
from .types import (
    AnyEvent,
    EntitiesCreated,
    GraphImported,
    MemoryCorrected,
    MemoryRemembered,
    NewMemory,
)

TEMP_SUFFIX = ".redact.tmp"

_json = msgspec.json.Encoder()


def created_memories(event: AnyEvent) -> list[NewMemory]:
    """The memories an event creates, with their content: remember(_batch), correct, and the
    knowledge-graph tool set's entities (their observations) and imports."""
    if isinstance(event, MemoryRemembered):
        return list(event.memories)
    if isinstance(event, MemoryCorrected):
        return [event.memory]
    if isinstance(event, EntitiesCreated):
        return list(event.observations)
    if isinstance(event, GraphImported):
        return [imported.memory for imported in event.memories]
    return []


def redacted_ids(event: AnyEvent) -> list[str]:
    """Memories whose content this event carries redacted (empty)."""
    return [m.memory_id for m in created_memories(event) if not m.content]


#: memory id -> the keys whose labels a forget erases in the line that created that memory
Labels = Mapping[str, Collection[str]]
NO_LABELS: Labels = MappingProxyType({})


def blank_label_keys(event: AnyEvent) -> list[tuple[str, str]]:
    """(memory id, key id) of each key link this event carries with its label erased (blank)."""
    return [(m.memory_id, k.key_id) for m in created_memories(event) for k in m.keys if not k.label]


def without_content(
    event: AnyEvent, memory_ids: Collection[str], labels: Labels = NO_LABELS
) -> AnyEvent:
    """The event as its redacted line decodes: the content of `memory_ids` emptied, and the
    labels of the keys `labels` names for them."""

    def blank(m: NewMemory) -> NewMemory:
        if m.memory_id not in memory_ids:
            return m
        erased = labels.get(m.memory_id, ())
        keys = [msgspec.structs.replace(k, label="") if k.key_id in erased else k for k in m.keys]
        return msgspec.structs.replace(m, content="", keys=keys)

    if isinstance(event, MemoryRemembered):
        return msgspec.structs.replace(event, memories=[blank(m) for m in event.memories])
    if isinstance(event, MemoryCorrected):
        return msgspec.structs.replace(event, memory=blank(event.memory))
    if isinstance(event, EntitiesCreated):
        return msgspec.structs.replace(event, observations=[blank(m) for m in event.observations])
    if isinstance(event, GraphImported):
        return msgspec.structs.replace(
            event,
            memories=[msgspec.structs.replace(i, memory=blank(i.memory)) for i in event.memories],
        )
    return event


def _has_crc(line: bytes) -> bool:
    return len(line) > _CRC_LEN and line[-_CRC_LEN : -_CRC_LEN + len(_CRC_PREFIX)] == _CRC_PREFIX


def _with_crc(prefix: bytes) -> bytes:
    return b'%s%s%s"}' % (prefix, _CRC_PREFIX, _crc(prefix).encode())


def _blank_in_place(prefix: bytes, memory: NewMemory, erased: Collection[str]) -> bytes | None:
    """`prefix` with `memory`'s content string turned into `""` and padding (and the labels of
    its keys in `erased`), or None if the exact encoding is not found (a hand-written line,
    say). A JSON string never holds an unescaped quote, so `"content":"...` after the memory's
    id can only be that field, and `"key_id":"k_...","label":"...` after it that key's link
    (the first after the id: a memory lists its keys after its id)."""
    start = prefix.find(b'"memory_id":' + _json.encode(memory.memory_id))
    if start < 0:
        return None
    fields = [(b'"content":', memory.content)] if memory.content else []
    fields += [
        (b'"key_id":' + _json.encode(k.key_id) + b',"label":', k.label)
        for k in memory.keys
        if k.key_id in erased and k.label
    ]
    for name, text in fields:
        value = _json.encode(text)
        at = prefix.find(name + value, start)
        if at < 0:
            return None
        at += len(name)
        prefix = prefix[:at] + b'""' + b" " * (len(value) - 2) + prefix[at + len(value) :]
    return prefix


def redact_line(
    line: bytes, memory_ids: Collection[str], labels: Labels = NO_LABELS
) -> bytes | None:
    """`line` (without newline) with the content of `memory_ids` blanked, at the same length
    (and the labels `labels` names).

    None when the line holds nothing of theirs to blank (not created there, or redacted).
    """
    redaction = _redact(line, memory_ids, labels)
    return None if redaction is None else redaction[0]


def _holds_erased(memory: NewMemory, labels: Labels) -> bool:
    """Whether `memory` still holds its content or a label `labels` erases for it."""
    if memory.content:
        return True
    erased = labels.get(memory.memory_id, ())
    return any(k.label for k in memory.keys if k.key_id in erased)


def _redact(
    line: bytes, memory_ids: Collection[str], labels: Labels = NO_LABELS
) -> tuple[bytes, list[NewMemory]] | None:
    """`redact_line`, with the memories whose content it blanked (from its one decode of
    `line`: a batch line is megabytes, and a forget held the lock for each decode of it)."""
    event = decode_line(line)
    targets = [
        m for m in created_memories(event) if m.memory_id in memory_ids and _holds_erased(m, labels)
    ]
    if not targets:
        return None
    expected = without_content(event, memory_ids, labels)
    crc = _has_crc(line)
    prefix: bytes | None = line[:-_CRC_LEN] if crc else line
    for memory in targets:
        assert prefix is not None
        prefix = _blank_in_place(prefix, memory, labels.get(memory.memory_id, ()))
        if prefix is None:
            break
    if prefix is not None:
        redacted = _with_crc(prefix) if crc else prefix
        if decode_line(redacted) == expected:
            return redacted, targets
    # Not in the form this code writes (a hand-written or old line): blank the content in the
    # line's own JSON object, so absent fields stay absent, and pad to the original length.
    raw = msgspec.json.decode(line)
    raw.pop("crc", None)
    for obj in raw.get("memories", []) + ([raw["memory"]] if "memory" in raw else []):
        if isinstance(obj, dict) and obj.get("memory_id") in memory_ids:
            obj["content"] = ""
            erased = labels.get(obj["memory_id"], ())
            for key in obj.get("keys", []):
                if isinstance(key, dict) and key.get("key_id") in erased:
                    key["label"] = ""
    body = _json.encode(raw)
    room = len(line) - (_CRC_LEN if crc else 0) - len(body)
    if room < 0:
        raise DecodeError("a redacted line would be longer than the original", seq=event.seq)
    padded = body[:-1] + b" " * room + (b"" if crc else b"}")
    redacted = _with_crc(padded) if crc else padded
    if len(redacted) != len(line) or decode_line(redacted) != expected:
        raise DecodeError("the line cannot be redacted in place", seq=event.seq)
    return redacted, targets


@dataclass
class SegmentRedaction:
    """What redacting one segment changes: new lines by byte offset, and the content removed."""

    path: Path
    memory_ids: frozenset[str] = frozenset()  # the memories it was planned for
    lines: dict[int, bytes] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)  # memory id -> content removed
    labels: Labels = field(default_factory=dict)  # the labels it was planned to erase
    removed_labels: set[str] = field(default_factory=set)  # the label texts they had


def plan_redaction(
    path: Path, memory_ids: Collection[str], labels: Labels = NO_LABELS
) -> SegmentRedaction:
    """Find the lines of segment `path` that carry content of `memory_ids` (or labels `labels`
    erases for them), and their redaction."""
    plan = SegmentRedaction(path, frozenset(memory_ids), labels=labels)
    data = path.read_bytes()
    for offset in sorted(_lines_naming(data, memory_ids)):
        stop = data.find(b"\n", offset)
        if stop < 0:
            continue  # a partial last line is not an event
        line = data[offset:stop]
        try:
            redaction = _redact(line, memory_ids, labels)
        except DecodeError as exc:  # a damaged line: say where, as the log's own reader does
            raise CorruptLog(path.name, data.count(b"\n", 0, offset) + 1, exc.message) from None
        if redaction is not None:
            plan.lines[offset], targets = redaction
            for m in targets:
                if m.content:
                    plan.contents[m.memory_id] = m.content
                erased = labels.get(m.memory_id, ())
                plan.removed_labels |= {k.label for k in m.keys if k.key_id in erased and k.label}
    return plan


#: Up to this many ids, a segment is searched once per id (a search is a fast scan of the
#: bytes); more (a fact's whole chain of versions) are found in one pass over it.
_FEW_IDS = 16


def _lines_naming(data: bytes, memory_ids: Collection[str]) -> set[int]:
    """The offsets of the lines of `data` in which one of `memory_ids` stands quoted (as a JSON
    string: the lines `redact_line` may change, and some it leaves as they are)."""
    ids = [m.encode() for m in memory_ids]
    starts: set[int] = set()
    if len(ids) <= _FEW_IDS or any(b'"' in m for m in ids):
        for needle in (b'"' + m + b'"' for m in ids):
            at = data.find(needle)
            while at >= 0:
                starts.add(data.rfind(b"\n", 0, at) + 1)
                # On from the line's end: a memory that 500 items of one batch relate to
                # searched back to that line's start (megabytes) once per naming.
                end = data.find(b"\n", at)
                at = -1 if end < 0 else data.find(needle, end + 1)
        return starts
    # A search per id read the segment once per version: forgetting 3,000 took ~15 s of them.
    # One pass instead, looking from every quote to the next: an id's `"id"` is such a pair.
    wanted = set(ids)
    sizes = [len(m) for m in ids]
    pair = re.compile(b'"(?=([^"]{%d,%d})")' % (min(sizes), max(sizes)))
    line_end = -1  # the end of the last line found: later ids in it start no search back
    for found in pair.finditer(data):
        if found.group(1) in wanted and found.start() > line_end:
            starts.add(data.rfind(b"\n", 0, found.start()) + 1)
            line_end = data.find(b"\n", found.start())
            if line_end < 0:
                line_end = len(data)
    return starts


def apply_redaction(plan: SegmentRedaction) -> bool:
    """Rewrite the segment with the planned lines: temp file, fsync, rename, fsync the directory.

    Call holding the appenders' lock, so nothing is appended to the old file meanwhile.
    """
    if not plan.lines:
        return False
    replaced_mtime_ns = os.stat(plan.path).st_mtime_ns
    data = bytearray(plan.path.read_bytes())
    for offset, line in plan.lines.items():
        data[offset : offset + len(line)] = line
    tmp = plan.path.with_name(f".{plan.path.name}{TEMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.write(fd, view[written:])
        outdate(fd, replaced_mtime_ns)  # same size: a backup by size and time must see it
        sync_file(fd)
    finally:
        os.close(fd)
    os.replace(tmp, plan.path)
    sync_dir(plan.path.parent)
    return True
