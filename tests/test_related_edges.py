"""`related_to` edges survive the fact being told again.

A memory told again is deduplicated: the new version replaces the old one, taking over its
depth, reads and every key link, named again or not. Its `related_to` was dropped: the agent had
said "pick Dana up" relates to "her flight lands at 9", told the first fact once more, and
`related` no longer showed the edge from either side, though nothing had changed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.core.timetravel import view
from keytrail.events import NotFound


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def clocked_store(tmp_path: Path, now: list[datetime]) -> Store:
    """A store whose clock reads `now[0]`: a test moves time on by setting it."""
    return Store(
        Settings(home=tmp_path / "store", embedder="hash"),
        embedder=HashEmbedder(),
        clock=lambda: now[0],
    )


def edges(store: Store, memory_id: str) -> set[str]:
    return {r.memory_id for r in store.related(memory_id).related if r.related_edge}


def test_a_fact_told_again_keeps_the_related_to_of_the_version_it_replaces(store: Store) -> None:
    flight = store.remember("Dana's flight lands at 9", ["flight"]).memory_id
    hotel = store.remember("Dana's hotel is near the station", ["hotel"]).memory_id
    pickup = store.remember(
        "Pick Dana up at the airport", ["airport"], related_to=[flight]
    ).memory_id
    assert edges(store, flight) == {pickup}

    again = store.remember("Pick Dana up at the airport", ["airport"])
    assert again.deduplicated is not None and again.deduplicated.memory_id == pickup
    assert edges(store, flight) == {again.memory_id}
    assert edges(store, again.memory_id) == {flight}

    # Told again naming another memory: both edges hold, as the keys of both tellings do.
    third = store.remember_batch(
        [RememberItem("Pick Dana up at the airport", ["airport"], related_to=[hotel])]
    )[0]
    assert third.deduplicated is not None and third.deduplicated.memory_id == again.memory_id
    assert edges(store, third.memory_id) == {hotel, flight}
    assert store.read_memory(third.memory_id).related_to == [hotel, flight]


def test_an_edge_follows_either_end_to_its_current_version(store: Store) -> None:
    """Y related_to X, then X corrected (the flight now lands at 10) or told again: the two
    facts are as related as before. `related` named only the version the edge was made to,
    hidden once replaced, so the edge was gone from both sides."""
    flight = store.remember("Dana's flight lands at 9", ["flight"]).memory_id
    pickup = store.remember("Pick Dana up at the airport", ["airport"], related_to=[flight])
    moved = store.correct(flight, "Dana's flight lands at 10").memory_id
    assert edges(store, pickup.memory_id) == {moved}
    assert edges(store, moved) == {pickup.memory_id}

    # The other end replaced too, by a retelling: still one edge between the current versions.
    again = store.remember("Pick Dana up at the airport", ["airport"]).memory_id
    assert edges(store, moved) == {again}
    assert edges(store, again) == {moved}
    # A correction that names other memories drops the edge: it said what the fact relates to.
    hotel = store.remember("Dana's hotel is near the station", ["hotel"]).memory_id
    rewritten = store.correct(again, "Pick Dana up at the station", related_to=[hotel]).memory_id
    assert edges(store, rewritten) == {hotel}
    assert edges(store, moved) == set()
    # The past still shows the edge as it was.
    from keytrail.core.timetravel import view

    past = view(store, store.state.memories[rewritten].created_seq - 1, None)
    assert {r.memory_id for r in past.related(moved).related if r.related_edge} == {again}


def test_related_to_a_memory_that_has_expired_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """An expired memory is hidden from every read, read_memory by id too, and so from
    `related`: an edge to it would be acknowledged and never shown. Like one to a forgotten
    memory, it is refused naming the field (the batch item's too), and nothing is written."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = clocked_store(tmp_path, now)
    with store:
        trip = store.remember("Dana is in Rome this week", ["Rome"], ttl_seconds=3600)
        home = store.remember("Dana lives in Lyon", ["Lyon"]).memory_id
        work = store.remember("Dana works at the hospital", ["work"]).memory_id
        now[0] += timedelta(hours=2)
        before = log_bytes(store.home)
        calls: dict[str, Callable[[], object]] = {
            "related_to[0]": lambda: store.remember(
                "Dana flew back", ["flight"], related_to=[trip.memory_id]
            ),
            "items[1].related_to[0]": lambda: store.remember_batch(
                [
                    RememberItem("Dana flew back", ["flight"]),
                    RememberItem("Dana is home", ["home"], related_to=[trip.memory_id]),
                ]
            ),
            "related_to[1]": lambda: store.correct(
                home, "Dana lives in Lyon again", related_to=[work, trip.memory_id]
            ),
        }
        for field, call in calls.items():
            with pytest.raises(NotFound) as info:
                call()
            assert info.value.field == field
            assert "it has expired" in str(info.value)
            assert log_bytes(store.home) == before
        store.cleanup_expired()  # recorded as expired: the same
        with pytest.raises(NotFound, match="it has expired"):
            store.remember("Dana flew back", ["flight"], related_to=[trip.memory_id])


def test_related_of_an_expired_memory_is_refused_as_read_memory_refuses_it(
    tmp_path: Path,
) -> None:
    """TTL hides an expired memory until cleanup: read_memory by id says "it has expired", and
    `related` of it said nothing of that and listed its neighbours. The past, before it
    expired, still answers."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store = clocked_store(tmp_path, now)
    with store:
        trip = store.remember("Dana is in Rome this week", ["Rome", "Dana"], ttl_seconds=3600)
        other = store.remember("Dana likes Rome in spring", ["Rome", "Dana"])
        before = store.state.seq
        assert {r.memory_id for r in store.related(trip.memory_id).related} == {other.memory_id}
        now[0] += timedelta(hours=2)
        for ask in (store.related, store.read_memory):
            with pytest.raises(NotFound, match="it has expired") as info:
                ask(trip.memory_id)
            assert info.value.field == "memory_id"
        past = view(store, before).related(trip.memory_id)
        assert {r.memory_id for r in past.related} == {other.memory_id}


def test_expiry_of_a_related_to_target_is_judged_at_the_events_time(tmp_path: Path) -> None:
    """Another process whose clock runs ahead has written later events: this one's command
    is recorded at that later time (a log's times never go back), and a target expired by
    then was still accepted, judged by this process's own clock, while `correct` of the same
    memory was refused as expired (found by the stress hunt)."""
    behind = [datetime(2026, 1, 1, tzinfo=UTC)]
    ahead = [behind[0] + timedelta(seconds=100)]
    slow = clocked_store(tmp_path, behind)
    trip = slow.remember("Dana is in Rome", ["Rome"], ttl_seconds=50).memory_id
    fast = clocked_store(tmp_path, ahead)
    fast.remember("Dana flew home", ["flight"])  # recorded at 100 s: the trip has expired
    with pytest.raises(NotFound) as refused:
        slow.remember("Dana bought a souvenir", ["shopping"], related_to=[trip])
    assert refused.value.field == "related_to[0]"
    with pytest.raises(NotFound):
        slow.correct(trip, "Dana is in Milan")
    slow.close()
    fast.close()


def test_related_of_an_old_version_lists_other_facts_not_its_own_newer_version(
    store: Store,
) -> None:
    """An old version shares every key with the version that replaced it, which `related`
    ranked first as if it were another fact on the same keys. It is the same fact (named by
    `superseded_by`), and left out, as a related_to edge leaves a memory's versions out."""
    home = store.remember("Dana lives in Berlin", ["home city", "Dana"]).memory_id
    work = store.remember("Dana works in Potsdam", ["work city", "Dana"]).memory_id
    moved = store.correct(home, "Dana lives in Munich").memory_id

    assert store.read_memory(home).superseded_by == moved
    assert [r.memory_id for r in store.related(home).related] == [work]
    assert [r.memory_id for r in store.related(moved).related] == [work]
