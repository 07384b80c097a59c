"""Bad input is refused with an error naming the field (and the limit), and changes nothing."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from keytrail.core import HashEmbedder, InvalidInput, NotFound, RememberItem, Settings, Store
from keytrail.core.config import Limits
from keytrail.core.history import changes, history
from keytrail.core.timetravel import view

L = Limits()


def log_digest(home: Path) -> dict[str, str]:
    """Every file under log/ (and the lock), by content hash."""
    out = {}
    for p in sorted(home.rglob("*")):
        if p.is_file() and (p.parts[len(home.parts)] == "log"):
            out[str(p.relative_to(home))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def seeded(store: Store) -> dict[str, Any]:
    a = store.remember(
        "Newton saw an apple fall", ["apple", "Newton"], key_types={"Newton": "name"}
    )
    b = store.remember("The user likes strawberries", ["fruit"])
    work = store.remember("The quarterly report is due Friday", ["report"], namespace="work")
    fruit = next(k.key_id for k in b.keys)
    apple = next(k.key_id for k in a.keys if k.label == "apple")
    return {
        "store": store,
        "a": a.memory_id,
        "b": b.memory_id,
        "work": work.memory_id,
        "fruit": fruit,
        "apple": apple,
    }


Case = tuple[str, Callable[[dict[str, Any]], object], type[Exception], str, str | None]

CASES: list[Case] = [
    ("empty content", lambda s: s["store"].remember("", ["x"]), InvalidInput, "content", None),
    ("blank content", lambda s: s["store"].remember(" \n\t", ["x"]), InvalidInput, "content", None),
    (
        "content not a string",
        lambda s: s["store"].remember(42, ["x"]),
        InvalidInput,
        "content",
        None,
    ),
    (
        "content too long",
        lambda s: s["store"].remember("x" * (L.content_chars + 1), ["x"]),
        InvalidInput,
        "content",
        str(L.content_chars),
    ),
    # No keys at all is valid: they are extracted from the content (tests/test_extract.py).
    ("key blank", lambda s: s["store"].remember("fact", ["  "]), InvalidInput, "keys[0]", None),
    (
        "key of a zero-width space",
        lambda s: s["store"].remember("fact", ["\u200b"]),
        InvalidInput,
        "keys[0]",
        None,
    ),
    (
        "key with a control character",
        lambda s: s["store"].remember("fact", ["ok", "a\x01b"]),
        InvalidInput,
        "keys[1]",
        None,
    ),
    ("keys a string", lambda s: s["store"].remember("fact", "apple"), InvalidInput, "keys", None),
    (
        "too many keys",
        lambda s: s["store"].remember("fact", [f"k{i}" for i in range(L.keys_per_memory + 1)]),
        InvalidInput,
        "keys",
        str(L.keys_per_memory),
    ),
    (
        "oversized key",
        lambda s: s["store"].remember("fact", ["ok", "k" * (L.key_chars + 1)]),
        InvalidInput,
        "keys[1]",
        str(L.key_chars),
    ),
    (
        "empty key",
        lambda s: s["store"].remember("fact", ["ok", "  "]),
        InvalidInput,
        "keys[1]",
        None,
    ),
    (
        "unknown key type",
        lambda s: s["store"].remember("fact", ["x"], key_types={"x": "verb"}),
        InvalidInput,
        "key_types",
        "proper_noun",
    ),
    (
        "key types not a mapping",
        lambda s: s["store"].remember("fact", ["x"], key_types="name"),
        InvalidInput,
        "key_types",
        None,
    ),
    (
        "key types a list of pairs",
        lambda s: s["store"].remember("fact", ["x"], key_types=[("x", "name")]),
        InvalidInput,
        "key_types",
        None,
    ),
    (
        "key type for a missing key",
        lambda s: s["store"].remember("fact", ["x"], key_types={"y": "name"}),
        InvalidInput,
        "key_types",
        None,
    ),
    (
        "malformed namespace",
        lambda s: s["store"].remember("fact", ["x"], namespace="my ns!"),
        InvalidInput,
        "namespace",
        None,
    ),
    (
        "namespace starting with a dash",
        lambda s: s["store"].remember("fact", ["x"], namespace="-ns"),
        InvalidInput,
        "namespace",
        None,
    ),
    (
        "empty namespace",
        lambda s: s["store"].remember("fact", ["x"], namespace=""),
        InvalidInput,
        "namespace",
        None,
    ),
    (
        "namespace too long",
        lambda s: s["store"].remember("fact", ["x"], namespace="n" * 65),
        InvalidInput,
        "namespace",
        "64",
    ),
    (
        "malformed session id",
        lambda s: s["store"].remember("fact", ["x"], session_id="a session/1"),
        InvalidInput,
        "session_id",
        None,
    ),
    (
        "negative ttl",
        lambda s: s["store"].remember("fact", ["x"], ttl_seconds=-5),
        InvalidInput,
        "ttl_seconds",
        str(L.ttl_seconds),
    ),
    (
        "zero ttl",
        lambda s: s["store"].remember("fact", ["x"], ttl_seconds=0),
        InvalidInput,
        "ttl_seconds",
        str(L.ttl_seconds),
    ),
    (
        "ttl too long",
        lambda s: s["store"].remember("fact", ["x"], ttl_seconds=L.ttl_seconds + 1),
        InvalidInput,
        "ttl_seconds",
        str(L.ttl_seconds),
    ),
    (
        "ttl a bool",
        lambda s: s["store"].remember("fact", ["x"], ttl_seconds=True),
        InvalidInput,
        "ttl_seconds",
        None,
    ),
    (
        "ttl a float",
        lambda s: s["store"].remember("fact", ["x"], ttl_seconds=1.5),
        InvalidInput,
        "ttl_seconds",
        None,
    ),
    (
        "source too long",
        lambda s: s["store"].remember("fact", ["x"], source="s" * 201),
        InvalidInput,
        "source",
        str(L.source_chars),
    ),
    (
        "related_to unknown",
        lambda s: s["store"].remember("fact", ["x"], related_to=[s["a"], "m_000000000000"]),
        NotFound,
        "related_to[1]",
        None,
    ),
    (
        "related_to too many",
        lambda s: s["store"].remember("fact", ["x"], related_to=[f"m_{i}" for i in range(33)]),
        InvalidInput,
        "related_to",
        str(L.related_to),
    ),
    ("batch empty", lambda s: s["store"].remember_batch([]), InvalidInput, "items", None),
    (
        "batch too big",
        lambda s: s["store"].remember_batch([RememberItem("fact", ["x"])] * (L.batch_items + 1)),
        InvalidInput,
        "items",
        str(L.batch_items),
    ),
    (
        "batch with one bad item",
        lambda s: s["store"].remember_batch(
            [RememberItem("good fact", ["x"]), RememberItem("", ["y"])]
        ),
        InvalidInput,
        "items[1].content",
        None,
    ),
    (
        "batch with a bad namespace in its second item",
        lambda s: s["store"].remember_batch(
            [RememberItem("good fact", ["x"]), RememberItem("other", ["y"], namespace="a b")]
        ),
        InvalidInput,
        "items[1].namespace",
        None,
    ),
    (
        "batch with a negative ttl in its second item",
        lambda s: s["store"].remember_batch(
            [RememberItem("good fact", ["x"]), RememberItem("other", ["y"], ttl_seconds=-1)]
        ),
        InvalidInput,
        "items[1].ttl_seconds",
        str(L.ttl_seconds),
    ),
    (
        "batch with an unknown related_to in its second item",
        lambda s: s["store"].remember_batch(
            [RememberItem("good fact", ["x"]), RememberItem("other", ["y"], related_to=["m_nope"])]
        ),
        NotFound,
        "items[1].related_to[0]",
        None,
    ),
    (
        "related_to a memory of another namespace",
        lambda s: s["store"].remember("fact", ["x"], namespace="work", related_to=[s["a"]]),
        InvalidInput,
        "related_to[0]",
        None,
    ),
    (
        "batch relating its second item to a memory of another namespace",
        lambda s: s["store"].remember_batch(
            [
                RememberItem("work fact", ["x"], namespace="work", related_to=[s["work"]]),
                RememberItem("other work fact", ["y"], namespace="work", related_to=[s["b"]]),
            ]
        ),
        InvalidInput,
        "items[1].related_to[0]",
        None,
    ),
    (
        "correct with related_to in another namespace",
        lambda s: s["store"].correct(s["a"], "Newton saw two apples fall", related_to=[s["work"]]),
        InvalidInput,
        "related_to[0]",
        None,
    ),
    (
        "read unknown memory",
        lambda s: s["store"].read_memory("m_nope"),
        NotFound,
        "memory_id",
        None,
    ),
    (
        "read via unknown key",
        lambda s: s["store"].read_memory(s["a"], via_key_id="k_nope"),
        NotFound,
        "via_key_id",
        None,
    ),
    (
        "read via a key with no link",
        lambda s: s["store"].read_memory(s["a"], via_key_id=s["fruit"]),
        InvalidInput,
        "via_key_id",
        None,
    ),
    (
        "read with a query too long",
        lambda s: s["store"].read_memory(s["a"], query="q" * (L.query_chars + 1)),
        InvalidInput,
        "query",
        str(L.query_chars),
    ),
    (
        "correct unknown memory",
        lambda s: s["store"].correct("m_nope", "new text"),
        NotFound,
        "memory_id",
        None,
    ),
    (
        "correct with empty content",
        lambda s: s["store"].correct(s["a"], ""),
        InvalidInput,
        "content",
        None,
    ),
    (
        "correct with too many keys",
        lambda s: s["store"].correct(
            s["a"], "new", [f"k{i}" for i in range(L.keys_per_memory + 1)]
        ),
        InvalidInput,
        "keys",
        str(L.keys_per_memory),
    ),
    (
        "correct with unknown related_to",
        lambda s: s["store"].correct(s["a"], "new", related_to=["m_nope"]),
        NotFound,
        "related_to[0]",
        None,
    ),
    ("forget unknown memory", lambda s: s["store"].forget("m_nope"), NotFound, "memory_id", None),
    (
        "forget with a reason too long",
        lambda s: s["store"].forget(s["a"], reason="r" * 201),
        InvalidInput,
        "reason",
        str(L.source_chars),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_the_field_and_changes_nothing(seeded: dict[str, Any], case: Case) -> None:
    _, call, error, field, limit = case
    store: Store = seeded["store"]
    home = store.home
    before, seq = log_digest(home), store.state.seq
    state_before = store.state.memories.keys() | set()
    with pytest.raises(error) as info:
        call(seeded)
    exc = info.value
    assert isinstance(exc, InvalidInput)
    assert exc.field == field, str(exc)
    assert str(exc).startswith(f"{field}: ")
    if limit is not None:
        assert limit in str(exc), f"{exc} does not mention the limit {limit}"
        assert exc.limit is not None and limit in str(exc.limit)
        assert exc.to_dict()["limit"] == exc.limit
    assert log_digest(home) == before
    assert store.refresh().seq == seq
    assert set(store.state.memories) == state_before
    # A second store on the same directory agrees nothing happened.
    assert Store(store.settings, embedder=store.embedder).state.seq == seq


def test_correcting_a_replaced_version_is_refused(seeded: dict[str, Any]) -> None:
    store: Store = seeded["store"]
    store.correct(seeded["a"], "Newton saw an apple fall in 1666")
    before, seq = log_digest(store.home), store.state.seq
    with pytest.raises(InvalidInput) as info:
        store.correct(seeded["a"], "another version")
    assert info.value.field == "memory_id" and "replaced" in str(info.value)
    assert log_digest(store.home) == before and store.state.seq == seq


def test_forgetting_twice_is_not_found(seeded: dict[str, Any]) -> None:
    store: Store = seeded["store"]
    store.forget(seeded["b"])
    before = log_digest(store.home)
    with pytest.raises(NotFound) as info:
        store.forget(seeded["b"])
    assert info.value.field == "memory_id" and "already forgotten" in str(info.value)
    # Every read by id says so too, as a read as of the past does, not only "no memory".
    for read in (store.read_memory, store.related):
        with pytest.raises(NotFound) as info:
            read(seeded["b"])
        assert str(info.value) == f"memory_id: no memory {seeded['b']!r}: it was forgotten"
    assert log_digest(store.home) == before


def test_limits_follow_configuration(make_store: Callable[..., Store]) -> None:
    store = make_store(limits=Limits(content_chars=10, keys_per_memory=2))
    store.remember("0123456789", ["a", "b"])
    with pytest.raises(InvalidInput, match="10 characters"):
        store.remember("0123456789x", ["a"])
    with pytest.raises(InvalidInput, match="2 keys"):
        store.remember("short", ["a", "b", "c"])


def test_good_input_after_bad_input_is_appended_normally(seeded: dict[str, Any]) -> None:
    store: Store = seeded["store"]
    seq = store.state.seq
    with pytest.raises(InvalidInput):
        store.remember("", ["x"])
    assert store.remember("a valid fact", ["x"]).seq == seq + 1


def test_key_types_name_a_key_as_keys_spell_it(store: Store) -> None:
    # A label's whitespace is collapsed; key_types naming the very same string must find it
    # (it was refused as "names keys that are not in keys").
    made = store.remember("A trip to New York", [" New  York "], {" New  York ": "name"})
    assert [(k.label, k.type) for k in made.keys] == [("New York", "name")]


def test_label_limits_count_the_normalised_label(make_store: Callable[..., Store]) -> None:
    # key_chars counts the label as stored (NFC): the same 10-letter name typed decomposed is
    # accepted, and a label NFC lengthens past the limit is refused rather than stored longer.
    store = make_store(limits=Limits(key_chars=10))
    composed, decomposed = "\u00e9" * 10, "e\u0301" * 10
    assert [k.label for k in store.remember("x", [decomposed]).keys] == [composed]
    with pytest.raises(InvalidInput) as refused:
        store.remember("y", ["\ufb2c" * 4])  # each NFC-decomposes to three characters
    assert refused.value.field == "keys[0]"


@pytest.mark.parametrize(
    "typed",
    [
        "\ufeffAnna",  # a byte order mark, as a file saved by Notepad starts
        "Anna\u200b",  # a zero-width space, as web pages and chat apps paste them
        "An\u200bna",
        "Anna\u2060",  # a word joiner
        "\u200fAnna\u200e",  # right-to-left and left-to-right marks around a name
        "\u202eAnna\u202c",  # a right-to-left override (would show "annA") and its end
        "\u2067Anna\u2069",  # a right-to-left isolate
    ],
)
def test_a_label_is_the_name_it_shows(store: Store, typed: str) -> None:
    # Characters that show nothing and join or break nothing made a second key that looks
    # exactly like "Anna" and that no one typing "Anna" could reach.
    anna = store.remember("Anna plays the cello", ["Anna"], {"Anna": "name"}).keys[0]
    again = store.remember("Anna teaches on Mondays", [typed], {typed: "name"}).keys[0]
    assert (again.key_id, again.label, again.resolution) == (anna.key_id, "Anna", "existing")
    # A joiner that changes how letters or an emoji join is part of the label.
    for label in ("می\u200cخواهم", "👩\u200d💻"):
        assert store.remember("x", [label]).keys[0].label == label


def test_an_id_of_the_wrong_kind_or_a_label_says_what_it_is(seeded: dict[str, Any]) -> None:
    """An agent that passes a key id to read_memory, a memory id to read_key or a key's label
    as its id got only "no key 'Newton'": now the error says what it passed and, for a label,
    the key id to use instead."""
    store: Store = seeded["store"]
    newton = store.state.key_for_label("Newton")
    assert newton is not None
    with pytest.raises(NotFound) as info:
        store.read_key("Newton")
    assert str(info.value) == (
        f"key_id: no key 'Newton': key ids look like 'k_…'; the key labelled 'Newton' is "
        f"{newton.id!r}"
    )
    with pytest.raises(NotFound) as info:
        store.read_key("newton")  # labels match whatever the case
    assert str(info.value).endswith(f"the key labelled 'newton' is {newton.id!r}")
    with pytest.raises(NotFound) as info:
        store.read_key(seeded["a"])
    assert str(info.value) == f"key_id: no key {seeded['a']!r}: that is a memory id, not a key id"
    for read in (store.read_memory, store.related, partial(history, store), store.forget):
        with pytest.raises(NotFound) as info:
            read(newton.id)
        assert str(info.value) == (
            f"memory_id: no memory {newton.id!r}: that is the id of the key 'Newton', "
            "not of a memory"
        )
    # A mistyped id is still just not found, and a past view says the same.
    with pytest.raises(NotFound) as info:
        store.read_memory("m_missing")
    assert str(info.value) == "memory_id: no memory 'm_missing'"
    with pytest.raises(NotFound) as info:
        view(store, as_of=store.state.seq).read_key("Newton")
    assert str(info.value).endswith(f"the key labelled 'Newton' is {newton.id!r}")


@pytest.mark.parametrize("ident", [7, True, b"m_x", ["m_x"], {"m_x": 1}], ids=repr)
def test_an_id_that_is_no_string_is_refused_naming_the_field(
    seeded: dict[str, Any], ident: object
) -> None:
    """An id of another type from a Python caller (a list of ids, bytes) met the lookup's
    TypeError (unhashable type: 'list') or AttributeError ('int' object has no attribute
    'casefold'), not an error of keytrail's, now and in a past view."""
    store: Store = seeded["store"]
    before = log_digest(store.home)
    past = view(store, as_of=store.state.seq)
    calls: dict[str, list[Callable[[object], object]]] = {
        "memory_id": [
            store.read_memory,
            store.related,
            partial(history, store),
            store.forget,
            lambda i: store.correct(i, "Newton saw two apples fall"),  # type: ignore[arg-type]
            past.read_memory,
            past.related,
        ],
        "key_id": [store.read_key, past.read_key],
        "via_key_id": [lambda i: store.read_memory(seeded["a"], via_key_id=i)],  # type: ignore[arg-type]
        "by_memory_id": [lambda i: store.correct(seeded["a"], by_memory_id=i)],  # type: ignore[arg-type]
    }
    for field, reads in calls.items():
        for read in reads:
            with pytest.raises(InvalidInput) as info:
                read(ident)
            assert str(info.value) == f"{field}: must be a string, got {type(ident).__name__}"
    assert log_digest(store.home) == before


def test_an_integer_too_long_to_write_is_refused_by_its_count_of_digits(
    seeded: dict[str, Any],
) -> None:
    """Python writes no int of over 4,300 digits: a ttl, page size, hop count or seq that
    long, from a Python caller, raised ValueError while its error was being worded."""
    store: Store = seeded["store"]
    huge, head = 10**5000, store.state.seq
    refusals = {
        "ttl_seconds: an integer of 5,001 digits is out of range (limit: 1 to 315360000 "
        "seconds)": lambda: store.remember("a fact", ttl_seconds=huge),
        "limit: an integer of 5,001 digits is out of range (limit: 1 to 200)": lambda: (
            store.list_memories(limit=huge)
        ),
        "hops: an integer of 5,001 digits is out of range (limit: 0 to 5)": lambda: (
            store.recall_memories("apple", hops=-huge)
        ),
        f"as_of: a seq of 5,001 digits is outside the log (limit: 1 to {head})": lambda: view(
            store, as_of=huge
        ),
        f"since: a seq of 5,001 digits is outside the log (limit: 0 to {head})": lambda: changes(
            store, since=huge
        ),
    }
    for said, call in refusals.items():
        with pytest.raises(InvalidInput) as info:
            call()
        assert str(info.value) == said
    # Up to 60 digits, about as much as an error quotes of a text, the value is said as it
    # is; longer, by its count of digits (500 nines came back whole).
    with pytest.raises(InvalidInput) as info:
        store.list_memories(limit=10**59)
    assert str(info.value) == f"limit: {10**59} is out of range (limit: 1 to 200)"
    for digits in (61, 500):
        with pytest.raises(InvalidInput) as info:
            store.list_memories(limit=int("9" * digits))
        said = f"limit: an integer of {digits} digits is out of range (limit: 1 to 200)"
        assert str(info.value) == said


def test_a_long_id_or_role_that_names_nothing_is_quoted_short(seeded: dict[str, Any]) -> None:
    """A long string given as an id or a role (pasted, or over the command line, which sets
    no length) came back whole in the error: `no memory 'm_xxx…` and all 100,002 characters."""
    store: Store = seeded["store"]
    long = "m_" + "x" * 100_000
    before = log_digest(store.home)
    for read in (store.read_memory, store.read_key, store.forget, store.related):
        with pytest.raises(NotFound) as info:
            read(long)
        assert str(info.value).endswith("… (100,002 characters)"), str(info.value)[:100]
        assert len(str(info.value)) < 120 and info.value.ident == long
    with pytest.raises(InvalidInput) as info:
        store.record_turn("chat-1", long, "hello")
    assert len(str(info.value)) < 160 and "… (100,002 characters)" in str(info.value)
    with pytest.raises(InvalidInput) as info:
        store.record_turn("chat-1", 10**5000, "hello")  # type: ignore[arg-type]
    assert str(info.value).startswith("role: unknown role an integer of 5,001 digits")
    assert log_digest(store.home) == before


def test_key_types_naming_no_key_are_quoted_as_typed(store: Store) -> None:
    """The error listed the case-folded forms ("['perseid']"), not what the agent typed."""
    with pytest.raises(InvalidInput) as refused:
        store.remember("Caroline visited Malmö", ["Caroline", "Malmö"], {"Malmo": "name"})
    assert str(refused.value) == "key_types: names keys that are not in keys: ['Malmo']"


def test_key_types_without_keys_say_the_keys_are_missing(store: Store) -> None:
    """An agent typing its names and leaving the keys to extraction (as remember's description
    allows, or keeping the old version's keys in a correct) was told "key_types: names keys that
    are not in keys: ['Dana']", though it gave no keys: the error says so, and writes nothing."""
    content = "Dana's daughter Mia starts school in September"
    made = store.remember(content, ["Dana", "Mia", "school"])
    before = log_digest(store.home)
    for call, field in (
        (partial(store.remember, content, None, {"Dana": "name"}), "key_types"),
        (
            partial(store.remember_batch, [RememberItem(content, [], {"Dana": "name"})]),
            "items[0].key_types",
        ),
        (partial(store.correct, made.memory_id, content, None, {"Dana": "name"}), "key_types"),
    ):
        with pytest.raises(InvalidInput) as refused:
            call()
        assert refused.value.field == field
        assert str(refused.value) == (
            f"{field}: types ['Dana'], but no keys were given: list them in "
            f"{field.removesuffix('key_types')}keys too"
        )
    assert log_digest(store.home) == before


def test_key_types_giving_one_key_two_types_are_refused(store: Store) -> None:
    """{"k2": "name", "K2": "concept"} name one key: the last silently won."""
    before = log_digest(store.home)
    with pytest.raises(InvalidInput) as refused:
        store.remember("a fact", ["k2"], {"k2": "name", "K2": "concept"})
    assert refused.value.field == "key_types"
    assert "'k2'" in str(refused.value) and "'K2'" in str(refused.value)
    assert log_digest(store.home) == before
    # The same type twice is no conflict.
    made = store.remember("a fact", ["k2"], {"k2": "name", "K2": "name"})
    assert made.keys[0].type == "name"


@pytest.mark.parametrize("invisible", ["\u200b", "\ufeff \u200b", "\u2060\u200e"])
def test_text_of_nothing_visible_is_empty(store: Store, invisible: str) -> None:
    """strip() keeps zero-width spaces and byte order marks: a query of one "passed" and
    answered every key as nearest at score 0, and a memory of them was stored."""
    before = log_digest(store.home)
    with pytest.raises(InvalidInput, match="must not be empty") as refused:
        store.recall(invisible)
    assert refused.value.field == "query"
    with pytest.raises(InvalidInput, match="must not be empty") as refused:
        store.remember(invisible, ["topic"])
    assert refused.value.field == "content"
    assert log_digest(store.home) == before
    assert store.remember("👍", ["topic"]).memory_id  # a symbol alone is something to see


@pytest.mark.parametrize(
    "invisible",
    [
        "\x01\x02",  # control characters
        "\x00",
        "\u0301\u0302",  # combining marks with nothing to combine with
        " \u034f ",  # the combining grapheme joiner
        "\u200f\u0301\x7f",
    ],
)
def test_text_of_only_controls_or_marks_shows_nothing(store: Store, invisible: str) -> None:
    """Control characters and combining marks alone were counted as something to see: such a
    memory was stored (and found by no one), such a query answered. Refused like a label of
    them, naming the field."""
    before = log_digest(store.home)
    said = "has no visible character (letter, digit, punctuation, symbol)"
    with pytest.raises(InvalidInput, match=re.escape(said)) as refused:
        store.recall(invisible)
    assert refused.value.field == "query"
    with pytest.raises(InvalidInput, match=re.escape(said)) as refused:
        store.remember(invisible, ["topic"])
    assert refused.value.field == "content"
    with pytest.raises(InvalidInput) as refused:
        store.remember_batch([RememberItem(content=invisible, keys=["topic"])])
    assert refused.value.field == "items[0].content"
    assert log_digest(store.home) == before
    assert store.remember("e\u0301\x01", ["topic"]).memory_id  # a letter is something to see


def test_a_correction_related_to_the_memory_it_corrects_is_refused(store: Store) -> None:
    """related_to follows current versions, so naming the memory corrected (or an older
    version of it) tied the new version to itself."""
    first = store.remember("Dana lives in Lyon", ["Dana"])
    second = store.correct(first.memory_id, "Dana lives in Paris")
    before = log_digest(store.home)
    for target in (second.memory_id, first.memory_id):
        with pytest.raises(InvalidInput) as refused:
            store.correct(second.memory_id, "Dana lives in Nice", related_to=[target])
        assert refused.value.field == "related_to[0]"
    assert log_digest(store.home) == before


def test_key_types_with_more_entries_than_keys_may_have_are_refused(store: Store) -> None:
    """key_types had no bound: 100,000 entries naming no key came back, every one, in the
    error (a megabyte). It can name no more keys than a memory may have."""
    limit = store.settings.limits.keys_per_memory
    seq = store.state.seq
    types = {f"label {i}": "name" for i in range(100_000)}
    with pytest.raises(InvalidInput) as caught:
        store.remember("Dana moved to Oslo", ["Oslo"], key_types=types)
    assert caught.value.field == "key_types"
    assert caught.value.limit == f"{limit} entries"
    assert len(str(caught.value)) < 200
    assert store.refresh().seq == seq


def test_an_unknown_key_type_is_quoted_short(store: Store) -> None:
    with pytest.raises(InvalidInput) as caught:
        store.remember("Dana moved to Oslo", ["Oslo"], key_types={"Oslo": "c" * 100_000})
    assert caught.value.field == "key_types"
    assert len(str(caught.value)) < 300 and "100,000 characters" in str(caught.value)


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def told(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Memories each `correct(..., by_memory_id=...)` refusal below names."""
    clock = _Clock()
    store = Store(
        Settings(home=tmp_path / "store", embedder="hash"), embedder=HashEmbedder(), clock=clock
    )
    stale = store.remember("Dana's daughter Mia is 6 years old.", ["Mia"], {"Mia": "name"})
    fresh = store.remember("Dana's daughter Mia is 7 years old.", ["Mia"], {"Mia": "name"})
    work = store.remember("Mia's school report is due Friday", ["Mia"], namespace="work")
    lyon = store.remember("Dana lives in Lyon", ["Dana"])
    paris = store.correct(lyon.memory_id, "Dana lives in Paris")
    gone = store.remember("Dana has a cat", ["Dana"])
    store.forget(gone.memory_id)
    brief = store.remember("Dana is in Rome this week", ["Dana"], ttl_seconds=60)
    clock.now += timedelta(seconds=120)
    yield {
        "store": store,
        "stale": stale.memory_id,
        "fresh": fresh.memory_id,
        "work": work.memory_id,
        "superseded": lyon.memory_id,
        "corrected": paris.memory_id,
        "forgotten": gone.memory_id,
        "expired": brief.memory_id,
    }
    store.close()


REPLACE_REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, arguments with ids named by `told`'s keys, field, what the message says)
    ("neither content nor by", {"memory_id": "stale"}, "content", "required"),
    (
        "content and by",
        {"memory_id": "stale", "content": "Mia is 7", "by_memory_id": "fresh"},
        "by_memory_id",
        "not both",
    ),
    (
        "keys with by",
        {"memory_id": "stale", "by_memory_id": "fresh", "keys": ["Mia"]},
        "keys",
        "new content",
    ),
    (
        "key_types with by",
        {"memory_id": "stale", "by_memory_id": "fresh", "key_types": {"Mia": "name"}},
        "key_types",
        "new content",
    ),
    (
        "related_to with by",
        {"memory_id": "stale", "by_memory_id": "fresh", "related_to": ["work"]},
        "related_to",
        "new content",
    ),
    (
        "source with by",
        {"memory_id": "stale", "by_memory_id": "fresh", "source": "chat"},
        "source",
        "new content",
    ),
    (
        "valid_from with by",
        {"memory_id": "stale", "by_memory_id": "fresh", "valid_from": "2026-01-01"},
        "valid_from",
        "new content",
    ),
    ("by itself", {"memory_id": "stale", "by_memory_id": "stale"}, "by_memory_id", "another"),
    ("by unknown", {"memory_id": "stale", "by_memory_id": "m_nope"}, "by_memory_id", "m_nope"),
    (
        "by forgotten",
        {"memory_id": "stale", "by_memory_id": "forgotten"},
        "by_memory_id",
        "forgotten",
    ),
    ("by expired", {"memory_id": "stale", "by_memory_id": "expired"}, "by_memory_id", "expired"),
    (
        "by superseded",
        {"memory_id": "stale", "by_memory_id": "superseded"},
        "by_memory_id",
        "already replaced",
    ),
    (
        "by a version with a predecessor",
        {"memory_id": "stale", "by_memory_id": "corrected"},
        "by_memory_id",
        "told once",
    ),
    (
        "by in another namespace",
        {"memory_id": "stale", "by_memory_id": "work"},
        "by_memory_id",
        "namespace 'work'",
    ),
    (
        "memory_id superseded",
        {"memory_id": "superseded", "by_memory_id": "fresh"},
        "memory_id",
        "already replaced",
    ),
    ("memory_id unknown", {"memory_id": "m_nope", "by_memory_id": "fresh"}, "memory_id", "m_nope"),
    (
        "memory_id forgotten",
        {"memory_id": "forgotten", "by_memory_id": "fresh"},
        "memory_id",
        "forgotten",
    ),
]


@pytest.mark.parametrize("case", REPLACE_REFUSALS, ids=[c[0] for c in REPLACE_REFUSALS])
def test_correct_by_memory_id_refuses_what_would_not_make_one_line_of_versions(
    told: dict[str, Any], case: tuple[str, dict[str, Any], str, str]
) -> None:
    """A memory told once becomes another's new version only where a correction's new version
    could stand: refused otherwise, naming the field, with the log as it was."""
    _, arguments, field, says = case
    store: Store = told["store"]
    ids = {name: told.get(value, value) for name, value in arguments.items() if "id" in name}
    before, seq = log_bytes(store.home), store.state.seq
    with pytest.raises(InvalidInput) as refused:
        store.correct(**{**arguments, **ids})
    assert refused.value.field == field, str(refused.value)
    assert says in str(refused.value)
    assert log_bytes(store.home) == before and store.refresh().seq == seq
    assert store.state.memories[told["stale"]].current()


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def test_correct_by_memory_id_takes_empty_lists_as_not_given(told: dict[str, Any]) -> None:
    """Some MCP clients send every argument with its empty default (`keys: []`,
    `key_types: {}`, `related_to: []`): as with content, empty means "not given", so the
    replace goes through instead of being refused as describing new content."""
    store: Store = told["store"]
    done = store.correct(
        told["stale"], by_memory_id=told["fresh"], keys=[], key_types={}, related_to=[]
    )
    assert done.memory_id == told["fresh"]
    assert store.state.memories[told["stale"]].superseded_by == told["fresh"]


def test_correct_by_a_memory_replaced_by_one_since_forgotten_says_so(
    told: dict[str, Any],
) -> None:
    """The other side of a replace said only "already replaced by m_..." while naming the
    memory id to correct says that version was forgotten and to remember the fact again."""
    store: Store = told["store"]
    store.correct(told["stale"], by_memory_id=told["fresh"])
    store.forget(told["fresh"])
    other = store.remember("Dana's son Leo is 4 years old.", ["Leo"]).memory_id
    with pytest.raises(InvalidInput) as refused:
        store.correct(other, by_memory_id=told["stale"])
    assert refused.value.field == "by_memory_id"
    assert f"replaced by {told['fresh']!r}, which was forgotten" in str(refused.value)
