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
