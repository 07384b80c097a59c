"""The knowledge graph's read side: pure functions of a `GraphState`, and the shapes they answer.

Shapes are the reference server's (`@modelcontextprotocol/server-memory`): entities with
name/entityType/observations, relations with from/to/relationType. Being functions of a state,
a past state (as_of) answers the same way as the present.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

import msgspec

from keytrail.projections import GraphState, KeyNode, MemoryNode

from .queries import visible

# -- what the read tools return ----------------------------------------------------------------


class Entity(msgspec.Struct, frozen=True, rename={"entity_type": "entityType"}):
    name: str
    entity_type: str
    observations: list[str]


class Relation(
    msgspec.Struct, frozen=True, rename={"from_": "from", "relation_type": "relationType"}
):
    from_: str
    to: str
    relation_type: str


class GraphPage(msgspec.Struct, frozen=True):
    """Entities and relations, a page at a time.

    read_graph pages over entities; each page holds the relations going out of its entities,
    so walking every page yields every relation exactly once.
    """

    entities: list[Entity]
    relations: list[Relation]
    total: int
    offset: int
    next_offset: int | None


# -- the read side ---------------------------------------------------------------------------


def entity_key(state: GraphState, name: str) -> KeyNode | None:
    """The entity named `name` (case-insensitive), or None."""
    key = state.key_for_label(name)
    return key if key is not None and key.entity_type is not None else None


def entity_keys(state: GraphState) -> Iterator[KeyNode]:
    """Every entity, oldest first."""
    return (k for k in state.keys.values() if k.entity_type is not None)


def observation_nodes(
    state: GraphState, key: KeyNode, namespace: str, now: datetime
) -> list[MemoryNode]:
    """The current memories of `namespace` linked to the entity's key, oldest first.

    Empty content marks a memory forgotten since (a past state holds it, blanked): left out.
    """
    memories = state.memories
    return [
        node
        for mid in key.links
        if (node := memories[mid]).namespace == namespace and visible(node, now) and node.content
    ]


def to_entity(state: GraphState, key: KeyNode, namespace: str, now: datetime) -> Entity:
    return Entity(
        name=key.label,
        entity_type=key.entity_type or "",
        observations=[n.content for n in observation_nodes(state, key, namespace, now)],
    )


def to_relation(state: GraphState, from_key: str, to_key: str, relation_type: str) -> Relation:
    keys = state.keys
    return Relation(from_=keys[from_key].label, to=keys[to_key].label, relation_type=relation_type)


def read_graph(
    state: GraphState, namespace: str, now: datetime, limit: int, offset: int
) -> GraphPage:
    entities = list(entity_keys(state))
    page = entities[offset : offset + limit]
    ids = {k.id for k in page}
    relations = [
        to_relation(state, r.from_key, r.to_key, r.relation_type)
        for r in state.relations.values()
        if r.from_key in ids
    ]
    end = offset + len(page)
    return GraphPage(
        entities=[to_entity(state, k, namespace, now) for k in page],
        relations=relations,
        total=len(entities),
        offset=offset,
        next_offset=end if end < len(entities) else None,
    )


def search_nodes(
    state: GraphState, query: str, namespace: str, now: datetime, limit: int, offset: int
) -> GraphPage:
    """Entities whose name, type or an observation contains any word of `query` (any case),
    and the relations touching them."""
    words = query.casefold().split()

    def hit(text: str) -> bool:
        folded = text.casefold()
        return any(w in folded for w in words)

    matched = [
        key
        for key in entity_keys(state)
        if hit(key.label)
        or hit(key.entity_type or "")
        or any(hit(n.content) for n in observation_nodes(state, key, namespace, now))
    ]
    page = matched[offset : offset + limit]
    ids = {k.id for k in page}
    relations = [
        to_relation(state, r.from_key, r.to_key, r.relation_type)
        for r in state.relations.values()
        if r.from_key in ids or r.to_key in ids
    ]
    end = offset + len(page)
    return GraphPage(
        entities=[to_entity(state, k, namespace, now) for k in page],
        relations=relations,
        total=len(matched),
        offset=offset,
        next_offset=end if end < len(matched) else None,
    )


def open_nodes(state: GraphState, names: Sequence[str], namespace: str, now: datetime) -> GraphPage:
    """The named entities (unknown names are left out) and the relations between them."""
    found: dict[str, KeyNode] = {}
    for name in names:
        key = entity_key(state, name)
        if key is not None:
            found.setdefault(key.id, key)
    relations = [
        to_relation(state, r.from_key, r.to_key, r.relation_type)
        for r in state.relations.values()
        if r.from_key in found and r.to_key in found
    ]
    return GraphPage(
        entities=[to_entity(state, k, namespace, now) for k in found.values()],
        relations=relations,
        total=len(found),
        offset=0,
        next_offset=None,
    )
