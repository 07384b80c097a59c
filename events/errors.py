"""The one exception hierarchy of keytrail.

It lives in the lowest layer so every layer can raise it; `keytrail.core` re-exports it.
Every error carries fields a caller (or an MCP client) can act on, not only a message.
"""

from __future__ import annotations

import math
from typing import Any

#: The most bits of an integer an error writes in full: 2**196 is just over 10**59, so up to 60
#: digits, about as much as `quoted` keeps of a text
_NUMBER_BITS = 196


def number(value: int, noun: str = "") -> str:
    """`value` as an error says it ("5", "seq 5"): in full, or by its count of digits when
    longer than an error quotes (Python writes no int past 4,300 digits: wording the error of
    one raised ValueError; and 500 nines came back whole)."""
    if value.bit_length() <= _NUMBER_BITS:
        return f"{noun} {value}" if noun else str(value)
    digits = math.floor(math.log10(abs(value)))  # a float: may be one off either way
    digits += (abs(value) >= 10 ** (digits + 1)) - (abs(value) < 10**digits)
    return f"{'a ' + noun if noun else 'an integer'} of {digits + 1:,} digits"


def quoted(value: object, limit: int = 60) -> str:
    """`value` as an error quotes it: its repr, cut short past `limit` characters (a refused
    megabyte must not come back whole in the error)."""
    text = number(value) if type(value) is int else repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value):,} characters)" if isinstance(value, str) else ""
    return f"{text[:limit]}…{size}"


class KeytrailError(Exception):
    """Root of every error keytrail raises on purpose."""

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def to_dict(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "message": self.message, **self.fields}


class InvalidInput(KeytrailError):
    """A command or query was given a value it cannot accept. Nothing was changed."""

    def __init__(self, field: str, problem: str, *, limit: Any = None, value: Any = None) -> None:
        message = f"{field}: {problem}"
        if limit is not None:
            message += f" (limit: {limit})"
        super().__init__(message, field=field, problem=problem, limit=limit)
        self.field = field
        self.problem = problem
        self.limit = limit
        self.value = value


class NotFound(InvalidInput):
    """An id names nothing that exists (or nothing visible at the time asked)."""

    def __init__(self, field: str, kind: str, ident: str, detail: str = "") -> None:
        problem = f"no {kind} {quoted(ident)}" + (f": {detail}" if detail else "")
        super().__init__(field, problem, value=ident)
        self.kind = kind
        self.ident = ident


class CorruptLog(KeytrailError):
    """A line of the event log cannot be decoded; the store refuses to open."""

    def __init__(self, segment: str, line: int, reason: str) -> None:
        super().__init__(
            f"corrupt event log: {segment} line {line}: {reason}",
            segment=segment,
            line=line,
            reason=reason,
        )
        self.segment = segment
        self.line = line
        self.reason = reason


class StoreError(KeytrailError):
    """The store is in a state the operation cannot work with (wrong directory, bad cache...)."""


class NoStore(StoreError):
    """A directory that was to hold an existing store holds none (missing, empty, or other files).

    Raised before anything is written there: a read of a mistyped home must not leave an empty
    store behind and answer from it.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"no keytrail store at {path} ({reason})", path=path, reason=reason)
        self.path = path
        self.reason = reason


class LockBusy(StoreError):
    """Another process holds the appenders' lock (only from `EventLog.lock(wait=False)`)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"the store's lock {path} is held by another process", path=path)
        self.path = path


class LogCutBack(StoreError):
    """Lines this reader folded are no longer in the log: the writer that appended them failed
    (a full disk, an I/O error) and cut them back, and others may have appended since.

    Whatever was folded from them is no event of the log; the reader must fold the log afresh.
    `segment` and `offset` are where its cursor stood, after `seq`; `size` is the segment's
    size now (None: the segment is gone).
    """

    def __init__(self, segment: str, offset: int, seq: int, size: int | None, reason: str) -> None:
        super().__init__(
            f"log/{segment} was cut back under a reader at seq {seq} (offset {offset}): {reason}",
            segment=segment,
            offset=offset,
            seq=seq,
            size=size,
            reason=reason,
        )
        self.segment = segment
        self.offset = offset
        self.seq = seq
        self.size = size
        self.reason = reason
