"""Snapshots by column: a lazily loaded state is the saved one, node for node, byte for byte."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from keytrail.core import HashEmbedder, RememberItem, Settings, Store, decide
from keytrail.core import store as store_module
from keytrail.core.maintenance import verify
from keytrail.events import EventLog
from keytrail.projections import fold, keygraph
from keytrail.projections import snapshot as snapshots
from keytrail.projections.snapshot import LazyNodes


def filled(make_store: Callable[..., Store], home: Path) -> Store:
    store = make_store(home=home)
    first = store.remember("the apple fell on Newton", keys=["apple", "gravity"])
    store.remember("apples are a fruit", keys=["apple", "fruit"], related_to=[first.memory_id])
    store.read_memory(first.memory_id, via_key_id=first.keys[0].key_id, query="apple")
    store.correct(first.memory_id, "an apple fell near Newton", keys=["apple"])
    return store


def test_a_lazy_load_decodes_nothing_until_looked_at_and_equals_the_eager_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = filled(make_store, tmp_path / "store")
    store.close()
    lazy = snapshots.load(store.snapshot_path, lazy=True)
    eager = snapshots.load(store.snapshot_path)
    assert lazy is not None and eager is not None
    memories = lazy.state.memories
    assert isinstance(memories, LazyNodes)
    assert all(type(v) is int for v in dict.values(memories))  # nothing decoded yet
    some_id = next(iter(memories))
    assert memories[some_id] == eager.state.memories[some_id]
    assert type(dict.__getitem__(memories, some_id)) is not int  # decoded once, kept
    # A partly decoded state writes the same bytes as the fully decoded one.
    assert snapshots.encode(lazy) == snapshots.encode(eager)
    assert lazy.state == eager.state  # compares every node, decoding the rest
    assert msgspec.msgpack.encode(lazy.state) == msgspec.msgpack.encode(eager.state)


def test_a_store_opened_from_a_snapshot_folds_onto_its_lazy_state(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.close()
    reopened = make_store(home=home)
    assert isinstance(reopened.state.memories, LazyNodes)
    later = reopened.remember("pears are a fruit too", keys=["fruit", "pear"])
    page = reopened.read_key(later.keys[0].key_id)
    assert {m.memory_id for m in page.memories} >= {later.memory_id}
    reopened.close()
    again = make_store(home=home)
    expected = snapshots.materialize(reopened.state)
    assert msgspec.msgpack.encode(snapshots.materialize(again.state)) == msgspec.msgpack.encode(
        expected
    )


def test_a_close_saves_a_snapshot_only_once_its_tail_is_a_share_of_the_log(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A one-shot command's close left a short tail for the next open to fold rather than
    rewrite the whole graph for it; a tail of `CLOSE_SNAPSHOT_SHARE`'s share of the log is
    saved, and every open folds the same state as a replay of the log."""
    home = tmp_path / "store"
    store = make_store(home=home)
    share = store_module.CLOSE_SNAPSHOT_SHARE
    for i in range(2 * share + 50):
        store.remember(f"fact {i}", keys=[f"k{i % 9}"])
    store.close()
    saved = store.state.seq
    assert snapshots.read_header(store.snapshot_path).seq == saved  # type: ignore[union-attr]
    for told in range(1, 3):  # each a process of its own: a tail of `told` events
        one = make_store(home=home)
        assert one.state.seq == saved + told - 1
        one.remember(f"one more fact {told}", keys=["k1", "other"])
        one.close()
        assert told * share < one.state.seq  # not yet due
        assert snapshots.read_header(one.snapshot_path).seq == saved  # type: ignore[union-attr]
    reopened = make_store(home=home)
    replayed = fold(EventLog(home).iter_new())
    assert msgspec.msgpack.encode(snapshots.materialize(reopened.state)) == msgspec.msgpack.encode(
        replayed
    )
    while (reopened.state.seq - saved) * share < reopened.state.seq:
        reopened.remember(f"fact at {reopened.state.seq}", keys=["k2"])
    reopened.close()
    header = snapshots.read_header(reopened.snapshot_path)
    assert header is not None and header.seq == reopened.state.seq


def test_a_remember_finds_the_same_text_in_a_lazy_state_without_decoding_it(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """Dedup's index of texts reads every memory of a state loaded lazily as a `MemoryText`
    (the leading fields of a `MemoryNode`, in its places), leaving the nodes undecoded."""
    names = [f.name for f in msgspec.structs.fields(keygraph.MemoryNode)]
    assert list(snapshots.MemoryText.__struct_fields__) == names[: names.index("status") + 1]
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.close()
    reopened = make_store(home=home)
    memories = reopened.state.memories
    assert isinstance(memories, LazyNodes)
    again = reopened.remember("Apples are a fruit", keys=["orchard"])
    assert again.deduplicated is not None
    told = reopened.state.memories[again.deduplicated.memory_id]
    assert told.content == "apples are a fruit" and told.superseded_by == again.memory_id
    # The superseded first version (by a correction) is no candidate; and read undecoded.
    assert reopened.remember("the apple fell on Newton", keys=["orchard"]).deduplicated is None
    undecoded = [mid for mid, v in dict.items(memories) if type(v) is int]
    assert len(undecoded) == 1  # the correction's: no command touched it
    assert memories[undecoded[0]].content == "an apple fell near Newton"


#: Texts told in more than one way (case, spacing, ligatures, ß, the Kelvin sign, a decomposed
#: accent, the Turkish İ), in two namespaces
SAME_TEXTS = [
    ("The fish swam over the harbour", "default"),
    ("the \ufb01sh swam over the  harbour", "default"),  # the ligature: not the same to hashing
    ("THE FISH SWAM OVER THE HARBOUR", "side"),
    ("Die Stra\u00dfe am Hafenbecken", "default"),
    ("die STRASSE am\u00a0hafenbecken", "side"),
    ("probe reading 300 K overnight", "default"),
    ("probe reading 300 \u212a overnight", "side"),
    ("Zo\u00eb drove the Volvo home", "default"),
    ("zoe\u0308 drove the volvo home\n", "side"),
    ("\u0130zmir harbour report", "default"),
    ("i\u0307zmir harbour report", "side"),
    ("the harbour", "default"),
    ("a harbour master", "default"),
]


def test_the_same_text_scan_of_a_lazy_state_finds_what_the_index_finds(
    make_store: Callable[..., Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remember's first lookups of its text look for the text's anchor in the snapshot's
    columns rather than build the index of every text (the cost of a one-shot remember): both
    find the same current memories in the same order, with memories superseded, forgotten
    and told since the snapshot, and none is decoded for it."""
    monkeypatch.setattr(snapshots, "SCAN_BYTES", 500)  # runs of a few nodes: finds at their edges
    home = tmp_path / "store"
    store = make_store(home=home)
    # No retelling is a duplicate: each stays current, and a form is held twice in a namespace.
    monkeypatch.setattr(store, "thresholds", replace(store.thresholds, dedup=1.01))
    told = [store.remember(t, keys=[f"k{i}"], namespace=ns) for i, (t, ns) in enumerate(SAME_TEXTS)]
    store.forget(store.remember("a harbour master", keys=["gone"], namespace="side").memory_id)
    store.close()
    reopened = make_store(home=home)
    memories = reopened.state.memories
    assert isinstance(memories, LazyNodes)
    reopened.correct(told[-1].memory_id, "the harbour master", keys=["k"])
    since = reopened.remember("THE  HARBOUR", keys=["new"], namespace="side")  # no column's
    forms = {(ns, decide.same_text_form(t)) for t, ns in SAME_TEXTS}
    forms |= {(ns, form) for _, form in forms for ns in ("default", "side")}
    undecoded = sum(type(v) is int for v in dict.values(memories))
    scanned = 0
    spied = decide.peek_holding

    def spy(*args: Any) -> Any:
        nonlocal scanned
        scanned += 1
        return spied(*args)

    monkeypatch.setattr(decide, "peek_holding", spy)
    state = reopened.state
    found = {key: decide.SameTexts().holders(state, *key) for key in forms}
    assert scanned == len(forms)  # every one by a scan: each form has an anchor
    assert sum(type(v) is int for v in dict.values(memories)) == undecoded
    monkeypatch.setattr(decide, "SCANS_BEFORE_INDEX", 0)
    index = decide.SameTexts()
    assert found == {key: index.holders(state, *key) for key in forms}
    assert scanned == len(forms)
    ids = [m.memory_id for m in told]
    assert found[("default", "the fish swam over the harbour")] == ids[:2]
    assert found[("side", "the fish swam over the harbour")] == [ids[2]]
    for i in (3, 5, 7, 9):  # ß, the Kelvin sign, ë and İ, each its own way in the other namespace
        form = decide.same_text_form(SAME_TEXTS[i][0])
        assert (found[("default", form)], found[("side", form)]) == ([ids[i]], [ids[i + 1]])
    assert found[("side", "the harbour")] == [since.memory_id]
    assert found[("default", "a harbour master")] == found[("side", "a harbour master")] == []
    # A word more than `most` memories hold (7 of the columns'): the scan gives up, the index
    # reads each memory once.
    decode = snapshots._view_decoder(snapshots.MemoryText).decode
    assert memories.peek_holding([b"harbour"], 6, decode) is None
    assert memories.peek_holding([b"harbour"], 7, decode) is not None


def test_a_recall_checks_what_lacks_a_vector_without_decoding_a_lazy_state(
    make_store: Callable[..., Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first recall after an open counts the texts told since the vectors were last
    recorded complete: walking back through `values()` decoded every memory of a state loaded
    lazily (0.7 s of the first recall at 100,000 memories). It reads them undecoded."""
    home = tmp_path / "store"
    store = filled(make_store, home)
    aside = store.remember("bananas are yellow", keys=["banana"]).memory_id
    store.close()
    reopened = make_store(home=home)
    memories = reopened.state.memories
    assert isinstance(memories, LazyNodes)
    # Nothing recorded complete, and any text told counts: every memory is looked up (all
    # have a row, so no build follows).
    monkeypatch.setattr(store_module, "INLINE_EMBED_MAX", 0)
    reopened.vectors.manifest = lambda: None  # type: ignore[method-assign]
    looked: list[int] = []
    missing = reopened.vectors.missing

    def counted(digests: list[str]) -> list[str]:
        looked.append(len(digests))
        return missing(digests)

    reopened.vectors.missing = counted  # type: ignore[method-assign]
    assert reopened.recall("apple").keys
    assert looked and looked[0] >= len(memories)  # the labels and every memory's text
    assert type(dict.__getitem__(memories, aside)) is int  # looked at, still undecoded
    reopened.close()


def test_a_snapshot_cut_short_is_unreadable(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    store = filled(make_store, tmp_path / "store")
    store.close()
    data = bytearray(store.snapshot_path.read_bytes())
    store.snapshot_path.write_bytes(bytes(data[:-3]))  # the memories' blob cut short
    assert snapshots.load(store.snapshot_path, lazy=True) is None


def undecoded(nodes: dict[str, object]) -> int:
    return sum(1 for v in dict.values(nodes) if type(v) is int)


def test_warm_up_builds_what_the_first_queries_would_and_they_answer_the_same(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    for i in range(30):
        store.remember(f"fact {i} about orchards", keys=["orchard", f"tree {i}"])
    store.close()
    # One fixed clock: the answers are compared to the last digit.
    now = store.clock()
    cold, warm = (
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=lambda: now)
        for _ in range(2)
    )
    assert undecoded(warm.state.memories) == len(warm.state.memories)
    plain = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    plain.warm_up().join(timeout=60)
    assert undecoded(plain.state.memories) == undecoded(plain.state.keys) == 0
    assert plain._labels_embedded == len(plain.state.labels)
    assert plain._memories_embedded == 0  # not asked for: a copy of every vector
    plain.close()
    warm.warm_up(memory_vectors=True).join(timeout=60)
    assert undecoded(warm.state.memories) == 0
    assert warm._memories_embedded == len(warm.state.memories)
    # The cold store builds the same on demand: the answers do not depend on who built it.
    for query in ("apple", "orchard tree 7", "what fell on Newton?"):
        assert warm.recall(query) == cold.recall(query)
        assert warm.recall_memories(query, learn=False) == cold.recall_memories(query, learn=False)
    assert undecoded(cold.state.memories) == 0  # recall_memories decoded them on demand
    cold.close()
    warm.close()


def test_warm_up_builds_a_hubs_read_key_columns_and_its_pages_answer_the_same(
    tmp_path: Path,
) -> None:
    from keytrail.core import keyrank

    settings = Settings(home=tmp_path / "store", embedder="hash")
    store = Store(settings, embedder=HashEmbedder())
    n = keyrank.COLUMNS_MIN_LINKS + 8
    items = [
        RememberItem(f"fact {i}: w{i * 7} w{i * 13}", ["user", f"topic {i}"]) for i in range(n)
    ]
    store.remember_batch(items[:300])
    store.remember_batch(items[300:])
    store.close()
    now = store.clock()
    cold, warm = (Store(settings, embedder=HashEmbedder(), clock=lambda: now) for _ in range(2))
    hub = warm.state.key_for_label("user")
    assert hub is not None and warm.biggest_keys() == [hub.id]
    warm.warm_up().join(timeout=60)
    assert warm._key_columns is not None and list(warm._key_columns) == [hub.id]
    assert cold._key_columns is None
    for offset in (0, 20, n - 5):
        assert warm.read_key(hub.id, offset=offset) == cold.read_key(hub.id, offset=offset)
    cold.close()
    warm.close()


def test_a_query_during_warm_up_and_a_close_after_it_are_safe(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.close()
    now = store.clock()
    reopened, other = (
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=lambda: now)
        for _ in range(2)
    )
    expected = other.recall_memories("apple", learn=False)
    other.close()
    thread = reopened.warm_up()
    assert reopened.recall_memories("apple", learn=False) == expected
    reopened.close()
    thread.join(timeout=60)
    assert not thread.is_alive()


def damage_node(path: Path, content: str) -> None:
    """Bit rot inside one node's bytes: the file's framing still reads, the node does not."""
    data = bytearray(path.read_bytes())
    at = data.find(content.encode())
    assert at > 0
    data[at - 1] = 0xC1  # the content's msgpack str header becomes a never-used opcode
    path.write_bytes(bytes(data))


def test_a_snapshot_with_a_damaged_node_costs_a_replay_not_answers(tmp_path: Path) -> None:
    home = tmp_path / "store"

    def opened() -> Store:
        return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())

    writer = opened()
    damaged = writer.remember("the zebra lives in the orchard", ["zebra"]).memory_id
    for i in range(3):
        writer.remember(f"fact {i} about orchards", ["orchard"])
    writer.close()
    writer = opened()
    snapshots.materialize(writer.state)  # read before the damage: this process is healthy
    damage_node(writer.snapshot_path, "the zebra lives in the orchard")
    reader = opened()  # from the damaged snapshot
    writer.remember_batch(
        [
            RememberItem("a new fact about the orchard", ["orchard"], related_to=[damaged]),
            RememberItem("pears grow there too", ["pear"]),
        ]
    )
    writer.remember("plums as well", ["plum"])
    replayed = fold(EventLog(home).iter_new())
    state = reader.refresh()
    assert state.seq == replayed.seq
    assert sorted(state.labels) == sorted(replayed.labels)
    assert reader.list_memories() == writer.list_memories()
    reader.close()
    writer.close()


def test_a_snapshot_of_the_format_before_the_checksum_is_not_read(tmp_path: Path) -> None:
    """Format 3 (no body checksum) is a cache miss, never an unchecked load: the open folds the
    log instead, and verify lists the file as ignored."""
    settings = Settings(home=tmp_path / "store", embedder="hash")
    store = Store(settings, embedder=HashEmbedder())
    for i in range(5):
        store.remember(f"fact number {i}", ["facts"])
    store.close()
    path = store.snapshot_path
    data = path.read_bytes()
    length = int.from_bytes(data[:4], "big")
    header = msgspec.msgpack.decode(data[4 : 4 + length], type=snapshots.Header)
    old = msgspec.msgpack.encode(msgspec.structs.replace(header, format=3, body_crc=0))
    path.write_bytes(len(old).to_bytes(4, "big") + old + data[4 + length :])
    assert snapshots.read_header(path) is None
    reopened = Store(settings, embedder=HashEmbedder())
    assert reopened._snapshot_seq == 0 and reopened.state.seq == header.seq  # from the log
    assert len(reopened.state.memories) == 5
    reopened.close()


def test_a_snapshot_whose_bytes_changed_but_still_decode_is_not_believed(tmp_path: Path) -> None:
    """Bit rot that leaves valid msgpack (one letter of a memory's content) would be read as
    the truth without the body's checksum: the open would answer the changed text."""
    home = tmp_path / "store"
    settings = Settings(home=home, embedder="hash")
    store = Store(settings, embedder=HashEmbedder())
    memory_id = store.remember("the zebra lives in the orchard", ["zebra"]).memory_id
    store.close()  # writes the snapshot the next open starts from
    path = store.snapshot_path
    data = path.read_bytes()
    assert data.count(b"the zebra lives") == 1
    path.write_bytes(data.replace(b"the zebra lives", b"the zebrb lives"))
    assert snapshots.damaged(path) and snapshots.load(path, lazy=True) is None
    with Store(settings, embedder=HashEmbedder()) as reopened:
        assert reopened.read_memory(memory_id).content == "the zebra lives in the orchard"
    assert not snapshots.damaged(path)  # the close wrote a whole one again


def test_verify_and_forget_take_a_snapshot_with_a_damaged_node_in_their_stride(
    tmp_path: Path,
) -> None:
    """verify lists it as ignored (no load accepts it: the body's checksum fails) instead of
    crashing; a forget's purge deletes it like any snapshot it cannot read."""
    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    damaged = store.remember("the zebra lives in the orchard", ["zebra"]).memory_id
    store.remember("fact about orchards", ["orchard"])
    store.close()
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    snapshots.materialize(store.state)
    damage_node(store.snapshot_path, "the zebra lives in the orchard")
    report = verify(home)
    # No store answers from it (every load checks the body's checksum): it costs a replay.
    assert report.ok and not report.cache_problems
    assert any(
        "keygraph.msgpack" in c and "damaged (its checksum does not match)" in c
        for c in report.caches_ignored
    )
    store.forget(damaged)
    assert b"zebra lives" not in b"".join(p.read_bytes() for p in store.snapshot_files())
    store.close()
    assert verify(home).ok


def rewrite_header(path: Path, **fields: object) -> None:
    """Bit rot in the header, which the body's checksum does not cover: the same fields, some
    changed, encoded to the same length so the framing still reads."""
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[:4], "big")
    header = msgspec.msgpack.decode(bytes(data[4 : 4 + length]))
    changed = msgspec.msgpack.encode({**header, **fields})
    assert len(changed) == length
    data[4 : 4 + length] = changed
    path.write_bytes(bytes(data))


def test_a_snapshot_whose_header_seq_rotted_is_not_believed(tmp_path: Path) -> None:
    """Seq 6 -> 4 is one bit. The latest snapshot's position is the log's end, so the seek
    finds no next line to check it against: the open took the header's seq, and the next
    remember was appended as seq 5 a second time, a duplicate in the log itself."""
    home = tmp_path / "store"
    settings = Settings(home=home, embedder="hash")
    store = Store(settings, embedder=HashEmbedder())
    for i in range(5):
        store.remember(f"fact {i} about Lyon", ["Lyon"])
    store.close()
    header = snapshots.read_header(store.snapshot_path)
    assert header is not None and header.seq == 6
    rewrite_header(store.snapshot_path, seq=4)
    assert snapshots.load(store.snapshot_path, lazy=True) is None
    with Store(settings, embedder=HashEmbedder()) as reopened:
        assert reopened.remember("one more about Paris", ["Paris"]).seq == 7
    seqs = [event.seq for event in EventLog(home).iter_new()]
    assert seqs == list(range(1, 8))


def test_a_body_byte_that_breaks_utf8_is_a_cache_miss_not_a_crash(tmp_path: Path) -> None:
    """One flipped bit can turn a string's bytes into invalid UTF-8, which msgspec reports as
    UnicodeDecodeError (not a DecodeError): the load let it escape and the open crashed, though
    the body's checksum already said the file was damaged."""
    home = tmp_path / "store"
    settings = Settings(home=home, embedder="hash")
    store = Store(settings, embedder=HashEmbedder())
    memory_id = store.remember("a café in Lyon", ["café"]).memory_id
    store.close()
    path = store.snapshot_path
    data = bytearray(path.read_bytes())
    for at in [i for i in range(len(data)) if data.startswith("é".encode(), i)]:
        data[at + 1] ^= 0x40  # 0xA9 -> 0xE9: not a continuation byte any more
    path.write_bytes(bytes(data))
    assert snapshots.load(path) is None
    assert snapshots.load(path, lazy=True) is None
    with Store(settings, embedder=HashEmbedder()) as reopened:
        assert reopened.read_memory(memory_id).content == "a café in Lyon"


def test_a_file_replaced_by_one_of_the_same_size_gets_a_later_second(tmp_path: Path) -> None:
    # `rsync -a` onto an earlier backup skips a file whose size and mtime (whole seconds) are
    # those it copied: the latest snapshot rewritten by a forget into one of the same size in
    # that second would leave the backup holding the forgotten content. The old file's time
    # is set ahead, so that this does not depend on when the clock's second turns.
    path = tmp_path / "keygraph.msgpack"
    path.write_bytes(b"the secret")
    ahead = (int(time.time()) + 30) * 10**9 + 500_000_000
    os.utime(path, ns=(ahead, ahead))
    snapshots.write_atomic(path, b"..........")
    assert path.read_bytes() == b".........."
    assert path.stat().st_mtime_ns // 10**9 > ahead // 10**9
    # Another size needs nothing of the sort: the file keeps the clock's time.
    os.utime(path, ns=(ahead, ahead))
    snapshots.write_atomic(path, b"longer than before")
    assert path.stat().st_mtime_ns < ahead


def shared_objects(
    state: keygraph.GraphState, weights: bool = True, dict_keys: bool = True
) -> None:
    """Every id a node repeats is the node's own string, and (`weights`) equal link weights
    one float; with `dict_keys`, the state's dicts are keyed by the nodes' own strings too (a
    snapshot's dicts keep the ids read at open: replacing them would empty a dict a moment)."""
    keys, memories = state.keys, state.memories
    for key_id, key in dict.items(keys):
        assert key_id is key.id or not dict_keys
        for memory_id in key.links:
            if memory_id in memories:
                assert memory_id is memories[memory_id].id
    for memory_id, memory in dict.items(memories):
        assert memory_id is memory.id or not dict_keys
        assert all(key_id is keys[key_id].id for key_id in memory.keys if key_id in keys)
    namespaces = {m.namespace for m in dict.values(memories)}
    assert len({id(m.namespace) for m in dict.values(memories)}) == len(namespaces)
    if weights:
        held = [w for key in dict.values(keys) for w in key.links.values()]
        assert len({id(w) for w in held}) == len(set(held))


def test_nodes_decoded_from_a_snapshot_share_the_ids_they_repeat(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    # A server's nodes come from a snapshot, each decoded on its own: without sharing, a
    # store of 100,000 memories held 800,000 copies of key and memory ids (about 47 MiB).
    home = tmp_path / "store"
    store = make_store(home=home)
    store.remember_batch(
        [
            RememberItem(f"fact {i} about the garden", keys=["garden", f"plant {i % 3}"])
            for i in range(12)
        ]
    )
    store.remember("a side note on plants", keys=["plant 1"], namespace="side")
    store.close()
    loaded = snapshots.load(store.snapshot_path, lazy=True)
    assert loaded is not None
    snapshots.materialize(loaded.state)
    shared_objects(loaded.state, dict_keys=False)
    eager = snapshots.load(store.snapshot_path)
    assert eager is not None
    shared_objects(eager.state, dict_keys=False)
    assert snapshots.encode(eager) == snapshots.encode(loaded)


def test_nodes_folded_from_events_share_the_ids_they_repeat(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    home = tmp_path / "store"
    store = make_store(home=home)
    for i in range(6):
        store.remember(f"fact {i} about the garden", keys=["garden", f"plant {i % 2}"])
    store.close()
    # Not the weights: sharing them cost a replay 3-5% (a snapshot's nodes share them).
    shared_objects(fold(EventLog(home).iter_new()), weights=False)


def test_shared_link_weights_keep_their_bits_and_are_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keygraph, "_SHARED_FLOATS", {})
    first, again = float("0.25"), float("0.25")
    assert first is not again
    assert keygraph.shared_float(first) is first
    assert keygraph.shared_float(again) is first
    # Values a dict keyed by value would mix up are given back as they came.
    negative_zero, nan = -0.0, float("nan")
    keygraph.shared_float(0.0)
    assert keygraph.shared_float(negative_zero) is negative_zero
    assert keygraph.shared_float(nan) is nan
    assert type(keygraph.shared_float(1)) is int
    keygraph.shared_float(1.0)
    assert type(keygraph.shared_float(1)) is int
    for i in range(keygraph.SHARED_FLOATS_KEPT + 100):
        keygraph.shared_float(1.0 + i / 1e6)
    assert len(keygraph._SHARED_FLOATS) == keygraph.SHARED_FLOATS_KEPT
    past = 3.0 + 1e-9
    assert keygraph.shared_float(past) is past  # not kept
    assert keygraph.shared_float(float("0.25")) is first  # kept ones still shared


def test_stats_of_a_lazy_state_count_it_undecoded_and_as_a_decoded_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A first `memory_stats` after a lazy open (a one-shot `keytrail stats`) reads each memory's
    status and each key's links undecoded, and counts what a fully decoded state counts:
    superseded, expired (by status and by time), forgotten, namespaces, links and hubs."""
    names = [f.name for f in msgspec.structs.fields(keygraph.MemoryNode)]
    assert list(snapshots.MemoryStatus.__struct_fields__) == names[: names.index("status") + 1]
    names = [f.name for f in msgspec.structs.fields(keygraph.KeyNode)]
    assert list(snapshots.KeyLinks.__struct_fields__) == names[: names.index("links") + 1]
    home = tmp_path / "store"
    store = filled(make_store, home)
    store.remember_batch(
        [RememberItem(f"the user owns lamp {i}", keys=["user", f"lamp {i}"]) for i in range(12)]
    )
    store.remember("the user moved to Oslo", keys=["user", "oslo"], namespace="side")
    store.remember("the user lends a ladder", keys=["user", "ladder"], ttl_seconds=60)
    gone = store.remember("the user hums in the shower", keys=["user", "shower"])
    store.forget(gone.memory_id)
    store.close()
    clock = store.clock
    later = lambda: clock() + timedelta(seconds=61)  # noqa: E731 - the ladder memory expired
    lazy = make_store(home=home)
    lazy.clock = later
    memories, keys = lazy.state.memories, lazy.state.keys
    assert isinstance(memories, LazyNodes) and isinstance(keys, LazyNodes)
    counted = lazy.memory_stats()
    assert all(type(v) is int for v in dict.values(memories))  # nothing decoded
    assert all(type(v) is int for v in dict.values(keys))
    eager = make_store(home=home)
    eager.clock = later
    snapshots.materialize(eager.state)
    expected = eager.memory_stats()
    assert counted == expected
    assert (counted.superseded, counted.expired, counted.forgotten) == (1, 1, 1)
    assert counted.namespaces == {"default": 14, "side": 1} and counted.hubs >= 1
    assert counted.links == sum(len(k.links) for k in eager.state.keys.values())
    # Caught up from a remember, the links and counts stay those of a fresh count.
    lazy.remember("the user paints lamp 3", keys=["user", "lamp 3", "paint"])
    eager.refresh()
    assert lazy.memory_stats() == replace(eager.memory_stats(), seq=lazy.state.seq)


def test_a_lazy_state_with_nodes_decoded_dropped_and_added_writes_the_eager_bytes(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """Runs of undecoded nodes are copied whole: broken by a decoded node, a dropped one or a
    new one at the end, the columns are still those of the fully decoded state."""
    store = make_store(home=tmp_path / "store")
    store.remember_batch([RememberItem(f"fact number {i}", [f"topic {i % 3}"]) for i in range(9)])
    store.close()
    lazy = snapshots.load(store.snapshot_path, lazy=True)
    eager = snapshots.load(store.snapshot_path)
    assert lazy is not None and eager is not None
    ids = list(eager.state.memories)
    for state in (lazy.state, eager.state):
        memories = state.memories
        for at in (0, 3, 4, 8):
            memories[ids[at]]  # decoded
        memories.pop(ids[6])
        memories["m_new"] = msgspec.structs.replace(eager.state.memories[ids[1]], id="m_new")
        state.keys.pop(next(iter(state.keys)))
    assert sum(type(v) is int for v in dict.values(lazy.state.memories)) == 4
    assert snapshots.encode(lazy) == snapshots.encode(eager)
    again = snapshots.load(store.snapshot_path, lazy=True)
    assert again is not None
    assert snapshots.encode(again) == store.snapshot_path.read_bytes()


@pytest.mark.parametrize(
    ("view", "node", "last"),
    [
        (snapshots.MemoryText, keygraph.MemoryNode, "status"),
        (snapshots.MemoryStatus, keygraph.MemoryNode, "status"),
        (snapshots.MemoryHash, keygraph.MemoryNode, "status"),
        (snapshots.MemoryNamespace, keygraph.MemoryNode, "namespace"),
        (snapshots.KeyLinks, keygraph.KeyNode, "links"),
        (snapshots.KeyLabels, keygraph.KeyNode, "aliases"),
    ],
)
def test_each_undecoded_view_has_its_nodes_leading_fields_in_their_places(
    view: type[msgspec.Struct], node: type[msgspec.Struct], last: str
) -> None:
    """The views read a stored node (an array) by position: a field added to or moved in a
    node without its views would make them read another field's bytes as this one."""
    names = [f.name for f in msgspec.structs.fields(node)]
    assert list(view.__struct_fields__) == names[: names.index(last) + 1]
