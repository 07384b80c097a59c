"""The knowledge graph's read side: pure functions of a `GraphState`, and the shapes they answer.

Shapes are the reference server's (`@modelcontextprotocol/server-memory`): entities with
name/entityType/observations, relations with from/to/relationType; keytrail only adds fields.
Being functions of a state, a past state (as_of) answers the same way as the present.

Every answer is bounded however big one entity grows: read_graph, search_nodes and open_nodes
list at most `cut` observations and `cut` relations per entity (`ENTITY_ITEMS`, or the store's
page limit if smaller), the newest, with the totals beside them; read_entity pages through all
of one entity's. What is matched (search_nodes) and exported (memory.jsonl, `to_entity`) is
never cut.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime

import msgspec

from keytrail.projections import GraphState, KeyNode, MemoryNode
from keytrail.projections import Relation as RelationNode
from keytrail.projections.keygraph import dotless_form

from .queries import newest, next_offset, visible

#: The most observations, and the most relations, that read_graph, search_nodes and open_nodes
#: list for one entity (the store's page limit, if smaller, caps it). An entity an agent writes
#: to all the time (its user) collects thousands of observations: listed whole, one such
#: entity made a read_graph page of 739 KB at 5,000 observations and 5,000 relations.
ENTITY_ITEMS = 50

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


class ShownEntity(Entity, frozen=True):
    """An entity as the read tools show it: the reference's fields and two counts.

    `observations` holds at most a page, the newest (see `newest`), in the order they were
    added (the reference server's order), each text once (`observation_texts`), so an entity
    under the cut reads as it always did. `observations_total` counts them all, once each.
    `relations_total` counts the relations the answer holds for this entity (see GraphPage), of
    which it lists at most a page, the newest.
    """

    observations_total: int
    relations_total: int


class GraphPage(msgspec.Struct, frozen=True):
    """Entities and relations, a page at a time, at most `cut` of each per entity.

    The relations an answer holds for an entity: read_graph, those going out of it (so walking
    every page meets every relation once, but for those cut from an entity past the cut);
    search_nodes, those going out of it or coming into it; open_nodes, those between it and
    another opened entity. Each entity lists at most `cut` of its relations, the newest; a
    relation kept for either end is listed, once. `relations_total` counts the relations the
    whole answer holds, `total` the entities.
    """

    entities: list[ShownEntity]
    relations: list[Relation]
    relations_total: int
    total: int
    offset: int
    next_offset: int | None


class EntityPage(msgspec.Struct, frozen=True):
    """One entity's observations and its relations (going out of it or coming into it), a page
    of each at a time.

    Pages go back in time: offset 0 holds the newest `limit` of each, the same ones the other
    read tools show, and `next_offset` the ones before them (null once both lists are done).
    Each page lists its items in the order they were added, so the pages read newest page
    first; put them in reverse order to have every item once, oldest first.
    """

    entity: ShownEntity
    relations: list[Relation]
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


def observation_form(text: str) -> str:
    """An observation's text as observations are compared: composed (NFC), as names are. Kept
    as typed, "cafe" + U+0301 and "café" were two observations that look the same."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def observation_nodes(
    state: GraphState, key: KeyNode, namespace: str, now: datetime
) -> list[MemoryNode]:
    """The current memories of `namespace` linked to the entity's key, oldest first.

    Empty content marks a memory forgotten since (a past state holds it, blanked): left out. A
    memory deleted since is current in a past state, content and all, so the past shows it.
    """
    memories = state.memories
    return [
        node
        for mid in key.links
        if (node := memories[mid]).namespace == namespace and visible(node, now) and node.content
    ]


def observation_texts(state: GraphState, key: KeyNode, namespace: str, now: datetime) -> list[str]:
    """The entity's observations, a set as the reference server keeps them: each text once,
    where first added, oldest first.

    Two current memories may hold one text (a correction onto a text the entity has, a keymem
    import), and add_observations and the import keep a text once, so every read lists it once
    and counts it once, and export, import, export gives the same bytes. Once as
    add_observations compares (`observation_form`), as first typed: two memories may hold one
    text in two encodings (told by remember, or added before observations compared so)."""
    texts: dict[str, str] = {}
    for node in observation_nodes(state, key, namespace, now):
        texts.setdefault(observation_form(node.content), node.content)
    return [*texts.values()]


def to_entity(state: GraphState, key: KeyNode, namespace: str, now: datetime) -> Entity:
    """The whole entity, every observation: what the memory.jsonl export writes."""
    return Entity(
        name=key.label,
        entity_type=key.entity_type or "",
        observations=observation_texts(state, key, namespace, now),
    )


def shown_entity(
    state: GraphState,
    key: KeyNode,
    namespace: str,
    now: datetime,
    relations_total: int,
    limit: int,
    offset: int = 0,
) -> ShownEntity:
    """The entity with `limit` of its observations (the newest past `offset`) and its counts."""
    texts = observation_texts(state, key, namespace, now)
    return ShownEntity(
        name=key.label,
        entity_type=key.entity_type or "",
        observations=newest(texts, limit, offset),
        observations_total=len(texts),
        relations_total=relations_total,
    )


def to_relation(state: GraphState, from_key: str, to_key: str, relation_type: str) -> Relation:
    keys = state.keys
    return Relation(from_=keys[from_key].label, to=keys[to_key].label, relation_type=relation_type)


#: Which entities of an answer a relation is held for (none: the answer does not hold it).
HeldFor = Callable[[RelationNode], Collection[str]]


def held_relations(
    state: GraphState, ids: Collection[str], held_for: HeldFor, limit: int, offset: int = 0
) -> tuple[list[Relation], int, dict[str, int]]:
    """The relations an answer holds, cut per entity: (listed, how many held, held per entity).

    Each entity of `ids` keeps `limit` of its relations, the newest past `offset` (relations in
    the order created, so re-creating one makes it the newest); a relation kept for any of its
    entities is listed once, in the order created.
    """
    per: dict[str, list[str]] = {k: [] for k in ids}
    held: list[tuple[str, RelationNode]] = []
    for rid, r in state.relations.items():
        owners = held_for(r)
        if owners:
            held.append((rid, r))
            for k in owners:
                per[k].append(rid)
    kept = {rid for rids in per.values() for rid in newest(rids, limit, offset)}
    listed = [
        to_relation(state, r.from_key, r.to_key, r.relation_type) for rid, r in held if rid in kept
    ]
    return listed, len(held), {k: len(rids) for k, rids in per.items()}


def graph_page(
    state: GraphState,
    page: list[KeyNode],
    held_for: Callable[[set[str]], HeldFor],
    namespace: str,
    now: datetime,
    cut: int,
    total: int,
    offset: int,
    limit: int,
) -> GraphPage:
    """`page`'s entities (of `total`, `limit` from `offset` on) and the relations held for
    them, each entity cut at `cut`."""
    ids = {k.id for k in page}
    relations, held, per = held_relations(state, ids, held_for(ids), cut)
    return GraphPage(
        entities=[shown_entity(state, k, namespace, now, per[k.id], cut) for k in page],
        relations=relations,
        relations_total=held,
        total=total,
        offset=offset,
        next_offset=next_offset(offset, limit, total),
    )


def going_out(ids: set[str]) -> HeldFor:
    return lambda r: (r.from_key,) if r.from_key in ids else ()


def touching(ids: set[str]) -> HeldFor:
    return lambda r: {r.from_key, r.to_key} & ids


def between(ids: set[str]) -> HeldFor:
    return lambda r: {r.from_key, r.to_key} if r.from_key in ids and r.to_key in ids else ()


def read_graph(
    state: GraphState,
    namespace: str,
    now: datetime,
    limit: int,
    offset: int,
    cut: int = ENTITY_ITEMS,
) -> GraphPage:
    """A page of entities, oldest first, and the relations going out of them."""
    entities = list(entity_keys(state))
    page = entities[offset : offset + limit]
    return graph_page(state, page, going_out, namespace, now, cut, len(entities), offset, limit)


def _folded(text: str) -> str:
    """`dotless_form`, so a word matches whether its accents were typed composed or as
    combining marks (macOS and pastes often decompose), in the query or in the text, and a
    Turkish İ as an i; ASCII, the common case over every observation, skips the
    normalisations."""
    return text.casefold() if text.isascii() else dotless_form(text)


def search_nodes(
    state: GraphState,
    query: str,
    namespace: str,
    now: datetime,
    limit: int,
    offset: int,
    cut: int = ENTITY_ITEMS,
) -> GraphPage:
    """Entities whose name, type or an observation contains any word of `query` (any case),
    and the relations touching them. Every observation is matched, listed or not."""
    words = _folded(query).split()

    def hit(text: str) -> bool:
        folded = _folded(text)
        return any(w in folded for w in words)

    matched = [
        key
        for key in entity_keys(state)
        if hit(key.label)
        or hit(key.entity_type or "")
        or any(hit(n.content) for n in observation_nodes(state, key, namespace, now))
    ]
    page = matched[offset : offset + limit]
    return graph_page(state, page, touching, namespace, now, cut, len(matched), offset, limit)


def open_nodes(
    state: GraphState,
    names: Sequence[str],
    namespace: str,
    now: datetime,
    cut: int = ENTITY_ITEMS,
) -> GraphPage:
    """The named entities (unknown names are left out) and the relations between them."""
    found: dict[str, KeyNode] = {}
    for name in names:
        key = entity_key(state, name)
        if key is not None:
            found.setdefault(key.id, key)
    opened = list(found.values())  # one page holds them all
    return graph_page(state, opened, between, namespace, now, cut, len(found), 0, len(found))


def read_entity(
    state: GraphState, key: KeyNode, namespace: str, now: datetime, limit: int, offset: int
) -> EntityPage:
    """A page of the entity's observations and of the relations going out of or into it."""
    relations, held, _ = held_relations(state, (key.id,), touching({key.id}), limit, offset)
    entity = shown_entity(state, key, namespace, now, held, limit, offset)
    return EntityPage(
        entity=entity,
        relations=relations,
        offset=offset,
        next_offset=next_offset(offset, limit, entity.observations_total, held),
    )
