"""read_key with a query of a big key, ranked from its kept columns (keyrank.py): each row's
content hash picks its vector from the cache, so every way a vector can be missing, stale,
purged, of another model or odd (zero, NaN) must still give the plain loop's answer: same
total, ids, order (ties in link order) and unrounded scores."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_hubs import plain_read_key

from keytrail.core import HashEmbedder, Store, keyrank
from keytrail.core.store import RememberItem
from keytrail.events.types import GraphImported, ImportedMemory, KeyLink, NewMemory
from keytrail.projections import text_hash
from keytrail.projections.vectors import VECTORS_DIR, Matrix

#: Small stores stand in for hubs: every key with this many links ranks from columns.
MIN_LINKS = 8
HUB_SIZE = 60
QUERY = "the lamp in the drawer"

PAGES: list[dict[str, Any]] = [
    {"limit": 20, "offset": 0},
    {"limit": 1, "offset": 0},
    {"limit": 1, "offset": 7},
    {"limit": 7, "offset": 25},
    {"limit": 50, "offset": HUB_SIZE - 5},
    {"limit": 5, "offset": HUB_SIZE + 10},  # past the end
    {"limit": 5, "offset": 0, "namespace": "other"},
    {"limit": 5, "offset": 0, "namespace": "nowhere"},
]


def fact(i: int) -> str:
    return f"fact {i}: the user keeps the lamp {i % 5} in drawer {i % 7}"


@pytest.fixture(autouse=True)
def small_hubs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keyrank, "COLUMNS_MIN_LINKS", MIN_LINKS)


def fill(store: Store, n: int = HUB_SIZE) -> list[str]:
    """`n` memories under "user", every third in namespace "other"; their ids in link order."""
    items = [
        RememberItem(fact(i), keys=["user"], namespace="other" if i % 3 == 0 else "default")
        for i in range(n)
    ]
    return [r.memory_id for r in store.remember_batch(items)]


def hub_id(store: Store) -> str:
    hub = store.state.key_for_label("user")
    assert hub is not None
    return hub.id


@contextmanager
def one_instant(store: Store) -> Iterator[None]:
    """Reads at one instant: a score moves with the clock (about 2e-7 per second of age), so a
    read and the plain loop's a moment later may differ in the sixth digit on a loaded machine."""
    now, clock = store.clock(), store.clock
    store.clock = lambda: now
    try:
        yield
    finally:
        store.clock = clock


def by_columns(store: Store, key_id: str, query: str, **page: Any) -> Any:
    """read_key by the columns, failing if they gave up (so the plain loop did not answer)."""
    key = store.state.keys[key_id]
    limit, offset, namespace = page.get("limit", 20), page.get("offset", 0), page.get("namespace")
    with one_instant(store):
        found = store._rank_by_columns(key, namespace, store.clock(), offset, limit, query)
        assert found is not None, "the columns gave up"
        return store.read_key(key_id, query=query, **page)


def assert_same_as_plain(
    store: Store, query: str = QUERY, pages: list[dict[str, Any]] = PAGES
) -> None:
    key_id = hub_id(store)
    with one_instant(store):
        for page in pages:
            got = by_columns(store, key_id, query, **page)
            assert got == plain_read_key(store, key_id, query=query, **page), page


def test_a_hub_read_with_a_query_from_a_fresh_import_without_vectors(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A store whose log came without its cache (an import, or cache/ deleted before the open)
    has no vector for any memory: the columns' read embeds them from the contents."""
    first = make_store()
    fill(first)
    first.close()
    copy = tmp_path / "copy"
    shutil.copytree(first.home / "log", copy / "log")
    store = make_store(home=copy)
    hub = store.state.keys[hub_id(store)]
    digests = [text_hash(store.state.memories[m].content) for m in hub.links]
    assert not any(d in store.vectors for d in digests)
    assert_same_as_plain(store)


def test_a_hub_read_with_a_query_after_the_cache_is_deleted_under_the_store(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    ids = fill(store)
    assert_same_as_plain(store)  # columns built, vectors cached
    shutil.rmtree(store.home / VECTORS_DIR)
    assert_same_as_plain(store)
    # A write finds its files gone and starts the cache over; a memory added by another
    # process meanwhile is folded by refresh.
    other = make_store(home=store.home)
    other.remember(fact(HUB_SIZE + 1), keys=["user"])
    store.remember(fact(HUB_SIZE + 2), keys=["user"])
    other.close()
    assert_same_as_plain(store)
    store.read_memory(ids[4], via_key_id=hub_id(store))
    assert_same_as_plain(store)


def test_a_forgotten_memory_under_the_hub_is_not_shown_and_its_vector_not_brought_back(
    store: Store,
) -> None:
    ids = fill(store)
    # The query is a memory's content: that memory leads, at factor 1.0.
    target = ids[10]
    content = store.state.memories[target].content
    first = by_columns(store, hub_id(store), content)
    assert first.memories[0].memory_id == target
    digest = text_hash(content)
    store.forget(target)
    assert digest not in store.vectors
    got = by_columns(store, hub_id(store), content)
    assert target not in [m.memory_id for m in got.memories]
    assert got.total == first.total - 1
    assert digest not in store.vectors  # the read embedded nothing of the forgotten content
    columns = store._key_columns
    assert columns is not None
    kept = columns[hub_id(store)]
    assert kept.digests()[kept.rows[target]] != digest
    assert_same_as_plain(store, query=content)


def test_a_memory_forgotten_by_another_process_is_not_shown(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    ids = fill(store)
    content = store.state.memories[ids[3]].content
    assert_same_as_plain(store, query=content)
    other = make_store(home=store.home)
    other.forget(ids[3])
    other.close()
    got = by_columns(store, hub_id(store), content)
    assert ids[3] not in [m.memory_id for m in got.memories]
    assert_same_as_plain(store, query=content)


def test_a_correction_under_the_hub(store: Store) -> None:
    ids = fill(store)
    assert_same_as_plain(store)
    fixed = store.correct(ids[2], "fact 2: the lamp in the drawer is broken now")
    got = by_columns(store, hub_id(store), QUERY, limit=HUB_SIZE + 5)
    shown = [m.memory_id for m in got.memories]
    assert ids[2] not in shown
    assert fixed.memory_id in shown
    assert_same_as_plain(store)


def test_the_same_memory_id_imported_again_with_other_content(store: Store) -> None:
    """A graph.imported line may carry an id the store holds, with other content: the row keeps
    its place and takes the new content's vector, never the old one's."""
    ids = fill(store)
    assert_same_as_plain(store)  # columns kept, old digests in them
    old = store.state.memories[ids[6]]
    new_content = "the lamp in the drawer"  # the query itself: factor 1.0 if the new vector is used
    hub = store.state.keys[hub_id(store)]
    memory = NewMemory(
        memory_id=old.id,
        namespace=old.namespace,
        content=new_content,
        content_hash=text_hash(new_content),
        keys=[KeyLink(key_id=hub.id, label=hub.label, weight=hub.links[old.id])],
    )
    event = GraphImported(
        format="keymem",
        memories=[ImportedMemory(memory=memory, created_at=old.created_at)],
    )
    store._write(lambda app: store._append(app, event))
    got = by_columns(store, hub.id, QUERY)
    assert got.memories[0].memory_id == old.id
    assert got.memories[0].score == pytest.approx(plain_read_key(store, hub.id).memories[0].score)
    assert_same_as_plain(store)
    vector = store.vectors.get(text_hash(new_content))
    assert vector is not None
    assert np.array_equal(vector, store.embedder.embed([new_content])[0])


def test_zero_vectors_and_a_zero_query(store: Store) -> None:
    """The hash embedder gives "!!!" (no word) a zero vector: similarity 0, factor 0.5."""
    fill(store, 30)
    store.remember_batch(
        [RememberItem("!" * (3 + i), keys=["user"], namespace="default") for i in range(10)]
    )
    assert not store.embedder.embed(["!!!"]).any()
    assert_same_as_plain(store)
    assert_same_as_plain(store, query="!!!")


def test_hundreds_of_exact_ties_under_one_factor(store: Store) -> None:
    """One batch (one instant, equal base scores) of 300 contents all at factor 0.5 (a zero
    query): more tied candidates than are rescored one by one (keyrank._ONE_BY_ONE), so they
    are rescored per distinct input, then multiplied by their factors; ties in link order."""
    assert keyrank._ONE_BY_ONE < 300
    made = store.remember_batch(
        [RememberItem(fact(i), keys=["user"], namespace="default") for i in range(300)]
    )
    pages = [{"limit": 1, "offset": 0}, {"limit": 3, "offset": 150}, {"limit": 20, "offset": 290}]
    assert_same_as_plain(store, query="!!!", pages=pages)
    got = by_columns(store, hub_id(store), "!!!", limit=3, offset=150)
    assert [m.memory_id for m in got.memories] == [r.memory_id for r in made[150:153]]
    assert_same_as_plain(store, pages=pages)


class OddEmbedder(HashEmbedder):
    """The hash embedder, but a text naming "nan" or "inf" gets such values (a damaged model
    or cache row)."""

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = super().embed(texts)
        for row, text in enumerate(texts):
            for word, value in (("nan", np.nan), ("inf", np.inf), ("minus", -np.inf)):
                if word in text.split():
                    out[row, :3] = value
        return out


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_and_inf_vectors_fall_back_to_the_plain_loop(
    make_store: Callable[..., Store],
) -> None:
    """A non-finite vector makes a score non-finite: numpy cannot choose, so the plain loop
    answers, whatever order it gives."""
    store = make_store(embedder=OddEmbedder())
    fill(store)
    store.remember_batch(
        [RememberItem(f"lamp {w} in the drawer", keys=["user"]) for w in ("nan", "inf", "minus")]
    )
    key = store.state.keys[hub_id(store)]
    assert store._rank_by_columns(key, None, store.clock(), 0, 20, QUERY) is None
    with one_instant(store):
        for page in PAGES:
            got = store.read_key(key.id, query=QUERY, **page)
            want = plain_read_key(store, key.id, query=QUERY, **page)
            assert repr(got) == repr(want), page  # NaN != NaN: compare their reprs
    assert_same_as_plain(store, pages=[{"limit": 5, "offset": 0, "namespace": "other"}])


def test_ties_at_factor_one_keep_link_order(store: Store) -> None:
    """The query equal to a content held by several memories (other namespaces and the same
    batch, so equal base scores): their scores tie exactly, in link order."""
    text = "the user keeps the lamp in the drawer"
    items = [RememberItem(fact(i), keys=["user"]) for i in range(30)]
    items += [RememberItem(text, keys=["user"], namespace=f"ns{i}") for i in range(12)]
    made = [r.memory_id for r in store.remember_batch(items)]
    got = by_columns(store, hub_id(store), text, limit=12)
    assert [m.memory_id for m in got.memories] == made[30:]
    assert len({m.score for m in got.memories}) == 1
    assert_same_as_plain(store, query=text)
    pages = [{"limit": 1, "offset": i} for i in range(14)]
    assert_same_as_plain(store, query=text, pages=pages)


def test_another_model_uses_its_own_rows(
    make_store: Callable[..., Store],
) -> None:
    """The same log read with another embedder (a reembed): the rows of the first model's
    fingerprint, under the same content hashes, must not be used."""
    first = make_store()
    fill(first)
    key_id = hub_id(first)
    before = by_columns(first, key_id, QUERY)
    first.close()
    other = make_store(home=first.home, embedder=HashEmbedder(dim=64))
    assert other.embedder.fingerprint != first.embedder.fingerprint
    got = by_columns(other, key_id, QUERY)
    assert got != before
    assert_same_as_plain(other)
    # Each shown content has a row of the other model's fingerprint, none is borrowed.
    contents = [other.state.memories[m].content for m in other.state.keys[key_id].links]
    assert np.array_equal(
        other.vectors.rows([text_hash(c) for c in contents]), HashEmbedder(dim=64).embed(contents)
    )


def test_reads_with_a_query_from_server_threads_while_others_write(store: Store) -> None:
    """The server runs tools on worker threads against one Store: queried reads of the hub
    beside remembers, reads and forgets under it never fail nor give a page out of order."""
    ids = fill(store)
    key_id = hub_id(store)
    errors: list[BaseException] = []

    def reader(n: int) -> None:
        try:
            for i in range(25):
                page = store.read_key(key_id, query=f"lamp {n} drawer {i % 7}", limit=10)
                scores = [m.score for m in page.memories]
                assert scores == sorted(scores, reverse=True)
                assert len({m.memory_id for m in page.memories}) == len(scores)
        except BaseException as exc:
            errors.append(exc)

    def writer() -> None:
        try:
            for i in range(15):
                store.remember(f"lamp number {i} went to drawer {i}", keys=["user"])
                store.read_memory(ids[i], via_key_id=key_id)
                if i % 5 == 0:
                    store.forget(ids[30 + i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(3)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert_same_as_plain(store)


def test_the_real_model_ranks_a_hub_with_a_query_as_the_plain_loop(real_store: Store) -> None:
    store = real_store
    fill(store, 40)
    text = fact(7)
    store.remember(text, keys=["user"], namespace="elsewhere")  # same content, another namespace
    assert_same_as_plain(store)
    assert_same_as_plain(store, query=text)
    got = by_columns(store, hub_id(store), text, limit=3)
    same = {m for m, n in store.state.memories.items() if n.content == text}
    assert {m.memory_id for m in got.memories[:2]} == same


def test_a_content_another_process_forgot_still_ranks_the_memory_that_shares_it(
    make_store: Callable[..., Store],
) -> None:
    """Two memories with one content in two namespaces; another process forgets one and erases
    the content's vector rows on disk (zeros). The other memory is still shown and must be
    ranked by its content's true vector, as a store opened afresh ranks it, not by zeros."""
    writer = make_store()
    fill(writer)
    text = "the user keeps the lamp in the drawer"
    kept = writer.remember(text, keys=["user"], namespace="default").memory_id
    gone = writer.remember(text, keys=["user"], namespace="other").memory_id
    writer.close()
    store = make_store(home=writer.home)  # its vectors come from the files, not its own work
    assert_same_as_plain(store, query=text)
    other = make_store(home=store.home)
    other.forget(gone)
    other.close()
    fresh = make_store(home=store.home)
    with one_instant(store):
        fresh.clock = store.clock
        got = by_columns(store, hub_id(store), text, limit=5)
        assert got.memories[0].memory_id == kept
        assert got == fresh.read_key(hub_id(store), query=text, limit=5)
    assert_same_as_plain(store, query=text)


def test_a_query_outranks_a_few_reads_of_an_unrelated_memory(real_store: Store) -> None:
    """Found by an agent on LoCoMo: after the Sweden memory was read three times through
    "Caroline", read_key(Caroline, query="What book does Caroline love?") ranked it above the
    memory that answers. The query's factor (0.5 + 0.5·cosine) spanned 2×, no more than three
    reads' link weight and the time factor; relevance to the query now decides (cosine⁴), and
    reads and recency order what is about as relevant."""
    s = real_store
    made = s.remember(
        "Caroline moved here from Sweden four years ago", ["Caroline"], {"Caroline": "name"}
    )
    key_id = made.keys[0].key_id
    book = s.remember(
        "Caroline's favourite book is Becoming Nicole by Amy Ellis Nutt", ["Caroline"]
    ).memory_id
    for _ in range(3):
        s.read_memory(made.memory_id, via_key_id=key_id)
    page = s.read_key(key_id, query="What book does Caroline love?")
    assert page.memories[0].memory_id == book
    # Without a query the reads decide, as before.
    assert s.read_key(key_id).memories[0].memory_id == made.memory_id
