"""The knowledge-graph tools, by two processes on one home, against a model of the reference.

A plain model of `@modelcontextprotocol/server-memory` as keytrail documents it (README "Coming
from the reference knowledge-graph server"; core/knowledge_graph.py and kg_reads.py
docstrings), sharing no code with keytrail: entities (names in any case, the first spelling
kept), observations, relations. Existing names are ignored, duplicate observations and
relations skipped, add_observations and create_relations fail for an unknown entity and write
nothing, deleting an entity removes its observations and every relation touching it. A memory
remembered under entity names is an observation of each (in the knowledge-graph namespace);
delete_observations only unlinks it from the entities named while another entity has it (a
plain concept key does not keep it), delete_entities deletes only the observations linked to no
other key at all and unlinks the rest. A deleted observation is hidden from the present and
shown as of any point before the delete; `forget` erases it from the past too.

Each step is performed by one of two KnowledgeGraph/Store pairs on one home (remember, correct
and forget through that process's Store: the memory tools served beside the knowledge-graph
ones), and every read from either must equal the one model: read_graph a
page at a time, search_nodes, open_nodes, read_entity and memory_stats, now or as of an earlier
seq or time. The page limit is 3, so every entity lists at most its 3 newest observations and
relations (with their totals) and read_entity pages back through the rest. Processes restart
(closed, or killed: opened from the latest snapshot, every 5 events), and snapshots are deleted
(they are caches): past reads then fold long tails and keep what they built.

Bounded (40 examples of 50 steps, derandomized): about 2-2.5 s.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import tempfile
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from test_model import BOUNDED

from keytrail.core import HashEmbedder, InvalidInput, NotFound, Settings, Store
from keytrail.core.config import Limits
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)
from keytrail.core.timetravel import view

T0 = datetime(2025, 5, 1, 8, 0, 0, 500000, tzinfo=UTC)
KG = "default"  # the knowledge-graph namespace (KEYTRAIL_KG_NAMESPACE unset)
#: entity names: one entity per name in any case, whitespace collapsed, composed or not (NFC)
NAMES = ["Alice", "alice", "Bob", "Lyon", "tea", "Anne Marie", " anne  marie", "Zoë", "ZOE\u0308"]
TYPES = ["person", "city", "drink"]
TEXTS = ["likes tea", "lives in Lyon", "speaks Spanish", "has a cat", "drinks coffee", "is tall"]
RELATION_TYPES = ["knows", "lives_in"]
QUERIES = ["tea", "LYON", "cat spanish", "person", "bob", "coffee Note", "ZOË marie", "nothing"]
PAGE = 3  # KEYTRAIL_MAX_PAGE: at most 3 observations and relations per entity in every read
STEPS = [1, 60, 3600]
PROCESSES = 2
HUB_MIN = 3

name_st = st.sampled_from(NAMES)
#: the name of an entity (as first spelled), or any name if there is none
entity_st = st.runner().flatmap(
    lambda machine: st.sampled_from(
        [machine.model.keys[cf].label for cf in machine.model.entities()] or NAMES
    )
)
#: mostly an entity's name
known_st = entity_st | name_st
#: texts of observations: the fixed ones and every text told by `remember` so far
texts_st = st.runner().flatmap(lambda machine: st.lists(st.sampled_from(machine.texts), max_size=4))
#: texts to delete: mostly those of current observations (shared ones included)
doomed_st = texts_st | st.runner().flatmap(
    lambda machine: st.lists(st.sampled_from(machine.shown_texts()), min_size=1, max_size=3)
)
pick = st.integers(min_value=0, max_value=10_000)
process = st.integers(0, PROCESSES - 1)
#: None (now), or how to name an earlier point: a seq, an event's time, any time up to now, or
#: the seq the last read as of the past asked for (a process answers it from a cached state,
#: which must hide what was forgotten since)
point = st.none() | st.tuples(st.sampled_from(["seq", "event time", "any time", "again"]), pick)


@dataclass
class Key:
    label: str  # the first spelling
    entity_type: str | None  # None: a plain key (made by remember, or an entity deleted)
    links: list[str] = field(default_factory=list)  # memory ids, in the order linked


@dataclass
class Memory:
    id: str
    content: str
    namespace: str
    keys: list[str]  # casefolded names, in the order linked
    status: str = "active"  # "deleted" (a knowledge-graph delete) or "forgotten"
    superseded_by: str | None = None  # corrected: the new version's id

    def current(self) -> bool:
        return self.status == "active" and self.superseded_by is None


@dataclass
class Graph:
    seq: int = 1
    now: datetime = T0
    keys: dict[str, Key] = field(default_factory=dict)  # casefolded name -> key, oldest first
    memories: dict[str, Memory] = field(default_factory=dict)
    relations: dict[tuple[str, str, str], None] = field(default_factory=dict)  # oldest first
    #: memories forgotten by now: hidden from every read of this graph, past or present
    gone: set[str] = field(default_factory=set)

    def entity(self, name: str) -> Key | None:
        key = self.keys.get(fold(name))
        return key if key is not None and key.entity_type is not None else None

    def entities(self) -> list[str]:
        return [cf for cf, k in self.keys.items() if k.entity_type is not None]

    def observations(self, cf: str) -> list[Memory]:
        """An entity's observations, in the order added: its shown memories of the namespace."""
        return [
            m
            for mid in self.keys[cf].links
            if (m := self.memories[mid]).namespace == KG and m.current() and mid not in self.gone
        ]

    def link(self, cf: str, mid: str) -> None:
        self.keys[cf].links.append(mid)
        self.memories[mid].keys.append(cf)

    def unlink(self, cf: str, mid: str) -> None:
        self.keys[cf].links.remove(mid)
        self.memories[mid].keys.remove(cf)


def newest(items: list[Any], limit: int, offset: int = 0) -> list[Any]:
    """The `limit` items before the newest `offset`, in their order."""
    end = max(0, len(items) - offset)
    return items[max(0, end - limit) : end]


def norm(name: str) -> str:
    """A name as stored: whitespace collapsed, NFC."""
    return unicodedata.normalize("NFC", " ".join(name.split()))


def fold(name: str) -> str:
    """A name as matched: `norm`, any case."""
    return norm(name).casefold()


def dedup(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class GraphVersusModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="keytrail-kg-model-"))
        self.clock = Clock()
        self.settings = Settings(
            home=self.home,
            embedder="hash",
            threshold_overrides={"merge": 2.0, "dedup": 0.999},  # no aliases, no merges
            hub_min=HUB_MIN,
            snapshot_every=5,
            segment_bytes=4096,
            limits=Limits(page=PAGE),
        )
        self.kgs = [self._open() for _ in range(PROCESSES)]
        self.model = Graph()
        self.then: list[Graph] = [copy.deepcopy(self.model)]  # the model after seq 1, 2, ...
        self.counter = 0
        self.texts = list(TEXTS)
        self.last_seq = 1  # the point the last read as of the past asked for

    def _open(self) -> KnowledgeGraph:
        return KnowledgeGraph(Store(self.settings, embedder=HashEmbedder(), clock=self.clock))

    def teardown(self) -> None:
        for kg in self.kgs:
            kg.store.close()
        shutil.rmtree(self.home, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------

    def shown_texts(self) -> list[str]:
        """The texts of current memories in the namespace (or the fixed ones, if none)."""
        model = self.model
        shown = [m.content for m in model.memories.values() if m.namespace == KG and m.current()]
        return shown or TEXTS

    def _appended(self, seq: int | None, kg: KnowledgeGraph) -> None:
        """One event was appended (seq given) or none; the model's seq follows."""
        if seq is None:
            assert kg.store.state.seq <= self.model.seq, "a command that did nothing appended"
            return
        self.model.seq += 1
        assert seq == self.model.seq, (seq, self.model.seq)

    def _new_memories(self, kg: KnowledgeGraph, seq: int, made: list[tuple[str, str]]) -> None:
        """Learn the ids of the memories event `seq` made, (entity, text) each in order (the
        tools do not return them; the writer's state has them), and add them to the model."""
        nodes = [n for n in kg.store.state.memories.values() if n.created_seq == seq]
        assert [n.content for n in nodes] == [text for _, text in made], (nodes, made)
        for node, (cf, text) in zip(nodes, made, strict=True):
            self.model.memories[node.id] = Memory(node.id, text, KG, [])
            self.model.link(cf, node.id)

    def _refused(self, kg: KnowledgeGraph, error: type[Exception], fld: str, call: Any) -> None:
        try:
            call()
        except InvalidInput as exc:
            assert type(exc) is error and exc.field == fld, (error, fld, exc)
        else:
            raise AssertionError(f"not refused: {error.__name__} on {fld}")
        assert kg.store.state.seq <= self.model.seq, "a refused command appended"

    @invariant()
    def note_the_past(self) -> None:
        while len(self.then) < self.model.seq:
            noted = copy.deepcopy(self.model)
            noted.seq = len(self.then) + 1
            self.then.append(noted)

    # -- commands ------------------------------------------------------------------------

    @initialize(
        p=process,
        entries=st.lists(
            st.tuples(name_st, st.sampled_from(TYPES), texts_st), min_size=2, max_size=4
        ),
    )
    def first_entities(self, p: int, entries: list[tuple[str, str, list[str]]]) -> None:
        """A few entities to start with (short runs then reach shared observations, cuts and
        cascades); names told first by `remember` come later."""
        self.create_entities(p, entries)

    @rule(
        p=process,
        entries=st.lists(
            st.tuples(name_st, st.sampled_from(TYPES), texts_st), min_size=1, max_size=3
        ),
    )
    def create_entities(self, p: int, entries: list[tuple[str, str, list[str]]]) -> None:
        """Names that are entities already (any case, or earlier in the call) are ignored; a
        plain key of that name becomes the entity, its memories of the namespace observations
        already; texts it has already are skipped, but listed in the answer."""
        kg, model = self.kgs[p], self.model
        seen: set[str] = set()
        made: list[tuple[str, str]] = []
        want: list[dict[str, Any]] = []
        specs: list[tuple[str, str, str]] = []
        for name, entity_type, texts in entries:
            cf = fold(name)
            if cf in seen or model.entity(cf) is not None:
                continue
            seen.add(cf)
            key = model.keys.get(cf)
            have = set() if key is None else {m.content for m in model.observations(cf)}
            label = norm(name) if key is None else key.label
            specs.append((cf, label, entity_type))
            want.append({"name": label, "entityType": entity_type, "observations": dedup(texts)})
            made += [(cf, text) for text in dedup(texts) if text not in have]
        done = kg.create_entities([EntityInput(n, t, ts) for n, t, ts in entries])
        assert msgspec.to_builtins(done.entities) == want, (done, want)
        event(f"create_entities: {'some' if specs else 'none'} new")
        self._appended(done.seq if specs else None, kg)
        assert (done.seq is None) == (not specs)
        for cf, label, entity_type in specs:
            key = model.keys.setdefault(cf, Key(label, None))
            key.entity_type = entity_type
        if done.seq is not None:
            self._new_memories(kg, done.seq, made)

    @rule(
        p=process,
        entries=st.lists(st.tuples(known_st, texts_st), min_size=1, max_size=3),
    )
    def add_observations(self, p: int, entries: list[tuple[str, list[str]]]) -> None:
        """To existing entities only (an unknown one refuses the call: nothing written); texts
        an entity has already (or was given earlier in the call) are skipped."""
        kg, model = self.kgs[p], self.model
        call = [ObservationInput(n, ts) for n, ts in entries]
        unknown = [i for i, (n, _) in enumerate(entries) if model.entity(n) is None]
        if unknown:
            event("add_observations: an unknown entity")
            fld = f"observations[{unknown[0]}].entityName"
            self._refused(kg, NotFound, fld, lambda: kg.add_observations(call))
            return
        known: dict[str, set[str]] = {}
        made: list[tuple[str, str]] = []
        want: list[dict[str, Any]] = []
        for name, texts in entries:
            cf = fold(name)
            have = known.setdefault(cf, {m.content for m in model.observations(cf)})
            added = [t for t in dedup(texts) if t not in have]
            have.update(added)
            made += [(cf, t) for t in added]
            want.append({"entityName": model.keys[cf].label, "addedObservations": added})
        done = kg.add_observations(call)
        assert msgspec.to_builtins(done.results) == want, (done, want)
        self._appended(done.seq if made else None, kg)
        assert (done.seq is None) == (not made)
        if done.seq is not None:
            self._new_memories(kg, done.seq, made)

    @rule(
        p=process,
        entries=st.lists(st.tuples(known_st, doomed_st), min_size=1, max_size=3),
    )
    def delete_observations(self, p: int, entries: list[tuple[str, list[str]]]) -> None:
        """By exact text. An observation another entity has too is only unlinked from the
        entities named; otherwise it is deleted (a plain concept key does not keep it)."""
        kg, model = self.kgs[p], self.model
        doomed: dict[str, dict[str, None]] = {}  # memory -> the entities it goes from
        texts: dict[str, None] = {}
        missing: list[str] = []
        # (entity, text) pairs: each asked, and each deleted, counts once
        asked: dict[tuple[str, str], str] = {}
        matched: set[tuple[str, str]] = set()
        for name, contents in entries:
            cf = fold(name)
            for c in dedup(contents):
                asked.setdefault((cf, c), c)
            if model.entity(name) is None:
                missing.append(norm(name))
                continue
            for m in model.observations(cf):
                if m.content in contents:
                    doomed.setdefault(m.id, {})[cf] = None
                    texts[m.content] = None
                    matched.add((cf, m.content))
        deleted: list[str] = []
        unlinked: list[tuple[str, str]] = []
        for mid, entities in doomed.items():
            others = [k for k in model.memories[mid].keys if k not in entities and model.entity(k)]
            if others:
                unlinked += [(cf, mid) for cf in entities]
            else:
                deleted.append(mid)
        count, requested = len(matched), len(asked)
        # the texts asked and not deleted (not the entity's, or no such entity), once each
        not_found = [*{t: None for pair, t in asked.items() if pair not in matched}]
        message = (
            "Observations deleted successfully"
            if count == requested
            else f"Deleted {count} of {requested} observations. Not found: "
            + "; ".join(not_found)
            + (f". Entities not found: {', '.join(missing)}" if missing else "")
        )
        done = kg.delete_observations([ObservationInput(n, ts) for n, ts in entries])
        got = msgspec.to_builtins(done)
        got.pop("seq")
        assert got == {
            "success": True,
            "message": message,
            "deleted": list(texts),
            "notFound": not_found,
            "deletedCount": count,
            "missingEntities": missing,
        }, got
        event(f"delete_observations: {'some unlinked' if unlinked else 'none unlinked'}")
        self._appended(done.seq if doomed else None, kg)
        for mid in deleted:
            model.memories[mid].status = "deleted"
        for cf, mid in unlinked:
            model.unlink(cf, mid)

    @rule(p=process, index=pick, which=pick)
    def delete_a_shared_observation(self, p: int, index: int, which: int) -> None:
        """delete_observations of an observation other entities have too, from one of them."""
        model = self.model
        shared = [
            m
            for m in model.memories.values()
            if m.namespace == KG and m.current() and sum(map(bool, map(model.entity, m.keys))) > 1
        ]
        if shared:
            m = shared[index % len(shared)]
            names = [model.keys[k].label for k in m.keys if model.entity(k)]
            self.delete_observations(p, [(names[which % len(names)], [m.content])])

    @rule(p=process, names=st.lists(known_st, min_size=1, max_size=3))
    def delete_entities(self, p: int, names: list[str]) -> None:
        """Their relations go; their observations linked to no other key are deleted, the
        others unlinked from them; the keys stay, as plain keys."""
        kg, model = self.kgs[p], self.model
        found: dict[str, None] = {}
        # A name asked twice, in any case, is one entity: counted and reported once.
        not_found: dict[str, str] = {}
        for name in names:
            if model.entity(name) is None:
                not_found.setdefault(fold(name), norm(name))
            else:
                found[fold(name)] = None
        missing, asked = list(not_found.values()), len(found) + len(not_found)
        done = kg.delete_entities(names)
        got = msgspec.to_builtins(done)
        got.pop("seq")
        if not found:
            assert done.seq is None and got == {
                "success": True,
                "message": f"Deleted 0 of {asked} entities. Not found: " + ", ".join(missing),
                "deleted": [],
                "notFound": missing,
                "deletedCount": 0,
                "missingEntities": [],
            }, got
            return
        labels = [model.keys[cf].label for cf in found]
        message = (
            "Entities deleted successfully"
            if not missing
            else f"Deleted {len(found)} of {asked} entities. Not found: " + ", ".join(missing)
        )
        assert got == {
            "success": True,
            "message": message,
            "deleted": labels,
            "notFound": missing,
            "deletedCount": len(found),
            "missingEntities": [],
        }, got
        self._appended(done.seq, kg)
        assert done.seq is not None
        deleted: dict[str, None] = {}
        unlinked: list[tuple[str, str]] = []
        for cf in found:
            for mid in model.keys[cf].links:
                m = model.memories[mid]
                if m.namespace != KG or not m.current():  # only what the entity shows
                    continue
                if all(k in found for k in m.keys):
                    deleted[mid] = None
                else:
                    unlinked.append((cf, mid))
        event(f"delete_entities: {'some unlinked' if unlinked else 'none unlinked'}")
        for mid in deleted:
            model.memories[mid].status = "deleted"
        for cf, mid in unlinked:
            model.unlink(cf, mid)
        for rid in [r for r in model.relations if r[0] in found or r[1] in found]:
            del model.relations[rid]
        for cf in found:
            model.keys[cf].entity_type = None

    @rule(
        p=process,
        relations=st.lists(
            st.tuples(name_st, name_st, st.sampled_from(RELATION_TYPES)), min_size=1, max_size=3
        ),
    )
    def create_relations(self, p: int, relations: list[tuple[str, str, str]]) -> None:
        kg, model = self.kgs[p], self.model
        call = [RelationInput(a, b, t) for a, b, t in relations]
        for i, (a, b, _) in enumerate(relations):
            for end, name in (("from", a), ("to", b)):
                if model.entity(name) is None:
                    event("create_relations: an unknown entity")
                    fld = f"relations[{i}].{end}"
                    self._refused(kg, NotFound, fld, lambda: kg.create_relations(call))
                    return
        new: dict[tuple[str, str, str], None] = {}
        for a, b, t in relations:
            rid = (fold(a), fold(b), t)
            if rid not in model.relations:
                new[rid] = None
        done = kg.create_relations(call)
        assert msgspec.to_builtins(done.relations) == [
            {"from": model.keys[a].label, "to": model.keys[b].label, "relationType": t}
            for a, b, t in new
        ], done
        self._appended(done.seq if new else None, kg)
        model.relations.update(new)

    @rule(
        p=process,
        relations=st.lists(
            st.tuples(name_st, name_st, st.sampled_from(RELATION_TYPES)), min_size=1, max_size=3
        ),
    )
    def delete_relations(self, p: int, relations: list[tuple[str, str, str]]) -> None:
        kg, model = self.kgs[p], self.model
        gone: dict[tuple[str, str, str], str] = {}
        # A relation asked twice (names in any case) is one: counted and reported once; those
        # that matched nothing are listed as first asked.
        not_found: dict[tuple[str, str, str], str] = {}
        for a, b, t in relations:
            rid = (fold(a), fold(b), t)
            if model.entity(a) and model.entity(b) and rid in model.relations:
                gone[rid] = f"{model.keys[rid[0]].label} {t} {model.keys[rid[1]].label}"
            else:
                not_found.setdefault(rid, f"{norm(a)} {t} {norm(b)}")
        message = (
            "Relations deleted successfully"
            if not not_found
            else f"Deleted {len(gone)} of {len(gone) + len(not_found)} relations. Not found: "
            + "; ".join(not_found.values())
        )
        done = kg.delete_relations([RelationInput(a, b, t) for a, b, t in relations])
        got = msgspec.to_builtins(done)
        got.pop("seq")
        assert got == {
            "success": True,
            "message": message,
            "deleted": list(gone.values()),
            "notFound": list(not_found.values()),
            "deletedCount": len(gone),
            "missingEntities": [],
        }, got
        self._appended(done.seq if gone else None, kg)
        for rid in gone:
            del model.relations[rid]

    @rule(
        p=process,
        labels=st.lists(entity_st, min_size=1, max_size=2)
        | st.lists(st.sampled_from([*NAMES, "note"]), min_size=1, max_size=3),
        ns=st.sampled_from([KG, "work"]),
        word=st.sampled_from(["tea", "cats", "Lyon"]),
    )
    def remember(self, p: int, labels: list[str], ns: str, word: str) -> None:
        """A memory told under names (entity or not): in the namespace, an observation of
        each entity it names, now and of an entity made of that key later."""
        kg, model = self.kgs[p], self.model
        self.counter += 1
        content = f"note number {self.counter} about {word}"
        self.texts.append(content)
        done = kg.store.remember(content, keys=labels, namespace=ns)
        self._appended(done.seq, kg)
        model.memories[done.memory_id] = Memory(done.memory_id, content, ns, [])
        for label in labels:
            cf = fold(label)
            if cf not in model.memories[done.memory_id].keys:
                model.keys.setdefault(cf, Key(norm(label), None))
                model.link(cf, done.memory_id)
        assert [k.label.casefold() for k in done.keys] == model.memories[done.memory_id].keys

    @rule(p=process, index=pick, seen=st.booleans())
    def forget(self, p: int, index: int, seen: bool) -> None:
        """Erased: hidden now and from every read as of the past (deleted ones too). Any
        memory, or (`seen`) an observation the last read as of the past could show, so that
        reading that point again asks a state cached before the forget."""
        model = self.model
        ids = list(model.memories)
        if seen:
            then = self.then[self.last_seq - 1]
            ids = [m.id for m in then.memories.values() if m.current() and m.id not in model.gone]
        if not ids:
            return
        mid = ids[index % len(ids)]
        kg = self.kgs[p]
        if model.memories[mid].status == "forgotten":
            self._refused(kg, NotFound, "memory_id", lambda: kg.store.forget(mid))
            return
        event(f"forget: a memory {model.memories[mid].status}")
        done = kg.store.forget(mid)
        self._appended(done.seq, kg)
        model.memories[mid].status = "forgotten"
        model.gone.add(mid)

    @rule(
        p=process,
        index=pick,
        labels=st.none() | st.lists(st.sampled_from([*NAMES, "note"]), min_size=1, max_size=2),
    )
    def correct(self, p: int, index: int, labels: list[str] | None) -> None:
        """A memory corrected with the memory tools: the new version takes the old one's place
        on every entity it names (its keys, or the old version's), at the end; the old one is
        no observation any more. A deleted or forgotten memory is refused (NotFound), and so is
        one corrected already (InvalidInput): correct the current version."""
        model = self.model
        if not model.memories:
            return
        old = list(model.memories.values())[index % len(model.memories)]
        kg = self.kgs[p]
        self.counter += 1
        content = f"note number {self.counter}, corrected"

        def call() -> Any:
            return kg.store.correct(old.id, content, keys=labels)

        if old.status != "active":
            event(f"correct: a memory {old.status}")
            self._refused(kg, NotFound, "memory_id", call)
            return
        if old.superseded_by is not None:
            event("correct: a memory corrected already")
            self._refused(kg, InvalidInput, "memory_id", call)
            return
        event(f"correct: keys {'kept' if labels is None else 'given'}")
        done = call()
        self._appended(done.seq, kg)
        self.texts.append(content)
        new = Memory(done.memory_id, content, old.namespace, [])
        model.memories[new.id] = new
        old.superseded_by = new.id
        for label in old.keys if labels is None else labels:
            cf = fold(label)
            if cf not in new.keys:
                model.keys.setdefault(cf, Key(norm(label), None))
                model.link(cf, new.id)
        assert [k.label.casefold() for k in done.keys] == new.keys, (done.keys, new.keys)

    @rule(seconds=st.sampled_from(STEPS))
    def advance_clock(self, seconds: int) -> None:
        self.clock.now += timedelta(seconds=seconds)
        self.model.now = self.clock.now

    @rule(p=process, how=st.sampled_from(["close", "kill"]))
    def reopen(self, p: int, how: str) -> None:
        event(f"reopen: {how}")
        old = self.kgs[p].store
        if how == "close":
            old.close()
        else:
            old.log.close()  # what dying leaves: no closing snapshot
        self.kgs[p] = self._open()

    @rule(which=st.sampled_from(["archived", "all"]))
    def drop_snapshots(self, which: str) -> None:
        """Snapshots are caches, deletable at any time: past reads then fold longer tails of
        the log (and keep the state they built as a snapshot), and an open replays it."""
        store = self.kgs[0].store
        for path in store.snapshot_files():
            if which == "all" or path != store.snapshot_path:
                path.unlink(missing_ok=True)

    # -- reads, now or as of a point -----------------------------------------------------

    def _point(self, at: tuple[str, int] | None) -> tuple[object, Graph]:
        """The as_of a read passes (None: now), and the model as of that point."""
        if at is None:
            return None, self.model
        how, where = at
        head = self.model.seq
        if how == "again":
            how, where = "seq", self.last_seq - 1
        if how == "seq":
            seq = 1 + where % head
            as_of: object = seq
        else:
            moment = (
                self.then[where % head].now
                if how == "event time"
                else T0 + (self.clock.now - T0) * (where / 10_000)
            )
            seq = max(i for i, then in enumerate(self.then, 1) if then.now <= moment)
            as_of = moment.isoformat()
        event(f"as of: {'the head' if seq == head else 'the past'}")
        self.last_seq = seq
        # Reads only look: a shallow copy, with what was forgotten since hidden there too.
        return as_of, dataclasses.replace(self.then[seq - 1], gone=set(self.model.gone))

    def _shown(self, g: Graph, cf: str, relations_total: int, limit: int, offset: int = 0) -> Any:
        obs = g.observations(cf)
        key = g.keys[cf]
        return {
            "name": key.label,
            "entityType": key.entity_type,
            "observations": [m.content for m in newest(obs, limit, offset)],
            "observations_total": len(obs),
            "relations_total": relations_total,
        }

    def _held(
        self, g: Graph, ids: list[str], held_for: Any, limit: int, offset: int = 0
    ) -> tuple[list[Any], int, dict[str, int]]:
        """The relations an answer holds: each entity's newest `limit` listed (once)."""
        per: dict[str, list[tuple[str, str, str]]] = {cf: [] for cf in ids}
        held = []
        for rid in g.relations:
            owners = held_for(rid)
            if owners:
                held.append(rid)
                for cf in owners:
                    per[cf].append(rid)
        kept = {rid for rids in per.values() for rid in newest(rids, limit, offset)}
        listed = [
            {"from": g.keys[a].label, "to": g.keys[b].label, "relationType": t}
            for a, b, t in held
            if (a, b, t) in kept
        ]
        return listed, len(held), {cf: len(rids) for cf, rids in per.items()}

    def _page(self, g: Graph, ids: list[str], held_for: Any, total: int, offset: int) -> Any:
        relations, held, per = self._held(g, ids, held_for, PAGE)
        end = offset + len(ids)
        return {
            "entities": [self._shown(g, cf, per[cf], PAGE) for cf in ids],
            "relations": relations,
            "relations_total": held,
            "total": total,
            "offset": offset,
            "next_offset": end if end < total else None,
        }

    @rule(
        p=process,
        at=point,
        limit=st.none() | st.integers(1, PAGE),
        offset=st.integers(0, 6),
    )
    def read_graph(self, p: int, at: Any, limit: int | None, offset: int) -> None:
        """A page of entities, oldest first, with the relations going out of them."""
        as_of, g = self._point(at)
        every = g.entities()
        page = every[offset : offset + (limit or PAGE)]

        def going_out(rid: tuple[str, str, str]) -> tuple[str, ...]:
            return (rid[0],) if rid[0] in page else ()

        got = msgspec.to_builtins(self.kgs[p].read_graph(limit, offset, as_of=as_of))
        want = self._page(g, page, going_out, len(every), offset)
        if any(e["observations_total"] > PAGE for e in want["entities"]):
            event("read_graph: an entity past the cut")
        assert got == want, (as_of, got, want)

    @rule(
        p=process,
        at=point,
        query=st.sampled_from(QUERIES),
        limit=st.none() | st.integers(1, PAGE),
        offset=st.integers(0, 3),
    )
    def search_nodes(self, p: int, at: Any, query: str, limit: int | None, offset: int) -> None:
        """Entities whose name, type or any observation (listed or not) holds a word of the
        query, any case, with the relations touching them."""
        as_of, g = self._point(at)
        words = query.casefold().split()

        def hit(text: str) -> bool:
            return any(w in text.casefold() for w in words)

        matched = [
            cf
            for cf in g.entities()
            if hit(g.keys[cf].label)
            or hit(g.keys[cf].entity_type or "")
            or any(hit(m.content) for m in g.observations(cf))
        ]
        page = matched[offset : offset + (limit or PAGE)]

        def touching(rid: tuple[str, str, str]) -> set[str]:
            return {rid[0], rid[1]} & set(page)

        got = msgspec.to_builtins(self.kgs[p].search_nodes(query, limit, offset, as_of=as_of))
        want = self._page(g, page, touching, len(matched), offset)
        assert got == want, (as_of, query, got, want)

    @rule(p=process, at=point, names=st.lists(name_st, max_size=PAGE + 1))
    def open_nodes(self, p: int, at: Any, names: list[str]) -> None:
        """The named entities (unknown names left out) and the relations between them; more
        names than a page: refused."""
        kg = self.kgs[p]
        as_of, g = self._point(at)
        if len(names) > PAGE:
            self._refused(kg, InvalidInput, "names", lambda: kg.open_nodes(names, as_of=as_of))
            return
        found = list(dict.fromkeys(fold(n) for n in names if g.entity(n) is not None))

        def between(rid: tuple[str, str, str]) -> set[str]:
            return {rid[0], rid[1]} if rid[0] in found and rid[1] in found else set()

        got = msgspec.to_builtins(kg.open_nodes(names, as_of=as_of))
        assert got == self._page(g, found, between, len(found), 0), (as_of, names, got)

    @rule(
        p=process,
        at=point,
        name=known_st,
        limit=st.none() | st.integers(1, PAGE),
        offset=st.integers(0, 8),
    )
    def read_entity(self, p: int, at: Any, name: str, limit: int | None, offset: int) -> None:
        """A page back through one entity's observations and relations (in or out): offset 0
        the newest `limit` of each, next_offset the ones before, null once both are done."""
        kg = self.kgs[p]
        as_of, g = self._point(at)
        if g.entity(name) is None:
            try:
                kg.read_entity(name, limit, offset, as_of=as_of)
            except NotFound as exc:
                assert exc.field == "name", exc
                later = as_of is not None and self.model.entity(name) is not None
                assert ("not at that point in time" in str(exc)) == later, (as_of, exc)
            else:
                raise AssertionError(f"read_entity({name!r}, as_of={as_of!r}) not refused")
            return
        cf = fold(name)
        size = limit or PAGE

        def touching(rid: tuple[str, str, str]) -> set[str]:
            return {rid[0], rid[1]} & {cf}

        relations, held, _ = self._held(g, [cf], touching, size, offset)
        entity = self._shown(g, cf, held, size, offset)
        if max(entity["observations_total"], held) > size + offset:
            event("read_entity: more before this page")
        end = offset + size
        want = {
            "entity": entity,
            "relations": relations,
            "offset": offset,
            "next_offset": end if end < max(entity["observations_total"], held) else None,
        }
        got = msgspec.to_builtins(kg.read_entity(name, limit, offset, as_of=as_of))
        assert got == want, (as_of, name, got, want)

    @rule(p=process, at=point)
    def memory_stats(self, p: int, at: Any) -> None:
        """Deleted observations are counted as deleted, forgotten ones (then or since) as
        forgotten; keys and links stay (a delete unlinks only what it unlinks)."""
        as_of, g = self._point(at)
        stats = view(self.kgs[p].store, as_of).memory_stats()
        namespaces: dict[str, int] = {}
        deleted = forgotten = superseded = 0
        for m in g.memories.values():
            if m.status == "forgotten" or m.id in g.gone:
                forgotten += 1
            elif m.status == "deleted":
                deleted += 1
            elif m.superseded_by is not None:
                superseded += 1
            else:
                namespaces[m.namespace] = namespaces.get(m.namespace, 0) + 1
        hubs = sum(
            1
            for k in g.keys.values()
            if sum(1 for mid in k.links if g.memories[mid].current() and mid not in g.gone)
            >= HUB_MIN
        )
        got = (
            stats.seq,
            stats.memories,
            stats.namespaces,
            stats.superseded,
            stats.deleted,
            stats.forgotten,
        )
        want = (
            g.seq,
            sum(namespaces.values()),
            dict(sorted(namespaces.items())),
            superseded,
            deleted,
            forgotten,
        )
        assert got == want, (as_of, got, want)
        assert (stats.keys, stats.links, stats.hubs) == (
            len(g.keys),
            sum(len(k.links) for k in g.keys.values()),
            hubs,
        ), (as_of, stats)


GRAPH = settings(BOUNDED, max_examples=40, stateful_step_count=50)

TestGraphVersusModel = GraphVersusModel.TestCase
TestGraphVersusModel.settings = GRAPH
