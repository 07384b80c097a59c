"""Exports: the events of one namespace, and the knowledge graph as a reference memory.jsonl.

A namespace export is a log of its own: the events that concern the namespace's memories (and
the store-wide ones: rules, keys, entities, relations, conversations), renumbered gap-free from
1, so `keytrail import` replays it into an empty store like a whole-store export.

memory.jsonl is what the reference knowledge-graph server reads and writes: one entity line per
entity (its observations from one namespace), then one line per relation. Only the graph goes
in: memories that are not observations of an entity, depths, weights, versions and times do not
(use the keytrail format for those).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime

import msgspec

from keytrail.events import (
    AnyEvent,
    EntitiesCreated,
    EntitiesDeleted,
    GraphImported,
    KeyAliased,
    KeyRetyped,
    KeyUnaliased,
    LinksAdjusted,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    NewMemory,
    ObservationsDeleted,
)
from keytrail.projections import GraphState

from .kg_reads import entity_keys, to_entity, to_relation


def memory_jsonl_lines(state: GraphState, namespace: str, now: datetime) -> Iterator[str]:
    """The graph as the reference server's memory.jsonl lines (no newlines)."""
    for key in entity_keys(state):
        entity = to_entity(state, key, namespace, now)
        yield _compact(
            {
                "type": "entity",
                "name": entity.name,
                "entityType": entity.entity_type,
                "observations": entity.observations,
            }
        )
    for r in state.relations.values():
        rel = to_relation(state, r.from_key, r.to_key, r.relation_type)
        yield _compact(
            {"type": "relation", "from": rel.from_, "to": rel.to, "relationType": rel.relation_type}
        )


def _compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class _NamespaceFilter:
    """Decides, event by event, what of it concerns one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.memories: set[str] = set()
        self.keys: set[str] = set()

    def _mine(self, memories: Iterable[NewMemory]) -> list[NewMemory]:
        kept = [m for m in memories if m.namespace == self.namespace]
        for m in kept:
            self.memories.add(m.memory_id)
            self.keys.update(link.key_id for link in m.keys)
        return kept

    def __call__(self, event: AnyEvent) -> AnyEvent | None:
        mine = self.memories.__contains__
        replace = msgspec.structs.replace
        if isinstance(event, MemoryRemembered):
            kept = self._mine(event.memories)
            return replace(event, memories=kept) if kept else None
        if isinstance(event, MemoryCorrected):
            return event if self._mine([event.memory]) else None
        if isinstance(event, MemoryReplaced):  # both versions are of one namespace
            return event if mine(event.old_id) else None
        if isinstance(event, MemoryRead | MemoryForgotten):
            return event if mine(event.memory_id) else None
        if isinstance(event, LinksAdjusted):
            adjustments = [a for a in event.adjustments if mine(a.memory_id)]
            return replace(event, adjustments=adjustments) if adjustments else None
        if isinstance(event, KeyAliased | KeyRetyped | KeyUnaliased):
            return event if event.key_id in self.keys else None
        if isinstance(event, MemoriesExpired):
            ids = [m for m in event.memory_ids if mine(m)]
            return replace(event, memory_ids=ids) if ids else None
        if isinstance(event, EntitiesCreated):
            self.keys.update(e.key_id for e in event.entities)
            return replace(event, observations=self._mine(event.observations))
        if isinstance(event, ObservationsDeleted):
            ids = [m for m in event.memory_ids if mine(m)]
            cut = [u for u in event.unlinked if mine(u.memory_id)]
            return replace(event, memory_ids=ids, unlinked=cut) if ids or cut else None
        if isinstance(event, EntitiesDeleted):
            return replace(
                event,
                forgotten=[m for m in event.forgotten if mine(m)],
                unlinked=[u for u in event.unlinked if mine(u.memory_id)],
            )
        if isinstance(event, GraphImported):
            self.keys.update(k.key_id for k in event.keys)
            items = [i for i in event.memories if i.memory.namespace == self.namespace]
            self._mine(i.memory for i in items)
            return replace(event, memories=items)
        # store.created, rules.changed, relations, conversation turns: store-wide, kept
        return event


def memory_namespaces(events: Iterable[AnyEvent], *, until: str | None = None) -> set[str]:
    """Every namespace a memory of these events was made in (forgotten ones too). With
    `until`, stops at the first event that makes a memory in that namespace."""
    found: set[str] = set()
    for event in events:
        if isinstance(event, MemoryRemembered):
            found.update(m.namespace for m in event.memories)
        elif isinstance(event, MemoryCorrected):
            found.add(event.memory.namespace)
        elif isinstance(event, EntitiesCreated):
            found.update(m.namespace for m in event.observations)
        elif isinstance(event, GraphImported):
            found.update(i.memory.namespace for i in event.memories)
        else:
            continue
        if until in found:
            break
    return found


def namespace_events(events: Iterable[AnyEvent], namespace: str) -> Iterator[AnyEvent]:
    """The events concerning `namespace`, renumbered 1, 2, 3... with their original times."""
    keep = _NamespaceFilter(namespace)
    seq = 0
    for event in events:
        kept = keep(event)
        if kept is not None:
            seq += 1
            yield msgspec.structs.replace(kept, seq=seq)
