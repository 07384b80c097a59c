"""Flat output schemas: the same documents pass and fail as under pydantic's own schema, but
for the value types of maps, which the server's own output check still enforces."""

import asyncio
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from jsonschema.validators import validator_for
from mcp.server.mcpserver.exceptions import UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import TypeAdapter
from referencing import Registry

from keytrail.core import open_store
from keytrail.server.mcp_server import build_server
from keytrail.server.output_schemas import FlatSchemaServer, SchemaShapeError, flat_output_schema


@dataclass(frozen=True)
class Inner:
    """An inner object."""

    name: str
    score: float | None = None


@dataclass(frozen=True)
class Outer:
    id: str
    at: datetime
    inner: Inner | None
    inners: list[Inner]
    labels: dict[str, str]
    note: str | None = None
    tags: list[str] = field(default_factory=list)


GOOD = {
    "id": "x",
    "at": "2026-01-01T00:00:00Z",
    "inner": {"name": "a", "score": None},
    "inners": [{"name": "b", "score": 1.5}, {"name": "c"}],
    "labels": {"k_1": "apple"},
    "note": None,
    "tags": ["t"],
}
DOCUMENTS = [
    GOOD,
    {**GOOD, "inner": None},
    {**GOOD, "inner": {"name": 3}},
    {**GOOD, "inner": {"score": 1.0}},
    {**GOOD, "inner": "a"},
    {**GOOD, "inners": [{"name": "b", "score": "high"}]},
    {**GOOD, "inners": [None]},
    {**GOOD, "labels": {"k_1": 2}},  # the one document only the server's check refuses
    {**GOOD, "note": 5},
    {**GOOD, "tags": [None]},
    {k: v for k, v in GOOD.items() if k != "inner"},
    {k: v for k, v in GOOD.items() if k != "note"},
]


def verdicts(schema: dict[str, Any]) -> list[bool]:
    validator = validator_for(schema)(schema, registry=Registry())
    return [validator.is_valid(doc) for doc in DOCUMENTS]


def test_flat_schema_accepts_exactly_what_the_original_accepts() -> None:
    original = TypeAdapter(Outer).json_schema()
    flat = flat_output_schema(original)
    text = json.dumps(flat)
    assert "$ref" not in text and "anyOf" not in text and '"title"' not in text
    assert flat["properties"]["inner"]["type"] == ["object", "null"]
    assert flat["properties"]["inner"]["description"] == "An inner object."
    map_value = DOCUMENTS.index({**GOOD, "labels": {"k_1": 2}})
    expected = verdicts(original)
    assert expected[map_value] is False
    expected[map_value] = True
    assert verdicts(flat) == expected
    assert verdicts(flat)[:2] == [True, True] and not all(verdicts(flat))
    assert flat["properties"]["labels"] == {
        "type": "object",
        "description": "A map: every value is a string.",
    }


def test_a_map_value_of_the_wrong_type_is_refused_by_the_server() -> None:
    """The flat schema leaves map values to the description; the server's check of each
    result against the tool's full output model is what keeps a wrong value from leaving."""
    server = FlatSchemaServer("maps")

    @server.tool()
    def labels(good: bool) -> Annotated[CallToolResult, Outer]:
        data = {**GOOD, "labels": {"k_1": "apple" if good else 2}}
        return CallToolResult(content=[TextContent(type="text", text="")], structured_content=data)

    listed = asyncio.run(server.list_tools())[0].output_schema
    assert listed is not None and "additionalProperties" not in listed["properties"]["labels"]
    ok = asyncio.run(server.call_tool("labels", {"good": True}))
    assert isinstance(ok, CallToolResult) and ok.structured_content is not None
    assert ok.structured_content["labels"] == {"k_1": "apple"}
    with pytest.raises(UnexpectedToolError) as refused:
        asyncio.run(server.call_tool("labels", {"good": False}))
    assert "labels.k_1" in str(refused.value.__cause__)


def test_a_described_optional_object_keeps_its_field_description() -> None:
    schema = {
        "$defs": {
            "Inner": {
                "type": "object",
                "description": "An inner object.",
                "examples": [{"title": "x"}],
            }
        },
        "type": "object",
        "properties": {
            "inner": {
                "anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}],
                "description": "The field.",
                "title": "Inner",
            }
        },
    }
    inner = flat_output_schema(schema)["properties"]["inner"]
    assert inner == {
        "type": ["object", "null"],
        "description": "The field.",
        "examples": [{"title": "x"}],  # data, not a schema: kept as it is
    }


def test_recursive_refs_are_refused() -> None:
    schema = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "$ref": "#/$defs/Node",
    }
    with pytest.raises(SchemaShapeError, match="Node"):
        flat_output_schema(schema)


def test_every_served_tool_lists_a_flat_output_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    with open_store(tmp_path / "store") as store:
        server = build_server(store, ("keygraph", "knowledge_graph"))
        tools = asyncio.run(server.list_tools())
    assert len(tools) > 20
    for tool in tools:
        assert tool.output_schema is not None, tool.name
        text = json.dumps(tool.output_schema)
        assert "$ref" not in text and "anyOf" not in text, tool.name
