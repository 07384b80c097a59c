"""Flat output schemas: the same documents pass and fail as under pydantic's own schema, but
for the value types of maps, which the server's own output check still enforces."""

import asyncio
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
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


def test_every_tool_answers_what_its_listed_output_schema_allows_in_every_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real answers, checked as a strict client checks them (jsonschema against the listed
    schema): an empty store, no match, the past, expired, superseded and forgotten memories,
    deleted entities, last pages and offsets past the end."""
    import anyio
    from mcp import Client

    from keytrail.core import HashEmbedder, Settings, Store

    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]

    def tick() -> datetime:
        now[0] += timedelta(seconds=1)
        return now[0]

    store = Store(
        Settings(home=tmp_path / "store", embedder="hash"), embedder=HashEmbedder(), clock=tick
    )
    answered: set[str] = set()
    broken: list[str] = []

    async def check() -> None:
        async with Client(build_server(store, ("keygraph", "knowledge_graph"))) as client:
            listed = {t.name: t.output_schema for t in (await client.list_tools()).tools}
            validators = {
                name: validator_for(schema)(schema, registry=Registry())
                for name, schema in listed.items()
                if schema is not None
            }

            async def call(tool: str, /, **args: Any) -> Any:
                result = await client.session.call_tool(tool, args)
                assert not result.is_error, (tool, args, result.content)
                answer = result.structured_content
                answered.add(tool)
                broken.extend(
                    f"{tool}({args}): {error.message} at {list(error.absolute_path)}"
                    for error in validators[tool].iter_errors(answer)
                )
                return answer

            # An empty store
            for name in ("memory_stats", "list_memories", "browse_keys", "list_sessions"):
                await call(name)
            await call("changes")
            await call("cleanup_expired")
            await call("recall", query="anything")
            await call("recall_memories", query="anything", explain=True)
            await call("read_graph")
            await call("search_nodes", query="nobody")
            await call("open_nodes", names=["nobody"])
            # Memories in every state
            lyon = await call(
                "remember",
                content="Dana lives in Lyon",
                keys=["Dana", "Lyon", "home"],
                key_types={"Dana": "name"},
                session_id="s1",
                source="chat",
                valid_from="2025-01-01T00:00:00Z",
            )
            start = lyon["seq"]
            trip = await call(
                "remember", content="A trip to Rome next week", keys=["Rome"], ttl_seconds=5
            )
            tea = await call(
                "remember",
                content="Dana likes green tea",
                keys=["Dana", "tea"],
                related_to=[lyon["memory_id"]],
            )
            await call("remember", content="Dana likes green tea a lot", keys=["Dana", "tea"])
            await call(
                "remember_batch",
                items=[{"content": f"Bob fact {i}", "keys": ["Bob", f"b{i}"]} for i in range(3)],
            )
            paris = await call(
                "correct", memory_id=lyon["memory_id"], content="Dana lives in Paris"
            )
            now[0] += timedelta(seconds=60)  # the trip expires
            keys = (await call("recall", query="Dana Lyon tea", context="where"))["keys"]
            await call("recall", query="Dana", as_of=start, namespace="default")
            await call("recall", query="zzz qqq")
            for key in keys:
                await call("read_key", key_id=key["key_id"])
                await call("read_key", key_id=key["key_id"], query="tea", limit=1, offset=1)
                await call("read_key", key_id=key["key_id"], offset=10**6)
            for memory in (lyon, paris, tea):
                await call("read_memory", memory_id=memory["memory_id"])
                await call("related", memory_id=memory["memory_id"])
                await call("history", memory_id=memory["memory_id"], limit=1, offset=1)
            # In January Lyon was true (tea not yet): asked for Paris, it answers Lyon.
            for memory in (lyon, paris):
                for tool in ("read_memory", "related"):
                    await call(tool, memory_id=memory["memory_id"], valid_at="2026-01-01T00:00Z")
            await call("read_memory", memory_id=lyon["memory_id"], as_of=start)
            await call("history", memory_id=trip["memory_id"], offset=10**6)
            await call("cleanup_expired", limit=1)
            await call("history", memory_id=trip["memory_id"])
            await call("recall_memories", query="Dana tea", hops=2, explain=True, as_of=start)
            await call("recall_memories", query="Dana", valid_at="2025-06-01T00:00:00Z")
            await call("forget", memory_id=tea["memory_id"], reason="asked")
            await call("forget", memory_id=paris["memory_id"], all_versions=True)
            await call("history", memory_id=paris["memory_id"])
            await call("record_turn", session_id="s1", role="user", content="hi")
            await call("get_conversation", session_id="s1")
            await call("get_conversation", session_id="s1", turn=1)
            await call("get_conversation", session_id="s1", offset=5)
            await call("list_sessions", limit=1, offset=3)
            turned = (await call("memory_stats"))["seq"]
            await call("record_turn", session_id="s1", role="assistant", content="hello")
            await call("get_conversation", session_id="s1", as_of=turned)
            await call("list_sessions", as_of=turned)
            for page in ({}, {"limit": 1, "offset": 1}, {"offset": 10**6}):
                await call("list_memories", **page)
                await call("browse_keys", **page)
                await call("changes", top=1, **page)
            await call("browse_keys", hubs_only=True)
            await call("browse_keys", as_of=start, valid_at="2024-06-01T00:00:00Z")
            await call("list_memories", as_of=start, valid_at="2024-06-01T00:00:00Z")
            await call("memory_stats", as_of=start)
            await call("memory_stats")
            # The knowledge graph, entities and relations deleted
            await call(
                "create_entities",
                entities=[
                    {"name": "Ann", "entityType": "person", "observations": ["likes Go"]},
                    {"name": "Acme", "entityType": "org"},
                ],
            )
            graph_start = (await call("memory_stats"))["seq"]
            await call(
                "create_relations",
                relations=[{"from": "Ann", "to": "Acme", "relationType": "works_at"}],
            )
            await call(
                "add_observations", observations=[{"entityName": "Ann", "contents": ["likes Rust"]}]
            )
            for page in ({}, {"limit": 1, "offset": 1}, {"offset": 10**6}):
                await call("read_graph", **page)
                await call("search_nodes", query="rust go", **page)
                await call("read_entity", name="Ann", **page)
            await call("open_nodes", names=["ann", "ACME", "nobody"])
            await call(
                "delete_observations",
                deletions=[{"entityName": "Ann", "observations": ["likes Go", "not there"]}],
            )
            await call(
                "delete_relations",
                relations=[{"from": "Ann", "to": "Acme", "relationType": "works_at"}],
            )
            await call("delete_entities", entityNames=["Ann", "Nobody"])
            await call("read_graph", as_of=graph_start)
            await call("read_entity", name="Ann", as_of=graph_start)
            await call("changes", since=graph_start)
            await call("memory_stats")
            assert answered == set(listed)

    try:
        anyio.run(check)
    finally:
        store.close()
    assert broken == []
