"""What commands and queries return: frozen dataclasses, turned into JSON by `to_dict`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec


def to_dict(value: Any) -> Any:
    """Plain JSON-ready data (datetimes as ISO strings) from any result."""
    return msgspec.to_builtins(value)


@dataclass(frozen=True)
class KeyRef:
    key_id: str
    label: str
    type: str
    weight: float | None = None


@dataclass(frozen=True)
class KeyOutcome:
    """How a key given to remember/correct was resolved."""

    key_id: str
    label: str
    type: str
    resolution: str  # new | existing | alias | promoted (a concept key named a name)
    merged_into: str | None = None  # for alias: the existing key's label
    similarity: float | None = None


@dataclass(frozen=True)
class Flag:
    memory_id: str
    similarity: float
    #: the start of that memory's text, so an agent can judge the flag without reading it (a
    #: read would deepen a memory it may be about to correct)
    preview: str


@dataclass(frozen=True)
class Remembered:
    memory_id: str
    namespace: str
    seq: int
    keys: list[KeyOutcome]
    expires_at: datetime | None = None
    #: set when this memory replaced a near-identical one (dedup); the old one is kept as history
    deduplicated: Flag | None = None
    #: memories sharing a key whose content is close but not the same: check and `correct`
    possible_contradictions: list[Flag] = field(default_factory=list)


@dataclass(frozen=True)
class Corrected:
    memory_id: str
    old_id: str
    seq: int
    keys: list[KeyOutcome]
    old_depth: float
    weaken_factor: float


@dataclass(frozen=True)
class KeyMatch:
    key_id: str
    label: str
    type: str
    match: str  # literal | similar
    score: float
    memory_count: int
    hub: bool
    specificity: float
    aliases: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recall:
    query: str
    keys: list[KeyMatch]
    #: only when nothing matched: the closest keys, to try with read_key or a new query
    nearest: list[KeyMatch] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryRef:
    """A memory as seen from a key: what to choose by, never the content.

    Lean on purpose (a page is read by a model, and checked field by field by clients): the
    score that ranks it, its depth, when it was told, and its other keys as `{key_id: label}`,
    the next hops of the walk. Everything else (content, link weights, expiry, source,
    versions, reads) is in `read_memory`, the next step.
    """

    memory_id: str
    namespace: str
    #: link weight × (0.9 + 0.1·depth) × time factor: the page's order
    score: float
    depth: float
    created_at: datetime
    #: the memory's other keys, key_id -> label
    keys: dict[str, str]


@dataclass(frozen=True)
class KeyPage:
    """A page of the memories a key leads to, best first, from `offset` on; `total` counts
    them all. When `next_offset` is not null there are more: call again with
    offset=next_offset (it is null on the last page)."""

    key_id: str
    #: "" when `label_erased`
    label: str
    #: a forget erased the label (and aliases) with the memories the key alone led to
    label_erased: bool
    type: str
    aliases: list[str]
    total: int
    offset: int
    memories: list[MemoryRef]
    next_offset: int | None


@dataclass(frozen=True)
class MemoryView:
    """A memory read in full."""

    memory_id: str
    namespace: str
    content: str
    depth: float
    access_count: int
    created_at: datetime
    last_read_at: datetime | None
    keys: list[KeyRef]
    related_to: list[str]  # as told, but for memories forgotten since
    supersedes: str | None
    superseded_by: str | None
    #: "active", or "superseded" when a newer version (`superseded_by`; None if every newer
    #: one was forgotten) replaced it
    status: str
    expires_at: datetime | None = None
    source: str | None = None
    session_id: str | None = None
    seq: int | None = None  # the memory.read event, when the read was recorded
    valid_from: datetime | None = None  # when it became true, if told apart from when told
    #: with valid_at: the id asked for, when the version true then is another version of it
    asked_id: str | None = None


@dataclass(frozen=True)
class RelatedMemory:
    memory_id: str
    score: float
    shared_keys: list[KeyRef]
    related_edge: bool
    depth: float


@dataclass(frozen=True)
class Related:
    memory_id: str
    related: list[RelatedMemory]
    #: with valid_at: the id asked for, when the version true then is another version of it
    asked_id: str | None = None


@dataclass(frozen=True)
class MemorySummary:
    memory_id: str
    namespace: str
    preview: str
    depth: float
    access_count: int
    created_at: datetime
    keys: list[KeyRef]
    expires_at: datetime | None = None


@dataclass(frozen=True)
class MemoryPage:
    """A page of the current memories, newest first, from `offset` on; `total` counts them
    all. When `next_offset` is not null there are more: call again with offset=next_offset
    (it is null on the last page)."""

    total: int
    offset: int
    memories: list[MemorySummary]
    next_offset: int | None


@dataclass(frozen=True)
class ProjectionState:
    """Where this process's build of the embedding projection (the vectors of every key label
    and memory content for the store's model) stands.

    A server that finds it missing or behind (a deleted cache, a new model, an import) builds it
    in the background and answers meanwhile. What reads no vectors answers at once; recall, and
    correct given keys, wait for the key labels (embedded first); remember, remember_batch,
    read_key with a query and recall_memories wait for all of it.
    """

    #: ready (no build under way: a few vectors the cache lacks are embedded when first
    #: needed, more than `store.INLINE_EMBED_MAX` start the build again) | building | failed
    #: (`error` says why; the next call that needs it tries again)
    status: str
    #: texts the build has embedded (or found embedded by another process) of `to_embed`
    embedded: int = 0
    to_embed: int = 0
    #: every key label has its vector: recall answers
    keys_ready: bool = True
    error: str | None = None


#: No build under way.
PROJECTION_READY = ProjectionState(status="ready")


@dataclass(frozen=True)
class Stats:
    store_id: str
    seq: int
    memories: int
    superseded: int
    expired: int
    forgotten: int
    #: knowledge-graph observations deleted (hidden now; reads as of before the delete show them)
    deleted: int
    keys: int
    links: int
    hubs: int
    namespaces: dict[str, int]
    sessions: int
    embedder: str
    log_bytes: int
    last_event_at: datetime | None
    #: the embedding projection of `embedder`: being built by this server, and how far
    projection: ProjectionState = PROJECTION_READY


@dataclass(frozen=True)
class Forgotten:
    memory_id: str
    seq: int
    #: Files under the store directory rewritten or deleted to remove the content.
    purged: list[str] = field(default_factory=list)
    #: With all_versions: the other versions forgotten with it.
    other_versions: list[str] = field(default_factory=list)
    #: Memories not forgotten that hold the same text (a retelling kept as a newer version, the
    #: same fact in another namespace): its words are still stored there until those are
    #: forgotten too.
    same_text_in: list[str] = field(default_factory=list)
    #: Keys whose label (and aliases) went with the memory: keys that led to forgotten
    #: memories only, their labels written nowhere else. By id: the words are not echoed back.
    labels_erased: list[str] = field(default_factory=list)
    #: Labels of its keys that stay in the store, and why (another memory's key too, named by
    #: another event, ...).
    labels_kept: list[KeptLabel] = field(default_factory=list)


@dataclass(frozen=True)
class KeptLabel:
    """A label of a forgotten memory's key that stays, and why."""

    key_id: str
    label: str
    reason: str


@dataclass(frozen=True)
class Expired:
    """What `cleanup_expired` did: `count` memories expired, all in one event at `seq` (null
    when nothing had expired). `memory_ids` lists at most `limit` of them, in log order; when
    count > len(memory_ids), `changes(since=seq - 1, until=seq)` pages through every id (its
    `expired` list)."""

    count: int
    memory_ids: list[str]
    seq: int | None


@dataclass(frozen=True)
class KeyListing:
    """A key as listed by `browse_keys`: how many current memories it leads to."""

    key_id: str
    label: str
    type: str
    memory_count: int
    hub: bool
    aliases: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KeyBrowse:
    """A page of the keys, most-used first, from `offset` on; `total` counts them all. When
    `next_offset` is not null there are more: call again with offset=next_offset (it is null
    on the last page)."""

    total: int
    offset: int
    keys: list[KeyListing]
    next_offset: int | None


@dataclass(frozen=True)
class TurnSaved:
    session_id: str
    turn: int
    seq: int


@dataclass(frozen=True)
class TurnView:
    turn: int
    role: str
    content: str
    at: datetime


@dataclass(frozen=True)
class Conversation:
    """A page of a session's turns, in order; `total` counts them all. `offset` newest turns
    were skipped; `next_offset` pages back to older ones (null: no older turn left)."""

    session_id: str
    total: int
    turns: list[TurnView]
    offset: int
    next_offset: int | None


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    turns: int
    first_at: datetime
    last_at: datetime


@dataclass(frozen=True)
class SessionList:
    """A page of the sessions, most recently active first, from `offset` on; `total` counts
    them all. When `next_offset` is not null there are more: call again with
    offset=next_offset (it is null on the last page)."""

    total: int
    offset: int
    sessions: list[SessionSummary]
    next_offset: int | None
