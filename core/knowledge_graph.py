"""The reference knowledge-graph server's model on top of the key graph.

An entity is a key (type "name" when created here) with an entity type; an observation is a
memory linked to that key, in the knowledge-graph namespace; a relation is a typed, directed edge
between two entity keys. Every change is an event, so history, as_of and forget see them.

Behaviour follows `@modelcontextprotocol/server-memory`: existing entity names are ignored,
duplicate relations and observations are skipped, add_observations and create_relations fail for
an unknown entity (and then write nothing), deletes cascade to relations. Differences, on purpose:
names match case-insensitively (key labels do), whitespace inside names is collapsed,
read_graph / search_nodes are paginated so a large graph never floods a model's context, and
every read lists at most a page of one entity's observations and relations (the newest, with
their totals), read_entity paging through the rest, so a big entity never floods it either.

The read side (kg_reads.py) is pure functions of a `GraphState`, so a past state (as_of) answers
the same way.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from keytrail.events import (
    EntitiesCreated,
    EntitiesDeleted,
    EntitySpec,
    InvalidInput,
    KeyLink,
    KeyMemory,
    MemoryRemembered,
    NewMemory,
    NotFound,
    ObservationsDeleted,
    RelationsAdded,
    RelationSpec,
    RelationsRemoved,
)
from keytrail.events.log import Appender
from keytrail.projections import GraphState, KeyNode, relation_id
from keytrail.projections.keygraph import same_name

from . import validation as check
from .kg_reads import (
    ENTITY_ITEMS,
    Entity,
    EntityPage,
    GraphPage,
    Relation,
    entity_key,
    observation_form,
    observation_nodes,
    open_nodes,
    read_entity,
    read_graph,
    search_nodes,
    to_relation,
)
from .store import content_hash

if TYPE_CHECKING:
    from .store import Store

# -- what the tools return (the reference server's JSON shapes) -------------------------------


class CreatedEntities(msgspec.Struct, frozen=True):
    entities: list[Entity]
    seq: int | None = None


class CreatedRelations(msgspec.Struct, frozen=True):
    relations: list[Relation]
    seq: int | None = None


class AddedObservations(
    msgspec.Struct,
    frozen=True,
    rename={"entity_name": "entityName", "added_observations": "addedObservations"},
):
    entity_name: str
    added_observations: list[str]


class ObservationResults(msgspec.Struct, frozen=True):
    results: list[AddedObservations]
    seq: int | None = None


class Deletion(
    msgspec.Struct,
    frozen=True,
    rename={
        "not_found": "notFound",
        "deleted_count": "deletedCount",
        "missing_entities": "missingEntities",
    },
):
    """What a delete_* tool returns: the reference's success/message, plus the details.

    `deleted` names what went: entity names (delete_entities), observation texts
    (delete_observations) or "from relationType to" (delete_relations), once each.
    `not_found` names what was asked for and is not there, once each, as asked: entity names
    (delete_entities), observation texts (delete_observations: texts the entity does not have,
    and those of an entity in `missing_entities`) or "from relationType to" (delete_relations).
    """

    success: bool
    message: str
    deleted: list[str] = []
    not_found: list[str] = []
    deleted_count: int = 0
    missing_entities: list[str] = []
    seq: int | None = None


# -- input ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityInput:
    name: str
    entity_type: str
    observations: Sequence[str] = ()


@dataclass(frozen=True)
class RelationInput:
    from_: str
    to: str
    relation_type: str


@dataclass(frozen=True)
class ObservationInput:
    entity_name: str
    contents: Sequence[str]


# -- the read side: pure functions of a state --------------------------------------------------


# -- commands ---------------------------------------------------------------------------------


def new_key_id(state: GraphState, taken: set[str]) -> str:
    while True:
        ident = "k_" + secrets.token_hex(5)
        if ident not in state.keys and ident not in taken:
            taken.add(ident)
            return ident


def new_memory_id(state: GraphState, taken: set[str]) -> str:
    while True:
        ident = "m_" + secrets.token_hex(6)
        if ident not in state.memories and ident not in taken:
            taken.add(ident)
            return ident


def observation_memory(
    memory_id: str, namespace: str, content: str, key: KeyLink, **extra: Any
) -> NewMemory:
    return NewMemory(
        memory_id=memory_id,
        namespace=namespace,
        content=content,
        content_hash=content_hash(content),
        keys=[key],
        **extra,
    )


class KnowledgeGraph:
    """The knowledge-graph commands and queries of one store."""

    def __init__(self, store: Store, namespace: str | None = None) -> None:
        self.store = store
        settings = store.settings
        self.namespace = check.namespace(
            namespace if namespace is not None else settings.kg_namespace,
            settings.default_namespace,
            "kg_namespace",
        )

    # -- checks (nothing written on bad input) ---------------------------------------------

    def _name(self, field: str, value: object, *, entity: bool = True) -> str:
        """An entity's name (its key's label), or with `entity=False` a type's."""
        limits = self.store.settings.limits
        return check.label(
            field, value, limits.entity_name_chars if entity else limits.kg_name_chars
        )

    def _list(
        self, field: str, value: object, what: str, kind: type | None = None
    ) -> Sequence[Any]:
        """`value`, a list of at most batch_items; of `kind` each, if given (a dict in the
        tools' shape met AttributeError where its fields were read)."""
        limit = self.store.settings.limits.batch_items
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise InvalidInput(field, f"must be a list of {what}")
        if len(value) > limit:
            raise InvalidInput(field, f"has {len(value)} {what}", limit=f"{limit} {what}")
        for i, item in enumerate(value):
            if kind is not None and not isinstance(item, kind):
                article = "an" if kind.__name__[0] in "AEIOU" else "a"
                got = type(item).__name__
                raise InvalidInput(f"{field}[{i}]", f"must be {article} {kind.__name__}, got {got}")
        return value

    def _observation_entries(
        self, field: str, entries: object, contents_field: str
    ) -> list[tuple[str, list[str]]]:
        """(entity name, observation texts) of each entry, checked; errors name the entry."""
        return [
            (
                self._name(f"{field}[{i}].entityName", e.entity_name),
                self._contents(f"{field}[{i}].{contents_field}", e.contents),
            )
            for i, e in enumerate(self._list(field, entries, "entries", ObservationInput))
        ]

    def _contents(self, field: str, value: object) -> list[str]:
        limit = self.store.settings.limits.content_chars
        items = self._list(field, value, "observations")
        texts: dict[str, str] = {}  # once each (`observation_form`), the first as typed
        for i, c in enumerate(items):
            text = check.text(f"{field}[{i}]", c, limit)
            texts.setdefault(observation_form(text), text)
        return list(texts.values())

    def _relations(self, value: object) -> list[tuple[str, str, str]]:
        items = self._list("relations", value, "relations", RelationInput)
        return [
            (
                self._name(f"relations[{i}].from", r.from_),
                self._name(f"relations[{i}].to", r.to),
                self._name(f"relations[{i}].relationType", r.relation_type, entity=False),
            )
            for i, r in enumerate(items)
        ]

    # -- commands --------------------------------------------------------------------------

    def create_entities(self, entities: Sequence[EntityInput]) -> CreatedEntities:
        """Create entities with their first observations; names that exist are ignored."""
        items = self._list("entities", entities, "entities", EntityInput)
        checked = [
            (
                self._name(f"entities[{i}].name", e.name),
                self._name(f"entities[{i}].entityType", e.entity_type, entity=False),
                self._contents(f"entities[{i}].observations", e.observations),
            )
            for i, e in enumerate(items)
        ]
        store = self.store

        def decide(app: Appender) -> CreatedEntities:
            state = store.state
            initial = state.rules.link_initial
            taken: set[str] = set()
            seen: set[str] = set()
            specs: list[EntitySpec] = []
            news: list[NewMemory] = []
            out: list[Entity] = []
            for i, (name, entity_type, contents) in enumerate(checked):
                folded = name.casefold()
                if folded in seen:
                    continue  # the same name earlier in this call
                seen.add(folded)
                key = state.key_for_label(name)
                if key is not None and key.entity_type is not None:
                    continue  # an existing entity: ignored, like the reference server
                if key is not None and not same_name(key.label, name):
                    raise InvalidInput(
                        f"entities[{i}].name",
                        f"{name!r} is an alias of the key {key.label!r}; use that name",
                        value=name,
                    )
                spec = EntitySpec(
                    key_id=key.id if key is not None else new_key_id(state, taken),
                    name=key.label if key is not None else name,
                    entity_type=entity_type,
                    new=key is None,
                )
                link = KeyLink(
                    key_id=spec.key_id,
                    label=spec.name,
                    type=key.type if key is not None else "name",  # type: ignore[arg-type]
                    resolution="existing",
                    weight=initial,
                )
                specs.append(spec)
                # An existing key may hold some of these already: duplicates are skipped.
                have = (
                    set()
                    if key is None
                    else {
                        observation_form(n.content)
                        for n in observation_nodes(state, key, self.namespace, app.at)
                    }
                )
                news += [
                    observation_memory(new_memory_id(state, taken), self.namespace, c, link)
                    for c in contents
                    if observation_form(c) not in have
                ]
                out.append(Entity(name=spec.name, entity_type=entity_type, observations=contents))
            if not specs:
                return CreatedEntities(entities=[])
            event = store._append(app, EntitiesCreated(entities=specs, observations=news))
            return CreatedEntities(entities=out, seq=event.seq)

        return store._write(decide)

    def create_relations(self, relations: Sequence[RelationInput]) -> CreatedRelations:
        """Relations between existing entities; unknown entity: error; duplicates skipped."""
        checked = self._relations(relations)
        store = self.store

        def decide(app: Appender) -> CreatedRelations:
            state = store.state
            specs: dict[str, RelationSpec] = {}
            for i, (src, dst, kind) in enumerate(checked):
                a = self._entity_or_fail(f"relations[{i}].from", src)
                b = self._entity_or_fail(f"relations[{i}].to", dst)
                rid = relation_id(a.id, b.id, kind)
                if rid not in state.relations:
                    specs.setdefault(
                        rid, RelationSpec(from_key=a.id, to_key=b.id, relation_type=kind)
                    )
            if not specs:
                return CreatedRelations(relations=[])
            event = store._append(app, RelationsAdded(relations=list(specs.values())))
            return CreatedRelations(
                relations=[
                    to_relation(state, r.from_key, r.to_key, r.relation_type)
                    for r in specs.values()
                ],
                seq=event.seq,
            )

        return store._write(decide)

    def _entity_or_fail(self, field: str, name: str) -> KeyNode:
        key = entity_key(self.store.state, name)
        if key is None:
            raise NotFound(field, "entity", name)
        return key

    def add_observations(self, observations: Sequence[ObservationInput]) -> ObservationResults:
        """Add observations to existing entities (all or nothing); returns what was new."""
        checked = self._observation_entries("observations", observations, "contents")
        store = self.store

        def decide(app: Appender) -> ObservationResults:
            state = store.state
            initial = state.rules.link_initial
            taken: set[str] = set()
            have: dict[str, set[str]] = {}
            news: list[NewMemory] = []
            results: list[AddedObservations] = []
            for i, (name, contents) in enumerate(checked):
                key = self._entity_or_fail(f"observations[{i}].entityName", name)
                known = have.setdefault(
                    key.id,
                    {
                        observation_form(n.content)
                        for n in observation_nodes(state, key, self.namespace, app.at)
                    },
                )
                added = [c for c in contents if observation_form(c) not in known]
                known.update(map(observation_form, added))
                link = KeyLink(
                    key_id=key.id,
                    label=key.label,
                    type=key.type,  # type: ignore[arg-type]
                    resolution="existing",
                    weight=initial,
                )
                news += [
                    observation_memory(new_memory_id(state, taken), self.namespace, c, link)
                    for c in added
                ]
                results.append(AddedObservations(entity_name=key.label, added_observations=added))
            if not news:
                return ObservationResults(results=results)
            event = store._append(app, MemoryRemembered(memories=news))
            return ObservationResults(results=results, seq=event.seq)

        return store._write(decide)

    def delete_entities(self, names: Sequence[str]) -> Deletion:
        """Delete entities, their observations and every relation touching them."""
        checked = [
            self._name(f"entityNames[{i}]", n)
            for i, n in enumerate(self._list("entityNames", names, "names"))
        ]
        store = self.store
        namespace = self.namespace

        def decide(app: Appender) -> Deletion:
            state = store.state
            found: dict[str, KeyNode] = {}
            # A name asked twice (in any case or Unicode form: names match as key labels do)
            # is one entity: counted once, found or not.
            missing: dict[str, str] = {}  # casefolded name -> the name as first asked
            for name in checked:
                key = entity_key(state, name)
                if key is None:
                    missing.setdefault(name.casefold(), name)
                else:
                    found.setdefault(key.id, key)
            asked = len(found) + len(missing)
            not_found = list(missing.values())
            if not found:
                return Deletion(
                    success=True,
                    message=f"Deleted 0 of {asked} entities. Not found: " + ", ".join(not_found),
                    not_found=not_found,
                )
            forgotten: dict[str, None] = {}
            unlinked: list[KeyMemory] = []
            for key in found.values():
                # What the entity shows, as delete_observations deletes: its past versions
                # (superseded), and memories expired, deleted or forgotten, stay as they are.
                for node in observation_nodes(state, key, namespace, app.at):
                    if all(k in found for k in node.keys):
                        forgotten[node.id] = None
                    else:
                        unlinked.append(KeyMemory(key_id=key.id, memory_id=node.id))
            relations = [
                RelationSpec(from_key=r.from_key, to_key=r.to_key, relation_type=r.relation_type)
                for r in state.relations.values()
                if r.from_key in found or r.to_key in found
            ]
            deleted = [k.label for k in found.values()]
            event = store._append(
                app,
                EntitiesDeleted(
                    key_ids=list(found),
                    forgotten=list(forgotten),
                    unlinked=unlinked,
                    relations=relations,
                ),
            )
            message = (
                "Entities deleted successfully"
                if not missing
                else f"Deleted {len(found)} of {asked} entities. Not found: " + ", ".join(not_found)
            )
            return Deletion(
                success=True,
                message=message,
                deleted=deleted,
                not_found=not_found,
                deleted_count=len(deleted),
                seq=event.seq,
            )

        return store._write(decide)

    def delete_observations(self, deletions: Sequence[ObservationInput]) -> Deletion:
        """Delete observations by their whole text (`observation_form`); unknown entities are
        reported, not errors."""
        checked = self._observation_entries("deletions", deletions, "observations")
        store = self.store

        def decide(app: Appender) -> Deletion:
            state = store.state
            # memory id -> the entity keys it is being deleted from, in the order asked
            doomed: dict[str, dict[str, None]] = {}
            texts: dict[str, None] = {}  # the observations deleted, once each, in order
            missing: list[str] = []
            # An observation is an entity's text: (entity, text) pairs, each counted once
            # however often it is asked (an entity named twice, in any case) and however many
            # memories hold it; a shared memory deleted from two entities is two of them.
            # Each pair with the text as first asked, to name those not found.
            asked: dict[tuple[str, str], str] = {}
            matched: set[tuple[str, str]] = set()
            for name, contents in checked:
                key = entity_key(state, name)
                owner = "?" + name.casefold() if key is None else key.id
                for c in contents:
                    asked.setdefault((owner, observation_form(c)), c)
                if key is None:
                    missing.append(name)
                    continue
                wanted = set(map(observation_form, contents))
                for node in observation_nodes(state, key, self.namespace, app.at):
                    if (form := observation_form(node.content)) in wanted:
                        doomed.setdefault(node.id, {})[key.id] = None
                        if (key.id, form) not in matched:
                            # as the entity lists it: once, as first typed (`observation_texts`)
                            texts[node.content] = None
                            matched.add((key.id, form))
            # An observation shared with an entity it is not deleted from stays that entity's:
            # only the links to the entities named go. Otherwise the memory is deleted (the
            # event names it in `memory_ids`; its text stays history until a forget).
            forgotten: list[str] = []
            unlinked: list[KeyMemory] = []
            for mid, from_keys in doomed.items():
                if all(
                    k in from_keys or state.keys[k].entity_type is None
                    for k in state.memories[mid].keys
                ):
                    forgotten.append(mid)
                else:
                    unlinked += [KeyMemory(key_id=k, memory_id=mid) for k in from_keys]
            count, requested = len(matched), len(asked)
            # The texts asked and not deleted (not the entity's, or no such entity), once each
            unmatched: dict[str, str] = {}
            for pair, text in asked.items():
                if pair not in matched:
                    unmatched.setdefault(pair[1], text)
            not_found = [*unmatched.values()]
            message = (
                "Observations deleted successfully"
                if count == requested
                else f"Deleted {count} of {requested} observations. "
                + "Not found: "
                + "; ".join(not_found)
                + (f". Entities not found: {', '.join(missing)}" if missing else "")
            )
            seq = None
            if doomed:
                event = ObservationsDeleted(memory_ids=forgotten, unlinked=unlinked)
                seq = store._append(app, event).seq
            return Deletion(
                success=True,
                message=message,
                deleted=list(texts),
                not_found=not_found,
                deleted_count=count,
                missing_entities=missing,
                seq=seq,
            )

        return store._write(decide)

    def delete_relations(self, relations: Sequence[RelationInput]) -> Deletion:
        """Delete relations matching from, to and relationType; the rest is counted."""
        checked = self._relations(relations)
        store = self.store

        def decide(app: Appender) -> Deletion:
            state = store.state
            specs: dict[str, RelationSpec] = {}
            names: dict[str, str] = {}  # relation id -> "from relationType to", as stored
            # A relation asked twice (entity names in any case or Unicode form) is one:
            # counted once, matched or not. Those that matched nothing, as first asked.
            missing: dict[tuple[str, str, str], str] = {}
            for src, dst, kind in checked:
                a, b = entity_key(state, src), entity_key(state, dst)
                if (
                    a is not None
                    and b is not None
                    and (rid := relation_id(a.id, b.id, kind)) in state.relations
                ):
                    specs[rid] = RelationSpec(from_key=a.id, to_key=b.id, relation_type=kind)
                    names[rid] = f"{a.label} {kind} {b.label}"
                else:
                    ident = (
                        a.id if a is not None else src.casefold(),
                        b.id if b is not None else dst.casefold(),
                        kind,
                    )
                    missing.setdefault(ident, f"{src} {kind} {dst}")
            count = len(specs)
            not_found = list(missing.values())
            message = (
                "Relations deleted successfully"
                if not missing
                else f"Deleted {count} of {count + len(missing)} relations. "
                "Not found: " + "; ".join(not_found)
            )
            seq = None
            if specs:
                seq = store._append(app, RelationsRemoved(relations=list(specs.values()))).seq
            return Deletion(
                success=True,
                message=message,
                deleted=list(names.values()),
                not_found=not_found,
                deleted_count=count,
                seq=seq,
            )

        return store._write(decide)

    # -- queries ---------------------------------------------------------------------------

    def _state_at(self, as_of: object | None) -> tuple[GraphState, datetime]:
        """The graph now, or as it stood right after `as_of` (a log seq or ISO-8601 time)."""
        if as_of is None:
            return self.store.refresh(), self.store.clock()
        from .timetravel import view

        past = view(self.store, as_of)
        return past.state, past.clock()

    @property
    def cut(self) -> int:
        """The most observations and relations the read tools list per entity."""
        return min(ENTITY_ITEMS, self.store.settings.limits.page)

    def read_graph(
        self, limit: int | None = None, offset: int = 0, as_of: object = None
    ) -> GraphPage:
        limit, offset, _ = self.store._page(limit, offset, None)
        with self.store._mutex:
            state, now = self._state_at(as_of)
            return read_graph(state, self.namespace, now, limit, offset, self.cut)

    def search_nodes(
        self, query: str, limit: int | None = None, offset: int = 0, as_of: object = None
    ) -> GraphPage:
        query = check.text("query", query, self.store.settings.limits.query_chars)
        limit, offset, _ = self.store._page(limit, offset, None)
        with self.store._mutex:
            state, now = self._state_at(as_of)
            return search_nodes(state, query, self.namespace, now, limit, offset, self.cut)

    def open_nodes(self, names: Sequence[str], as_of: object = None) -> GraphPage:
        items = self._list("names", names, "names")
        page = self.store.settings.limits.page
        if len(items) > page:
            raise InvalidInput("names", f"has {len(items)} names", limit=f"{page} names")
        checked = [self._name(f"names[{i}]", n) for i, n in enumerate(items)]
        with self.store._mutex:
            state, now = self._state_at(as_of)
            return open_nodes(state, checked, self.namespace, now, self.cut)

    def read_entity(
        self, name: str, limit: int | None = None, offset: int = 0, as_of: object = None
    ) -> EntityPage:
        """A page of one entity's observations and relations, newest first (see EntityPage);
        `limit` defaults to the cut, so the first page is what the other read tools show."""
        checked = self._name("name", name)
        limit, offset, _ = self.store._page(self.cut if limit is None else limit, offset, None)
        with self.store._mutex:
            state, now = self._state_at(as_of)
            key = entity_key(state, checked)
            if key is None:
                # Like a memory read by id as of a past point: one the present holds came later.
                later = as_of is not None and entity_key(self.store.state, checked) is not None
                raise NotFound(
                    "name", "entity", checked, "not at that point in time" if later else ""
                )
            return read_entity(state, key, self.namespace, now, limit, offset)
