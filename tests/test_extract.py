"""Keys are optional: without them, names and salient terms are extracted and marked so."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from keytrail.core import RememberItem, Store
from keytrail.core import validation as check
from keytrail.core.config import Limits
from keytrail.core.extract import extract_keys
from keytrail.core.importers import import_text
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph
from keytrail.projections.keygraph import GraphState, KeyNode


def labels(content: str) -> dict[str, str]:
    return {k.label: k.type for k in extract_keys(content)}


def test_names_and_salient_terms() -> None:
    got = labels(
        "Yesterday Caroline went to the LGBTQ support group in New York. "
        "The group meets on Tuesday; Mel's painting sold at the gallery."
    )
    assert got["Caroline"] == "name" and got["LGBTQ"] == "name" and got["New York"] == "name"
    assert got["Mel"] == "name"  # a possessive ends a name and is dropped
    assert got["group"] == "concept"  # said twice: the most salient term
    # Sentence-opening common words and calendar words are not names; filler is not a concept.
    assert "Yesterday" not in got and "The" not in got and "Tuesday" not in got
    assert not {"went", "meets", "the"} & set(got)
    assert len([t for t in got.values() if t == "concept"]) <= 4


def test_a_line_break_ends_a_name_and_opens_a_sentence() -> None:
    """Transcripts and notes break lines without punctuation: a name never runs on into the
    next line ("Guests Alice Bob"), and a common word opening a line ("Yesterday", "The") is
    no more a name than one opening a sentence."""
    assert labels("Guests\nAlice\nBob") == {"Guests": "name", "Alice": "name", "Bob": "name"}
    got = labels("Notes from the trip\r\nYesterday we went hiking\n\nThe lake was cold")
    assert "Yesterday" not in got and "The" not in got and "Notes" in got
    assert not any(" " in label for label in got)
    got = labels("Caroline flew to New York\nMelanie stayed home")
    assert got["New York"] == "name" and got["Melanie"] == "name"


def test_nothing_to_extract_gives_no_keys() -> None:
    assert extract_keys("ok, thanks!") == []


def test_remember_without_keys_extracts_and_marks_them(store: Store) -> None:
    given = store.remember("Priya adopted a greyhound", ["Priya", "dog"], {"Priya": "name"})
    result = store.remember("Priya adopted a greyhound named Biscuit from the shelter")
    got = {k.label: k for k in result.keys}
    assert {"Priya", "Biscuit", "greyhound", "shelter"} <= set(got)
    assert got["Priya"].resolution == "existing"  # extracted keys join existing ones
    event = json.loads(
        sorted((store.home / "log").glob("*.jsonl"))[-1].read_text().splitlines()[-1]
    )
    links = {lk["label"]: lk for lk in event["memories"][0]["keys"]}
    assert all(lk["extracted"] for lk in links.values())
    assert links["Biscuit"]["type"] == "name" and links["shelter"]["type"] == "concept"
    assert store.state.key_for_label("Biscuit").extracted  # type: ignore[union-attr]
    assert not store.state.key_for_label("dog").extracted  # type: ignore[union-attr]
    assert not store.state.key_for_label("Priya").extracted  # type: ignore[union-attr]
    assert [k.label for k in given.keys] == ["Priya", "dog"]


def test_remember_batch_extracts_per_item(store: Store) -> None:
    out = store.remember_batch(
        [
            RememberItem("Lagos traffic was terrible this morning"),
            RememberItem("Joined the chess club", ["chess"]),
        ]
    )
    assert "Lagos" in {k.label for k in out[0].keys}
    assert [k.label for k in out[1].keys] == ["chess"]
    nodes = store.state.memories
    assert nodes[out[0].memory_id].keys and nodes[out[1].memory_id].keys


def test_a_name_opening_with_a_non_ascii_capital_is_kept_whole() -> None:
    # "Émile" was read from its second letter: a concept "mile", and "Ólafur" became "lafur".
    got = labels("Émile met Ólafur in Łódź, then flew to İzmir.")
    assert {got[n] for n in ("Émile", "Ólafur", "Łódź", "İzmir")} == {"name"}
    assert not {"mile", "lafur", "zmir"} & set(got)
    got = labels("We asked Ángela about the ómnibus schedule")
    assert got.get("Ángela") == "name" and not {"ngela", "mnibus"} & set(got)


def test_extracted_keys_keep_the_key_limits(make_store: Callable[..., Store]) -> None:
    # A long run of capitalised words (a title, shouted text) is no name a query can spell: it
    # made a 229-character key past the 100-character limit a given key is held to.
    store = make_store(limits=Limits(keys_per_memory=3))
    shouted = " ".join(["Alpha", "Beta", "Gamma", "Delta"] * 10) + " met here."
    got = store.remember(shouted)
    assert all(len(k.label) <= store.settings.limits.key_chars for k in got.keys)
    # Given keys may be 200 characters (as long as an entity's name); extraction stays at 100.
    run = " ".join(["Alpha", "Beta", "Gamma", "Delta"] * 6)  # 131 characters
    assert store.settings.limits.key_chars >= len(run)
    got = store.remember(f"Yesterday {run} met the violinists.")
    assert got.keys and all(len(k.label) <= 100 for k in got.keys)
    many = store.remember("Caroline met Melanie and Zoë in Paris to discuss painting")
    assert 1 <= len(many.keys) <= 3
    for node in store.state.memories.values():
        assert len(node.keys) <= 3


def test_a_name_in_decomposed_unicode_is_the_same_key_and_is_found(store: Store) -> None:
    # "Zoë" typed as Zoe + U+0308 (as macOS and some pastes produce) made a second name key,
    # and a query so typed matched neither: labels and queries were not NFC-normalised.
    composed, decomposed = "Zo\u00eb", "Zoe\u0308"
    first = store.remember(f"{composed} moved to Oslo")
    given = store.remember(f"Dana met {decomposed} at work", [decomposed], {decomposed: "name"})
    extracted = store.remember(f"{decomposed} likes tea")
    zoe = next(k.key_id for k in first.keys if k.label == composed)
    assert [k.key_id for k in given.keys] == [zoe]
    assert zoe in {k.key_id for k in extracted.keys}
    for query in (f"Where is {composed}?", f"Where is {decomposed}?"):
        assert [k.key_id for k in store.recall(query).keys if k.match == "literal"] == [zoe]


def test_entity_and_imported_names_are_nfc_too(store: Store) -> None:
    # Every way a label enters (remember keys, a knowledge-graph entity, an import) is one key
    # for "Zoë" however it was typed, so the entity's observations and memories meet.
    composed, decomposed = "Zo\u00eb", "Zoe\u0308"
    zoe = store.remember(f"{composed} moved to Oslo", [composed], {composed: "name"}).keys[0]
    kg = KnowledgeGraph(store)
    made = kg.create_entities([EntityInput(decomposed, "person", ["likes tea"])])
    assert [e.name for e in made.entities] == [composed]  # the key became the entity
    assert [e.name for e in kg.open_nodes([decomposed]).entities] == [composed]
    entity = {"type": "entity", "name": decomposed, "entityType": "person", "observations": ["x"]}
    import_text(store, json.dumps(entity) + "\n", "memory.jsonl", "memory-jsonl")
    labels = [k.label for k in store.state.keys.values()]
    assert labels.count(composed) == 1 and decomposed not in labels
    assert store.state.keys[zoe.key_id].entity_type == "person"


def test_a_name_stored_decomposed_before_nfc_labels_is_still_found(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A store written before labels were NFC-normalised holds "Zoe + U+0308" as typed. After
    # the upgrade the very same name, now normalised on the way in, must still reach that key:
    # not a missing entity, and not a second "Zoë" key beside it.
    decomposed = "Zoe\u0308"
    home = tmp_path / "old"
    with monkeypatch.context() as old_code:
        old_code.setattr(check, "label", lambda f, v, lim: " ".join(check.text(f, v, lim).split()))
        old = make_store(home)
        KnowledgeGraph(old).create_entities([EntityInput(decomposed, "person", ["likes tea"])])
        old.close()
    store = make_store(home)
    assert [e.name for e in KnowledgeGraph(store).open_nodes([decomposed]).entities] == [decomposed]
    again = store.remember("Zoe moved to Oslo", [decomposed], {decomposed: "name"})
    assert [k.resolution for k in again.keys] == ["existing"]
    assert len(store.state.keys) == 1
    zoe = again.keys[0].key_id
    for query in ("Where is Zo\u00eb?", f"Where is {decomposed}?"):
        assert [k.key_id for k in store.recall(query).keys if k.match == "literal"] == [zoe]


@pytest.mark.parametrize(
    ("content", "concept"),
    [
        ("we like café", "café"),
        ("we like cafe\u0301", "café"),  # decomposed as typed: NFC first, one word
        ("we like naïve", "naïve"),
        ("we like über", "über"),
        ("we like straße", "straße"),  # lowercased, not case-folded to "strasse"
        ("we like λόγος", "λόγος"),  # its final sigma kept (casefold would make it σ)
        ("we like привет", "привет"),
        ("we like हिन्दी", "हिन्दी"),  # vowel signs are marks, not word breaks
    ],
)
def test_a_concept_word_with_non_ascii_letters_is_extracted(content: str, concept: str) -> None:
    # Only ASCII words could be concepts: "café" or "привет" gave no key at all.
    assert labels(content) == {concept: "concept"}


def test_non_ascii_concepts_keep_the_rules_ascii_ones_follow() -> None:
    # shorter than four letters: no concept, as "we like tea"
    assert labels("we like été and мир") == {}
    # a name's words are not concepts too, and the name keeps its capital
    assert labels("we like Zürich; zürich is lovely") == {"Zürich": "name", "lovely": "concept"}
    # the most repeated first, at most four
    got = labels("café café naïve über привет λόγος straße")
    assert list(got) == ["café", "привет", "straße", "naïve"]
    # a script written without spaces has no words to take: not a whole clause as one key
    assert labels("我喜欢喝咖啡") == {} and labels("東京でラーメンを食べた") == {}


def test_a_name_stored_half_composed_by_an_old_log_is_still_found(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    # A log written before labels were NFC-normalised holds a name as it was typed, and a paste
    # can mix forms: here ë is composed (U+00EB) and Å decomposed (A + U+030A). Neither the NFC
    # label nor its NFD form is that text, so the key was reached by no lookup, and the same
    # name remembered again made a second key.
    mixed, composed = "Zo\u00eb A\u030angstr\u00f6m", "Zo\u00eb \u00c5ngstr\u00f6m"
    home = tmp_path / "old"
    make_store(home).close()
    segment = sorted((home / "log").glob("*.jsonl"))[-1]
    created = json.loads(segment.read_text().splitlines()[0])
    content = f"{mixed} studies comets"
    old_line = {  # as an old version wrote it, without the checksum hand-written lines may omit
        "type": "memory.remembered",
        "seq": created["seq"] + 1,
        "at": created["at"],
        "v": 1,
        "memories": [
            {
                "memory_id": "m_0123456789ab",
                "namespace": "default",
                "content": content,
                "content_hash": "sha256:" + hashlib.sha256(content.encode()).hexdigest(),
                "keys": [
                    {"key_id": "k_0123456789", "label": mixed, "type": "name", "resolution": "new"}
                ],
            }
        ],
    }
    with segment.open("a", encoding="utf-8") as log:
        log.write(json.dumps(old_line, ensure_ascii=False) + "\n")
    store = make_store(home)
    assert store.state.labels == {mixed.casefold(): "k_0123456789"}  # the fold is unchanged
    for asked in (composed, composed.upper(), unicodedata.normalize("NFD", composed), mixed):
        found = store.state.key_for_label(asked)
        assert found is not None and found.id == "k_0123456789", asked
    found_by = [k.key_id for k in store.recall(f"What does {composed} study?").keys]
    assert "k_0123456789" in found_by
    again = store.remember(f"{composed} moved to Kiruna", [composed], {composed: "name"})
    assert [(k.key_id, k.resolution) for k in again.keys] == [("k_0123456789", "existing")]
    assert len(store.state.keys) == 1
    # a label added later is found too (the index follows the labels as they grow)
    store.remember("Ørjan met Zoë", ["Ørjan"], {"Ørjan": "name"})
    assert store.state.key_for_label("ØRJAN") is not None


def test_the_unnormalised_label_index_follows_the_labels_it_was_built_from() -> None:
    # The index of half-composed labels rides on the state object, built on first need: labels
    # folded after it was built, and a label dropped (key.unaliased), must show in later lookups.
    mixed = "Zo\u00eb A\u030angstr\u00f6m"
    state = GraphState(
        keys={k: KeyNode(id=k, label=k) for k in ("k_1", "k_2")},
        labels={"plain": "k_1"},
    )
    nfc = unicodedata.normalize("NFC", mixed)
    assert state.key_for_label(nfc) is None  # builds the (empty) index
    state.labels[mixed.casefold()] = "k_2"  # as the fold adds a label: at the end
    assert state.key_for_label(nfc).id == "k_2"  # type: ignore[union-attr]
    del state.labels[mixed.casefold()]  # as key.unaliased drops one
    state.labels_dropped += 1
    assert state.key_for_label(nfc) is None


def test_titles_and_place_abbreviations_keep_names_whole() -> None:
    """The stop of "Dr." or "St." ends no sentence. A title is no part of the name a query
    would spell ("Smith"), nor a name or concept of its own; "St." belongs to the place."""
    got = labels("Dr. Smith met Mrs. Jones in St. Louis, and Prof. Ada Lovelace took notes.")
    assert {k: v for k, v in got.items() if v == "name"} == {
        "Smith": "name",
        "Jones": "name",
        "St. Louis": "name",
        "Ada Lovelace": "name",
    }
    assert not {"Dr", "Mrs", "Prof", "prof", "St", "Louis"} & set(got)
    assert labels("Martin Luther King Jr. spoke.")["Martin Luther King"] == "name"
    # A real sentence end after a lowercase word is still one: "Anna" opens a sentence.
    assert "Anna" in labels("we saw the doctor. Anna came later")


def test_a_comma_or_bracket_between_names_ends_each() -> None:
    """A list of names ("Luna, Oliver and Bailey") gave the name "Luna Oliver": punctuation
    that ends no sentence still ends a name, so a query for "Oliver" finds each alone."""
    got = labels("Melanie has 3 pets now: Luna, Oliver and a new one, Bailey.")
    assert {k for k, v in got.items() if v == "name"} == {"Melanie", "Luna", "Oliver", "Bailey"}
    got = labels('Caroline (Melanie\'s friend) read "Becoming Nicole" at home.')
    assert {k for k, v in got.items() if v == "name"} == {"Caroline", "Melanie", "Becoming Nicole"}
    assert labels("Dana / Sam") == {"Dana": "name", "Sam": "name"}
    assert labels("We met in Paris, France.")["Paris"] == "name"


def test_abbreviated_weekdays_and_months_are_no_names() -> None:
    """LoCoMo's "Last Fri I finally took my kids to a pottery workshop" gave the name "Fri"."""
    got = labels("Last Fri I took my kids to a pottery workshop, and on Wed in Sept we met Dana.")
    assert {k for k, v in got.items() if v == "name"} == {"Dana"}
    # The ones that are also given names stay names: "Jan" and "Jun" are people too.
    assert labels("Jan met Jun")["Jan"] == "name"


def test_abbreviated_weekdays_and_months_are_no_concepts_either() -> None:
    """Months and weekdays spelt out are common words, never concepts; "Sept" and "Thurs"
    became the concepts "sept" and "thurs" (four letters, in no word list)."""
    got = labels("We met on Thurs in Sept about the pottery workshop")
    assert not {"sept", "thurs"} & set(got), got
    assert got["pottery"] == "concept"


def test_contractions_are_no_names() -> None:
    """In LoCoMo's chats "I've", "You're", "I'll", "Can't" and "They're" were among the most
    frequent name keys: the common words are listed without apostrophes, and "I've" is
    capitalised wherever it stands. The word before the clitic decides, as for "I'm"."""
    got = labels(
        "I've been painting with Dana. You're right, I'll call her. Can't wait! "
        "They're coming, and I'd love it. Don't worry. How're the kids?"
    )
    assert {k for k, v in got.items() if v == "name"} == {"Dana"}
    # A name with a clitic is still the name, and ends there.
    assert labels("Tomorrow Dana'll bring Sam")["Dana"] == "name"
    assert "Sam" in labels("Tomorrow Dana'll bring Sam")


def test_a_function_word_alone_is_no_name_and_a_lone_hyphen_ends_one() -> None:
    # From a LoCoMo turn: "The" became a name key that every question with "the" matched.
    got = labels('Melanie: "Summer Sounds"- The playing was great')
    assert "The" not in got and got["Summer Sounds"] == "name"
    assert "And" not in labels("Caroline said - And then it rained")
    # A hyphen typed as a dash ended no name: "Books A" was one.
    assert "Books A" not in labels("Books - A great way to relax")
    # Inside a longer name, or a hyphenated one, they stay.
    got = labels("I read The Hobbit, then Plan A failed; Jean-Luc met Anna-Lena")
    assert {got.get(n) for n in ("The Hobbit", "Plan A", "Jean-Luc", "Anna-Lena")} == {"name"}
    assert labels("We met Will at the park").get("Will") == "name"
