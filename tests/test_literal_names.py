"""Name keys whose label holds punctuation ("Jean-Luc", "St. Louis", "C++", "AT&T") are
matched literally inside a sentence, as any other name is.

`literal_candidates` built its n-grams from `\\w+` words only, so "Where did Jean-Luc go?"
offered "jean luc" and never "jean-luc": such a key was found only by a query that was exactly
its label, although the extractor itself makes name keys of hyphenated names.
"""

from __future__ import annotations

import pytest

from keytrail.core import Store
from keytrail.core.queries import literal_candidates


@pytest.mark.parametrize(
    ("label", "query"),
    [
        ("Jean-Luc", "Where did Jean-Luc go?"),
        ("Jean-Luc", "what is jean-luc's phone number"),
        ("Mary-Kate", "Who is Mary-Kate?"),
        ("St. Louis", "We flew to St. Louis, then home."),
        ("Node.js", "I use Node.js daily"),
        ("C++", "I love C++ a lot"),
        ("C++", "is it C++?"),
        ("AT&T", "call AT&T tomorrow"),
        (".NET", "about .NET."),
        ("[x]", "what about [x]?"),
        ("(y)", "(y) here"),
        ("सीता", "कल सीता आई।"),  # Devanagari: vowel signs in the name, a danda after it
        ("राम", "राम, सीता और लक्ष्मण"),
    ],
)
def test_a_name_with_punctuation_is_found_inside_a_sentence(
    store: Store, label: str, query: str
) -> None:
    key_id = (
        store.remember(f"a fact about {label}", keys=[label], key_types={label: "name"})
        .keys[0]
        .key_id
    )
    found = {k.key_id: k.match for k in store.recall(query).keys}
    assert found.get(key_id) == "literal"
    # recall_memories' key signal matches names the same way
    hits = store.recall_memories(query, learn=False).memories
    assert any("keys" in m.found_by for m in hits)


@pytest.mark.parametrize(
    ("label", "query"),
    [
        ("Jean-Luc", "Jean-Lucas called"),  # whole words still: a longer word is another name
        ("Jean-Luc", "Jean called Luc"),
        ("Anna", "Hanna-Maria called"),
        ("C#", "I love C++"),
        ("AT&T", "AT&Ts"),
        ("Luc", "Jean-Luc called"),  # as before: a part of a hyphenated name is a word of it
        # A combining mark is part of its letter, never punctuation to trim nor a word break:
        # Ram is not Rama, Ramu or Ramdas, and आय ("income") is no word of आया ("came").
        ("राम", "कल रामा आया"),
        ("राम", "कल रामू आया"),
        ("राम", "मैं रामदास से मिला"),
        ("आय", "कल रामा आया"),
        ("রাম", "রামু এসেছে"),  # Bengali
        ("Spın", "the Spın̈ band"),  # n + U+0308 has no composed form
    ],
)
def test_whole_words_only(store: Store, label: str, query: str) -> None:
    expected = label == "Luc"
    assert (label.casefold() in literal_candidates(query)) is expected


@pytest.mark.parametrize(
    ("label", "query", "expected"),
    [
        # A woman is no woman technologist (woman, ZWJ, laptop), nor Sweden the middle of the
        # flags of the US and Spain: trimming punctuation must not cut an emoji apart.
        ("👩", "the 👩\u200d💻 called", False),
        ("💻", "the 👩\u200d💻 called", False),
        ("🇸🇪", "flags 🇺🇸🇪🇸 here", False),
        ("🇸🇪", "go 🇸🇪!", True),
        ("👩\u200d💻", "ask the 👩\u200d💻!", True),
    ],
)
def test_an_emoji_is_matched_whole(label: str, query: str, expected: bool) -> None:
    assert (label in literal_candidates(query)) is expected


@pytest.mark.parametrize(
    ("label", "query"),
    [
        ("東京", "東京に住んでいる"),  # Japanese: the particle follows the name unspaced
        ("张伟", "我昨天见到了张伟。"),  # Chinese
        ("トヨタ", "トヨタの車を買った"),  # katakana
        ("서울", "서울에서 살아요"),  # Korean: spaced, but the particle is attached
        ("กรุงเทพ", "ฉันไปกรุงเทพเมื่อวาน"),  # Thai
    ],
)
def test_a_name_in_a_script_without_spaces_is_found_inside_a_sentence(
    store: Store, label: str, query: str
) -> None:
    """ "東京に住んでいる" is one \\w+ word: the name 東京 was found only by a query that was
    nothing else."""
    key_id = (
        store.remember(f"a fact about {label}", keys=[label], key_types={label: "name"})
        .keys[0]
        .key_id
    )
    found = {k.key_id: k.match for k in store.recall(query).keys}
    assert found.get(key_id) == "literal"


def test_a_name_in_such_a_script_is_not_found_where_it_is_not() -> None:
    candidates = literal_candidates("東京に住んでいる")
    assert "大阪" not in candidates and "東京" in candidates
    # Bounded: a long run gives at most _UNSPACED_GRAM candidates per character. Distinct
    # characters, so every substring is new (one repeated character dedups to a handful, and
    # the bound could not fail); unbounded, these would be about two million.
    run = "".join(chr(0x4E00 + i) for i in range(2000))
    assert len(literal_candidates(run)) < 2000 * 8 + 10


@pytest.mark.parametrize(
    ("label", "typed"),
    [
        # A keyboard types ' and a phone's smart punctuation ’.
        ("O'Brien", "O’Brien"),
        ("D’Angelo", "D'Angelo"),
        # casefold turns the Turkish İ into i + U+0307, so "İstanbul" matched no query but one
        # typed with İ, and "Istanbul" remembered beside it made a second key of the same city.
        ("İstanbul", "Istanbul"),
        ("İstanbul", "ISTANBUL"),
        ("İstanbul", "istanbul"),
        ("Istanbul", "İstanbul"),
        ("İzmir", "izmir"),
        # A name pasted with an invisible character in it is the same key (labels drop them),
        # so a query pasted the same way finds it too.
        ("Anna", "An\u200bna"),
        ("Anna", "An\u2060na"),
    ],
)
def test_a_name_is_one_however_it_is_spelled(store: Store, label: str, typed: str) -> None:
    key_id = (
        store.remember(f"a fact about {label}", keys=[label], key_types={label: "name"})
        .keys[0]
        .key_id
    )
    found = {k.key_id: k.match for k in store.recall(f"we flew to {typed} today").keys}
    assert found.get(key_id) == "literal"
    again = store.remember(f"more about {typed}", keys=[typed], key_types={typed: "name"})
    assert [(k.key_id, k.resolution) for k in again.keys] == [(key_id, "existing")]
    # ... and within one command, before either is stored
    names = {f"{label} Bay": "name", f"{typed} Bay": "name"}
    both = store.remember("Two spellings", keys=list(names), key_types=names).keys
    assert len(both) == 1
