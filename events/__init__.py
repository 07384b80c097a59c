"""The event log: event types, line encoding, upcasting, and the segmented append-only log."""

from .codec import UPCASTERS, DecodeError, decode_line, encode_event, encode_line, event_tag, upcast
from .errors import CorruptLog, InvalidInput, KeytrailError, NotFound, StoreError
from .log import Appender, EventLog, LogPosition, segment_name, utc_now
from .types import (
    BY_TAG,
    CURRENT_VERSION,
    EVENT_TYPES,
    KEY_TYPES,
    AnyEvent,
    Event,
    FoldRules,
    KeyAliased,
    KeyLink,
    KeyRetyped,
    KeyType,
    LinkDelta,
    LinksAdjusted,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    NewMemory,
    RulesChanged,
    Similar,
    StoreCreated,
    TurnRecorded,
)

__all__ = [
    "BY_TAG", "CURRENT_VERSION", "EVENT_TYPES", "KEY_TYPES", "UPCASTERS",
    "AnyEvent", "Appender", "CorruptLog", "DecodeError", "Event", "EventLog", "FoldRules",
    "InvalidInput", "KeyAliased", "KeyLink", "KeyRetyped", "KeyType", "KeytrailError",
    "LinkDelta", "LinksAdjusted", "LogPosition", "MemoriesExpired", "MemoryCorrected",
    "MemoryForgotten", "MemoryRead", "MemoryRemembered", "NewMemory", "NotFound",
    "RulesChanged", "Similar", "StoreCreated", "StoreError", "TurnRecorded",
    "decode_line", "encode_event", "encode_line", "event_tag", "segment_name", "upcast",
    "utc_now",
]
