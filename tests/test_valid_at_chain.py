"""`valid_at` shows one version of a correction chain at any time, also when a correction is
backdated before the version it replaces.

A version used to hold until the valid_from of its *immediate* successor only. In a chain
Seoul (from 2020) -> Busan (from 2022) -> Daegu (from 2021, a backdated correction), Seoul
held until Busan's 2022, so `valid_at=2021-06-01` showed both Seoul and Daegu as true. A
version holds until the earliest valid_from of every later version: Seoul until 2021.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from keytrail.core import NotFound, Store
from keytrail.core.timetravel import read_memory_at, view


def shown(store: Store, valid_at: str) -> list[str]:
    page = view(store, None, valid_at).list_memories()
    return [m.preview for m in page.memories]


def test_a_backdated_correction_ends_every_earlier_version(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    busan = store.correct(seoul.memory_id, "The user lives in Busan", valid_from="2022-01-01")
    store.correct(busan.memory_id, "The user lives in Daegu", valid_from="2021-01-01")
    assert shown(store, "2019-06-01") == []
    assert shown(store, "2020-06-01") == ["The user lives in Seoul"]
    assert shown(store, "2021-06-01") == ["The user lives in Daegu"]
    assert shown(store, "2022-06-01") == ["The user lives in Daegu"]
    key = store.recall("home").keys[0].key_id
    past = view(store, None, "2021-06-01").read_key(key)
    assert [m.memory_id for m in past.memories] == [store.list_memories().memories[0].memory_id]


def test_a_chain_in_order_still_shows_each_version_in_its_time(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    a = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    b = store.correct(a.memory_id, "The user lives in Busan", valid_from="2021-01-01")
    store.correct(b.memory_id, "The user lives in Daegu", valid_from="2022-01-01")
    assert shown(store, "2020-06-01") == ["The user lives in Seoul"]
    assert shown(store, "2021-06-01") == ["The user lives in Busan"]
    assert shown(store, "2022-06-01") == ["The user lives in Daegu"]


def test_a_memory_made_the_next_version_ends_the_stale_one_in_valid_time(
    make_store: Callable[..., Store],
) -> None:
    """Two facts told apart, both true from their valid_from; once correct(by_memory_id) makes
    the second the first's next version, the first holds only until the second began."""
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    busan = store.remember("The user lives in Busan", ["home"], valid_from="2022-01-01")
    key = store.recall("home").keys[0].key_id
    both = view(store, None, "2022-06-01")
    assert sorted(shown(store, "2022-06-01")) == [
        "The user lives in Busan",
        "The user lives in Seoul",
    ]
    assert both.read_key(key).total == 2  # a count kept for valid_at reads, caught up below
    store.correct(seoul.memory_id, by_memory_id=busan.memory_id)
    assert shown(store, "2021-06-01") == ["The user lives in Seoul"]
    assert shown(store, "2022-06-01") == ["The user lives in Busan"]
    assert view(store, None, "2022-06-01").read_key(key).total == 1
    then = read_memory_at(store, seoul.memory_id, valid_at="2022-06-01")
    assert (then.memory_id, then.asked_id) == (busan.memory_id, seoul.memory_id)


def log_bytes(store: Store) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((store.home / "log").glob("*.jsonl")))


def test_read_memory_valid_at_answers_the_version_of_the_chain_true_then(
    make_store: Callable[..., Store],
) -> None:
    """read_memory with valid_at ignored the time: asked for Busan in 2021, it showed Busan
    where read_key and list_memories show Seoul. It answers the version true then, saying
    which id was asked for when that is another version."""
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    before = store.state.seq
    busan = store.correct(seoul.memory_id, "The user lives in Busan", valid_from="2022-01-01")
    daegu = store.correct(busan.memory_id, "The user lives in Daegu", valid_from="2021-01-01")
    key = store.recall("home").keys[0].key_id
    written = log_bytes(store)
    for asked in (seoul.memory_id, busan.memory_id, daegu.memory_id):
        for valid_at, true_id in (
            ("2020-06-01", seoul.memory_id),
            ("2021-06-01", daegu.memory_id),
            ("2022-06-01", daegu.memory_id),
        ):
            read = read_memory_at(store, asked, valid_at=valid_at)
            listed = view(store, None, valid_at).read_key(key).memories
            assert [m.memory_id for m in listed] == [read.memory_id] == [true_id]
            assert read.asked_id == (None if asked == true_id else asked)
            assert read.seq is None
    # As of before the corrections the store knew only Seoul: that is what was true in 2023.
    then = read_memory_at(store, seoul.memory_id, as_of=before, valid_at="2023-01-01")
    assert (then.memory_id, then.asked_id, then.content) == (
        seoul.memory_id,
        None,
        "The user lives in Seoul",
    )
    assert log_bytes(store) == written, "a read at a valid time appended something"


def test_read_memory_valid_at_refuses_when_no_version_was_true_then(
    make_store: Callable[..., Store],
) -> None:
    """A memory told today showed for valid_at 2000, and one whose only successor is
    forgotten for a time after it ended: both are refused as not found, naming valid_at and
    when the fact was true, and append nothing."""
    store = make_store()
    today = store.remember("The user drinks tea", ["drinks"])
    told = store.state.memories[today.memory_id].created_at
    seoul = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    busan = store.correct(seoul.memory_id, "The user lives in Busan", valid_from="2022-01-01")
    store.forget(busan.memory_id)
    written = log_bytes(store)
    with pytest.raises(NotFound) as early:
        read_memory_at(store, today.memory_id, valid_at="2000-01-01")
    assert early.value.field == "valid_at"
    assert early.value.problem == (
        f"no memory {today.memory_id!r}: not yet true at 2000-01-01T00:00:00+00:00 "
        f"(true from {told.isoformat()})"
    )
    with pytest.raises(NotFound) as ended:
        read_memory_at(store, seoul.memory_id, valid_at="2023-01-01")
    assert ended.value.field == "valid_at"
    assert ended.value.problem == (
        f"no memory {seoul.memory_id!r}: no longer true at 2023-01-01T00:00:00+00:00 "
        "(true from 2020-01-01T00:00:00+00:00 until 2022-01-01T00:00:00+00:00)"
    )
    assert read_memory_at(store, seoul.memory_id, valid_at="2021-01-01").memory_id == (
        seoul.memory_id
    )
    assert log_bytes(store) == written, "a refused read appended something"


def neighbours(store: Store, memory_id: str, valid_at: str) -> tuple[str, str | None, list[str]]:
    answer = view(store, None, valid_at).related(memory_id)
    contents = [store.state.memories[r.memory_id].content for r in answer.related]
    return answer.memory_id, answer.asked_id, contents


def test_related_valid_at_starts_from_the_version_of_the_chain_true_then(
    make_store: Callable[..., Store],
) -> None:
    """related with valid_at started from the id asked for whatever the time: asked for Busan
    in 2020, it answered Busan's neighbours then, among them Seoul, its own earlier version. It
    starts from the version true then, as read_memory does, saying which id was asked for."""
    store = make_store()
    seoul = store.remember("The user lives in Seoul", ["home", "Seoul"], valid_from="2020-01-01")
    busan = store.correct(
        seoul.memory_id, "The user lives in Busan", ["home", "Busan"], valid_from="2022-01-01"
    )
    daegu = store.correct(
        busan.memory_id, "The user lives in Daegu", ["home", "Daegu"], valid_from="2021-01-01"
    )
    store.remember("Seoul has the Han river", ["Seoul"], valid_from="2000-01-01")
    store.remember("Daegu is hot in summer", ["Daegu"], valid_from="2000-01-01")
    written = log_bytes(store)
    for asked in (seoul.memory_id, busan.memory_id, daegu.memory_id):
        for valid_at, true_id, near in (
            ("2020-06-01", seoul.memory_id, ["Seoul has the Han river"]),
            ("2021-06-01", daegu.memory_id, ["Daegu is hot in summer"]),
            ("2022-06-01", daegu.memory_id, ["Daegu is hot in summer"]),
        ):
            assert neighbours(store, asked, valid_at) == (
                true_id,
                None if asked == true_id else asked,
                near,
            ), (asked, valid_at)
    assert log_bytes(store) == written, "related at a valid time appended something"


def test_related_valid_at_refuses_when_no_version_was_true_then(
    make_store: Callable[..., Store],
) -> None:
    """related answered neighbours for a valid time before the fact was true (a memory told
    today, in 2000); it is refused as read_memory refuses it, naming valid_at."""
    store = make_store()
    today = store.remember("The user drinks tea", ["drinks"])
    store.remember("The user drank coffee", ["drinks"], valid_from="1990-01-01")
    told = store.state.memories[today.memory_id].created_at
    seoul = store.remember("The user lives in Seoul", ["home"], valid_from="2020-01-01")
    busan = store.correct(seoul.memory_id, "The user lives in Busan", valid_from="2022-01-01")
    store.forget(busan.memory_id)
    with pytest.raises(NotFound) as early:
        view(store, None, "2000-01-01").related(today.memory_id)
    assert early.value.field == "valid_at"
    assert early.value.problem == (
        f"no memory {today.memory_id!r}: not yet true at 2000-01-01T00:00:00+00:00 "
        f"(true from {told.isoformat()})"
    )
    with pytest.raises(NotFound) as ended:
        view(store, None, "2023-01-01").related(seoul.memory_id)
    assert ended.value.field == "valid_at"
    assert "no longer true at 2023-01-01" in ended.value.problem
    assert neighbours(store, today.memory_id, told.isoformat())[2] == ["The user drank coffee"]
