"""Event catalogue: golden lines decode forever, checksums bite, the upcaster chain works.

tests/golden/events-v1.jsonl holds one line of every event type at its current version, written
by `codec.encode_line` when the type was introduced. It must never be regenerated: a change to a
type that breaks one of these lines needs a new version and an upcaster, plus golden lines of
the new version next to the old ones.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from keytrail.events import (
    BY_TAG,
    CURRENT_VERSION,
    EVENT_TYPES,
    UPCASTERS,
    CorruptLog,
    DecodeError,
    EventLog,
    FoldRules,
    KeyAliased,
    KeyLink,
    KeyRetyped,
    KeyUnaliased,
    LinkDelta,
    LinksAdjusted,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    NewMemory,
    RulesChanged,
    Similar,
    StoreCreated,
    TurnRecorded,
    decode_line,
    encode_line,
    event_tag,
    upcast,
)

GOLDEN_DIR = Path(__file__).parent / "golden"
GOLDEN_V1 = GOLDEN_DIR / "events-v1.jsonl"


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s).astimezone(UTC)


FP = "fastembed:sentence-transformers/all-MiniLM-L6-v2:384"

#: What each line of events-v1.jsonl decodes to, in file order.
EXPECTED_V1: list[Any] = [
    StoreCreated(
        seq=1,
        at=_t("2025-03-01T09:00:00.000001+00:00"),
        store_id="5f0c3a9e2b7d4411",
        rules=FoldRules(),
        software="keytrail 0.1.0",
    ),
    RulesChanged(
        seq=2,
        at=_t("2025-03-01T09:00:01.250000+00:00"),
        rules=FoldRules(depth_step=0.04, hebbian_step=0.15, weight_max=2.5),
        reason="tuned Hebbian step after benchmark",
    ),
    MemoryRemembered(
        seq=3,
        at=_t("2025-03-01T09:01:02.345678+00:00"),
        memories=[
            NewMemory(
                memory_id="m_1a2b3c4d5e6f",
                namespace="default",
                content="Isaac Newton formulated the laws of motion after seeing an apple fall.",
                content_hash="sha256:1f6b5e0b0d1c8b9fa1e4c6d2a7f3e9b8c4d5a6e7f8091a2b3c4d5e6f708192a3",
                keys=[
                    KeyLink(
                        key_id="k_0a1b2c3d4e", label="Isaac Newton", type="name", resolution="new"
                    ),
                    KeyLink(key_id="k_1b2c3d4e5f", label="apple", resolution="new"),
                    KeyLink(
                        key_id="k_2c3d4e5f60",
                        label="gravity",
                        resolution="alias",
                        similarity=0.912345,
                        fingerprint=FP,
                        weight=0.91,
                        extracted=True,
                    ),
                ],
                related_to=["m_0f0e0d0c0b0a"],
                expires_at=_t("2026-03-01T09:01:02.345678+00:00"),
                session_id="claude-desktop:2025-03-01",
                source="chat",
                supersedes="m_aaaaaaaaaaaa",
                supersede_reason="duplicate",
                duplicate_of=Similar(memory_id="m_aaaaaaaaaaaa", similarity=0.981, fingerprint=FP),
                contradicts=[Similar(memory_id="m_bbbbbbbbbbbb", similarity=0.83, fingerprint=FP)],
            ),
            NewMemory(
                memory_id="m_6f5e4d3c2b1a",
                namespace="work.projects",
                content="The user likes strawberries, “not too ripe”.",
                content_hash="sha256:0000000000000000000000000000000000000000000000000000000000000000",
                keys=[
                    KeyLink(
                        key_id="k_3d4e5f6071",
                        label="fruit",
                        type="concept",
                        resolution="existing",
                        weight=1.0,
                    )
                ],
            ),
        ],
    ),
    MemoryCorrected(
        seq=4,
        at=_t("2025-03-02T10:00:00+00:00"),
        old_id="m_6f5e4d3c2b1a",
        memory=NewMemory(
            memory_id="m_7a7a7a7a7a7a",
            namespace="work.projects",
            content="The user likes raspberries more than strawberries.",
            content_hash="sha256:abababababababababababababababababababababababababababababababab",
            keys=[KeyLink(key_id="k_3d4e5f6071", label="fruit", weight=1.3)],
            related_to=[],
            source="chat",
        ),
        weaken_factor=0.3,
    ),
    MemoryRead(
        seq=5,
        at=_t("2025-03-02T10:05:00+00:00"),
        memory_id="m_7a7a7a7a7a7a",
        via_key_id="k_3d4e5f6071",
        query="what fruit does the user like?",
    ),
    LinksAdjusted(
        seq=6,
        at=_t("2025-03-02T10:06:00+00:00"),
        adjustments=[
            LinkDelta(key_id="k_3d4e5f6071", memory_id="m_7a7a7a7a7a7a", delta=0.1),
            LinkDelta(key_id="k_1b2c3d4e5f", memory_id="m_1a2b3c4d5e6f", delta=-0.005),
        ],
        query="fruit",
    ),
    KeyAliased(
        seq=7,
        at=_t("2025-03-02T10:07:00+00:00"),
        key_id="k_1b2c3d4e5f",
        alias="apples",
        evidence="recall 'apples' read memory via key apple",
        similarity=0.95,
        fingerprint=FP,
    ),
    KeyRetyped(
        seq=8,
        at=_t("2025-03-02T10:08:00+00:00"),
        key_id="k_0a1b2c3d4e",
        key_type="proper_noun",
        evidence="always capitalised",
    ),
    MemoryForgotten(
        seq=9,
        at=_t("2025-03-03T00:00:00+00:00"),
        memory_id="m_1a2b3c4d5e6f",
        content_hash="sha256:1f6b5e0b0d1c8b9fa1e4c6d2a7f3e9b8c4d5a6e7f8091a2b3c4d5e6f708192a3",
        reason="user asked to forget",
    ),
    MemoriesExpired(
        seq=10, at=_t("2026-03-01T09:01:03+00:00"), memory_ids=["m_1a2b3c4d5e6f", "m_6f5e4d3c2b1a"]
    ),
    TurnRecorded(
        seq=11,
        at=_t("2026-03-01T09:02:00+00:00"),
        session_id="claude-code:abc-123",
        turn=3,
        role="user",
        content="Remember that I am allergic to kiwis.\nThanks!",
    ),
    # Valid time (added with a default, same v1): told later than it became true.
    MemoryRemembered(
        seq=12,
        at=_t("2026-04-02T08:00:00+00:00"),
        memories=[
            NewMemory(
                memory_id="m_5e0u15e0u100",
                namespace="default",
                content="The user lives in Seoul.",
                content_hash="sha256:5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e",
                keys=[KeyLink(key_id="k_5e0u15e0u1", label="Seoul", type="name", resolution="new")],
                valid_from=_t("2019-09-01T00:00:00+00:00"),
            )
        ],
    ),
    MemoryCorrected(
        seq=13,
        at=_t("2026-04-10T08:00:00+00:00"),
        old_id="m_5e0u15e0u100",
        memory=NewMemory(
            memory_id="m_b05a9b05a900",
            namespace="default",
            content="The user moved to Busan.",
            content_hash="sha256:b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0",
            keys=[KeyLink(key_id="k_b05a9b05a9", label="Busan", type="name", resolution="new")],
            valid_from=_t("2026-03-15T00:00:00+00:00"),
        ),
        weaken_factor=0.3,
    ),
    KeyAliased(
        seq=14,
        at=_t("2026-04-12T08:00:00+00:00"),
        key_id="k_3d4e5f6071",
        alias="where do I buy groceries",
        evidence="3 reads through the key after this query",
        learned=True,
    ),
    KeyUnaliased(
        seq=15,
        at=_t("2026-04-19T08:00:00+00:00"),
        key_id="k_3d4e5f6071",
        alias="where do I buy groceries",
        evidence="unused in the last 50 reads through the key",
    ),
    # correct(memory_id, by_memory_id=...): a memory told on its own becomes the next version.
    MemoryReplaced(
        seq=16,
        at=_t("2026-04-20T08:00:00+00:00"),
        old_id="m_b05a9b05a900",
        new_id="m_7a7a7a7a7a7a",
        weaken_factor=0.8,
        related_to=["m_0f0e0d0c0b0a"],
    ),
]


def golden_lines(path: Path = GOLDEN_V1) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path.name} must end with a newline"
    return data[:-1].split(b"\n")


def test_golden_covers_every_event_type_at_its_current_version() -> None:
    tags = {
        (json.loads(line)["type"], json.loads(line)["v"])
        for p in GOLDEN_DIR.glob("events-v*.jsonl")
        for line in golden_lines(p)
    }
    for cls in EVENT_TYPES:
        tag = str(cls.__struct_config__.tag)
        assert (tag, CURRENT_VERSION[tag]) in tags, (
            f"no golden line for {tag} v{CURRENT_VERSION[tag]}"
        )


def test_every_product_upcaster_has_golden_lines_of_its_old_version() -> None:
    tags = {
        (json.loads(line)["type"], json.loads(line)["v"])
        for p in GOLDEN_DIR.glob("events-v*.jsonl")
        for line in golden_lines(p)
    }
    for tag, version in UPCASTERS:
        assert (tag, version) in tags, f"upcaster {tag} v{version} has no golden line"


def test_golden_lines_carry_a_checksum() -> None:
    for line in golden_lines():
        assert line.endswith(b'"}') and b',"crc":"' in line[-20:]


@pytest.mark.parametrize("index", range(len(EXPECTED_V1)), ids=[event_tag(e) for e in EXPECTED_V1])
def test_golden_v1_line_decodes_to_expected_event(index: int) -> None:
    line = golden_lines()[index]
    expected = EXPECTED_V1[index]
    event = decode_line(line)
    assert type(event) is type(expected)
    for field in msgspec.structs.fields(expected):
        assert getattr(event, field.name) == getattr(expected, field.name), field.name
    assert event == expected
    assert event.at.utcoffset() is not None and event.at.utcoffset().total_seconds() == 0


@pytest.mark.parametrize("index", range(len(EXPECTED_V1)), ids=[event_tag(e) for e in EXPECTED_V1])
def test_golden_v1_line_reencodes_identically(index: int) -> None:
    line = golden_lines()[index]
    reencoded = encode_line(decode_line(line))
    assert reencoded.endswith(b"\n") and reencoded.count(b"\n") == 1
    old, new = json.loads(line), json.loads(reencoded)
    old.pop("crc"), new.pop("crc")
    # Optional fields added since, inside nested structs (e.g. NewMemory.valid_from), re-encode
    # as null: drop those, then compare the rest as written.
    stripped = _drop_added_nulls(old, new)
    nested_added = stripped != new
    new = stripped
    added = set(new) - set(old)
    if not added and not nested_added:
        # Same field set as when the line was written: the wire format is byte-for-byte stable.
        assert reencoded[:-1] == line
    else:
        # A field with a default was added since: everything old is unchanged, the new ones
        # decode to their defaults.
        assert {k: new[k] for k in old} == old
        cls = BY_TAG[old["type"]]
        fields = {f.name: f for f in msgspec.structs.fields(cls)}
        defaults = {
            name: f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            for name, f in fields.items()
            if name in added  # a list's default is made by a factory (erased_keys=[])
        }
        for name in added:
            assert new[name] == msgspec.to_builtins(defaults[name]), name


def _drop_added_nulls(old: object, new: object) -> object:
    if isinstance(old, dict) and isinstance(new, dict):
        return {
            k: _drop_added_nulls(old.get(k), v) for k, v in new.items() if k in old or v is not None
        }
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_drop_added_nulls(o, n) for o, n in zip(old, new, strict=True)]
    return new


def test_golden_file_has_one_line_per_expected_event() -> None:
    lines = golden_lines()
    assert len(lines) == len(EXPECTED_V1)
    assert [json.loads(x)["seq"] for x in lines] == list(range(1, len(lines) + 1))


def test_golden_lines_read_through_the_log(tmp_path: Path) -> None:
    """The golden file is a valid log segment: gap-free, ordered in time, checksummed."""
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "00000000000000000001.jsonl").write_bytes(GOLDEN_V1.read_bytes())
    assert EventLog(tmp_path).read_new() == EXPECTED_V1


def test_wire_names_are_stable() -> None:
    """The type tag is a stable dotted name, never a class path; envelope fields come first."""
    for line in golden_lines():
        obj = json.loads(line)
        assert list(obj)[:3] == ["type", "seq", "at"]
        assert obj["type"] in BY_TAG and "." in obj["type"] and "Event" not in obj["type"]
        assert obj["at"].endswith("Z")
        assert list(obj)[-1] == "crc"


# -- checksums -------------------------------------------------------------------------------


def test_checksum_mismatch_is_detected() -> None:
    line = encode_line(
        MemoryRead(seq=3, at=_t("2025-01-01T00:00:00+00:00"), memory_id="m_000000000001")
    )[:-1]
    assert decode_line(line).memory_id == "m_000000000001"  # type: ignore[union-attr]
    tampered = line.replace(b"m_000000000001", b"m_000000000002")
    with pytest.raises(DecodeError, match="checksum"):
        decode_line(tampered)
    # A flipped bit in the checksum itself is a mismatch too.
    crc = line[-10:-2]
    bad_crc = line[:-10] + (b"0" if crc[:1] != b"0" else b"1") + crc[1:] + b'"}'
    with pytest.raises(DecodeError, match="checksum"):
        decode_line(bad_crc)


def test_lines_without_checksum_are_accepted() -> None:
    """Hand-written fixtures may omit the checksum."""
    line = b'{"type":"memory.read","seq":4,"at":"2025-01-01T00:00:00Z","v":1,"memory_id":"m_1"}'
    event = decode_line(line)
    assert event == MemoryRead(seq=4, at=_t("2025-01-01T00:00:00+00:00"), memory_id="m_1")


@pytest.mark.parametrize(
    "line, match",
    [
        (b'{"type":"memory.exploded","seq":1,"at":"2025-01-01T00:00:00Z"}', "unknown event type"),
        (b'{"seq":1,"at":"2025-01-01T00:00:00Z"}', "unknown event type"),
        (
            b'{"type":"memory.read","seq":1,"at":"2025-01-01T00:00:00Z","v":2,"memory_id":"m"}',
            "unsupported version",
        ),
        (
            b'{"type":"memory.read","seq":1,"at":"2025-01-01T00:00:00Z","v":0,"memory_id":"m"}',
            "unsupported version",
        ),
        (b'{"type":"memory.read","seq":1,"at":"2025-01-01T00:00:00Z","v":1}', "memory_id"),
        (b'{"type":"memory.read","seq":1,', "not a JSON object"),
        (b"", "not a JSON object"),
    ],
)
def test_undecodable_lines_raise_decode_error(line: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode_line(line)


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "memory.pinned", "v": 1, "memory_id": "m_1"},
        {"type": "memory.read", "v": CURRENT_VERSION["memory.read"] + 1, "memory_id": "m_1"},
    ],
    ids=["unknown-type", "newer-version"],
)
def test_a_line_from_a_newer_keytrail_says_so(tmp_path: Path, raw: dict[str, Any]) -> None:
    """A whole, checksummed line of a type or version this keytrail does not know is no
    damage but a log written by a newer keytrail. It was reported as a 'corrupt event log'
    with nothing more, which sends whoever looks after the store after a backup it does not
    need: the message says it may come from a newer keytrail, and to upgrade."""
    (tmp_path / "log").mkdir()
    first = encode_line(MemoryRead(seq=1, at=_t("2025-01-01T00:00:00+00:00"), memory_id="m_1"))
    line = encode_line_raw({**raw, "seq": 2, "at": "2025-01-01T00:00:01Z"})
    (tmp_path / "log" / "00000000000000000001.jsonl").write_bytes(first + line)
    with pytest.raises(CorruptLog) as refused:
        EventLog(tmp_path).read_new()
    assert "00000000000000000001.jsonl line 2" in refused.value.message
    assert "newer keytrail" in refused.value.message and "upgrade" in refused.value.message


def test_a_broken_line_is_not_blamed_on_a_newer_keytrail() -> None:
    for line in (
        b'{"seq":1,"at":"2025-01-01T00:00:00Z"}',
        b'{"type":"memory.read","seq":1,"at":"2025-01-01T00:00:00Z","v":0,"memory_id":"m"}',
    ):
        with pytest.raises(DecodeError) as refused:
            decode_line(line)
        assert "newer" not in refused.value.message


# -- the upcaster chain (the mechanism, on a hypothetical memory.read v3) -------------------------


def _read_v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    # hypothetical v1 -> v2: field "memory" renamed "memory_id"
    raw["memory_id"] = raw.pop("memory")
    return raw


def _read_v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    # hypothetical v2 -> v3: "via" (a label) became "via_key_id" with a k_ prefix
    via = raw.pop("via", None)
    raw["via_key_id"] = None if via is None else f"k_{via}"
    return raw


CHAIN = {("memory.read", 1): _read_v1_to_v2, ("memory.read", 2): _read_v2_to_v3}
OLD_V1 = (
    b'{"type":"memory.read","seq":7,"at":"2025-01-01T00:00:00Z","v":1,"memory":"m_9","via":"fruit"}'
)
OLD_V2 = (
    b'{"type":"memory.read","seq":7,"at":"2025-01-01T00:00:00Z","v":2,'
    b'"memory_id":"m_9","via":"fruit"}'
)


@pytest.fixture
def read_is_v3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend memory.read is at v3 today, with the two upcasters above."""
    monkeypatch.setitem(CURRENT_VERSION, "memory.read", 3)


@pytest.mark.usefixtures("read_is_v3")
@pytest.mark.parametrize("line", [OLD_V1, OLD_V2], ids=["v1", "v2"])
def test_decode_walks_the_upcaster_chain(line: bytes) -> None:
    event = decode_line(line, upcasters=CHAIN)
    assert isinstance(event, MemoryRead)
    assert (event.memory_id, event.via_key_id, event.v, event.seq) == ("m_9", "k_fruit", 3, 7)
    assert event.at == _t("2025-01-01T00:00:00+00:00")


@pytest.mark.usefixtures("read_is_v3")
def test_upcasters_apply_to_checksummed_lines_and_through_the_log(tmp_path: Path) -> None:
    old = MemoryRead(
        seq=1, at=_t("2025-01-01T00:00:00+00:00"), memory_id="m_1", via_key_id="k_x"
    )  # written when memory.read was v1, as the codec does
    body = encode_line(old)
    # Rename the field as a hypothetical v1 would have had it, with a valid checksum.
    raw = json.loads(body)
    raw.pop("crc")
    raw["memory"] = raw.pop("memory_id")
    raw.pop("via_key_id")
    line = encode_line_raw(raw)
    (tmp_path / "log").mkdir()
    (tmp_path / "log" / "00000000000000000001.jsonl").write_bytes(line)
    events = EventLog(tmp_path, upcasters=CHAIN).read_new()
    assert events == [MemoryRead(seq=1, at=old.at, v=3, memory_id="m_1", via_key_id=None)]


def encode_line_raw(raw: dict[str, Any]) -> bytes:
    """A checksummed line for an arbitrary object, the way codec.encode_line frames one."""
    from keytrail.events.codec import _crc  # the framing itself, not a product behaviour

    body = msgspec.json.encode(raw)
    return b'%s,"crc":"%s"}\n' % (body[:-1], _crc(memoryview(body)[:-1]).encode())


@pytest.mark.usefixtures("read_is_v3")
def test_a_missing_step_in_the_chain_is_an_error() -> None:
    with pytest.raises(DecodeError, match="no upcaster from v2"):
        decode_line(OLD_V1, upcasters={("memory.read", 1): _read_v1_to_v2})
    with pytest.raises(DecodeError, match="no upcaster from v1"):
        decode_line(OLD_V1, upcasters={})


@pytest.mark.usefixtures("read_is_v3")
def test_a_current_line_needs_no_upcaster() -> None:
    line = b'{"type":"memory.read","seq":7,"at":"2025-01-01T00:00:00Z","v":3,"memory_id":"m_9"}'
    assert decode_line(line, upcasters={}) == MemoryRead(
        seq=7, at=_t("2025-01-01T00:00:00+00:00"), v=3, memory_id="m_9"
    )


def test_upcast_rejects_a_result_that_does_not_fit_the_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(CURRENT_VERSION, "memory.read", 2)
    raw = {"type": "memory.read", "seq": 1, "at": "2025-01-01T00:00:00Z", "v": 1, "memory": "m"}
    with pytest.raises(DecodeError, match=r"memory\.read v2"):
        upcast(raw, {("memory.read", 1): lambda r: r})  # forgot the rename
    assert upcast(raw, {("memory.read", 1): _read_v1_to_v2}).memory_id == "m"  # type: ignore[union-attr]
    assert raw["memory"] == "m", "upcasters get a copy; the caller's object is not changed"


def test_the_product_chain_is_complete() -> None:
    """Every type above v1 has an upcaster from each older version."""
    for tag, current in CURRENT_VERSION.items():
        for version in range(1, current):
            assert (tag, version) in UPCASTERS, f"{tag}: no upcaster v{version} -> v{version + 1}"
