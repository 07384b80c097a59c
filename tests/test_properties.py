"""Properties: replay equals live state, snapshot + tail equals replay, events round-trip."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_hubs import plain_read_key

from keytrail.core import HashEmbedder, InvalidInput, KeytrailError, Settings, Store, keyrank
from keytrail.core.config import Limits
from keytrail.core.history import history
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)
from keytrail.core.queries import QUERY_POWER, Queries, visible
from keytrail.core.timetravel import TimeView, resolve, view
from keytrail.events import (
    EVENT_TYPES,
    AnyEvent,
    EntitiesCreated,
    EntitiesDeleted,
    EntitySpec,
    EventLog,
    FoldRules,
    GraphImported,
    ImportedKey,
    ImportedMemory,
    KeyAliased,
    KeyLink,
    KeyMemory,
    KeyRetyped,
    KeyUnaliased,
    LinkDelta,
    LinksAdjusted,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    NewMemory,
    ObservationsDeleted,
    RelationsAdded,
    RelationSpec,
    RelationsRemoved,
    RulesChanged,
    Similar,
    StoreCreated,
    TurnRecorded,
    decode_line,
    encode_line,
)
from keytrail.events.redact import blank_label_keys, redacted_ids
from keytrail.projections import GraphState, fold
from keytrail.projections import snapshot as snapshots
from keytrail.projections.keygraph import erase_labels

T0 = datetime(2025, 1, 1, 8, 30, 0, 123456, tzinfo=UTC)

# -- command sequences -----------------------------------------------------------------------

KEYS = ["apple", "fruit", "Newton", "gravity", "physics", "strawberry", "tea", "Paris"]
NAMESPACES = [None, "default", "work", "home.kitchen"]
CONTENTS = [
    "Newton saw an apple fall from a tree",
    "The user likes strawberries and apples",
    "Gravity pulls the apple towards the earth",
    "The user drinks green tea every morning",
    "Paris is the capital of France",
]

remember_op = st.tuples(
    st.just("remember"),
    st.integers(0, len(CONTENTS) - 1),
    st.booleans(),  # make the content unique (else it may deduplicate)
    st.lists(st.sampled_from(KEYS), min_size=1, max_size=4),
    st.sampled_from(NAMESPACES),
    st.sampled_from([None, None, 30, 600, 7200]),  # ttl seconds
    st.booleans(),  # related to an earlier memory
)
correct_op = st.tuples(
    st.just("correct"),
    st.integers(0, 99),
    st.integers(0, 99),
    st.one_of(st.none(), st.lists(st.sampled_from(KEYS), min_size=1, max_size=3)),
)
#: remember a fact anew in the namespace of a memory, then make it that one's next version
#: (correct with by_memory_id), or name an earlier memory as the new version (mostly refused)
replace_op = st.tuples(
    st.just("replace"),
    st.integers(0, 99),
    st.integers(0, len(CONTENTS) - 1),
    st.one_of(st.none(), st.integers(0, 99)),
)
read_op = st.tuples(st.just("read"), st.integers(0, 99), st.booleans())
forget_op = st.tuples(st.just("forget"), st.integers(0, 99))
#: a memory under a key few others share (or under the keys extracted from its text): a
#: forget of it (and of the others under that key) erases the key's label
own_op = st.tuples(st.just("remember_own"), st.integers(0, len(CONTENTS) - 1), st.integers(0, 2))
cleanup_op = st.tuples(st.just("cleanup"), st.sampled_from([0, 45, 700, 8000]))
clock_op = st.tuples(
    st.just("tick"), st.sampled_from([-120, -1, 1, 40, 4000])
)  # clocks may go backwards
reopen_op = st.tuples(st.just("reopen"))
batch_op = st.tuples(
    st.just("batch"), st.lists(st.integers(0, len(CONTENTS) - 1), min_size=1, max_size=4)
)

ENTITIES = ["Alice", "Bob", "alice", "Paris", "Newton"]
RELATION_TYPES = ["knows", "lives_in"]
OBSERVATIONS = ["likes tea", "lives in Lyon", "plays chess"]
entity_op = st.tuples(
    st.just("entities"),
    st.lists(
        st.tuples(
            st.sampled_from(ENTITIES),
            st.sampled_from(["person", "city"]),
            st.lists(st.sampled_from(OBSERVATIONS), max_size=2),
        ),
        min_size=1,
        max_size=3,
    ),
)
relation_op = st.tuples(
    st.sampled_from(["relate", "unrelate"]),
    st.sampled_from(ENTITIES),
    st.sampled_from(ENTITIES),
    st.sampled_from(RELATION_TYPES),
)
observe_op = st.tuples(
    st.sampled_from(["observe", "unobserve"]),
    st.sampled_from(ENTITIES),
    st.lists(st.sampled_from(OBSERVATIONS), min_size=1, max_size=2),
)
delete_entity_op = st.tuples(st.just("delete_entities"), st.sampled_from(ENTITIES))
forget_text_op = st.tuples(st.just("forget_text"), st.sampled_from(OBSERVATIONS))
# An observation text remembered under two entity names: an observation of both, which
# delete_observations on one of them unlinks rather than forgets.
share_op = st.tuples(
    st.just("share"),
    st.sampled_from(OBSERVATIONS),
    st.sampled_from(ENTITIES),
    st.sampled_from(ENTITIES),
)
FIXTURES = Path(__file__).parent / "fixtures"
import_op = st.tuples(st.just("import"), st.sampled_from(["memory.jsonl", "keymem-graph.json"]))

op = st.one_of(
    entity_op,
    relation_op,
    observe_op,
    delete_entity_op,
    forget_text_op,
    own_op,
    share_op,
    import_op,
    remember_op,
    remember_op,
    correct_op,
    replace_op,
    read_op,
    read_op,
    forget_op,
    cleanup_op,
    clock_op,
    reopen_op,
    batch_op,
)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def open_store(home: Path, clock: Clock, snapshot_every: int) -> Store:
    return Store(
        Settings(home=home, embedder="hash", snapshot_every=snapshot_every, limits=Limits()),
        embedder=HashEmbedder(),
        clock=clock,
    )


def encoded(state: GraphState) -> bytes:
    # A state opened from a snapshot holds undecoded nodes until looked at: decode them all.
    return msgspec.msgpack.encode(snapshots.materialize(state))


def replay(home: Path) -> GraphState:
    return fold(EventLog(home).iter_new())


def run(
    store: Store,
    clock: Clock,
    ops: list[tuple[Any, ...]],
    home: Path,
    snapshot_every: int,
    ids: list[str] | None = None,
) -> Store:
    """Apply `ops`; `ids` (the memories made so far) carries over between calls."""
    ids = [] if ids is None else ids
    counter = 0
    for item in ops:
        kind = item[0]
        seq = store.state.seq
        try:
            if kind == "remember":
                _, c, unique, keys, ns, ttl, related = item
                counter += 1
                content = CONTENTS[c] + (f" #{counter}" if unique else "")
                r = store.remember(
                    content,
                    keys,
                    namespace=ns,
                    ttl_seconds=ttl,
                    related_to=[ids[-1]] if related and ids else None,
                    key_types={"Newton": "name"} if "Newton" in keys else None,
                )
                ids.append(r.memory_id)
            elif kind == "remember_own":
                _, c, n = item
                counter += 1
                r5 = store.remember(f"{CONTENTS[c]} o{counter}", [f"own label {n}"] if n else None)
                ids.append(r5.memory_id)
            elif kind == "batch":
                from keytrail.core import RememberItem

                out = store.remember_batch(
                    [RememberItem(CONTENTS[c], [KEYS[c], "fruit"]) for c in item[1]]
                )
                ids += [o.memory_id for o in out]
            elif kind == "correct" and ids:
                _, i, c, keys = item
                counter += 1
                r2 = store.correct(
                    ids[i % len(ids)], f"{CONTENTS[c % len(CONTENTS)]} v{counter}", keys
                )
                ids.append(r2.memory_id)
            elif kind == "replace" and ids:
                _, i, c, earlier = item
                stale = store.state.memories[ids[i % len(ids)]]
                if earlier is None:
                    counter += 1
                    told = store.remember(
                        f"{CONTENTS[c]} r{counter}", [KEYS[c]], namespace=stale.namespace
                    )
                    ids.append(told.memory_id)
                    by = told.memory_id
                    seq = store.state.seq  # what the correct below may refuse to add to
                else:
                    by = ids[earlier % len(ids)]
                store.correct(stale.id, by_memory_id=by)
            elif kind == "correct_valid" and ids:  # a version dated in the world
                _, i, c, shift = item
                counter += 1
                r3 = store.correct(
                    ids[i % len(ids)],
                    f"{CONTENTS[c % len(CONTENTS)]} w{counter}",
                    valid_from=clock.now + timedelta(seconds=shift),
                )
                ids.append(r3.memory_id)
            elif kind == "remember_valid":
                _, c, ns, shift = item
                counter += 1
                r4 = store.remember(
                    f"{CONTENTS[c]} u{counter}",
                    [KEYS[c], "fruit"],
                    namespace=ns,
                    valid_from=clock.now + timedelta(seconds=shift),
                )
                ids.append(r4.memory_id)
            elif kind == "read" and ids:
                _, i, via = item
                memory_id = ids[i % len(ids)]
                node = store.state.memories[memory_id]
                store.read_memory(
                    memory_id,
                    via_key_id=node.keys[0] if via else None,
                    query="what happened?" if via else None,
                )
            elif kind == "forget" and ids:
                store.forget(ids[item[1] % len(ids)], reason="property test")
            elif kind == "forget_text":  # an observation too, deleted or not
                told = store.state.memories.values()
                found = [m.id for m in told if m.content == item[1] and m.status != "forgotten"]
                if found:
                    store.forget(found[0], reason="property test")
            elif kind == "cleanup":
                clock.now += timedelta(seconds=item[1], microseconds=1234)
                store.cleanup_expired()
            elif kind == "tick":
                clock.now += timedelta(seconds=item[1], microseconds=1234)
            elif kind == "entities":
                KnowledgeGraph(store).create_entities(
                    [EntityInput(name, kind_, obs) for name, kind_, obs in item[1]]
                )
            elif kind in ("relate", "unrelate"):
                kg = KnowledgeGraph(store)
                rel = [RelationInput(item[1], item[2], item[3])]
                if kind == "relate":
                    kg.create_relations(rel)
                else:
                    kg.delete_relations(rel)
            elif kind == "observe":
                KnowledgeGraph(store).add_observations([ObservationInput(item[1], item[2])])
            elif kind == "unobserve":
                KnowledgeGraph(store).delete_observations([ObservationInput(item[1], item[2])])
            elif kind == "share":
                store.remember(item[1], [item[2], item[3]])
            elif kind == "delete_entities":
                KnowledgeGraph(store).delete_entities([item[1]])
            elif kind == "import":
                from keytrail.core.importers import import_text

                import_text(store, (FIXTURES / item[1]).read_text(), item[1])
            elif kind == "reopen":
                store.close()  # writes a snapshot; the next events are its tail
                store = open_store(home, clock, snapshot_every)
        except InvalidInput:  # NotFound too: reading a forgotten memory, correcting an old one
            assert store.state.seq == seq, "a refused command appended something"
    return store


#: Random ops rarely delete a shared observation (unlinked, not forgotten): always try one.
SHARED_OBSERVATION_OPS: list[tuple[Any, ...]] = [
    ("entities", [("Alice", "person", ["likes tea"]), ("Bob", "person", [])]),
    ("share", "plays chess", "Alice", "Bob"),
    ("reopen",),
    ("unobserve", "Alice", ["plays chess", "likes tea"]),
    ("unobserve", "Bob", ["plays chess"]),
]


#: An observation deleted, then its entity, then the first forgotten: reads as of before each
#: delete show it until the forget, and a forget after a delete erases it all the same.
DELETED_OBSERVATION_OPS: list[tuple[Any, ...]] = [
    ("entities", [("Alice", "person", ["likes tea", "plays chess"])]),
    ("unobserve", "Alice", ["likes tea"]),
    ("delete_entities", "Alice"),
    ("forget_text", "likes tea"),
]


#: Memories under keys of their own and under extracted keys, forgotten one by one: each
#: forget of the last memory under a key erases its label.
OWN_LABEL_OPS: list[tuple[Any, ...]] = [
    ("remember_own", 0, 1),
    ("remember_own", 4, 0),
    ("remember_own", 1, 1),
    ("forget", 0),
    ("remember_own", 2, 2),
    ("forget", 1),
    ("forget", 2),
    ("reopen",),
    ("forget", 3),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=4, max_size=30), snapshot_every=st.integers(2, 50))
@example(ops=SHARED_OBSERVATION_OPS, snapshot_every=2)
@example(ops=DELETED_OBSERVATION_OPS, snapshot_every=2)
@example(ops=OWN_LABEL_OPS, snapshot_every=2)
def test_replay_and_snapshot_plus_tail_equal_the_live_state(
    ops: list[tuple[Any, ...]], snapshot_every: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, snapshot_every)
        store = run(store, clock, ops, home, snapshot_every)
        live = encoded(store.state)
        # (a) the log alone, folded from nothing, is the live state
        full = replay(home)
        assert encoded(full) == live
        assert full.seq == store.state.seq == len(EventLog(home).read_new())
        # a second process that was open all along catches up to the same state
        assert encoded(store.refresh()) == live
        # (b) snapshot + tail: close (snapshot), reopen from it, and from a stale one
        snap_before_close = snapshots.load(store.snapshot_path)
        store.close()
        reopened = open_store(home, clock, 10_000)
        assert encoded(reopened.state) == live
        snap = snapshots.load(store.snapshot_path)
        assert snap is not None and snap.seq == full.seq
        if snap_before_close is not None and snap_before_close.seq < full.seq:
            # an older snapshot plus the longer tail gives the same state
            snapshots.save(store.snapshot_path, snap_before_close)
            assert encoded(open_store(home, clock, 10_000).state) == live
        # and with no cache at all
        shutil.rmtree(home / "cache")
        assert encoded(open_store(home, clock, 10_000).state) == live


def redacted(past: bytes, prefix: list[AnyEvent]) -> bytes:
    """An encoded past state as its log prefix folds now: a forget since has blanked the
    content in the line that created the memory (a deleted observation keeps its line)."""
    state = msgspec.msgpack.decode(past, type=GraphState)
    for memory_id in {m for event in prefix for m in redacted_ids(event)}:
        state.memories[memory_id].content = ""
    # ... and the labels of the keys that led to it alone (a blank label in the line)
    erase_labels(state, {k for event in prefix for _, k in blank_label_keys(event)})
    return encoded(state)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(op, min_size=3, max_size=15), cut=st.integers(1, 40))
@example(ops=OWN_LABEL_OPS, cut=4)
def test_replaying_a_prefix_equals_the_state_at_that_seq(
    ops: list[tuple[Any, ...]], cut: int
) -> None:
    """Folding is incremental: the first k events give the state the live store had at k."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, 10_000)
        seen: dict[int, bytes] = {store.state.seq: encoded(store.state)}
        ids: list[str] = []
        for item in ops:
            store = run(store, clock, [item], home, 10_000, ids)
            seen[store.state.seq] = encoded(store.state)
        events = EventLog(home).read_new()
        k = min(cut, len(events))
        if k in seen:
            assert encoded(fold(events[:k])) == redacted(seen[k], events[:k])
        state = fold(events[:k])
        assert encoded(fold(events[k:], state)) == encoded(store.state)


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(op, min_size=3, max_size=15), cut=st.integers(1, 40))
@example(ops=DELETED_OBSERVATION_OPS[:3], cut=2)
@example(ops=DELETED_OBSERVATION_OPS[:3], cut=3)
@example(ops=DELETED_OBSERVATION_OPS, cut=2)
def test_reads_as_of_a_seq_show_what_the_log_prefix_held(
    ops: list[tuple[Any, ...]], cut: int
) -> None:
    """as_of(k) answers from the first k events: every memory current then is listed and
    counted, a knowledge-graph observation deleted since included, except what was forgotten
    since (its creating line is redacted: erased from the past too)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = run(open_store(home, clock, 7), clock, ops, home, 7)
        events = EventLog(home).read_new()
        k = min(cut, len(events))
        prefix, now = fold(events[:k]), events[k - 1].at
        erased = {m for event in events for m in redacted_ids(event)}

        def current(node: Any) -> bool:
            return (
                node.status == "active"
                and node.superseded_by is None
                and (node.expires_at is None or node.expires_at > now)
                and node.id not in erased
            )

        past = view(store, k)
        listed = [m.memory_id for m in past.list_memories(limit=200).memories]
        assert listed == [n.id for n in reversed(prefix.memories.values()) if current(n)]
        stats = past.memory_stats()
        nodes = list(prefix.memories.values())
        forgotten = [n for n in nodes if n.status == "forgotten" or n.id in erased]
        deleted = [n for n in nodes if n.status == "deleted" and n.id not in erased]
        assert (stats.memories, stats.forgotten, stats.deleted) == (
            len(listed),
            len(forgotten),
            len(deleted),
        )
        kg = KnowledgeGraph(store)
        graph = {e.name: e.observations for e in kg.read_graph(200, 0, as_of=k).entities}
        assert graph == {
            key.label: [
                n.content
                for mid in key.links
                if (n := prefix.memories[mid]).namespace == kg.namespace and current(n)
            ]
            for key in prefix.keys.values()
            if key.entity_type is not None
        }
        store.close()


# -- every event type round-trips ------------------------------------------------------------

texts = st.text(max_size=40)
ids = st.text(alphabet="abcdef0123456789_mk", min_size=1, max_size=16)
floats = st.floats(allow_nan=False, allow_infinity=False)
times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
ints = st.integers(0, 2**62)
key_types = st.sampled_from(["concept", "name", "proper_noun"])
opt = st.one_of

similar = st.builds(Similar, memory_id=ids, similarity=floats, fingerprint=texts)
key_link = st.builds(
    KeyLink,
    key_id=ids,
    label=texts,
    type=key_types,
    resolution=st.sampled_from(["new", "existing", "alias"]),
    similarity=opt(st.none(), floats),
    fingerprint=opt(st.none(), texts),
    weight=floats,
    extracted=st.booleans(),
)
new_memory = st.builds(
    NewMemory,
    memory_id=ids,
    namespace=texts,
    content=st.text(max_size=300),
    content_hash=texts,
    keys=st.lists(key_link, max_size=4),
    related_to=st.lists(ids, max_size=3),
    expires_at=opt(st.none(), times),
    session_id=opt(st.none(), texts),
    source=opt(st.none(), texts),
    supersedes=opt(st.none(), ids),
    supersede_reason=opt(st.none(), texts),
    duplicate_of=opt(st.none(), similar),
    contradicts=st.lists(similar, max_size=3),
)
relation = st.builds(RelationSpec, from_key=ids, to_key=ids, relation_type=texts)
rules = st.builds(FoldRules, **{f.name: floats for f in msgspec.structs.fields(FoldRules)})
envelope = {"seq": ints, "at": times}

EVENTS = {
    StoreCreated: st.builds(StoreCreated, store_id=texts, rules=rules, software=texts, **envelope),
    RulesChanged: st.builds(RulesChanged, rules=rules, reason=texts, **envelope),
    MemoryRemembered: st.builds(
        MemoryRemembered, memories=st.lists(new_memory, min_size=1, max_size=3), **envelope
    ),
    MemoryCorrected: st.builds(
        MemoryCorrected, old_id=ids, memory=new_memory, weaken_factor=floats, **envelope
    ),
    MemoryReplaced: st.builds(
        MemoryReplaced,
        old_id=ids,
        new_id=ids,
        weaken_factor=floats,
        related_to=st.lists(ids, max_size=3),
        **envelope,
    ),
    MemoryRead: st.builds(
        MemoryRead,
        memory_id=ids,
        via_key_id=opt(st.none(), ids),
        query=opt(st.none(), texts),
        **envelope,
    ),
    LinksAdjusted: st.builds(
        LinksAdjusted,
        adjustments=st.lists(
            st.builds(LinkDelta, key_id=ids, memory_id=ids, delta=floats), max_size=5
        ),
        query=opt(st.none(), texts),
        **envelope,
    ),
    KeyAliased: st.builds(
        KeyAliased,
        key_id=ids,
        alias=texts,
        evidence=texts,
        similarity=opt(st.none(), floats),
        fingerprint=opt(st.none(), texts),
        learned=st.booleans(),
        **envelope,
    ),
    KeyUnaliased: st.builds(KeyUnaliased, key_id=ids, alias=texts, evidence=texts, **envelope),
    KeyRetyped: st.builds(KeyRetyped, key_id=ids, key_type=key_types, evidence=texts, **envelope),
    MemoryForgotten: st.builds(
        MemoryForgotten, memory_id=ids, content_hash=texts, reason=texts, **envelope
    ),
    MemoriesExpired: st.builds(MemoriesExpired, memory_ids=st.lists(ids, max_size=5), **envelope),
    EntitiesCreated: st.builds(
        EntitiesCreated,
        entities=st.lists(
            st.builds(EntitySpec, key_id=ids, name=texts, entity_type=texts, new=st.booleans()),
            max_size=3,
        ),
        observations=st.lists(new_memory, max_size=2),
        **envelope,
    ),
    RelationsAdded: st.builds(RelationsAdded, relations=st.lists(relation, max_size=3), **envelope),
    RelationsRemoved: st.builds(
        RelationsRemoved, relations=st.lists(relation, max_size=3), **envelope
    ),
    ObservationsDeleted: st.builds(
        ObservationsDeleted,
        memory_ids=st.lists(ids, max_size=3),
        unlinked=st.lists(st.builds(KeyMemory, key_id=ids, memory_id=ids), max_size=2),
        **envelope,
    ),
    EntitiesDeleted: st.builds(
        EntitiesDeleted,
        key_ids=st.lists(ids, max_size=3),
        forgotten=st.lists(ids, max_size=3),
        unlinked=st.lists(st.builds(KeyMemory, key_id=ids, memory_id=ids), max_size=2),
        relations=st.lists(relation, max_size=3),
        **envelope,
    ),
    GraphImported: st.builds(
        GraphImported,
        format=st.sampled_from(["memory-jsonl", "keymem"]),
        source=texts,
        keys=st.lists(
            st.builds(
                ImportedKey,
                key_id=ids,
                label=texts,
                type=key_types,
                aliases=st.lists(texts, max_size=2),
                entity_type=opt(st.none(), texts),
            ),
            max_size=3,
        ),
        memories=st.lists(
            st.builds(
                ImportedMemory,
                memory=new_memory,
                created_at=times,
                depth=floats,
                access_count=ints,
                last_read_at=opt(st.none(), times),
            ),
            max_size=2,
        ),
        relations=st.lists(relation, max_size=2),
        **envelope,
    ),
    TurnRecorded: st.builds(
        TurnRecorded,
        session_id=texts,
        turn=ints,
        role=texts,
        content=st.text(max_size=300),
        **envelope,
    ),
}


def test_every_event_type_has_a_strategy() -> None:
    assert set(EVENTS) == set(EVENT_TYPES)


any_event = st.one_of(*EVENTS.values())


@settings(max_examples=300, deadline=None)
@given(event=any_event)
def test_every_event_round_trips_through_a_line(event: Any) -> None:
    line = encode_line(event)
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line, whatever the content
    decoded = decode_line(line[:-1])
    assert type(decoded) is type(event)
    assert decoded == event
    assert encode_line(decoded) == line


@settings(max_examples=30, deadline=None)
@given(events=st.lists(any_event, min_size=1, max_size=12), segment_bytes=st.integers(200, 4000))
def test_events_round_trip_through_the_log(events: list[Any], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp), segment_bytes=segment_bytes, clock=lambda: T0)
        with log.lock() as app:
            stamped = [app.append(e) for e in events]
        back = EventLog(Path(tmp)).read_new()
        assert back == stamped
        assert [e.seq for e in back] == list(range(1, len(events) + 1))
        for original, got in zip(events, back, strict=True):
            assert msgspec.structs.replace(got, seq=original.seq, at=original.at) == original


def fresh_count(store: Store, key_id: str, namespace: str | None) -> int:
    now, memories = store.clock(), store.state.memories
    return sum(
        1
        for mid in store.state.keys[key_id].links
        if visible(memories[mid], now) and namespace in (None, memories[mid].namespace)
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=4, max_size=30))
@example(ops=SHARED_OBSERVATION_OPS)
@example(  # counted once its expiry passed, then marked expired: nothing to take off
    ops=[
        ("remember", 0, True, ["apple"], None, 30, False),
        ("remember", 1, True, ["apple"], None, None, False),
        ("tick", 40),
        ("cleanup", 0),
    ]
)
def test_kept_key_counts_equal_a_fresh_count_after_every_command(
    ops: list[tuple[Any, ...]],
) -> None:
    """recall's memory counts are kept per key between commands and only topped up with new
    links; after any command (or clock move) they must equal a count from scratch."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, 10_000)
        ids: list[str] = []
        for item in ops:
            store = run(store, clock, [item], home, 10_000, ids)
            state, now = store.refresh(), clock.now
            for key in list(state.keys.values()):
                for namespace in NAMESPACES:
                    assert store._count(key, namespace, now) == fresh_count(
                        store, key.id, namespace
                    ), (item, key.label, namespace)
        store.close()


def plain_ranking(
    store: Store, key_id: str, namespace: str | None
) -> tuple[int, list[tuple[str, float]]]:
    """read_key's ranking from scratch: every shown link scored, a stable sort (unrounded)."""
    now, memories = store.clock(), store.state.memories
    scored = [
        (mid, weight * (0.9 + 0.1 * node.depth) * store.time_factor(node, now))
        for mid, weight in store.state.keys[key_id].links.items()
        if visible(node := memories[mid], now) and namespace in (None, node.namespace)
    ]
    return len(scored), sorted(scored, key=lambda ms: -ms[1])


def plain_ranking_with_query(
    store: Store, key_id: str, namespace: str | None, query: str
) -> tuple[int, list[tuple[str, float]]]:
    """read_key's ranking with a query from scratch: base scores times cosine ** QUERY_POWER."""
    now, memories, links = store.clock(), store.state.memories, store.state.keys[key_id].links
    shown = [
        (mid, weight)
        for mid, weight in links.items()
        if visible(node := memories[mid], now) and namespace in (None, node.namespace)
    ]
    if not shown:
        return 0, []
    base = np.array(
        [
            w * (0.9 + 0.1 * memories[m].depth) * store.time_factor(memories[m], now)
            for m, w in shown
        ],
        dtype=np.float64,
    )
    sims = store.embed([memories[m].content for m, _ in shown]) @ store.embedder.embed([query])[0]
    base *= np.clip(sims, 0.0, 1.0) ** QUERY_POWER
    scored = [(m, float(score)) for (m, _), score in zip(shown, base.tolist(), strict=True)]
    return len(scored), sorted(scored, key=lambda ms: -ms[1])


def column_values(columns: keyrank.KeyColumns) -> dict[str, list[Any]]:
    """What a key's kept columns hold, row by row (namespaces by name, not code)."""
    n = columns.size
    names = {code: ns for ns, code in columns.namespaces.items()}
    values = {
        name: getattr(columns, name)[:n].tolist()
        for name in (
            "weight",
            "depth",
            "last_us",
            "expires_us",
            "current",
            "half_base",
            "slope_per_us",
        )
    }
    values["namespace"] = [names[code] for code in columns.namespace[:n].tolist()]
    values["ids"] = list(columns.ids)
    return values


def assert_same_counts(
    kept: Queries, scan: Queries, browsed: Sequence[str | None], context: object
) -> None:
    """memory_stats, list_memories pages of every namespace and browse_keys pages of each of
    `browsed` are the same from kept counts as from a scan."""
    assert kept.memory_stats() == scan.memory_stats(), context
    for namespace in NAMESPACES:
        for offset in (0, 2):
            assert kept.list_memories(namespace, 3, offset) == scan.list_memories(
                namespace, 3, offset
            ), (context, namespace, offset)
    for namespace in browsed:
        for hubs_only in (False, True):
            for limit, offset in ((1, 0), (2, 1), (50, 0)):
                assert kept.browse_keys(namespace, hubs_only, limit, offset) == scan.browse_keys(
                    namespace, hubs_only, limit, offset
                ), (context, namespace, hubs_only, limit, offset)


#: direct recall, whose Hebbian update (links.adjusted) moves link weights
recall_memories_op = st.tuples(st.just("recall_memories"), st.sampled_from(CONTENTS))
#: a memory marked expired by cleanup, then the clock moved back before its expiry
EXPIRED_THEN_EARLIER_OPS: list[tuple[Any, ...]] = [
    ("remember", 0, True, ["apple"], None, 30, False),
    ("remember", 1, True, ["apple"], None, None, False),
    ("cleanup", 45),
    ("tick", -120),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=4, max_size=30))
@example(ops=SHARED_OBSERVATION_OPS)
@example(ops=EXPIRED_THEN_EARLIER_OPS)
@example(ops=[EXPIRED_THEN_EARLIER_OPS[0], ("tick", 40), ("tick", -120)])  # no event: the
# expiry passes, then the clock goes back before it
def test_kept_memory_stats_equal_a_scan_after_every_command(ops: list[tuple[Any, ...]]) -> None:
    """memory_stats on the present is kept between commands and brought up to date from what
    changed (list_memories and browse_keys take their counts from it); after any command (or
    clock move) they must equal a scan of every memory and key (what a view of the time does).
    """
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, 10_000)
        ids: list[str] = []
        for item in ops:
            store = run(store, clock, [item], home, 10_000, ids)
            head = store.refresh()
            fresh, _ = store.past._build(head.seq)  # the head folded afresh: no cache holds it
            scan = TimeView(store, fresh, clock.now)
            assert_same_counts(store, scan, NAMESPACES, item)
            # As of a time after the last event: the present's state read then, its counts
            # kept with it (times asked out of order too).
            for at in (clock.now, head.at, head.at + (clock.now - head.at) / 2):
                if head.seq and head.at <= at <= clock.now:
                    kept = view(store, as_of=at)
                    assert isinstance(kept, TimeView) and kept.state is head
                    assert_same_counts(kept, TimeView(store, fresh, at), NAMESPACES, (item, at))
                    assert kept._past_tally(at, build=False) is not None  # counts were kept
        store.close()


#: Three memories under one key, the first then forgotten: as of before the forget it is hidden
#: too, and the key's kept count of the past drops by one.
FORGOTTEN_SINCE_OPS: list[tuple[Any, ...]] = [
    ("remember", 0, True, ["apple", "fruit"], None, None, False),
    ("remember", 1, True, ["apple"], "work", None, False),
    ("remember", 2, True, ["apple", "fruit"], None, None, False),
    ("forget", 0),
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, min_size=4, max_size=30),
    points=st.lists(st.integers(1, 12), min_size=1, max_size=3),
)
@example(ops=FORGOTTEN_SINCE_OPS, points=[2, 3])
@example(
    ops=[*EXPIRED_THEN_EARLIER_OPS, ("remember", 2, True, ["apple"], None, None, False)], points=[1]
)
@example(ops=[*SHARED_OBSERVATION_OPS, ("forget_text", "likes tea")], points=[1, 2, 3])
def test_kept_past_counts_equal_a_scan_after_every_command(
    ops: list[tuple[Any, ...]], points: list[int]
) -> None:
    """memory_stats as of a past point keeps its counts with the cached past state (and
    list_memories and browse_keys take theirs from it), brought up to date from what the
    present noted since (a forget hides a memory of the past too); after any command (or clock
    move) they must equal a scan of that past state folded afresh (a state no cache holds)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, 10_000)
        ids: list[str] = []
        for item in ops:
            store = run(store, clock, [item], home, 10_000, ids)
            head = store.refresh()
            moments: list[int | datetime] = []
            for seq in points:
                if seq < head.seq:  # the head itself is the present's state
                    at = store.past.state(seq).at
                    moments += [seq, at, at + timedelta(seconds=40)]
            for as_of in moments:
                if isinstance(as_of, datetime) and (as_of >= head.at or as_of > clock.now):
                    continue
                point = resolve(store, as_of)
                assert point is not None
                kept = view(store, as_of=as_of)
                fresh, _ = store.past._build(point.seq)
                scan = TimeView(store, fresh, point.now)
                assert_same_counts(kept, scan, NAMESPACES, (item, as_of))
                assert kept._past_tally(point.now, build=False) is not None  # counts were kept
        store.close()


correct_valid_op = st.tuples(
    st.just("correct_valid"),
    st.integers(0, 99),
    st.integers(0, 99),
    st.sampled_from([-7200, -60, 30, 7200]),  # backdated, or true from later on
)
remember_valid_op = st.tuples(
    st.just("remember_valid"),
    st.integers(0, len(CONTENTS) - 1),
    st.sampled_from(NAMESPACES),
    st.sampled_from([-7200, 0, 7200]),
)
#: A fact corrected twice: the second correction, backdated before the first, ends the first
#: version's time as well (a chain walked from a version whose own status did not change).
BACKDATED_CHAIN_OPS: list[tuple[Any, ...]] = [
    ("remember_valid", 0, None, -7200),
    ("correct_valid", 0, 1, 7200),
    ("correct_valid", 1, 2, -60),
]


def assert_same_key_counts(kept: Queries, scan: Queries, context: object) -> None:
    """Each key's shown memories in every namespace (related and recall read these)."""
    now = scan.clock()
    for key in list(scan.state.keys.values()):
        for namespace in NAMESPACES:
            assert kept._count(key, namespace, now) == scan._count(key, namespace, now), (
                context,
                key.label,
                namespace,
            )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.one_of(op, correct_valid_op, correct_valid_op, remember_valid_op),
        min_size=4,
        max_size=30,
    ),
    valid=st.lists(st.sampled_from([-10_000, -3600, 0, 45, 3600, 10_000]), min_size=1, max_size=2),
    points=st.lists(st.integers(1, 12), max_size=2),
)
@example(ops=BACKDATED_CHAIN_OPS, valid=[-3600, 0], points=[])
@example(ops=[*BACKDATED_CHAIN_OPS, ("tick", 40), ("forget", 1)], valid=[0], points=[2])
@example(ops=[*FORGOTTEN_SINCE_OPS, ("tick", 40)], valid=[0], points=[2, 3])
def test_kept_valid_time_counts_equal_a_scan_after_every_command(
    ops: list[tuple[Any, ...]], valid: list[int], points: list[int]
) -> None:
    """A view of a valid time keeps its counts (the memories it shows, per namespace and per
    key) with its state, the present's or a past one, brought up to date from what the present
    noted since (a correction may end the time of every version before it); after any command
    (or clock move) they must equal a scan of that state folded afresh, read at the same valid
    time."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock = Clock()
        store = open_store(home, clock, 10_000)
        ids: list[str] = []
        for item in ops:
            store = run(store, clock, [item], home, 10_000, ids)
            head = store.refresh()
            for shift in valid:
                valid_at = T0 + timedelta(seconds=shift)
                kept = view(store, valid_at=valid_at)
                fresh, _ = store.past._build(head.seq)
                scan = TimeView(store, fresh, clock.now, valid_at, present=False)
                assert_same_counts(kept, scan, NAMESPACES, (item, valid_at))
                assert_same_key_counts(kept, scan, (item, valid_at))
                assert kept._past_tally(clock.now, build=False) is not None  # counts were kept
                for seq in points:
                    if seq >= head.seq:
                        continue
                    past = view(store, as_of=seq, valid_at=valid_at)
                    then, _ = store.past._build(seq)
                    scan = TimeView(store, then, past.clock(), valid_at)
                    assert_same_counts(past, scan, NAMESPACES, (item, seq, valid_at))
                    assert_same_key_counts(past, scan, (item, seq, valid_at))
        store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.one_of(op, recall_memories_op), st.booleans()), max_size=30),
    pages=st.lists(
        st.tuples(st.sampled_from(NAMESPACES), st.integers(1, 4), st.integers(0, 6)),
        min_size=3,
        max_size=3,
    ),
)
@example(steps=[(o, False) for o in SHARED_OBSERVATION_OPS], pages=[(None, 2, 0)] * 3)
@example(steps=[(o, False) for o in EXPIRED_THEN_EARLIER_OPS], pages=[(None, 1, 0)] * 3)
@example(
    steps=[(o, False) for o in EXPIRED_THEN_EARLIER_OPS[:2]]
    + [(("recall_memories", CONTENTS[0]), i % 2 == 1) for i in range(4)],
    pages=[(None, 1, 0)] * 3,
)
def test_read_key_by_kept_columns_equals_the_plain_ranking_after_every_command(
    steps: list[tuple[tuple[Any, ...], bool]], pages: list[tuple[str | None, int, int]]
) -> None:
    """read_key of a big key ranks from columns kept between reads and brought up to date from
    the change journal; after any command (here or in another Store on the same home, then
    folded by refresh) or clock move it must answer exactly as the plain loop does: same
    total, ids, order (ties in link order) and unrounded scores, in every namespace and page,
    with a query too."""
    saved = keyrank.COLUMNS_MIN_LINKS
    keyrank.COLUMNS_MIN_LINKS = 1  # every key is "big"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "store"
            clock = Clock()
            store = open_store(home, clock, 10_000)
            other = open_store(home, clock, 10_000)
            ids: list[str] = []
            for i, (item, elsewhere) in enumerate(steps):
                if item[0] == "recall_memories":
                    (other if elsewhere else store).recall_memories(item[1])
                elif elsewhere:
                    other.refresh()  # caught up, as a server is before each command
                    other = run(other, clock, [item], home, 10_000, ids)
                else:
                    store = run(store, clock, [item], home, 10_000, ids)
                state = store.refresh()
                namespace, limit, offset = pages[i % len(pages)]
                for key in list(state.keys.values()):
                    total, ranking = plain_ranking(store, key.id, namespace)
                    got = store._rank_by_columns(key, namespace, clock.now, offset, limit)
                    assert got == (total, ranking[offset : offset + limit]), (item, key.label)
                    # The kept columns, caught up, hold what columns built now would.
                    assert store._key_columns is not None
                    kept = store._key_columns[key.id]
                    fresh = keyrank.KeyColumns(state, key, store.settings.time_decay_days)
                    assert column_values(kept) == column_values(fresh), (item, key.label)
                    page = {"namespace": namespace, "limit": limit, "offset": offset}
                    assert store.read_key(key.id, **page) == plain_read_key(store, key.id, **page)
                    # With a query: the columns' page times each memory's similarity factor.
                    query = CONTENTS[i % len(CONTENTS)][:24]
                    total, ranking = plain_ranking_with_query(store, key.id, namespace, query)
                    got = store._rank_by_columns(key, namespace, clock.now, offset, limit, query)
                    assert got == (total, ranking[offset : offset + limit]), (item, key.label)
                    page["query"] = query
                    assert store.read_key(key.id, **page) == plain_read_key(store, key.id, **page)
            other.close()
            store.close()
    finally:
        keyrank.COLUMNS_MIN_LINKS = saved


def warm_reads(store: Store, ids: list[str], points: list[int | datetime]) -> list[Any]:
    """What the kept caches serve: counts, pages, history and reads as of past points (errors
    as their message; the log's size and the vectors' progress are not read answers)."""

    def outcome(call: Any, *args: Any) -> Any:
        try:
            result = call(*args)
        except KeytrailError as exc:
            return ("error", type(exc).__name__, exc.message)
        if hasattr(result, "log_bytes"):
            result = dataclasses.replace(result, log_bytes=0, projection=None)
        return result

    def answers(queries: Any) -> list[Any]:
        found = [outcome(queries.memory_stats), outcome(queries.recall, "apple", 5)]
        for namespace in (None, "work"):
            found.append(outcome(queries.list_memories, namespace, 3, 0))
            for hubs_only in (False, True):
                found.append(outcome(queries.browse_keys, namespace, hubs_only, 3))
        found += [outcome(queries.related, m) for m in ids[-3:]]
        return found

    out: list[Any] = []
    for as_of in [None, *points]:
        try:
            out += answers(view(store, as_of=as_of))
        except KeytrailError as exc:  # a point the reader's clock has not reached
            out.append(("error", type(exc).__name__, exc.message))
    for memory_id in ids[:2] + ids[-2:]:
        out.append(outcome(history, store, memory_id))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(st.tuples(op, st.sampled_from([0, 0, 0, -90, -5000])), min_size=4, max_size=25),
    snapshot_every=st.sampled_from([2, 5, 10_000]),
    segment_bytes=st.sampled_from([700, 4000, 64 << 20]),
    points=st.lists(st.floats(0, 1), max_size=2),
)
def test_a_warm_reader_answers_as_a_fresh_store_on_the_same_home(
    ops: list[tuple[tuple[Any, ...], int]],
    snapshot_every: int,
    segment_bytes: int,
    points: list[float],
) -> None:
    """A store that only reads, beside one that writes (or another process): its kept counts,
    past states, times and history caches, brought up to date from what it folds on refresh,
    answer after every command as a store opened afresh on the same home, with its clock (which
    may run behind the writer's); past states come from snapshots, segments roll over."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "store"
        clock, reader_clock = Clock(), Clock()

        def opened(at: Clock, every: int) -> Store:
            return Store(
                Settings(
                    home=home,
                    embedder="hash",
                    snapshot_every=every,
                    segment_bytes=segment_bytes,
                    hub_min=2,
                    limits=Limits(),
                ),
                embedder=HashEmbedder(),
                clock=at,
            )

        writer = opened(clock, snapshot_every)
        reader = opened(reader_clock, snapshot_every)
        ids: list[str] = []
        first = ("remember", 0, True, ["apple", "fruit"], "work", 600, False)
        for item, behind in [(first, 0), *ops]:
            writer = run(writer, clock, [item], home, snapshot_every, ids)
            reader_clock.now = clock.now + timedelta(seconds=behind)
            head = writer.refresh()
            moments: list[int | datetime] = []
            for pick in points:
                seq = 1 + int(pick * (head.seq - 1))
                if seq < head.seq:  # the head itself is the present's state
                    at = EventLog(home).read_new()[seq - 1].at
                    moments += [seq, at + timedelta(microseconds=1)]
            fresh = opened(reader_clock, 10**9)
            try:
                assert warm_reads(reader, ids, moments) == warm_reads(fresh, ids, moments), item
            finally:
                fresh.close()
        writer.close()
        reader.close()
