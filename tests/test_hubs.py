"""A hub key (one an agent puts on most memories, such as "user") must not make commands grow
with the store: dedup compares a new memory with a bounded set of candidates."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import tell_again

from keytrail.core import Store, hybrid, keyrank, queries
from keytrail.core.decide import (
    COMPARE_LIMIT,
    COMPARE_SCAN_PER_KEY,
    Batch,
    LinksByNamespace,
    SameTexts,
    same_text_form,
)
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.core.queries import visible
from keytrail.core.results import Remembered
from keytrail.core.store import RememberItem
from keytrail.core.timetravel import TimeView
from keytrail.projections.keygraph import Changes
from keytrail.projections.vectors import Matrix

HUB_SIZE = 2 * COMPARE_LIMIT + 50


def fact(i: int) -> str:
    return f"fact number {i}: the user keeps item {i} in drawer {i % 7}"


@pytest.fixture
def hub_store(store: Store) -> Store:
    """HUB_SIZE memories, each under the hub key "user" and one key of its own."""
    items = [RememberItem(fact(i), keys=["user", f"item {i}"]) for i in range(HUB_SIZE)]
    for start in range(0, len(items), 200):
        store.remember_batch(items[start : start + 200])
    return store


def compared_sizes(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many stored contents each later dedup check embeds and compares."""
    sizes: list[int] = []
    embed_contents = store.embed_contents

    def spy(contents: Mapping[str, str], hashed: Mapping[str, str] | None = None) -> Matrix:
        sizes.append(len(contents))
        return embed_contents(contents, hashed)

    monkeypatch.setattr(store, "embed_contents", spy)
    return sizes


def test_a_remember_under_a_hub_compares_a_bounded_number_of_memories(
    hub_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = compared_sizes(hub_store, monkeypatch)
    hub_store.remember("the user bought a new lamp", keys=["user", "lamp"])
    hub_store.remember("the user repainted the hall", keys=["user"])
    assert len(sizes) == 2
    assert all(0 < n <= COMPARE_LIMIT for n in sizes), sizes


def test_an_old_fact_retold_under_a_hub_is_found_through_its_rare_key(hub_store: Store) -> None:
    # Fact 0 is the oldest memory under "user", far outside the hub's newest COMPARE_LIMIT.
    oldest = next(m for m in hub_store.state.memories.values() if m.content == fact(0))
    again = hub_store.remember(fact(0), keys=["user", "item 0"])
    assert again.deduplicated is not None
    assert again.deduplicated.memory_id == oldest.id


def test_a_recent_fact_retold_under_the_hub_alone_is_found(hub_store: Store) -> None:
    newest = next(m for m in hub_store.state.memories.values() if m.content == fact(HUB_SIZE - 1))
    again = hub_store.remember(fact(HUB_SIZE - 1), keys=["user"])
    assert again.deduplicated is not None
    assert again.deduplicated.memory_id == newest.id


def test_an_old_fact_retold_under_the_hub_alone_is_found_by_its_text(hub_store: Store) -> None:
    # Fact 0 shares only "user" with the retelling, and is far past the hub's newest
    # COMPARE_LIMIT: the same text is a candidate however it is keyed.
    oldest = next(m for m in hub_store.state.memories.values() if m.content == fact(0))
    again = hub_store.remember(fact(0), keys=["user"])
    assert again.deduplicated is not None
    assert again.deduplicated.memory_id == oldest.id
    # ... and sharing no key at all.
    first = next(m for m in hub_store.state.memories.values() if m.content == fact(1))
    again = hub_store.remember(fact(1), keys=["drawers"])
    assert again.deduplicated is not None and again.deduplicated.memory_id == first.id


def test_related_through_a_hub_scores_as_a_full_walk_would(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`related` looks at a hub's newest links only; every score it gives is still exact."""
    items = [RememberItem(fact(i), keys=["user", f"shelf {i % 5}"]) for i in range(60)]
    made = store.remember_batch(items)
    target = made[10].memory_id
    monkeypatch.setattr(queries, "HUB_LINKS", 10**9)
    full = {r.memory_id: r.score for r in store.related(target, limit=100).related}
    monkeypatch.setattr(queries, "HUB_LINKS", 15)  # "user" is a hub, shelves are not
    bounded = store.related(target, limit=20).related
    assert len(bounded) == 20
    assert all(r.score == full[r.memory_id] for r in bounded)
    # The memories sharing the rarer shelf key still come first, as in the full answer.
    top = sorted(full.values(), reverse=True)[:11]
    assert [r.score for r in bounded[:11]] == top


def test_a_hub_count_follows_remember_correct_and_forget(store: Store) -> None:
    made = store.remember_batch([RememberItem(fact(i), keys=["user"]) for i in range(30)])

    def user_count() -> int:
        match = store.recall("user").keys[0]
        assert match.label == "user"
        return match.memory_count

    assert user_count() == 30
    store.remember("the user bought a lamp", keys=["user", "lamp"])
    assert user_count() == 31
    store.correct(made[0].memory_id, "fact number 0: the drawer is empty now")
    assert user_count() == 31  # the old version no longer counts, the new one does
    store.forget(made[1].memory_id)
    assert user_count() == 30


class Unwalkable(dict[str, float]):
    """A hub's links that fail a read walking all of them (newest first is allowed)."""

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("a read walked every link of the hub")

    def items(self) -> Any:
        raise AssertionError("a read walked every link of the hub")

    def keys(self) -> Any:
        raise AssertionError("a read walked every link of the hub")

    def values(self) -> Any:
        raise AssertionError("a read walked every link of the hub")


def test_reads_through_a_hub_walk_only_its_newest_links(
    hub_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = hub_store
    monkeypatch.setattr(queries, "HUB_LINKS", 40)
    monkeypatch.setattr(hybrid, "HUB_LINKS", 40)
    hub = s.state.key_for_label("user")
    assert hub is not None and len(hub.links) > 40
    target = next(m for m in s.state.memories.values() if m.content == fact(7))
    # The first count of the hub (in all namespaces, and in the memory's) walks it once; the
    # counts are kept from then on.
    before = s.recall("user drawer").keys
    first = s.related(target.id, limit=5).related
    hub.links = Unwalkable(hub.links)
    assert s.recall("user drawer").keys == before
    related = s.related(target.id, limit=5).related
    assert related == first
    assert related[0].memory_id != target.id and len(related) == 5
    found = s.recall_memories("what does the user keep in drawer 0, item 7?", learn=False)
    assert target.id in [m.memory_id for m in found.memories[:3]]


def test_a_forget_recounts_only_the_keys_of_the_memory_forgotten(
    hub_store: Store,
) -> None:
    """memory_stats and browse_keys count every key; after a forget only the forgotten
    memory's keys are counted again, not the hub it is not under."""
    s = hub_store
    aside = s.remember("a note of its own, under no hub", keys=["zz aside"]).memory_id
    stats, browsed = s.memory_stats(), s.browse_keys(limit=5)  # every key counted once
    hub = s.state.key_for_label("user")
    assert hub is not None
    hub.links = Unwalkable(hub.links)
    s.forget(aside)
    after, page = s.memory_stats(), s.browse_keys(limit=5)
    hub.links = dict(dict.items(hub.links))
    assert (after.memories, after.forgotten) == (stats.memories - 1, stats.forgotten + 1)
    assert after.hubs == stats.hubs and page.keys == browsed.keys
    assert page.total == browsed.total - 1  # "zz aside" leads to no memory now
    s._key_counts = None  # what a count from scratch says
    assert (s.memory_stats().hubs, s.browse_keys(limit=5)) == (after.hubs, page)


def test_a_hub_count_drops_what_stopped_counting_without_a_walk(
    hub_store: Store,
) -> None:
    """Kept counts take off a forgotten, corrected or expired memory rather than walk the hub
    again, and equal a count from scratch after."""
    s = hub_store
    ttl = s.remember("the user lends a ladder", keys=["user", "ladder"], ttl_seconds=60)
    hub = s.state.key_for_label("user")
    assert hub is not None
    ids = list(hub.links)
    stats = s.memory_stats()
    assert s.recall("user").keys[0].memory_count == HUB_SIZE + 1
    hub.links = Unwalkable(hub.links)
    s.forget(ids[3])
    s.correct(ids[4], "fact number 4: the drawer is empty now")
    s.read_memory(ids[5], via_key_id=hub.id)
    assert (s.memory_stats().hubs, s.recall("user").keys[0].memory_count) == (
        stats.hubs,
        HUB_SIZE,  # one forgotten, one replaced by its correction
    )
    hub.links = dict(dict.items(hub.links))  # an expiry passing counts its keys again
    clock = s.clock
    s.clock = lambda: clock() + timedelta(seconds=61)
    s.cleanup_expired()
    counted = s.recall("user").keys[0].memory_count, s.memory_stats()
    assert counted[0] == HUB_SIZE - 1 and ttl.memory_id == ids[-1]
    s._key_counts = s._tally = s._stats_cache = None
    assert (s.recall("user").keys[0].memory_count, s.memory_stats()) == counted


def test_kept_counts_follow_a_memory_told_again_under_its_id(store: Store) -> None:
    """A hand-made log may tell a memory again under the same id, in another namespace and
    under other keys: counts kept before it equal a count from scratch after it."""
    told = store.remember("the user keeps a lamp", keys=["user", "lamp"])
    store.remember("the user keeps a chair", keys=["user", "chair"])
    user, lamp = (store.state.key_for_label(label) for label in ("user", "lamp"))
    assert user is not None and lamp is not None

    def counts() -> list[int]:
        now = store.clock()
        return [store._count(k, ns, now) for k in (user, lamp) for ns in (None, "default")]

    assert counts() == [2, 2, 1, 1]
    tell_again(store, told.memory_id, "the user keeps a lamp", [user], namespace="elsewhere")
    assert counts() == [2, 1, 1, 0]  # the lamp key's link stays, to a memory elsewhere now
    store.forget(told.memory_id)
    assert counts() == [1, 1, 0, 0]
    store._key_counts = None
    assert counts() == [1, 1, 0, 0]


def test_memory_stats_after_writes_walks_only_what_changed(hub_store: Store) -> None:
    """memory_stats counts every memory once; after remember, read, correct and an expiry it
    counts only the memories those changed, and answers as a count from scratch. list_memories
    and browse_keys take their totals from those counts (list_memories walks only the newest
    memories)."""
    s = hub_store
    before = s.memory_stats()
    first, second = list(s.state.memories)[:2]
    s.state.memories = Unwalkable(s.state.memories)  # type: ignore[assignment]
    s.remember("the user bought a lamp", keys=["user", "lamp"], ttl_seconds=60)
    s.read_memory(first)
    s.correct(second, "fact number 1: the drawer is empty now")
    after = s.memory_stats()
    newest = s.list_memories(limit=3, offset=1)
    s.state.keys = Unwalkable(s.state.keys)  # type: ignore[assignment]
    browsed = s.browse_keys(limit=3, offset=1)
    s.state.keys = dict(dict.items(s.state.keys))
    s.state.memories = dict(dict.items(s.state.memories))
    assert browsed == TimeView(s, s.state, s.clock()).browse_keys(limit=3, offset=1)
    assert newest.total == after.memories
    assert newest == TimeView(s, s.state, s.clock()).list_memories(limit=3, offset=1)  # a scan
    assert (after.memories, after.superseded) == (before.memories + 1, before.superseded + 1)
    assert after.links == before.links + 2 + 2  # the lamp memory's, the correction's (inherited)
    s._tally = s._stats_cache = None
    assert s.memory_stats() == after
    s.clock = lambda: after.last_event_at + timedelta(seconds=61)  # the lamp memory expired
    expired = s.memory_stats()
    assert (expired.memories, expired.expired) == (after.memories - 1, after.expired + 1)


def full_walk(batch: Batch, namespace: str, content: str, key_ids: list[str]) -> list[str]:
    """The stored candidates as compare took them before its bounds: every key in the order
    named, each key's links oldest first; then the memories of the same text sharing no key,
    oldest first."""
    now, memories, found = batch.store.clock(), batch.state.memories, {}
    for key_id in key_ids:
        key = batch.state.keys.get(key_id)
        for memory_id in key.links if key is not None else ():
            node = memories[memory_id]
            if node.namespace == namespace and visible(node, now):
                found[memory_id] = None
    for node in memories.values():
        if node.namespace == namespace and visible(node, now) and node.content == content:
            found.setdefault(node.id, None)
    return list(found)


def test_a_store_without_hubs_compares_the_candidates_of_the_full_walk_in_its_order(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the bounds the candidates must be the full walk's and in its order (the same
    text found by its text alone last): identical
    texts embed to equal vectors whose products differ only in float noise, which depends on
    each row's place in the matrix, so the order decides which of them a retold fact
    deduplicates into (and which contradictions are listed)."""
    compared: list[tuple[list[str], list[str]]] = []
    compare, embed_contents = Batch.compare, store.embed_contents
    taken: list[list[str]] = []

    def spy(contents: Mapping[str, str], hashed: Mapping[str, str] | None = None) -> Matrix:
        taken.append(list(contents))
        return embed_contents(contents, hashed)

    def checked(
        batch: Batch, namespace: str, content: str, vector: Matrix, key_ids: list[str]
    ) -> Any:
        expected = full_walk(batch, namespace, content, key_ids)
        taken.clear()
        outcome = compare(batch, namespace, content, vector, key_ids)
        compared.append((expected, taken[0] if taken else []))
        return outcome

    monkeypatch.setattr(store, "embed_contents", spy)
    monkeypatch.setattr(Batch, "compare", checked)
    rnd = random.Random(8)
    texts = ["the user likes coffee", "the cat is {} years old", "meeting on {}"]
    keys = ["user", "coffee", "cat", "meeting", "work"]
    for _ in range(40):
        text = rnd.choice(texts).format(rnd.choice(["2", "3", "Monday"]))
        store.remember(text, keys=rnd.sample(keys, rnd.randint(1, 3)), namespace="a")
    assert any(len(expected) > 2 for expected, _ in compared)
    for expected, got in compared:
        assert got == expected


def test_a_memory_told_again_under_its_id_is_walked_at_the_keys_it_lists(store: Store) -> None:
    """Dedup walks a stored candidate at the first of the command's keys that it lists. Links
    tell the same while no memory was told again under its id (a hand-made log): then a key
    may still link a memory that no longer lists it, and the memory's own keys decide where
    it stands, and so which of two equal texts a retelling deduplicates into."""
    moved = store.remember("the harbour master is called Jim", keys=["harbour"])
    blue = store.remember("the boat is blue", keys=["boat"])
    boat = store.state.key_for_label("boat")
    assert boat is not None
    tell_again(store, moved.memory_id, "the boat is blue", [boat])
    harbour = store.state.key_for_label("harbour")
    assert harbour is not None and moved.memory_id in harbour.links
    assert store.state.memories[moved.memory_id].keys == [boat.id]
    # Both are met at "boat", the second key: the older telling (by seq) comes first.
    told = store.remember("the boat is blue", keys=["harbour", "boat"])
    assert told.deduplicated is not None
    assert told.deduplicated.memory_id == blue.memory_id


def test_a_fact_retold_in_a_small_namespace_beside_a_big_one_is_deduplicated(
    store: Store,
) -> None:
    told = store.remember("the user keeps a spare key in the shed", keys=["user"], namespace="home")
    items = [
        RememberItem(fact(i), keys=["user", f"item {i}"], namespace="work")
        for i in range(COMPARE_SCAN_PER_KEY + 10)
    ]
    for start in range(0, len(items), 200):
        store.remember_batch(items[start : start + 200])
    again = store.remember(
        "the user keeps a spare key in the shed", keys=["user"], namespace="home"
    )
    assert again.deduplicated is not None
    assert again.deduplicated.memory_id == told.memory_id


def test_links_by_namespace_follow_new_links_and_a_cut_link(store: Store) -> None:
    """The per-namespace split dedup reads a big key through equals a fresh split, as links
    are added and after one is cut (an observation deleted from one of two entities)."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", []), EntityInput("Bob", "person", [])])
    split = LinksByNamespace()

    def fresh(key_id: str, namespace: str) -> list[str]:
        memories = store.state.memories
        return [m for m in store.state.keys[key_id].links if memories[m].namespace == namespace]

    def check() -> None:
        for key in store.state.keys.values():
            for namespace in ("default", "work"):
                assert split.of(store.state, key, namespace) == fresh(key.id, namespace)

    store.remember("Alice and Bob play chess", keys=["Alice", "Bob"])
    store.remember("Alice runs on Sundays", keys=["Alice"], namespace="work")
    check()
    store.remember("Bob and Alice met in 2019", keys=["Alice", "Bob"], namespace="work")
    check()
    kg.delete_observations([ObservationInput("Alice", ["Alice and Bob play chess"])])
    # One link cut and one added: Alice has as many links as at the last look.
    store.remember("Alice bakes bread", keys=["Alice"])
    alice = store.state.key_for_label("Alice")
    assert alice is not None and store.state.links_cut == 1
    check()
    assert len(split.of(store.state, alice, "default")) == 1


def test_links_by_namespace_follow_a_memory_told_again_in_another_namespace(
    store: Store,
) -> None:
    """A hand-made log may tell a memory again under its id in another namespace: the split
    dedup reads then puts it in its new namespace, not the one it was first told in."""
    told = store.remember("the user keeps a lamp", keys=["user"])
    store.remember("the user keeps a chair", keys=["user"])
    user = store.state.key_for_label("user")
    assert user is not None
    split = LinksByNamespace()
    assert split.of(store.state, user, "default") == list(user.links)
    tell_again(store, told.memory_id, "the user keeps a lamp", [user], namespace="elsewhere")
    assert len(user.links) == 2  # the link kept its place: nothing was added or cut
    assert split.of(store.state, user, "elsewhere") == [told.memory_id]
    assert told.memory_id not in split.of(store.state, user, "default")


def test_same_texts_follow_new_retired_and_retold_memories(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index of current memories by text that dedup reads equals a fresh scan as memories
    are added, replaced, forgotten, deleted, expired, told again under their id elsewhere, and
    after the retirements journal dropped what it had noted since the last look."""
    texts = SameTexts()
    kg = KnowledgeGraph(store)

    def check() -> None:
        fresh: dict[tuple[str, str], list[str]] = {}
        for m in store.state.memories.values():
            if m.current():
                fresh.setdefault((m.namespace, same_text_form(m.content)), []).append(m.id)
        for namespace, form in {*fresh, ("default", "gone"), ("default", "the boat is blue")}:
            got = texts.holders(store.state, namespace, form)
            assert got == fresh.get((namespace, form), []), (namespace, form)

    check()
    blue = store.remember("The boat is  blue", keys=["boat"]).memory_id
    store.remember("the boat is blue", keys=["sea"], namespace="work")
    gone = store.remember("gone", keys=["x"]).memory_id
    check()
    store.correct(blue, "the boat is red")
    store.forget(gone)
    store.remember("the van is parked", keys=["van"], ttl_seconds=60)
    kg.create_entities([EntityInput("Alice", "person", ["Alice rows"])])
    check()
    kg.delete_observations([ObservationInput("Alice", ["Alice rows"])])
    later = store.clock() + timedelta(seconds=61)
    monkeypatch.setattr(store, "clock", lambda: later)
    store.cleanup_expired()
    check()
    tell_again(store, blue, "the boat is blue", [], namespace="elsewhere")
    check()
    monkeypatch.setattr(Changes, "KEPT", 2)
    for i in range(4):
        told = store.remember(f"fact {i}", keys=["f"]).memory_id
        store.forget(told)
    check()


def plain_read_key(store: Store, key_id: str, **page: Any) -> Any:
    """read_key as the plain loop answers it (every link scored, a stable sort)."""
    saved = keyrank.COLUMNS_MIN_LINKS
    keyrank.COLUMNS_MIN_LINKS = 10**9
    try:
        return store.read_key(key_id, **page)
    finally:
        keyrank.COLUMNS_MIN_LINKS = saved


PAGES: list[dict[str, Any]] = [
    {"limit": 20, "offset": 0},
    {"limit": 7, "offset": 193},  # across the exact ties of two remember_batch calls
    {"limit": 50, "offset": HUB_SIZE - 30},
    {"limit": 5, "offset": 0, "namespace": "default"},
    {"limit": 5, "offset": 0, "namespace": "elsewhere"},
]


def test_read_key_of_a_hub_walks_no_link_once_its_columns_are_kept(
    hub_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first read_key of a big key, later ones (after remember, read, correct and
    forget) bring its columns up to date from the changes alone, and answer as the plain loop."""
    s = hub_store
    monkeypatch.setattr(keyrank, "COLUMNS_MIN_LINKS", 100)
    hub = s.state.key_for_label("user")
    assert hub is not None and len(hub.links) >= 100
    assert s.read_key(hub.id) == plain_read_key(s, hub.id)  # builds the columns
    ids = list(hub.links)
    hub.links = Unwalkable(hub.links)
    s.remember("the user bought a lamp", keys=["user", "lamp"])
    s.read_memory(ids[5], via_key_id=hub.id)
    s.read_memory(ids[300], via_key_id=hub.id)
    s.correct(ids[9], "fact number 9: the drawer is empty now")
    s.forget(ids[250])
    got = [s.read_key(hub.id, **page) for page in PAGES]
    # With a query too: each memory's similarity factor, from the cached content hashes.
    queried = [s.read_key(hub.id, query="the drawer and the lamp", **page) for page in PAGES]
    hub.links = dict(dict.items(hub.links))
    assert got == [plain_read_key(s, hub.id, **page) for page in PAGES]
    assert queried == [
        plain_read_key(s, hub.id, query="the drawer and the lamp", **page) for page in PAGES
    ]
    assert queried[0].memories[0].memory_id != got[0].memories[0].memory_id
    assert got[0].memories[0].memory_id in (ids[5], ids[300])  # read: deeper, more recent
    assert got[0].total == HUB_SIZE  # one added, one replaced by its correction, one forgotten
    assert got[4].total == 0 and got[4].memories == []


def test_read_key_of_a_hub_pages_through_exact_ties_as_the_plain_ranking(
    hub_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch remembered at one instant ties exactly (same weight, depth and time): pages
    must keep the plain ranking's link order among them, and its scores to the last digit."""
    s = hub_store
    monkeypatch.setattr(keyrank, "COLUMNS_MIN_LINKS", 100)
    hub = s.state.key_for_label("user")
    assert hub is not None
    ids = list(hub.links)
    for mid in ids[150:160]:
        s.read_memory(mid, via_key_id=hub.id)
    for offset in range(0, HUB_SIZE, 37):
        page = {"limit": 41, "offset": offset}
        assert s.read_key(hub.id, **page) == plain_read_key(s, hub.id, **page)
    now = s.clock()
    found = s._rank_by_columns(hub, None, now, 0, HUB_SIZE)
    assert found is not None
    scores = [
        (
            mid,
            w
            * (0.9 + 0.1 * s.state.memories[mid].depth)
            * s.time_factor(s.state.memories[mid], now),
        )
        for mid, w in hub.links.items()
    ]
    assert found == (HUB_SIZE, sorted(scores, key=lambda ms: -ms[1]))


def test_a_batch_past_the_bound_decides_as_its_items_told_one_by_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """An item of a batch compares with what a remember of it after the earlier items would:
    stored memories and earlier items alike, the rarest keys first, each key's newest links
    first, at most COMPARE_LIMIT. Comparing with every earlier item sharing a key, a batch of
    500 under one key spent half a second holding the lock, and deduplicated a fact told again
    that remembers one by one keep (its first telling is past the newest COMPARE_LIMIT)."""
    shed = "the user keeps a spare key in the shed"
    # "shed" has more stored links than "user": it is the rarer key only counting the batch's.
    before = [
        RememberItem("the user keeps a spare key in the garage", keys=["user", "garage"]),
        RememberItem(fact(1), keys=["user"]),
        *(RememberItem(f"the shed has {n} windows", keys=["shed"]) for n in range(3)),
    ]
    count = COMPARE_LIMIT + 60
    items = [RememberItem(shed, keys=["user", "shed"])]
    items += [
        RememberItem(fact(i), keys=["user", "early"] if i == 0 else ["user"]) for i in range(count)
    ]
    items += [
        RememberItem(shed, keys=["user", "shed"]),  # found through its rare key, though oldest
        # Past the newest COMPARE_LIMIT: a near-duplicate (the hashing embedder reads no
        # punctuation) is kept; the same text is found by its text.
        RememberItem(fact(0) + "!", keys=["user", "late"]),
        RememberItem(fact(2), keys=["user", "late"]),
        RememberItem(fact(count - 1), keys=["user"]),  # among the newest: a duplicate
        RememberItem("the user keeps a spare key in the garage", keys=["user", "garage"]),
        # Two current tellings, equally near: the walk's order picks which one it dedups into.
        RememberItem(fact(0), keys=["late", "early", "user"]),
    ]

    def decisions(store: Store, told: list[Remembered]) -> list[tuple[Any, ...]]:
        place = {m.id: f"stored {m.content}" for m in store.state.memories.values()}
        place.update({r.memory_id: i for i, r in enumerate(told)})
        return [
            (
                r.deduplicated and (place[r.deduplicated.memory_id], r.deduplicated.similarity),
                [(place[c.memory_id], c.similarity) for c in r.possible_contradictions],
            )
            for r in told
        ]

    one_by_one = make_store(home=tmp_path / "one-by-one")
    batch = make_store(home=tmp_path / "batch")
    for store in (one_by_one, batch):
        for item in before:
            store.remember(item.content, item.keys)
    told = [one_by_one.remember(i.content, i.keys) for i in items]
    done = batch.remember_batch(items)
    expected = decisions(one_by_one, told)
    assert expected[-6][0] == (0, 1.0) and expected[-5][0] is None
    assert expected[-4][0] == (3, 1.0) and expected[-3][0] is not None
    assert expected[-1][0] == (len(items) - 5, 1.0)  # through "late", named first
    assert any(contradictions for _, contradictions in expected)
    assert decisions(batch, done) == expected


def test_same_texts_let_go_of_forgotten_memories(store: Store) -> None:
    """A forgotten memory's text is gone by the time dedup's index reads its retirement, so its
    id could not be taken from its slot there: a server that remembers and forgets as much for
    days held every forgotten id, one more per forget. The ids held stay within twice the
    current memories."""
    store.remember("the kept fact", keys=["kept"])
    for i in range(40):
        # Each remember's dedup reads the one before it into the index, forgotten after.
        told = store.remember(f"passing fact {i}", keys=[f"topic {i % 3}"]).memory_id
        after = store.remember(f"another fact {i}", keys=[f"topic {i % 3}"]).memory_id
        store.forget(told)
        store.forget(after)
    store.remember("the last fact", keys=["kept"])  # dedup catches up with the forgets
    current = sum(m.current() for m in store.state.memories.values())
    assert current == 2
    assert len(store.same_texts) <= 2 * current
