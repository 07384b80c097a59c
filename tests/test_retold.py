"""A fact told again (deduplicated) keeps where it came from.

The new version replaces the old one and takes over what it had built up. Told again without a
`source`, it dropped the old version's: read_memory of the current version said nothing of where
the fact came from, though a correction given no source keeps the old one's.
"""

from __future__ import annotations

from keytrail.core import RememberItem, Store


def test_a_fact_told_again_without_a_source_keeps_the_old_versions(store: Store) -> None:
    told = store.remember("Dana's lease ends in March", ["lease"], source="the signed lease")
    again = store.remember("Dana's lease ends in March", ["lease"])
    assert again.deduplicated is not None and again.deduplicated.memory_id == told.memory_id
    assert store.read_memory(again.memory_id).source == "the signed lease"
    # A source given with the retelling is the new version's.
    third = store.remember_batch(
        [RememberItem("Dana's lease ends in March", ["lease"], source="Dana, on the phone")]
    )[0]
    assert third.deduplicated is not None
    assert store.read_memory(third.memory_id).source == "Dana, on the phone"
