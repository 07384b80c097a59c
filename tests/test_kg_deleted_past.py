"""A deleted knowledge-graph observation is hidden from the present, not erased from the past.

delete_observations / delete_entities fold the memory as "deleted": every present-tense read
hides it, but its text stays (in the log line that created it, and in the state), so a read as
of any point before the delete shows it as it was, and `history` keeps it. Only `forget` erases
it, from every file, and then the past hides it too, as for any forgotten memory.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import msgspec
import pytest
from test_forget import encoded, files_holding, replay

from keytrail.core import NotFound, Store, reembed
from keytrail.core.history import changes, history
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.core.maintenance import verify
from keytrail.core.timetravel import read_memory_at, view
from keytrail.events import EntitiesDeleted, EventLog
from keytrail.projections import snapshot as snapshots
from keytrail.projections import text
from keytrail.projections.text import TextIndex

TEA = "likes Darjeeling tea"
JAZZ = "listens to modal jazz"


def deleted_tea(store: Store) -> tuple[KnowledgeGraph, str, int]:
    """Alice with two observations, the first then deleted: (kg, its memory id, the seq just
    before the delete)."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", [TEA, JAZZ])])
    tea = next(m.id for m in store.state.memories.values() if m.content == TEA)
    before = store.state.seq
    kg.delete_observations([ObservationInput("Alice", [TEA])])
    return kg, tea, before


def observations(page: object) -> dict[str, list[str]]:
    return {e["name"]: e["observations"] for e in msgspec.to_builtins(page)["entities"]}


def test_reads_as_of_before_the_delete_show_the_observation(store: Store) -> None:
    kg, tea, before = deleted_tea(store)
    past = view(store, before)
    assert {m.memory_id for m in past.list_memories().memories} >= {tea}
    assert past.list_memories().total == 2
    assert read_memory_at(store, tea, as_of=before).content == TEA
    assert observations(kg.read_graph(as_of=before)) == {"Alice": [TEA, JAZZ]}
    assert observations(kg.open_nodes(["Alice"], as_of=before)) == {"Alice": [TEA, JAZZ]}
    assert observations(kg.search_nodes("darjeeling", as_of=before)) == {"Alice": [TEA, JAZZ]}
    alice = store.state.key_for_label("Alice")
    assert alice is not None
    assert [k.memory_count for k in past.recall("Alice").keys if k.key_id == alice.id] == [2]
    assert {m.memory_id for m in past.read_key(alice.id).memories} >= {tea}
    found = store.recall_memories("Darjeeling tea", learn=False, as_of=before)
    assert tea in [m.memory_id for m in found.memories]


def test_present_reads_hide_the_deleted_observation(store: Store) -> None:
    kg, tea, _ = deleted_tea(store)
    seq = store.state.seq
    listed = [m.memory_id for m in store.list_memories().memories]
    assert len(listed) == 1 and tea not in listed
    with pytest.raises(NotFound, match="deleted"):
        store.read_memory(tea)
    with pytest.raises(NotFound, match="deleted"):
        read_memory_at(store, tea, as_of=seq)  # as of now: deleted then too
    with pytest.raises(NotFound):
        store.related(tea)
    with pytest.raises(NotFound):
        store.correct(tea, "likes green tea")
    with pytest.raises(NotFound):
        store.remember("tea is a drink", ["tea"], related_to=[tea])
    alice = store.state.key_for_label("Alice")
    assert alice is not None
    assert [k.memory_count for k in store.recall("Alice").keys if k.key_id == alice.id] == [1]
    assert tea not in [m.memory_id for m in store.read_key(alice.id).memories]
    assert observations(kg.read_graph()) == {"Alice": [JAZZ]}
    assert observations(kg.search_nodes("darjeeling")) == {}
    found = store.recall_memories("Darjeeling tea", learn=False)
    assert tea not in [m.memory_id for m in found.memories]
    assert store.state.seq == seq  # the refusals wrote nothing


def test_memory_stats_counts_deleted_observations_apart(store: Store) -> None:
    _, tea, before = deleted_tea(store)
    now = store.memory_stats()
    assert (now.memories, now.deleted, now.forgotten) == (1, 1, 0)
    then = view(store, before).memory_stats()
    assert (then.memories, then.deleted, then.forgotten) == (2, 0, 0)
    store.forget(tea)
    now = store.memory_stats()
    assert (now.memories, now.deleted, now.forgotten) == (1, 0, 1)
    then = view(store, before).memory_stats()  # forgetting holds in the past too
    assert (then.memories, then.deleted, then.forgotten) == (1, 0, 1)


def test_the_fold_keeps_the_text_and_replay_equals_the_live_state(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(snapshot_every=3)
    _, tea, _ = deleted_tea(store)
    node = store.state.memories[tea]
    assert (node.status, node.content) == ("deleted", TEA)
    assert encoded(replay(store.home)) == encoded(store.state)
    store.close()
    reopened = make_store(home=store.home)  # from the snapshot the close wrote
    assert encoded(reopened.state) == encoded(replay(store.home))
    assert reopened.state.memories[tea].status == "deleted"


def test_history_and_changes_call_it_deleted(store: Store) -> None:
    since = store.state.seq
    _, tea, _ = deleted_tea(store)
    told = history(store, tea)
    assert [(v.status, v.preview) for v in told.versions] == [("deleted", TEA)]
    assert told.events[-1].what == "deleted as an observation"
    done = changes(store, since=since)
    assert (done.deleted, done.forgotten) == ([tea], [])
    store.forget(tea)
    done = changes(store, since=since)
    assert (done.deleted, done.forgotten) == ([tea], [tea])


def test_deleting_the_entity_afterwards_does_not_delete_the_observation_again(
    store: Store,
) -> None:
    kg, tea, _ = deleted_tea(store)
    kg.delete_entities(["Alice"])
    last = EventLog(store.home).read_new()[-1]
    assert isinstance(last, EntitiesDeleted)
    assert tea not in last.forgotten and len(last.forgotten) == 1  # jazz only
    assert [t.what for t in history(store, tea).events].count("deleted with its entity") == 0


def test_forget_after_delete_erases_the_text_from_every_file(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(snapshot_every=3)
    kg, tea, before = deleted_tea(store)
    reembed.build(store)  # a vector row of every content, the deleted one's too
    store.index_text()
    store.close()
    assert {"cache/snapshot/keygraph.msgpack"} <= set(files_holding(store.home, TEA))
    assert any(p.startswith("log/") for p in files_holding(store.home, TEA))

    store = make_store(home=store.home, snapshot_every=3)
    gone = store.forget(tea, reason="user asked")
    assert any(p.startswith("log/") for p in gone.purged)
    assert files_holding(store.home, TEA) == []
    node = store.state.memories[tea]
    assert (node.status, node.content) == ("forgotten", "")
    # Forgotten, it is gone from the past too.
    assert tea not in [m.memory_id for m in view(store, before).list_memories().memories]
    with pytest.raises(NotFound, match="forgotten"):
        read_memory_at(store, tea, as_of=before)
    assert observations(kg.read_graph(as_of=before)) == {"Alice": [JAZZ]}
    with pytest.raises(NotFound, match="already forgotten"):
        store.forget(tea)
    assert encoded(replay(store.home)) == encoded(store.state)
    store.close()
    report = verify(store.home)
    assert report.ok and report.redacted == [tea], report.problems


def test_verify_is_clean_after_a_delete_and_still_reports_restored_forgotten_content(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(snapshot_every=3)
    kg, tea, _ = deleted_tea(store)
    reembed.build(store)
    store.index_text()
    kg.delete_entities(["Alice"])  # jazz too, after the index and the vectors were made
    store.close()
    report = verify(store.home)
    assert report.ok and report.redacted == [], (report.problems, report.cache_problems)
    assert report.caches_checked and not report.caches_ignored

    segment = next((store.home / "log").glob("*.jsonl"))
    backup = segment.read_bytes()
    store = make_store(home=store.home)
    store.forget(tea)
    store.close()
    assert verify(store.home).ok
    segment.write_bytes(backup + segment.read_bytes()[len(backup) :])  # a backup put back
    assert TEA.encode() in segment.read_bytes()
    problems = verify(store.home).problems
    assert any(f"memory {tea}: forgotten at seq" in p for p in problems), problems


def test_a_snapshot_of_the_old_fold_is_a_cache_miss_and_the_replay_keeps_the_text(
    make_store: Callable[..., Store],
) -> None:
    """Before "deleted", the fold forgot a deleted observation (status forgotten, content
    blank). Such a snapshot is from another schema: the open replays the log instead, and the
    log's events already say which memories were deleted, so no upcaster is needed."""
    store = make_store()
    _, tea, before = deleted_tea(store)
    store.close()
    path = store.snapshot_path
    snap = snapshots.load(path)
    assert snap is not None
    old = snap.state.memories[tea]
    old.status, old.content = "forgotten", ""
    snapshots.save(path, snap)
    data = path.read_bytes()
    length = int.from_bytes(data[:4], "big")
    header = msgspec.msgpack.decode(data[4 : 4 + length], type=snapshots.Header)
    older = msgspec.msgpack.encode(msgspec.structs.replace(header, schema="0" * 16))
    path.write_bytes(len(older).to_bytes(4, "big") + older + data[4 + length :])
    assert snapshots.load(path) is None
    report = verify(store.home)
    assert report.ok and any("keygraph.msgpack" in c for c in report.caches_ignored)

    reopened = make_store(home=store.home)
    assert reopened._snapshot_seq == 0  # replayed, not opened from the old snapshot
    node = reopened.state.memories[tea]
    assert (node.status, node.content) == ("deleted", TEA)
    assert read_memory_at(reopened, tea, as_of=before).content == TEA
    reopened.close()
    assert snapshots.load(path) is not None  # the close wrote one of this schema


def test_a_text_index_of_the_old_fold_is_rebuilt_and_past_text_search_finds_the_observation(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before "deleted", catching the text index up deleted a deleted observation's document
    like a forgotten one's. Such an index is from another schema: it is rebuilt from the state,
    so a text search as of before the delete finds the observation again."""
    store = make_store()
    _, tea, before = deleted_tea(store)
    store.close()
    old_fold = copy.deepcopy(store.state)
    old_fold.memories[tea].status = "forgotten"
    with monkeypatch.context() as old_code:
        old_code.setattr(text, "SCHEMA_VERSION", 2)
        TextIndex(store.home / "index" / "text").rebuild(old_fold)
        assert tea not in TextIndex(store.home / "index" / "text").committed()[1]

    reopened = make_store(home=store.home)
    with reopened._mutex:
        index = reopened.text_index()
    assert tea in [hit.memory_id for hit in index.search("Darjeeling tea", 10, max_seq=before)]
    found = reopened.recall_memories("Darjeeling tea", learn=False, as_of=before)
    assert tea in [m.memory_id for m in found.memories]


def test_a_deleted_observation_in_another_process_reads_the_same(
    make_store: Callable[..., Store],
) -> None:
    """A second process that folds the delete from the log answers past and present alike."""
    writer = make_store()
    kg = KnowledgeGraph(writer)
    kg.create_entities([EntityInput("Alice", "person", [TEA, JAZZ])])
    before = writer.state.seq
    reader = make_store(home=writer.home)
    kg.delete_observations([ObservationInput("Alice", [TEA])])
    assert view(reader, before).list_memories().total == 2
    assert reader.list_memories().total == 1
    assert reader.memory_stats().deleted == 1


def test_deleting_the_entity_leaves_its_past_versions_as_they_were(store: Store) -> None:
    """delete_entities deleted every memory linked to the key, past versions included: an
    observation corrected onto Alice and Bob left its old version (linked to Alice alone)
    superseded, and deleting Alice turned that version "deleted". `history` then showed the
    chain's past as deleted while its current version lives on with Bob, and memory_stats
    moved it from `superseded` to `deleted`. Like delete_observations, it deletes what the
    entity shows: the current observations."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", [TEA]), EntityInput("Bob", "person")])
    old = next(m.id for m in store.state.memories.values() if m.content == TEA)
    new = store.correct(old, "Alice and Bob like Darjeeling tea", keys=["Alice", "Bob"]).memory_id
    stats = store.memory_stats()
    kg.delete_entities(["Alice"])
    last = EventLog(store.home).read_new()[-1]
    assert isinstance(last, EntitiesDeleted)
    assert old not in last.forgotten
    assert [(v.memory_id, v.status) for v in history(store, new).versions] == [
        (old, "superseded"),
        (new, "active"),
    ]
    after = store.memory_stats()
    assert (after.superseded, after.deleted) == (stats.superseded, stats.deleted)
    assert observations(kg.open_nodes(["Bob"])) == {"Bob": ["Alice and Bob like Darjeeling tea"]}
