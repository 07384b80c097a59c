"""Pure decision rules of commands, without a store."""

from __future__ import annotations

import pytest

from keytrail.core.decide import may_alias, specifics, stems


@pytest.mark.parametrize(
    ("label", "other", "similarity", "merges"),
    [
        ("apples", "apple", 0.771, True),  # a variant at the merge threshold
        ("hobbies", "hobby", 0.815, True),
        ("running", "run", 0.854, True),
        ("husband", "wife", 0.869, False),  # a sibling, however close
        ("couch", "sofa", 0.856, False),  # kept apart below near-identical
        ("TV", "television", 0.958, True),  # near-identical meaning
        ("Tuesday", "Monday", 0.95, False),  # specifics differ at any cosine
        ("2024 budget", "2023 budget", 0.97, False),
        ("apples", "apple", 0.70, False),  # below the merge threshold
    ],
)
def test_may_alias(label: str, other: str, similarity: float, merges: bool) -> None:
    assert may_alias(label, other, similarity, merge=0.76, near_same=0.90) is merges


@pytest.mark.parametrize(
    ("text", "other", "same"),
    [
        ("moved from 3pm to 5pm", "moved from 5pm to 3pm", False),  # numbers keep their order
        ("2 cats and 3 dogs", "3 cats and 2 dogs", False),
        ("open Monday to Friday", "open Friday to Monday", False),
        ("2 cats", "2 cats and 2 dogs", False),  # and their count
        ("on Monday at 10am", "at 10am on Monday", True),  # a number and a day, either order
        ("not on Monday", "on Monday, not", True),
        ("I don't swim", "I do not swim", False),  # another negation is another specific
    ],
)
def test_specifics_keep_the_order_and_count_of_numbers_and_dates(
    text: str, other: str, same: bool
) -> None:
    assert (specifics(text) == specifics(other)) is same


def test_stems_ignore_case_and_plural() -> None:
    assert stems("Birthday Parties") == stems("birthday party")
    assert stems("LGBTQ+") == stems("lgbtq")
    assert stems("tea") != stems("green tea")
