"""Pure decision rules of commands, without a store."""

from __future__ import annotations

import random

import pytest

from keytrail.core.decide import may_alias, same_text_form, specifics, stems, text_anchors


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


#: Characters that a caseless form turns into others (or into ASCII), and plain ones around them
TRICKY = [
    *"aAbBeEfFiIkKlLnNoOsStTzZ09;`-. ",
    *"ßẞſﬀﬁﬂﬃﬄﬅﬆKŉ\u037e\u1fefİıẚÅÉéÖöΣσςΐ東",
    "e\u0301",
    "\u0301",
    "\u0338",
    "\u00a0",
    "\u3000",
    "\t",
    "\n",
    "\x1f",
]


def test_every_text_of_a_form_holds_its_anchors_in_some_ascii_case() -> None:
    """`text_anchors` are what the same-text scan looks for in the stored bytes: a text that
    lacks one (in any ASCII case) must never have that form, or a retold text would be
    missed."""
    rng = random.Random(5)
    anchored = 0
    for _ in range(20_000):
        text = "".join(rng.choice(TRICKY) for _ in range(rng.randrange(1, 14)))
        anchors = text_anchors(same_text_form(text))
        held = text.encode().lower()
        assert all(anchor in held for anchor in anchors), (text, anchors)
        anchored += bool(anchors) and len(anchors[0]) >= 3
    assert anchored > 300  # the runs looked for are not all cut short


@pytest.mark.parametrize(
    ("form", "anchors"),
    [
        # f, i, s, t: ligatures and ß make them
        ("the fish swam over the harbour", [b"harbour", b"over", b"wam", b"he", b"h"]),
        ("zoë drove the volvo home", [b"drove", b"home", b"he", b"vo", b"z"]),
        ("zoe\u0301 drove", [b"drove", b"zo"]),  # an e before a mark is not looked for
        ("東京harbour 42", [b"harbour", b"42"]),
        ("strasse", [b"ra", b"e"]),
        ("東京", []),
    ],
)
def test_text_anchors_are_the_runs_typed_as_themselves(form: str, anchors: list[bytes]) -> None:
    assert text_anchors(form) == anchors
