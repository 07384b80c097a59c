"""Knowledge-graph and import events: golden lines decode forever, and the fold applies them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from keytrail.events import (
    CURRENT_VERSION,
    UPCASTERS,
    EntitiesCreated,
    EntitiesDeleted,
    EntitySpec,
    GraphImported,
    ImportedKey,
    ImportedMemory,
    KeyLink,
    KeyMemory,
    NewMemory,
    ObservationsDeleted,
    RelationsAdded,
    RelationSpec,
    RelationsRemoved,
    decode_line,
    encode_line,
    event_tag,
)

# Its own file (the glob events-v*.jsonl of test_events covers it), so the gap-free seqs of
# events-v1.jsonl never collide with other branches' new lines.
GOLDEN = Path(__file__).parent / "golden" / "events-v1-kg.jsonl"
#: observations.deleted v2 (added `unlinked`), written by codec.encode_line when it was bumped.
GOLDEN_V2 = Path(__file__).parent / "golden" / "events-v2-kg.jsonl"


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s).astimezone(UTC)


OBS = NewMemory(
    memory_id="m_0a1b2c3d4e5f",
    namespace="default",
    content="Speaks fluent Spanish",
    content_hash="sha256:3b0e4c0c3f5d8a7e1b9c2d4f6a8b0c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f1a3b",
    keys=[KeyLink(key_id="k_1a2b3c4d5e", label="David Barnett", type="name", weight=1.0)],
)

#: The knowledge-graph lines at the end of events-v1.jsonl, in file order.
EXPECTED_KG: list[Any] = [
    EntitiesCreated(
        seq=12,
        at=_t("2026-03-02T10:00:00+00:00"),
        entities=[
            EntitySpec(key_id="k_1a2b3c4d5e", name="David Barnett", entity_type="person"),
            EntitySpec(key_id="k_2b3c4d5e6f", name="Lyon", entity_type="city", new=False),
        ],
        observations=[OBS],
    ),
    RelationsAdded(
        seq=13,
        at=_t("2026-03-02T10:00:01+00:00"),
        relations=[
            RelationSpec(from_key="k_1a2b3c4d5e", to_key="k_2b3c4d5e6f", relation_type="lives_in")
        ],
    ),
    RelationsRemoved(
        seq=14,
        at=_t("2026-03-02T10:00:02+00:00"),
        relations=[
            RelationSpec(from_key="k_1a2b3c4d5e", to_key="k_2b3c4d5e6f", relation_type="lives_in")
        ],
    ),
    ObservationsDeleted(seq=15, at=_t("2026-03-02T10:00:03+00:00"), memory_ids=["m_0a1b2c3d4e5f"]),
    EntitiesDeleted(
        seq=16,
        at=_t("2026-03-02T10:00:04+00:00"),
        key_ids=["k_1a2b3c4d5e"],
        forgotten=["m_0a1b2c3d4e5f"],
        unlinked=[KeyMemory(key_id="k_1a2b3c4d5e", memory_id="m_6f5e4d3c2b1a")],
        relations=[
            RelationSpec(from_key="k_1a2b3c4d5e", to_key="k_2b3c4d5e6f", relation_type="knows")
        ],
    ),
    GraphImported(
        seq=17,
        at=_t("2026-03-02T10:00:05+00:00"),
        format="keymem",
        source="graph.json",
        keys=[
            ImportedKey(key_id="k_3c4d5e6f7a", label="Dana", type="name", aliases=["D."]),
            ImportedKey(
                key_id="k_1a2b3c4d5e", label="David Barnett", type="name", entity_type="person"
            ),
        ],
        memories=[
            ImportedMemory(
                memory=OBS,
                created_at=_t("2024-05-01T12:30:00+00:00"),
                depth=0.35,
                access_count=7,
                last_read_at=_t("2024-06-01T08:00:00+00:00"),
            )
        ],
        relations=[
            RelationSpec(from_key="k_1a2b3c4d5e", to_key="k_3c4d5e6f7a", relation_type="knows")
        ],
    ),
]


from test_events import _drop_added_nulls  # noqa: E402


def golden_kg_lines() -> list[bytes]:
    data = GOLDEN.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def test_golden_kg_file_holds_one_line_per_expected_event() -> None:
    assert len(golden_kg_lines()) == len(EXPECTED_KG)


@pytest.mark.parametrize("index", range(len(EXPECTED_KG)), ids=[event_tag(e) for e in EXPECTED_KG])
def test_golden_kg_line_decodes_and_reencodes(index: int) -> None:
    line = golden_kg_lines()[index]
    assert decode_line(line) == EXPECTED_KG[index]
    reencoded = encode_line(EXPECTED_KG[index])
    old, new = json.loads(line), json.loads(reencoded)
    old.pop("crc"), new.pop("crc")
    tag, current = old["type"], CURRENT_VERSION[old["type"]]
    if old["v"] < current:
        # Written at an older version: it re-encodes at the current one, as its upcasters say.
        for version in range(old["v"], current):
            old = UPCASTERS[(tag, version)](dict(old))
            old["v"] = version + 1
        assert new == old
    elif _drop_added_nulls(old, new) == new:
        # Same fields as when the line was written: the wire format is byte-for-byte stable.
        assert reencoded == line + b"\n"
    else:
        # Optional fields added since (e.g. NewMemory.valid_from) re-encode as null; the rest
        # is exactly as written.
        assert _drop_added_nulls(old, new) == old


#: What each line of events-v2-kg.jsonl decodes to, in file order.
EXPECTED_KG_V2: list[Any] = [
    ObservationsDeleted(
        seq=18,
        at=_t("2026-03-02T10:00:06+00:00"),
        memory_ids=["m_0a1b2c3d4e5f"],
        unlinked=[KeyMemory(key_id="k_1a2b3c4d5e", memory_id="m_6f5e4d3c2b1a")],
    ),
    ObservationsDeleted(
        seq=19,
        at=_t("2026-03-02T10:00:07+00:00"),
        memory_ids=[],
        unlinked=[
            KeyMemory(key_id="k_2b3c4d5e6f", memory_id="m_6f5e4d3c2b1a"),
            KeyMemory(key_id="k_1a2b3c4d5e", memory_id="m_7a6b5c4d3e2f"),
        ],
    ),
]


def golden_kg_v2_lines() -> list[bytes]:
    data = GOLDEN_V2.read_bytes()
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


@pytest.mark.parametrize("index", range(len(EXPECTED_KG_V2)))
def test_golden_kg_v2_line_decodes_and_reencodes_byte_for_byte(index: int) -> None:
    line = golden_kg_v2_lines()[index]
    assert json.loads(line)["v"] == 2
    assert decode_line(line) == EXPECTED_KG_V2[index]
    assert encode_line(EXPECTED_KG_V2[index]) == line + b"\n"


def test_a_v1_observations_deleted_line_keeps_its_meaning() -> None:
    """v1 forgot every memory it named: upcast, the same ids are forgotten and none unlinked."""
    v1 = next(x for x in golden_kg_lines() if json.loads(x)["type"] == "observations.deleted")
    assert json.loads(v1)["v"] == 1
    event = decode_line(v1)
    assert isinstance(event, ObservationsDeleted)
    assert (event.v, event.memory_ids, event.unlinked) == (2, ["m_0a1b2c3d4e5f"], [])
