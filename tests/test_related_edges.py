"""`related_to` edges survive the fact being told again.

A memory told again is deduplicated: the new version replaces the old one, taking over its
depth, reads and every key link, named again or not. Its `related_to` was dropped: the agent had
said "pick Dana up" relates to "her flight lands at 9", told the first fact once more, and
`related` no longer showed the edge from either side, though nothing had changed.
"""

from __future__ import annotations

from keytrail.core import RememberItem, Store


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
