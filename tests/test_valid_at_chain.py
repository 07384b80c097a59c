"""`valid_at` shows one version of a correction chain at any time, also when a correction is
backdated before the version it replaces.

A version used to hold until the valid_from of its *immediate* successor only. In a chain
Seoul (from 2020) -> Busan (from 2022) -> Daegu (from 2021, a backdated correction), Seoul
held until Busan's 2022, so `valid_at=2021-06-01` showed both Seoul and Daegu as true. A
version holds until the earliest valid_from of every later version: Seoul until 2021.
"""

from __future__ import annotations

from collections.abc import Callable

from keytrail.core import Store
from keytrail.core.timetravel import view


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
