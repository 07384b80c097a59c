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
        ("Luc", "Jean-Luc called"),  # a hyphenated name is one word, not its parts
        ("Jean", "Jean-Luc called"),
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
    assert label.casefold() not in literal_candidates(query)


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


def _name(store: Store, label: str) -> str:
    return (
        store.remember(f"a fact about {label}", keys=[label], key_types={label: "name"})
        .keys[0]
        .key_id
    )


def _literal(store: Store, query: str) -> dict[str, float]:
    return {k.key_id: k.score for k in store.recall(query).keys if k.match == "literal"}


# -- a hyphenated name is one name --------------------------------------------------------


def test_a_part_of_a_hyphenated_name_is_found_below_the_whole(store: Store) -> None:
    """ "Anna-Lena called" answered the key Anna as if the query named her: the query's words
    were split at the hyphen. A joined name may be another person's ("Anna-Lena"), or two
    names ("the Paris-London train"), which the query does not tell: a part is still found (a
    missed key hides its memories from the agent), at PART_LITERAL, below the whole name."""
    from keytrail.core.queries import PART_LITERAL

    anna, lena = _name(store, "Anna"), _name(store, "Lena")
    for query in (
        "Anna-Lena called",
        "did anna-lena call?",
        "Anna-Lena's phone",
        "(Anna-Lena)",
        "Anna\u2010Lena called",  # the hyphen a word processor types
    ):
        assert _literal(store, query) == {anna: PART_LITERAL, lena: PART_LITERAL}, query
    paris, london = _name(store, "Paris"), _name(store, "London")
    assert _literal(store, "the Paris-London train") == {paris: PART_LITERAL, london: PART_LITERAL}
    whole = _name(store, "Anna-Lena")
    assert _literal(store, "Anna-Lena called") == {
        whole: 1.0,
        anna: PART_LITERAL,
        lena: PART_LITERAL,
    }
    # Anna, punctuated or beside another name, is Anna.
    for query in ("Anna's phone", "Anna, call me", "(Anna) called", "Anna and Lena called"):
        assert _literal(store, query)[anna] == 1.0, query
    assert _literal(store, "Anna and Lena called")[lena] == 1.0
    # Still whole words: no part of a longer word.
    assert anna not in _literal(store, "Hanna-Lena called")


def test_a_name_joined_to_a_lowercase_word_is_still_the_name(store: Store) -> None:
    """A hyphen between a name and a lowercase word or a number is an affix, not a compound
    name: a Berlin-based firm is in Berlin, a pre-Google job was before Google."""
    from keytrail.core.queries import PART_LITERAL

    berlin, google = _name(store, "Berlin"), _name(store, "Google")
    assert _literal(store, "the Berlin-based startup") == {berlin: 1.0}
    assert _literal(store, "my pre-Google job") == {google: 1.0}
    covid = _name(store, "COVID")
    assert _literal(store, "after COVID-19") == {covid: 1.0}
    assert _literal(store, "Berlin-Brandenburg airport") == {berlin: PART_LITERAL}


def test_a_hyphenated_key_is_matched_whole_and_spelt_with_a_space(store: Store) -> None:
    key = _name(store, "Anna-Lena")
    assert _literal(store, "Anna-Lena called") == {key: 1.0}
    assert _literal(store, "did anna-lena's train arrive?") == {key: 1.0}
    # The same name typed with a space matches too, below the spelling itself.
    assert _literal(store, "Anna Lena called") == {key: 0.95}
    spaced = _name(store, "Jean Luc")
    assert _literal(store, "Jean-Luc called") == {spaced: 0.95}
    assert not _literal(store, "Anna-Lenas called")


# -- accents ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "typed"),
    [
        ("Lea", "Léa"),
        ("Léa", "Lea"),
        ("José", "JOSE"),
        ("Zoë", "Zoe"),
        ("Zoe", "Zoe\u0308"),  # the diaeresis typed as a combining mark
        ("Müller", "Muller"),
        ("Nguyễn", "Nguyen"),  # two marks on one letter
        ("Ørsted", "Orsted"),  # letters NFD leaves whole
        ("Łódź", "Lodz"),
        ("Dæhlie", "Daehlie"),
        ("Œdipus", "Oedipus"),
        ("Işık", "Isik"),  # the Turkish dotless ı
        ("Þór", "Thor"),
        ("Αθήνα", "ΑΘΗΝΑ"),  # Greek drops its accents in capitals
        ("Jean-Loïc", "Jean Loic"),
    ],
)
def test_a_name_is_found_with_or_without_its_accents(store: Store, label: str, typed: str) -> None:
    """recall("Léa") did not find the key Lea, nor "Lea" the key Léa."""
    key = _name(store, label)
    assert _literal(store, f"did {typed} call?") == {key: 0.95}
    # recall_memories' key signal matches names the same way
    hits = store.recall_memories(f"did {typed} call?", learn=False).memories
    assert any("keys" in m.found_by for m in hits)


def test_accents_do_not_change_which_key_a_name_is(store: Store) -> None:
    """Folding accents is how a query finds keys, never which key a label is: Lea and Léa
    remembered are two keys, and a query for either spelling answers it first."""
    lea = _name(store, "Lea")
    again = store.remember("Léa called", keys=["Léa"], key_types={"Léa": "name"}).keys[0]
    assert again.resolution == "new" and again.key_id != lea
    lea_accented = again.key_id
    assert store.state.key_for_label("Léa").id == lea_accented  # type: ignore[union-attr]
    assert store.state.key_for_label("Lea").id == lea  # type: ignore[union-attr]
    for typed, exact, other in (("Léa", lea_accented, lea), ("Lea", lea, lea_accented)):
        keys = store.recall(f"{typed} called", top_k=1).keys
        assert [k.key_id for k in keys] == [exact]
        found = _literal(store, f"{typed} called")
        assert found == {exact: 1.0, other: 0.95}
        assert [k.key_id for k in store.recall(f"{typed} called").keys][:2] == [exact, other]


@pytest.mark.parametrize(
    ("label", "query"),
    [
        ("Anna", "Hänna called"),  # still never a longer name
        ("Anna", "Hanna called"),
        ("Lea", "Léandre called"),  # still whole words
        ("Lea", "Léa-Marie called"),
        ("राम", "कल रामा आया"),  # a vowel sign is no accent: Ram is not Rama
        ("Андрей", "Андреи пришёл"),  # й is its own letter, not и with a breve
    ],
)
def test_folding_accents_keeps_whole_words(store: Store, label: str, query: str) -> None:
    assert _name(store, label) not in _literal(store, query)


def test_a_concept_is_not_folded(store: Store) -> None:
    """Only names are: in a word accents may tell two meanings apart (año, ano)."""
    key = store.remember("a good year", keys=["año"]).keys[0].key_id
    assert key not in _literal(store, "el ano")
    assert _literal(store, "el año") == {key: 1.0}


def test_a_name_in_a_script_without_spaces_is_still_found_beside_folding(store: Store) -> None:
    tokyo = _name(store, "東京")
    assert _literal(store, "東京-大阪の新幹線") == {tokyo: 1.0}
    assert _literal(store, "東京に住んでいる") == {tokyo: 1.0}
