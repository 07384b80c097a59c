"""Importers for other memory stores: the reference server's memory.jsonl and keymem's graph.json.

An import is checked whole before anything is written: the first problem is reported with the
line number (memory.jsonl) or JSON path (graph.json) that holds it, and the store is left
byte-identical. A valid file is written as one `graph.imported` event, so it lands all at once
or not at all, even if the process dies halfway.

Original times: the event's `at` is when the import happened; each imported memory carries its
own `created_at` (and depth, access count, last read), which the fold uses instead.

memory.jsonl (the reference knowledge-graph server)::

    {"type": "entity", "name": "Dana", "entityType": "person", "observations": ["..."]}
    {"type": "relation", "from": "Dana", "to": "Acme", "relationType": "works_at"}

Entities become name keys with their type, observations memories linked to them (in the
knowledge-graph namespace), relations typed edges. Names that are already entities in the store
gain the new observations; duplicates are skipped.

graph.json (keymem)::

    {"keys": {"<id>": {"concept": "Dana", "aliases": ["D."], "key_type": "name"}},
     "memories": {"<id>": {"content": "...", "created_at": "2025-01-31T09:00:00Z",
                           "depth": 0.3, "access_count": 4, "last_accessed": null,
                           "namespace": "default", "ttl": 86400, "supersedes": null,
                           "links": ["<memory id>"]}},
     "links": [{"key_id": "<id>", "memory_id": "<id>", "weight": 1.2}]}

`keys` and `memories` may also be lists of objects with an `id`. `ttl` is seconds from
`created_at`; `supersedes` chains versions (the older one becomes superseded; one the store has
superseded since is refused); `links` inside a memory are related memories. Ids are kept when
they are valid keytrail ids not yet in the store, else new ones are minted. A key whose label
(or alias) is already in the store is merged into it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from keytrail.events import (
    KEY_TYPES,
    GraphImported,
    ImportedKey,
    ImportedMemory,
    InvalidInput,
    KeyLink,
    NewMemory,
    RelationSpec,
)
from keytrail.events.log import Appender
from keytrail.projections import relation_id
from keytrail.projections.keygraph import same_name

from . import validation as check
from .config import Settings
from .kg_reads import observation_form, observation_nodes
from .knowledge_graph import KnowledgeGraph, new_key_id, new_memory_id
from .store import Store, content_hash
from .timetravel import parse_time
from .validation import quoted

Format = Literal["memory-jsonl", "keymem", "keytrail"]
FORMATS: tuple[str, ...] = ("memory-jsonl", "keymem", "keytrail")
#: Imports a checked file into a store (one event), returning what it did.
Writer = Callable[[Store], "ImportReport"]
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")


@dataclass(frozen=True)
class ImportReport:
    format: str
    source: str
    seq: int | None
    keys: int
    entities: int
    memories: int
    relations: int
    skipped: list[str] = field(default_factory=list)


def detect_format(text: str) -> Format:
    """keymem (one JSON object with keys/memories), memory-jsonl or keytrail (JSON lines)."""
    stripped = text.lstrip()
    if not stripped:
        # An empty graph's memory.jsonl (keytrail's export and the reference server write one);
        # a keytrail export holds at least store.created, and an empty file is no JSON document.
        return "memory-jsonl"
    if stripped.startswith("{"):
        try:
            whole = json.loads(stripped)
        except ValueError:
            whole = None
        if isinstance(whole, dict) and ("memories" in whole or "keys" in whole):
            return "keymem"
    first = next((line for line in text.split("\n") if line.strip()), "")
    try:
        obj = json.loads(first)
    except ValueError:
        if stripped.startswith("{"):
            return "keymem"  # one JSON document over several lines (it will say where it breaks)
        obj = None
    if isinstance(obj, dict):
        if obj.get("type") in ("entity", "relation"):
            return "memory-jsonl"
        if isinstance(obj.get("type"), str) and "." in obj["type"] and "seq" in obj:
            return "keytrail"
    raise InvalidInput(
        "--format",
        "cannot tell the file's format from its first line",
        limit=" | ".join(FORMATS),
    )


# -- memory.jsonl -----------------------------------------------------------------------------


@dataclass
class _Entity:
    name: str
    entity_type: str
    observations: list[str]
    line: int


@dataclass(frozen=True)
class _Relation:
    from_: str
    to: str
    relation_type: str
    line: int


def _unicode(where: str, parsed: object) -> None:
    """Refuse a parsed JSON value holding a lone surrogate (an escape such as "\\ud800" with no
    pair): no event can carry it, so it is refused with the rest of the file's checks."""
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(where, f"is not valid Unicode text ({exc.reason})") from None


def _string(where: str, obj: dict[str, Any], name: str, limit: int) -> str:
    if name not in obj:
        raise InvalidInput(where, f"missing {name!r}")
    value = obj[name]
    if not isinstance(value, str):
        raise InvalidInput(where, f"{name!r} must be a string, got {type(value).__name__}")
    try:
        return check.label(name, value, limit)
    except InvalidInput as exc:
        raise InvalidInput(where, f"{name!r} {exc.problem}", limit=exc.limit) from None


def parse_memory_jsonl(
    text: str, label: str, settings: Settings
) -> tuple[list[_Entity], list[_Relation]]:
    limits = settings.limits
    entities: dict[str, _Entity] = {}
    relations: list[_Relation] = []
    # JSON lines end at "\n" (a "\r" before it is JSON whitespace): not splitlines(), which
    # also breaks at U+2028, U+2029 and U+0085, characters a JSON string holds unescaped.
    for number, raw in enumerate(text.split("\n"), 1):
        if not raw.strip():
            continue
        where = f"{label} line {number}"
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(where, f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InvalidInput(where, "must be a JSON object")
        _unicode(where, obj)
        kind = obj.get("type")
        if kind == "entity":
            name = _string(where, obj, "name", limits.entity_name_chars)
            entity_type = _string(where, obj, "entityType", limits.kg_name_chars)
            observations = obj.get("observations", [])
            if not isinstance(observations, list):
                raise InvalidInput(where, "'observations' must be a list of strings")
            contents: list[str] = []
            for i, o in enumerate(observations):
                if not isinstance(o, str) or not o.strip():
                    raise InvalidInput(where, f"observations[{i}] must be a non-empty string")
                if len(o) > limits.content_chars:
                    raise InvalidInput(
                        where,
                        f"observations[{i}] is {len(o)} characters long",
                        limit=f"{limits.content_chars} characters",
                    )
                contents.append(o.strip())
            known = entities.get(name.casefold())
            if known is None:
                entities[name.casefold()] = _Entity(name, entity_type, contents, number)
            else:  # the same entity twice: one entity, observations merged
                known.observations += contents
        elif kind == "relation":
            relations.append(
                _Relation(
                    _string(where, obj, "from", limits.entity_name_chars),
                    _string(where, obj, "to", limits.entity_name_chars),
                    _string(where, obj, "relationType", limits.kg_name_chars),
                    number,
                )
            )
        else:
            raise InvalidInput(where, f"unknown type {quoted(kind)}", limit="entity | relation")
    return list(entities.values()), relations


def check_memory_jsonl(
    text: str, label: str, settings: Settings, empty_store: bool = False
) -> Writer:
    entities, relations = parse_memory_jsonl(text, label, settings)
    if empty_store:  # every relation must then end at an entity of the file: check it now
        names = {e.name.casefold() for e in entities}
        for r in relations:
            for role, name in (("from", r.from_), ("to", r.to)):
                if name.casefold() not in names:
                    raise InvalidInput(
                        f"{label} line {r.line}",
                        f"relation {role!r} names no entity {quoted(name)}",
                    )
    return lambda store: _write_memory_jsonl(store, label, entities, relations)


def _write_memory_jsonl(
    store: Store, label: str, entities: list[_Entity], relations: list[_Relation]
) -> ImportReport:
    namespace = KnowledgeGraph(store).namespace

    def decide(app: Appender) -> ImportReport:
        state = store.state
        initial = state.rules.link_initial
        taken: set[str] = set()
        keys: list[ImportedKey] = []
        ids: dict[str, str] = {}  # folded entity name -> key id
        types: dict[str, str] = {}
        memories: list[ImportedMemory] = []
        skipped: list[str] = []
        for e in entities:
            where = f"{label} line {e.line}"
            key = state.key_for_label(e.name)
            if key is not None and not same_name(key.label, e.name):
                raise InvalidInput(
                    where, f"{quoted(e.name)} is an alias of the key {quoted(key.label)}"
                )
            if key is None:
                key_id, label_, key_type = new_key_id(state, taken), e.name, "name"
                keys.append(
                    ImportedKey(key_id=key_id, label=e.name, type="name", entity_type=e.entity_type)
                )
            else:
                key_id, label_, key_type = key.id, key.label, key.type
                if key.entity_type is None:
                    keys.append(
                        ImportedKey(
                            key_id=key_id,
                            label=key.label,
                            type=key.type,  # type: ignore[arg-type]
                            entity_type=e.entity_type,
                        )
                    )
                else:
                    skipped.append(f"entity {e.name!r} exists: only new observations added")
            ids[e.name.casefold()] = key_id
            types[key_id] = key_type
            have = set()
            if key is not None:
                # What the entity shows now, as add_observations compares: a text whose
                # observation has expired (or was deleted) is new again.
                have = {
                    observation_form(n.content)
                    for n in observation_nodes(state, key, namespace, app.at)
                }
            link = KeyLink(
                key_id=key_id,
                label=label_,
                type=key_type,  # type: ignore[arg-type]
                resolution="existing",
                weight=initial,
            )
            for content in dict.fromkeys(e.observations):
                if observation_form(content) in have:
                    continue
                have.add(observation_form(content))
                memory = NewMemory(
                    memory_id=new_memory_id(state, taken),
                    namespace=namespace,
                    content=content,
                    content_hash=content_hash(content),
                    keys=[link],
                )
                memories.append(ImportedMemory(memory=memory, created_at=app.at))
        specs: dict[str, RelationSpec] = {}
        for r in relations:
            ends: list[str] = []
            for role, name in (("from", r.from_), ("to", r.to)):
                end = ids.get(name.casefold())
                if end is None:
                    existing = state.key_for_label(name)
                    if existing is None or existing.entity_type is None:
                        raise InvalidInput(
                            f"{label} line {r.line}",
                            f"relation {role!r} names no entity {quoted(name)} "
                            "(not in the file nor in the store)",
                        )
                    end = existing.id
                ends.append(end)
            rid = relation_id(ends[0], ends[1], r.relation_type)
            if rid not in state.relations:
                specs.setdefault(
                    rid,
                    RelationSpec(from_key=ends[0], to_key=ends[1], relation_type=r.relation_type),
                )
        seq = None
        if keys or memories or specs:  # the same file again holds nothing new: nothing written
            seq = store._append(
                app,
                GraphImported(
                    format="memory-jsonl",
                    source=label,
                    keys=keys,
                    memories=memories,
                    relations=list(specs.values()),
                ),
            ).seq
        return ImportReport(
            format="memory-jsonl",
            source=label,
            seq=seq,
            keys=len(keys),
            entities=len(entities),
            memories=len(memories),
            relations=len(specs),
            skipped=skipped,
        )

    return store._write(decide)


# -- keymem graph.json ------------------------------------------------------------------------


@dataclass
class _KmKey:
    id: str
    label: str
    type: str
    aliases: list[str]
    path: str


@dataclass
class _KmMemory:
    id: str
    content: str
    created_at: datetime | None
    depth: float
    access_count: int
    last_read_at: datetime | None
    namespace: str
    ttl: int | None
    supersedes: str | None
    supersede_reason: str
    related: list[str]
    path: str
    links: list[tuple[str, float]] = field(default_factory=list)


def _entries(
    doc: dict[str, Any], name: str, label: str
) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(id, JSON path, object) of a keymem section given as an object by id or a list."""
    section = doc.get(name, {})
    if isinstance(section, dict):
        for ident, obj in section.items():
            path = f"{label} $.{name}.{ident}"
            if not isinstance(obj, dict):
                raise InvalidInput(path, "must be an object")
            yield str(ident), path, obj
    elif isinstance(section, list):
        for i, obj in enumerate(section):
            path = f"{label} $.{name}[{i}]"
            if not isinstance(obj, dict):
                raise InvalidInput(path, "must be an object")
            ident = obj.get("id")
            if not isinstance(ident, str) or not ident:
                raise InvalidInput(path, "'id' must be a non-empty string")
            yield ident, path, obj
    else:
        raise InvalidInput(f"{label} $.{name}", "must be an object keyed by id, or a list")


def _time(path: str, value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):  # out of range, or NaN
            raise InvalidInput(
                path, f"{quoted(value)} is not a Unix time a date can hold"
            ) from None
    if not isinstance(value, str):
        raise InvalidInput(path, "must be an ISO-8601 time or a Unix timestamp")
    # As a time argument is read: held to TIME_CHARS (fromisoformat reads a megabyte of zeros
    # as midnight), no zone meaning UTC, and a refused one quoted, not echoed whole.
    return parse_time(path, value)


def _number(path: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidInput(path, f"must be a number from {low} to {high}, got {quoted(value)}")
    return float(value)


def parse_keymem(text: str, label: str, settings: Settings) -> tuple[list[_KmKey], list[_KmMemory]]:
    limits = settings.limits
    if not text.strip():  # "not JSON: Expecting value" would not say why
        raise InvalidInput(label, "the file is empty: a keymem graph.json is one JSON object")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{label} $", f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{label} $", "must be a JSON object with keys, memories and links")
    _unicode(f"{label} $", doc)
    keys: dict[str, _KmKey] = {}
    for ident, path, obj in _entries(doc, "keys", label):
        concept = _string(path, obj, "concept", limits.key_chars)
        kind = obj.get("key_type", "concept")
        if kind not in KEY_TYPES:
            raise InvalidInput(
                f"{path}.key_type", f"unknown key type {quoted(kind)}", limit=" | ".join(KEY_TYPES)
            )
        aliases = obj.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise InvalidInput(f"{path}.aliases", "must be a list of non-empty strings")
        # An alias is a label of the key as much as its concept is: held to the same rules.
        aliases = [
            check.label(f"{path}.aliases[{i}]", a, limits.key_chars) for i, a in enumerate(aliases)
        ]
        if ident in keys:
            raise InvalidInput(path, f"duplicate key id {quoted(ident)}")
        keys[ident] = _KmKey(ident, concept, str(kind), aliases, path)
    memories: dict[str, _KmMemory] = {}
    for ident, path, obj in _entries(doc, "memories", label):
        if ident in memories:
            raise InvalidInput(path, f"duplicate memory id {quoted(ident)}")
        content = obj.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput(f"{path}.content", "must be a non-empty string")
        if len(content) > limits.content_chars:
            raise InvalidInput(
                f"{path}.content",
                f"is {len(content)} characters long",
                limit=f"{limits.content_chars} characters",
            )
        ttl = obj.get("ttl")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0):
            raise InvalidInput(f"{path}.ttl", "must be a positive whole number of seconds or null")
        access = obj.get("access_count", 0)
        if isinstance(access, bool) or not isinstance(access, int) or access < 0:
            raise InvalidInput(f"{path}.access_count", "must be a whole number >= 0")
        related = obj.get("links", [])
        if not isinstance(related, list) or not all(isinstance(r, str) for r in related):
            raise InvalidInput(f"{path}.links", "must be a list of memory ids")
        supersedes = obj.get("supersedes")
        if supersedes is not None and not isinstance(supersedes, str):
            raise InvalidInput(f"{path}.supersedes", "must be a memory id or null")
        created_at = _time(f"{path}.created_at", obj.get("created_at"))
        if ttl is not None:
            # Checked here, not when writing: the expiry must be a date (from now if no time).
            try:
                (created_at or datetime.now(UTC)) + timedelta(seconds=ttl)
            except OverflowError:
                raise InvalidInput(f"{path}.ttl", f"{ttl} seconds ends past year 9999") from None
        try:
            namespace = check.namespace(obj.get("namespace"), settings.default_namespace)
        except InvalidInput as exc:
            raise InvalidInput(f"{path}.namespace", exc.problem) from None
        memories[ident] = _KmMemory(
            id=ident,
            content=content.strip(),
            created_at=created_at,
            depth=_number(f"{path}.depth", obj.get("depth", 0.0), 0.0, 1.0),
            access_count=access,
            last_read_at=_time(f"{path}.last_accessed", obj.get("last_accessed")),
            namespace=namespace,
            ttl=ttl,
            supersedes=supersedes,
            supersede_reason=str(obj.get("supersede_reason") or "correction"),
            related=list(dict.fromkeys(related)),
            path=path,
        )
    links = doc.get("links", [])
    if not isinstance(links, list):
        raise InvalidInput(f"{label} $.links", "must be a list of key-memory links")
    seen: set[tuple[str, str]] = set()
    for i, link in enumerate(links):
        path = f"{label} $.links[{i}]"
        if not isinstance(link, dict):
            raise InvalidInput(path, "must be an object with key_id, memory_id, weight")
        key_id, memory_id = link.get("key_id"), link.get("memory_id")
        if key_id not in keys:
            raise InvalidInput(f"{path}.key_id", f"names no key of the file: {quoted(key_id)}")
        if memory_id not in memories:
            raise InvalidInput(
                f"{path}.memory_id", f"names no memory of the file: {quoted(memory_id)}"
            )
        weight = _number(f"{path}.weight", link.get("weight", 1.0), 1e-9, 1e9)
        if (key_id, memory_id) not in seen:
            seen.add((key_id, memory_id))
            memories[memory_id].links.append((key_id, weight))
    superseded: dict[str, str] = {}
    for m in memories.values():
        for j, target in enumerate(m.related):
            if target not in memories:
                raise InvalidInput(
                    f"{m.path}.links[{j}]", f"names no memory of the file: {quoted(target)}"
                )
            # As remember and correct refuse it.
            check.related_namespace(
                f"{m.path}.links[{j}]", target, memories[target].namespace, m.namespace
            )
        if m.supersedes is not None:
            if m.supersedes not in memories or m.supersedes == m.id:
                raise InvalidInput(
                    f"{m.path}.supersedes",
                    f"names no other memory of the file: {quoted(m.supersedes)}",
                )
            if m.supersedes in superseded:
                raise InvalidInput(
                    f"{m.path}.supersedes",
                    f"{quoted(m.supersedes)} is already superseded by "
                    f"{quoted(superseded[m.supersedes])}",
                )
            if memories[m.supersedes].namespace != m.namespace:
                # A correction keeps its memory's namespace: a newer version elsewhere would
                # hide the fact from its own namespace's reads and show it in another's.
                raise InvalidInput(
                    f"{m.path}.supersedes",
                    f"memory {quoted(m.supersedes)} is in namespace "
                    f"{quoted(memories[m.supersedes].namespace)}, not {quoted(m.namespace)} "
                    "(the versions of a memory share its namespace)",
                )
            superseded[m.supersedes] = m.id
    return list(keys.values()), _chain_order(memories)


def _chain_order(memories: dict[str, _KmMemory]) -> list[_KmMemory]:
    """Oldest first, with every superseded version before the one replacing it."""
    epoch = datetime.min.replace(tzinfo=UTC)
    ordered: list[_KmMemory] = []
    placed: set[str] = set()
    for start in sorted(memories.values(), key=lambda m: m.created_at or epoch):
        chain: list[_KmMemory] = []
        node: _KmMemory | None = start
        while node is not None and node.id not in placed:
            if any(n.id == node.id for n in chain):
                raise InvalidInput(f"{node.path}.supersedes", "the version chain is a cycle")
            chain.append(node)
            node = memories.get(node.supersedes) if node.supersedes else None
        for m in reversed(chain):
            placed.add(m.id)
            ordered.append(m)
    return ordered


def check_keymem(text: str, label: str, settings: Settings) -> Writer:
    km_keys, km_memories = parse_keymem(text, label, settings)
    return lambda store: _write_keymem(store, label, km_keys, km_memories)


def _write_keymem(
    store: Store, label: str, km_keys: list[_KmKey], km_memories: list[_KmMemory]
) -> ImportReport:
    def decide(app: Appender) -> ImportReport:
        state = store.state
        taken: set[str] = set()
        key_ids: dict[str, str] = {}  # file key id -> store key id
        specs: dict[str, tuple[str, str]] = {}  # store key id -> (label, type)
        aliases: dict[str, list[str]] = {}
        claimed: dict[str, str] = {}  # folded labels this file gives a key
        for k in km_keys:
            existing = state.key_for_label(k.label)
            target = existing.id if existing is not None else claimed.get(k.label.casefold())
            if target is None:  # a new key, under its own id when it fits
                target = k.id if _usable(k.id, state.keys, taken) else new_key_id(state, taken)
                taken.add(target)
                claimed[k.label.casefold()] = target
                specs[target] = (k.label, k.type)
            elif existing is not None:  # merged into the store's key of that label
                specs.setdefault(target, (existing.label, existing.type))
            key_ids[k.id] = target
            for alias in [k.label, *k.aliases]:
                folded = alias.casefold()
                if state.labels.get(folded) is None and folded not in claimed:
                    claimed[folded] = target
                    aliases.setdefault(target, []).append(alias)
        imported = [
            ImportedKey(
                key_id=key_id,
                label=label_,
                type=kind,  # type: ignore[arg-type]
                aliases=aliases.get(key_id, []),
            )
            for key_id, (label_, kind) in specs.items()
            # a key the store holds is named only for an alias the file adds to it
            if key_id not in state.keys or key_id in aliases
        ]
        # The same file again, or grown since: a memory the store holds already (same
        # namespace, text and time told; or, with no time in the file, the same id and text)
        # is not imported twice. Links to it reach the one held.
        held: dict[tuple[str, str, datetime], str] = {
            (node.namespace, node.content_hash, node.created_at): node.id
            for node in state.memories.values()
        }
        memory_ids: dict[str, str] = {}
        fresh: list[_KmMemory] = []
        for m in km_memories:
            digest = content_hash(m.content)
            there = held.get((m.namespace, digest, m.created_at)) if m.created_at else None
            same_id = state.memories.get(m.id)
            if (
                there is None
                and same_id is not None
                and (same_id.namespace, same_id.content_hash) == (m.namespace, digest)
            ):
                there = same_id.id
            if there is not None:
                memory_ids[m.id] = there
                continue
            memory_id = (
                m.id if _usable(m.id, state.memories, taken) else new_memory_id(state, taken)
            )
            taken.add(memory_id)
            memory_ids[m.id] = memory_id
            fresh.append(m)
        for m in fresh:
            # A memory the store holds that a read by id no longer shows (forgotten, deleted,
            # expired): refused as a version's old one, as correct refuses it, and as a link's
            # target, as remember's related_to refuses it, in the commands' words.
            for j, target in enumerate(m.related):
                if memory_ids[target] in state.memories:
                    store._visible_memory(f"{m.path}.links[{j}]", memory_ids[target], app.at)
            held_old = state.memories.get(memory_ids[m.supersedes]) if m.supersedes else None
            if held_old is not None:
                store._visible_memory(f"{m.path}.supersedes", held_old.id, app.at)
            # A version of a memory the store holds that has another version since (corrected
            # after the file was last imported) would fork the chain: refused, as in a file.
            if held_old is not None and held_old.superseded_by is not None:
                raise InvalidInput(
                    f"{m.path}.supersedes",
                    f"{quoted(m.supersedes)} is already superseded by "
                    f"{quoted(held_old.superseded_by)} in the store "
                    "(a new version goes after its current one)",
                )
        if not fresh and not imported:
            return ImportReport(
                format="keymem",
                source=label,
                seq=None,
                keys=0,
                entities=0,
                memories=0,
                relations=0,
            )
        items: list[ImportedMemory] = []
        for m in fresh:
            created = m.created_at or app.at
            links = [
                KeyLink(
                    key_id=key_ids[k],
                    label=specs[key_ids[k]][0],
                    type=specs[key_ids[k]][1],  # type: ignore[arg-type]
                    resolution="existing",
                    weight=w,
                )
                for k, w in m.links
            ]
            unique = list({lk.key_id: lk for lk in links}.values())
            new = NewMemory(
                memory_id=memory_ids[m.id],
                namespace=m.namespace,
                content=m.content,
                content_hash=content_hash(m.content),
                keys=unique,
                related_to=[memory_ids[r] for r in m.related],
                expires_at=None if m.ttl is None else created + timedelta(seconds=m.ttl),
                supersedes=memory_ids[m.supersedes] if m.supersedes else None,
                supersede_reason=m.supersede_reason if m.supersedes else None,
            )
            items.append(
                ImportedMemory(
                    memory=new,
                    created_at=created,
                    depth=m.depth,
                    access_count=m.access_count,
                    last_read_at=m.last_read_at,
                )
            )
        event = store._append(
            app, GraphImported(format="keymem", source=label, keys=imported, memories=items)
        )
        return ImportReport(
            format="keymem",
            source=label,
            seq=event.seq,
            keys=len(imported),
            entities=0,
            memories=len(items),
            relations=0,
        )

    return store._write(decide)


def _usable(ident: str, taken_in_store: dict[str, Any], taken: set[str]) -> bool:
    return bool(_ID_RE.match(ident)) and ident not in taken_in_store and ident not in taken


CHECKERS: dict[str, Callable[[str, str, Settings], Writer]] = {
    "memory-jsonl": check_memory_jsonl,
    "keymem": check_keymem,
}


def check_import(
    text: str, label: str, settings: Settings, fmt: str | None = None, empty_store: bool = False
) -> Writer:
    """Check a whole memory.jsonl or keymem graph.json (auto-detected unless `fmt` is given).

    Returns the writer that imports it into a store as one event; raises on the first problem
    (with its line or JSON path) before anything, even the store, is touched. `empty_store`:
    the store does not exist yet, so nothing in the file may refer to what is not in it.
    """
    chosen = fmt or detect_format(text)
    if chosen not in CHECKERS:
        raise InvalidInput(
            "--format",
            f"{quoted(chosen)} cannot be imported into a store this way",
            limit=" | ".join(CHECKERS),
        )
    if chosen == "memory-jsonl":
        return check_memory_jsonl(text, label, settings, empty_store)
    return CHECKERS[chosen](text, label, settings)


def import_text(store: Store, text: str, label: str, fmt: str | None = None) -> ImportReport:
    """Check, then import, a memory.jsonl or keymem graph.json into `store`."""
    return check_import(text, label, store.settings, fmt)(store)
