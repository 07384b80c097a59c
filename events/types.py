"""The event catalogue: every fact the log can hold.

Each event is a frozen msgspec Struct with a stable dotted tag (`type` on the wire) and a schema
version `v`. The envelope (`seq`, `at`, `type`, `v`) is shared; the rest is the event's own
payload, which carries every decision the command made, so a fold never needs the clock, the
environment or an embedding model.

Evolution: adding a field with a default needs no new version. Renaming, retyping or changing the
meaning of a field bumps the class's `VERSION` and adds an upcaster in `codec.UPCASTERS`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import msgspec

KeyType = Literal["concept", "name", "proper_noun"]
KEY_TYPES: tuple[str, ...] = ("concept", "name", "proper_noun")

#: How a key named by a command was resolved against the graph.
#: "new": created; "existing": the label (or an alias) was already there;
#: "alias": a new concept label close enough to an existing key became its alias;
#: "promoted": an existing concept key the command named a name or proper noun became one
#: (the link's `type`), so it matches literally from then on.
Resolution = Literal["new", "existing", "alias", "promoted"]

EPOCH = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
_MICROSECOND = timedelta(microseconds=1)


def micros(when: datetime) -> int:
    """`when` as whole microseconds since the epoch, exactly (a timedelta's own resolution)."""
    return (when - EPOCH) // _MICROSECOND


class FoldRules(msgspec.Struct, frozen=True, kw_only=True):
    """Constants the fold applies, written into the log so replay never depends on code defaults."""

    depth_step: float = 0.05
    depth_max: float = 1.0
    weaken_threshold: float = 0.7
    weaken_deep: float = 0.8
    weaken_shallow: float = 0.3
    link_initial: float = 1.0
    hebbian_step: float = 0.1
    hebbian_decay: float = 0.005
    weight_min: float = 0.1
    weight_max: float = 3.0


class KeyLink(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One key of a memory, with how it was resolved and the weight of its link."""

    key_id: str
    label: str
    type: KeyType = "concept"
    resolution: Resolution = "existing"
    # For "alias": the cosine that justified the merge and the model that measured it.
    similarity: float | None = None
    fingerprint: str | None = None
    weight: float = 1.0
    # True when the key was extracted from the content rather than given by the caller.
    extracted: bool = False


class Similar(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """An embedding comparison that drove a decision, kept for audit."""

    memory_id: str
    similarity: float
    fingerprint: str


class NewMemory(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The payload of one memory created by remember, remember_batch or correct."""

    memory_id: str
    namespace: str
    content: str
    content_hash: str
    keys: list[KeyLink]
    related_to: list[str] = []
    expires_at: datetime | None = None
    session_id: str | None = None
    source: str | None = None
    # Dedup: this memory replaces a near-identical active one.
    supersedes: str | None = None
    supersede_reason: str | None = None
    duplicate_of: Similar | None = None
    # Memories in the contradiction band that share a key: flagged, not changed.
    contradicts: list[Similar] = []
    # Valid time: when the fact became true in the world (None: when it was told, `at`).
    valid_from: datetime | None = None


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", gc=False):
    """Envelope shared by every event. A type whose schema changes overrides `v`'s default."""

    seq: int = 0
    at: datetime = EPOCH
    v: int = 1


class StoreCreated(Event, frozen=True, kw_only=True, tag="store.created"):
    store_id: str
    rules: FoldRules
    software: str = ""


class RulesChanged(Event, frozen=True, kw_only=True, tag="rules.changed"):
    rules: FoldRules
    reason: str = ""


class MemoryRemembered(Event, frozen=True, kw_only=True, tag="memory.remembered"):
    """remember (one memory) or remember_batch (all of them, all or nothing)."""

    memories: list[NewMemory]


class MemoryCorrected(Event, frozen=True, kw_only=True, tag="memory.corrected"):
    old_id: str
    memory: NewMemory
    # Factor applied to the old version's depth (decided from its depth at the time).
    weaken_factor: float


class MemoryReplaced(Event, frozen=True, kw_only=True, tag="memory.replaced"):
    """correct with `by_memory_id`: a memory told on its own (`new_id`, a remember that flagged
    `old_id` as a possible contradiction) becomes the next version of `old_id`, as a correction
    would have made it, without a second memory of the same text."""

    old_id: str
    new_id: str
    # Factor applied to the old version's depth (decided from its depth at the time).
    weaken_factor: float
    # The old version's related_to edges the new one takes on (those it did not name itself),
    # as a correction that names none keeps them.
    related_to: list[str] = []


class MemoryRead(Event, frozen=True, kw_only=True, tag="memory.read"):
    memory_id: str
    via_key_id: str | None = None
    query: str | None = None


class LinkDelta(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    key_id: str
    memory_id: str
    delta: float


class LinksAdjusted(Event, frozen=True, kw_only=True, tag="links.adjusted"):
    adjustments: list[LinkDelta]
    query: str | None = None


class KeyAliased(Event, frozen=True, kw_only=True, tag="key.aliased"):
    key_id: str
    alias: str
    evidence: str = ""
    similarity: float | None = None
    fingerprint: str | None = None
    # True when read_memory learned it from a query that kept leading to this key's memories.
    learned: bool = False


class KeyRetyped(Event, frozen=True, kw_only=True, tag="key.retyped"):
    key_id: str
    key_type: KeyType
    evidence: str = ""


class MemoryForgotten(Event, frozen=True, kw_only=True, tag="memory.forgotten"):
    memory_id: str
    content_hash: str
    reason: str = ""
    # Keys whose labels (and aliases) this forget erased: keys that lead to nothing but
    # forgotten memories and that no other event names. Their labels are blanked in the lines
    # of those memories, as the content is; the fold drops them from the state.
    erased_keys: list[str] = []


class MemoriesExpired(Event, frozen=True, kw_only=True, tag="memories.expired"):
    memory_ids: list[str]


class TurnRecorded(Event, frozen=True, kw_only=True, tag="turn.recorded"):
    session_id: str
    turn: int
    role: str
    content: str


# -- knowledge graph (the reference knowledge-graph server's entities, relations, observations) --


class EntitySpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A key declared an entity: its name (the key's label) and its entity type."""

    key_id: str
    name: str
    entity_type: str
    # True when this event created the key; False when an existing key became an entity.
    new: bool = True


class RelationSpec(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A typed, directed edge between two entity keys ("from" relation_type "to")."""

    from_key: str
    to_key: str
    relation_type: str


class KeyMemory(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    key_id: str
    memory_id: str


class EntitiesCreated(Event, frozen=True, kw_only=True, tag="entities.created"):
    """create_entities: new entities and their first observations (memories linked to them)."""

    entities: list[EntitySpec]
    observations: list[NewMemory] = []


class RelationsAdded(Event, frozen=True, kw_only=True, tag="relations.added"):
    relations: list[RelationSpec]


class RelationsRemoved(Event, frozen=True, kw_only=True, tag="relations.removed"):
    relations: list[RelationSpec]


class ObservationsDeleted(Event, frozen=True, kw_only=True, tag="observations.deleted"):
    """delete_observations: each observation is deleted or unlinked, decided under the lock.

    `memory_ids` are deleted: observations of no other entity. A deleted memory is hidden from
    the present but not erased (its text stays in the line that created it, and reads as of an
    earlier point show it); only `memory.forgotten` erases. An observation also linked to
    another entity key stays that entity's: only its link to the entity it was deleted from
    goes (`unlinked`), like the cascade of `entities.deleted`.

    v2 added `unlinked`. v1 lines deleted every memory named, so they upcast with it empty. The
    bump (rather than a defaulted field alone) makes software that predates it refuse a v2 line
    instead of folding it as if nothing were unlinked.
    """

    v: int = 2
    memory_ids: list[str]
    unlinked: list[KeyMemory] = []


class EntitiesDeleted(Event, frozen=True, kw_only=True, tag="entities.deleted"):
    """delete_entities: the keys stop being entities; cascades decided under the lock.

    Observations linked only to deleted entities are deleted (`forgotten`, a name kept from
    before a delete was told apart from a forget: hidden from the present, not erased, as for
    `observations.deleted`); observations also linked to other keys lose the link to the deleted
    entity; every relation touching one is removed. The keys themselves stay (keys are never
    removed), so history and as_of still name them.
    """

    key_ids: list[str]
    forgotten: list[str] = []
    unlinked: list[KeyMemory] = []
    relations: list[RelationSpec] = []


class ImportedKey(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    key_id: str
    label: str
    type: KeyType = "concept"
    aliases: list[str] = []
    entity_type: str | None = None


class ImportedMemory(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A memory brought in from another store, with the times and reading it had there."""

    memory: NewMemory
    # The original creation time: the fold uses it instead of the event's record time.
    created_at: datetime
    depth: float = 0.0
    access_count: int = 0
    last_read_at: datetime | None = None


class GraphImported(Event, frozen=True, kw_only=True, tag="graph.imported"):
    """`keytrail import` of a memory.jsonl or keymem graph.json: the whole file, one line.

    Memories come oldest first and a version chain in order, so `supersedes` always names a
    memory folded before it.
    """

    format: str
    source: str = ""
    keys: list[ImportedKey] = []
    memories: list[ImportedMemory] = []
    relations: list[RelationSpec] = []


class KeyUnaliased(Event, frozen=True, kw_only=True, tag="key.unaliased"):
    """A learned alias dropped because reads through its key stopped using it."""

    key_id: str
    alias: str
    evidence: str = ""


AnyEvent = (
    StoreCreated
    | RulesChanged
    | MemoryRemembered
    | MemoryCorrected
    | MemoryReplaced
    | MemoryRead
    | LinksAdjusted
    | KeyAliased
    | KeyRetyped
    | MemoryForgotten
    | MemoriesExpired
    | TurnRecorded
    | EntitiesCreated
    | RelationsAdded
    | RelationsRemoved
    | ObservationsDeleted
    | EntitiesDeleted
    | GraphImported
    | KeyUnaliased
)

EVENT_TYPES: tuple[type[Event], ...] = (
    StoreCreated,
    RulesChanged,
    MemoryRemembered,
    MemoryCorrected,
    MemoryReplaced,
    MemoryRead,
    LinksAdjusted,
    KeyAliased,
    KeyRetyped,
    MemoryForgotten,
    MemoriesExpired,
    TurnRecorded,
    EntitiesCreated,
    RelationsAdded,
    RelationsRemoved,
    ObservationsDeleted,
    EntitiesDeleted,
    GraphImported,
    KeyUnaliased,
)

#: tag -> class, e.g. "memory.remembered" -> MemoryRemembered
BY_TAG: dict[str, type[Event]] = {str(cls.__struct_config__.tag): cls for cls in EVENT_TYPES}


def current_version(cls: type[Event]) -> int:
    """The schema version new events of this type are written with (the default of `v`)."""
    for field in msgspec.structs.fields(cls):
        if field.name == "v":
            return int(field.default)
    raise AssertionError(f"{cls.__name__} has no v field")


CURRENT_VERSION: dict[str, int] = {tag: current_version(cls) for tag, cls in BY_TAG.items()}
