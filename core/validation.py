"""Input checks. Each failure names the field, the problem and the limit; nothing is written."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from keytrail.events import KEY_TYPES, InvalidInput

# The errors' own (NotFound quotes an id with them), for the checks here as well.
from keytrail.events.errors import number as number
from keytrail.events.errors import quoted as quoted

from .config import Limits

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")
NAMESPACE_CHARS = 64
SESSION_CHARS = 128
#: The longest time (as_of, valid_at, valid_from, since, until) taken, as typed. The longest
#: ISO-8601 time fromisoformat reads is 42 characters ("2026-03-01T09:00:00.123456+05:30:00.
#: 123456"); it also reads any number of zeros after the "T", so a megabyte was midnight.
TIME_CHARS = 64


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """ "1 turn", "2 turns": a count as a person reads it (`plural` where it is no noun + s).
    Here, not in the server, because messages of core (errors, verify) count things too."""
    return f"{count} {noun}" if count == 1 else f"{count} {plural or noun + 's'}"


#: The most characters of a file's path an error quotes (see `quoted`): a real one whole, one too
#: long to name a file (thousands of characters) cut short
PATH_CHARS = 200


def os_error_text(exc: OSError) -> str:
    """`exc` as str() says it, its file names quoted short: a name too long to be a file's
    (`--output` or `--home` of 3,000 characters) came back whole."""
    if exc.errno is None or exc.filename is None:
        return str(exc)
    text = f"[Errno {exc.errno}] {exc.strerror}: {quoted(exc.filename, PATH_CHARS)}"
    if exc.filename2 is not None:
        text += f" -> {quoted(exc.filename2, PATH_CHARS)}"
    return text


#: What an integer typed as a flag or a KEYTRAIL_* variable is made of (see `integer`)
INTEGER_FORM = "ASCII digits 0-9, after a minus if negative"
_INTEGER_RE = re.compile(r"-?[0-9]+")


def integer(field: str, raw: str) -> int:
    """`raw`, an integer typed as a command-line flag or a KEYTRAIL_* variable: ASCII digits,
    after a minus for a negative one (the range checked after says which mean something),
    surrounding whitespace ignored. int() also reads other scripts' digits, underscores and a
    plus, which no one typing a number means: `serve --http --port ٣` served on port 3."""
    digits = raw.strip()
    if not _INTEGER_RE.fullmatch(digits):
        raise InvalidInput(field, f"not an integer: {quoted(raw)}", limit=INTEGER_FORM)
    try:
        return int(digits)
    except ValueError:  # over the 4,300 digits int() reads: outside every range
        size = len(digits.lstrip("-"))
        raise InvalidInput(field, f"an integer of {size:,} digits is out of range") from None


#: What a decimal number typed as a flag or a KEYTRAIL_* variable is made of (see `floating`)
FLOAT_FORM = (
    "ASCII digits 0-9, after a minus if negative; a decimal point and an exponent optional: "
    "2.5, .5, 1e-3"
)
_FLOAT_RE = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def floating(field: str, raw: str) -> float:
    """`raw`, a decimal number typed as a command-line flag or a KEYTRAIL_* variable, as
    `integer` reads an integer: ASCII digits with at most one decimal point, after a minus if
    negative, an exponent optional, surrounding whitespace ignored. float() also reads other
    scripts' digits, underscores, a plus, "nan" and "inf": KEYTRAIL_TIME_DECAY_DAYS=١.٥ was
    1.5. One too large for a float is infinite, which the range checked after refuses."""
    digits = raw.strip()
    if not _FLOAT_RE.fullmatch(digits):
        raise InvalidInput(field, f"not a number: {quoted(raw)}", limit=FLOAT_FORM)
    return float(digits)


@dataclass(frozen=True)
class KeySpec:
    label: str
    type: str


def text(field: str, value: object, limit: int, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    unicode(field, value)
    stripped = value.strip()
    if not allow_empty and not _shows_something(stripped):
        if any(not c.isspace() and unicodedata.category(c) != "Cf" for c in stripped):
            raise InvalidInput(field, NOTHING_VISIBLE)  # control characters, lone marks
        raise InvalidInput(field, "must not be empty")
    if len(value) > limit:
        raise InvalidInput(field, f"is {len(value)} characters long", limit=f"{limit} characters")
    return stripped


def ident(field: str, value: object) -> str:
    """An id (of a memory or key) a command or query is given, to look up: one of another type
    met the lookup's TypeError (a list) or AttributeError (None, an int) instead."""
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be a string, got {type(value).__name__}")
    return value


#: Why text of characters that all show nothing is refused (a label's and content's words)
NOTHING_VISIBLE = "has no visible character (letter, digit, punctuation, symbol)"


def _shows_something(text: str) -> bool:
    """Whether `text` holds a letter, digit, punctuation mark or symbol: whitespace, format
    characters (strip() keeps a zero-width space or a byte order mark), control characters
    and combining marks with nothing to combine with show nothing."""
    return any(unicodedata.category(c)[0] in "LNPS" for c in text)


def unicode(field: str, value: str) -> str:
    """`value` if it can be written as UTF-8. A lone surrogate (a JSON escape such as \\ud800, or
    an argument in no valid encoding, which Python decodes to \\udcXX) cannot be, and would
    otherwise fail only when its event is encoded, as a traceback instead of this error."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            field,
            f"is not valid Unicode text: a lone surrogate U+{ord(value[exc.start]):04X} "
            f"at character {exc.start}",
        ) from None
    return value


def related_namespace(field: str, memory_id: str, found: str, namespace: str) -> None:
    """Refuse a `related_to` target in another namespace than the memory naming it: `related`
    walks one namespace, so an edge across two would be kept and never followed."""
    if found != namespace:
        raise InvalidInput(
            field,
            f"memory {memory_id!r} is in namespace {found!r}, not {namespace!r} "
            "(related_to links memories of one namespace)",
            value=memory_id,
        )


def label(field: str, value: object, limit: int) -> str:
    """A key label (or knowledge-graph entity name): whitespace collapsed, invisible marks left
    out and NFC-normalised, so "Zoë" typed composed or as e + U+0308 (as some keyboards send
    it), or after a byte order mark, is one label. The limit
    counts the label as stored: NFC shortens a decomposed name and lengthens a few characters."""
    if isinstance(value, str):
        value = _normal_label(value)
    checked = text(field, value, limit)
    if checked.isascii() and checked.isprintable() and checked.strip(" "):
        return checked  # most labels: no control character, and a visible one (all but space)
    # A label is matched and shown: a control character in it prints as nothing ("a\x01b" shows
    # as "ab" yet matches no "ab"), and one of only invisible characters (a zero-width space)
    # is a key no one can see or type.
    for i, char in enumerate(checked):
        if unicodedata.category(char) == "Cc":
            raise InvalidInput(field, f"holds a control character U+{ord(char):04X} at {i}")
    if not _shows_something(checked):
        raise InvalidInput(field, NOTHING_VISIBLE)
    return checked


#: The bidirectional-text controls: the direction marks (Arabic letter, left-to-right,
#: right-to-left), embeddings and overrides (U+202A-202E) and isolates (U+2066-2069). Printed
#: raw, they make a terminal show a line other than the one stored ("Trojan Source").
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

#: Format characters that show nothing and join or break no letters: a byte order mark (a file
#: saved by Notepad starts with one), zero-width space and word joiner (pasted from web pages
#: and chat apps), and the left-to-right, right-to-left and Arabic letter marks. In a label they
#: made a second key that looks exactly like the first and that no one typing it reaches. The
#: zero-width (non-)joiners stay: they change how Persian, Indic letters and emoji join. The
#: direction embeddings, overrides and isolates go too: in a label they only make it show as
#: something other than what it is (a reversed name).
_INVISIBLE = dict.fromkeys(map(ord, "\ufeff\u200b\u2060" + BIDI_CONTROLS))


def _normal_label(value: str) -> str:
    return unicodedata.normalize("NFC", " ".join(visible(value).split()))


def visible(text: str) -> str:
    """`text` without the invisible characters a label drops, for matching text to labels."""
    return text.translate(_INVISIBLE)


def name(field: str, value: object, limit: int) -> str:
    """A namespace or session id: letters, digits and _ . : @ -, starting with a letter/digit."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(field, "must be a non-empty string")
    if len(value) > limit:
        raise InvalidInput(field, f"is {len(value)} characters long", limit=f"{limit} characters")
    if not _NAME_RE.match(value):
        raise InvalidInput(
            field,
            f"{quoted(value)} may only contain letters, digits and _ . : @ -, "
            "and must start with a letter or digit",
        )
    return value


def namespace(value: object | None, default: str, field: str = "namespace") -> str:
    return name(field, default if value is None else value, NAMESPACE_CHARS)


def optional_namespace(value: object | None) -> str | None:
    return None if value is None else name("namespace", value, NAMESPACE_CHARS)


def session_id(value: object | None, field: str = "session_id") -> str | None:
    return None if value is None else name(field, value, SESSION_CHARS)


def keys(
    labels: object,
    types: Mapping[str, str] | None,
    limits: Limits,
    *,
    field: str = "keys",
    required: bool = True,
) -> list[KeySpec]:
    if labels is None or (
        isinstance(labels, Sequence) and not isinstance(labels, str) and len(labels) == 0
    ):
        if required:
            raise InvalidInput(
                field,
                "at least one key is required (a concept, name or topic)",
                limit=f"1 to {limits.keys_per_memory} keys",
            )
        labels = []
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise InvalidInput(field, "must be a list of strings")
    if len(labels) > limits.keys_per_memory:
        raise InvalidInput(field, f"has {len(labels)} keys", limit=f"{limits.keys_per_memory} keys")
    # "items[3].keys" -> "items[3].key_types": a batch item's error names that item.
    types_field = (
        field.removesuffix("keys") + "key_types" if field.endswith("keys") else "key_types"
    )
    if types is not None and not isinstance(types, Mapping):
        raise InvalidInput(types_field, "must map key labels to a type")
    types = dict(types or {})
    if len(types) > limits.keys_per_memory:  # it can type no more keys than a memory has
        raise InvalidInput(
            types_field, f"has {len(types)} entries", limit=f"{limits.keys_per_memory} entries"
        )
    specs: list[KeySpec] = []
    seen: set[str] = set()
    folded_types: dict[str, tuple[str, str]] = {}
    for spelling, kind in types.items():
        folded = _normal_label(str(spelling)).casefold()
        other = folded_types.setdefault(folded, (str(spelling), kind))
        if other[1] != kind:
            raise InvalidInput(
                types_field,
                f"gives one key two types: {quoted(other[0])} {quoted(other[1])}, "
                f"{quoted(str(spelling))} {quoted(kind)}",
            )
    if folded_types and not labels:
        # Keys left to extraction: "names keys that are not in keys" read as a contradiction.
        raise InvalidInput(
            types_field,
            f"types {sorted(spelling for spelling, _ in folded_types.values())}, but no keys "
            f"were given: list them in {field} too",
        )
    for i, raw in enumerate(labels):
        given = label(f"{field}[{i}]", raw, limits.key_chars)
        spelling, kind = folded_types.pop(given.casefold(), (given, "concept"))
        if kind in ("name", "proper_noun") and spelling != given:
            # keys=["paris"] with key_types={"Paris": "name"} (the CLI's `-k paris -n Paris`):
            # a name is spelled as it was given as a name.
            given = label(f"{types_field}[{spelling!r}]", spelling, limits.key_chars)
        if kind not in KEY_TYPES:
            raise InvalidInput(
                types_field,
                f"{quoted(given)} has unknown type {quoted(kind)}",
                limit=" | ".join(KEY_TYPES),
            )
        if given.casefold() not in seen:
            seen.add(given.casefold())
            specs.append(KeySpec(given, kind))
    if folded_types:
        raise InvalidInput(
            types_field,
            f"names keys that are not in {field}: "
            f"{sorted(spelling for spelling, _ in folded_types.values())}",
        )
    return specs


def ttl(value: object | None, limits: Limits, field: str = "ttl_seconds") -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be a whole number of seconds")
    if value <= 0 or value > limits.ttl_seconds:
        raise InvalidInput(
            field, f"{number(value)} is out of range", limit=f"1 to {limits.ttl_seconds} seconds"
        )
    return value


def id_list(field: str, value: object | None, limit: int) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput(field, "must be a list of memory ids")
    if len(value) > limit:
        raise InvalidInput(field, f"has {len(value)} ids", limit=f"{limit} ids")
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise InvalidInput(f"{field}[{i}]", "must be a memory id")
        if item not in out:
            out.append(item)
    return out


def count(field: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, "must be an integer")
    if value < low or value > high:
        raise InvalidInput(field, f"{number(value)} is out of range", limit=f"{low} to {high}")
    return value
