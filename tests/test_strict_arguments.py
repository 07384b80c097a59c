"""Tools refuse arguments they do not know, over a real in-memory MCP client session.

The SDK's default drops an unknown argument and runs the tool with that parameter's default,
so a misspelled `namespace` would store a memory in the wrong place and report success.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import BaseModel

from keytrail.core import Store
from keytrail.server.mcp_server import build_server
from keytrail.server.strict_arguments import StrictArgumentsServer, untitled

ALL_TOOLSETS = ("keygraph", "knowledge_graph")


def log_bytes(store: Store) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((store.settings.home / "log").glob("*.jsonl")))


def text_of(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def data(result: CallToolResult) -> Any:
    assert not result.is_error, text_of(result)
    return result.structured_content


@asynccontextmanager
async def session(store: Store) -> AsyncIterator[Client]:
    async with Client(build_server(store, ALL_TOOLSETS)) as client:
        yield client


async def refused(client: Client, store: Store, name: str, args: dict[str, Any]) -> str:
    """The call is an MCP tool error and the log is byte-identical afterwards."""
    before = log_bytes(store)
    result = await client.call_tool(name, args)
    assert result.is_error, f"{name}({args}) should be refused: {result.structured_content}"
    assert log_bytes(store) == before, f"{name}({args}) changed the log"
    return text_of(result)


@pytest.fixture
def direct_recall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")  # so recall_memories is served too


def test_a_misspelled_namespace_stores_nothing_and_says_what_is_accepted(store: Store) -> None:
    async def test() -> None:
        async with session(store) as client:
            args = {"content": "Dana lives in Lyon", "keys": ["Dana", "Lyon"]}
            message = await refused(client, store, "remember", {**args, "namspace": "work"})
            assert message == (
                "Error executing tool remember: unknown argument 'namspace' for remember "
                "(did you mean 'namespace'?); accepted: content, keys, key_types, namespace, "
                "ttl_seconds, related_to, source, session_id, valid_from"
            )
            stored = data(await client.call_tool("remember", {**args, "namespace": "work"}))
            assert stored["namespace"] == "work"
            page = data(await client.call_tool("list_memories", {"namespace": "work"}))
            assert page["total"] == 1

    anyio.run(test)


def test_a_misspelled_read_argument_is_refused_and_reads_nothing(store: Store) -> None:
    async def test() -> None:
        async with session(store) as client:
            memory = data(await client.call_tool("remember", {"content": "Mia plays the cello"}))
            message = await refused(client, store, "recall", {"query": "cello", "limt": 3})
            assert "unknown argument 'limt' for recall" in message
            assert "accepted: query, top_k, namespace, context, as_of, valid_at" in message
            # read_memory records each read in the log: refused, it records nothing.
            read = {"memory_id": memory["memory_id"], "via_keyid": "k_0"}
            message = await refused(client, store, "read_memory", read)
            assert "'via_keyid'" in message and "did you mean 'via_key_id'?" in message
            before = log_bytes(store)
            data(await client.call_tool("read_memory", {"memory_id": memory["memory_id"]}))
            assert log_bytes(store) != before  # the same read, spelled right, is recorded

    anyio.run(test)


def test_every_unknown_argument_is_named(store: Store) -> None:
    async def test() -> None:
        async with session(store) as client:
            args = {"query": "x", "limt": 3, "namspace": "a"}
            message = await refused(client, store, "recall", args)
            assert "unknown arguments 'limt', 'namspace' for recall" in message
            message = await refused(client, store, "list_sessions", {"now": "2026"})
            assert message.endswith(
                "unknown argument 'now' for list_sessions; accepted: limit, offset, as_of"
            )
            # An unknown tool is still the SDK's own error.
            assert "Unknown tool" in await refused(client, store, "no_such_tool", {"x": 1})

    anyio.run(test)


def test_every_tool_publishes_and_enforces_no_additional_properties(
    store: Store, direct_recall: None
) -> None:
    """Loops over what is listed, so a tool added later is covered without being named here."""

    async def test() -> None:
        async with session(store) as client:
            data(await client.call_tool("remember", {"content": "Dana lives in Lyon"}))
            tools = (await client.list_tools()).tools
            assert {"remember", "recall_memories", "create_entities"} <= {t.name for t in tools}
            for tool in tools:
                assert tool.input_schema.get("additionalProperties") is False, tool.name
                accepted = ", ".join(tool.input_schema.get("properties", {}))
                message = await refused(client, store, tool.name, {"not_an_argument": 1})
                assert "unknown argument 'not_an_argument'" in message, (tool.name, message)
                assert (f"accepted: {accepted}" if accepted else "no arguments") in message

    anyio.run(test)


def test_input_schemas_carry_no_titles_the_names_already_say(
    store: Store, direct_recall: None
) -> None:
    """A client hands every input schema to the model in each conversation: pydantic's titles
    ("As Of" for as_of) were about a tenth of them. A property named "title" would stay."""

    def titles(node: object, path: str) -> list[str]:
        if isinstance(node, list):
            return [t for i, item in enumerate(node) for t in titles(item, f"{path}[{i}]")]
        if not isinstance(node, dict):
            return []
        found = [path] if isinstance(node.get("title"), str) else []
        for key, value in node.items():
            if key in ("properties", "$defs") and isinstance(value, dict):
                found += [t for n, sub in value.items() for t in titles(sub, f"{path}.{n}")]
            elif key not in ("default", "enum", "const", "required"):
                found += titles(value, f"{path}.{key}")
        return found

    async def test() -> None:
        async with session(store) as client:
            tools = (await client.list_tools()).tools
            assert {"remember_batch", "recall_memories", "create_entities"} <= {
                t.name for t in tools
            }
            assert [t for tool in tools for t in titles(tool.input_schema, tool.name)] == []

    anyio.run(test)
    kept = untitled({"properties": {"title": {"type": "string", "title": "Title"}}})
    assert kept == {"properties": {"title": {"type": "string"}}}


def test_a_tool_set_change_updates_what_is_accepted() -> None:
    """Tools added or removed after the first call are checked against their own schema."""
    server = StrictArgumentsServer("tools")

    @server.tool()
    def first(a: int) -> int:
        return a

    async def test() -> None:
        async with Client(server) as client:
            assert data(await client.call_tool("first", {"a": 1})) == {"result": 1}

            @server.tool()
            def second(b: int) -> int:
                return b

            assert data(await client.call_tool("second", {"b": 2})) == {"result": 2}
            assert "accepted: b" in text_of(await client.call_tool("second", {"a": 2}))

            @server.tool()
            def third() -> int:
                return 3

            assert text_of(await client.call_tool("third", {"c": 3})).endswith(
                "unknown argument 'c' for third; it takes no arguments"
            )
            server.remove_tool("first")
            assert "Unknown tool" in text_of(await client.call_tool("first", {"a": 1}))

    anyio.run(test)


def test_accepted_names_are_what_the_client_sends() -> None:
    """A parameter that shadows a BaseModel method is aliased by the SDK, and the context
    parameter is filled by the server, not sent: the check uses the wire names."""
    server = StrictArgumentsServer("names")

    @server.tool()
    def shadowing(json: str, ctx: Context) -> str:
        return f"{json} {type(ctx).__name__}"

    async def test() -> None:
        async with Client(server) as client:
            (tool,) = (await client.list_tools()).tools
            assert list(tool.input_schema["properties"]) == ["json"]
            assert data(await client.call_tool("shadowing", {"json": "x"})) == {
                "result": "x Context"
            }
            refused = await client.call_tool("shadowing", {"json": "x", "ctx": 1})
            assert refused.is_error and "unknown argument 'ctx'" in text_of(refused)

    anyio.run(test)


def test_refusal_is_a_keytrail_error_with_fields(store: Store) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from keytrail.core import KeytrailError
    from keytrail.server.strict_arguments import UnknownArguments

    server = build_server(store, ALL_TOOLSETS)
    with pytest.raises(UnknownArguments) as caught:
        anyio.run(server.call_tool, "recall", {"query": "x", "limt": 3})
    error = caught.value
    assert isinstance(error, KeytrailError) and isinstance(error, ToolError)
    fields = json.loads(json.dumps(error.to_dict()))
    assert fields["tool"] == "recall" and fields["unknown"] == ["limt"]
    assert fields["accepted"][:2] == ["query", "top_k"]


def test_a_nested_argument_is_accepted_only_by_its_published_name(store: Store) -> None:
    """A relation's start is published as `from`, and the relation object says
    additionalProperties: false; its Python field name `from_` is not on the wire and must be
    refused like any other unknown name, not taken as `from`."""

    async def test() -> None:
        async with session(store) as client:
            entities = [{"name": n, "entityType": "person"} for n in ("Ann", "Ben")]
            data(await client.call_tool("create_entities", {"entities": entities}))
            (tool,) = [t for t in (await client.list_tools()).tools if t.name == "create_relations"]
            (relation,) = tool.input_schema["$defs"].values()
            assert "from" in relation["properties"] and "from_" not in relation["properties"]
            assert relation["additionalProperties"] is False
            sneaked = {"from_": "Ann", "to": "Ben", "relationType": "knows"}
            message = await refused(client, store, "create_relations", {"relations": [sneaked]})
            assert "relations[0].from_: Extra inputs are not permitted" in message
            spelled = {"from": "Ann", "to": "Ben", "relationType": "knows"}
            data(await client.call_tool("create_relations", {"relations": [spelled]}))

    anyio.run(test)


def test_an_argument_breaking_its_schema_is_named_with_its_limit_and_nothing_else(
    store: Store,
) -> None:
    """The SDK's own refusal is pydantic's whole report (model name, input echo, type tags and
    a documentation URL per problem); keytrail says `field: problem (got value)` instead."""

    async def test() -> None:
        async with session(store) as client:
            remember = {"content": "Dana lives in Lyon", "keys": ["Dana"]}
            said = {
                "ttl_seconds": await refused(
                    client, store, "remember", {**remember, "ttl_seconds": -5}
                ),
                "namespace": await refused(
                    client, store, "remember", {**remember, "namespace": "Bad Space!"}
                ),
                "keys[1]": await refused(
                    client, store, "remember", {**remember, "keys": ["Dana", "x" * 201]}
                ),
                "items[1].content": await refused(
                    client, store, "remember_batch", {"items": [remember, {"keys": ["Dana"]}]}
                ),
                "limit": await refused(client, store, "read_key", {"key_id": "k_x", "limit": 0}),
            }
            for field, message in said.items():
                assert message.startswith("Error executing tool "), message
                assert f": {field}: " in message, message
                for noise in ("validation error for", "errors.pydantic.dev", "input_value"):
                    assert noise not in message, message
            assert said["ttl_seconds"].endswith(
                "ttl_seconds: Input should be greater than or equal to 1 (got -5)"
            )
            assert "(got 'Bad Space!')" in said["namespace"]
            assert "at most 200 characters" in said["keys[1]"]
            assert "x" * 201 not in said["keys[1]"]  # a long value is not echoed back
            assert said["items[1].content"].endswith("items[1].content: Field required")

    anyio.run(test)


def test_a_schema_refusal_is_a_keytrail_error_with_one_problem_per_argument(store: Store) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from keytrail.core import KeytrailError
    from keytrail.server.strict_arguments import InvalidArguments

    server = build_server(store, ALL_TOOLSETS)
    with pytest.raises(InvalidArguments) as caught:
        anyio.run(server.call_tool, "list_memories", {"limit": 0, "offset": -1})
    error = caught.value
    assert isinstance(error, KeytrailError) and isinstance(error, ToolError)
    fields = json.loads(json.dumps(error.to_dict()))
    assert fields["tool"] == "list_memories"
    assert [p["field"] for p in fields["problems"]] == ["limit", "offset"]


def test_an_argument_of_several_types_is_named_as_itself_once(store: Store) -> None:
    """pydantic puts each union member's tag in the error's location (`as_of.int`,
    `as_of.str`), which read as sub-fields that do not exist; the argument is `as_of`, and
    one problem per argument. Dict keys (key_types) and list items stay in the name."""
    from keytrail.server.strict_arguments import InvalidArguments

    server = build_server(store, ALL_TOOLSETS)
    with pytest.raises(InvalidArguments) as caught:
        anyio.run(server.call_tool, "recall", {"query": "x", "as_of": 1.5})
    assert [p["field"] for p in caught.value.problems] == ["as_of"]
    assert "as_of.int" not in str(caught.value) and "as_of.str" not in str(caught.value)
    assert "(got 1.5)" in str(caught.value)
    with pytest.raises(InvalidArguments) as caught:
        anyio.run(
            server.call_tool,
            "remember_batch",
            {"items": [{"content": "x", "key_types": {"int": "zz"}, "as_of": 1}]},
        )
    fields = [p["field"] for p in caught.value.problems]
    assert fields == ["items[0].key_types.int", "items[0].as_of"]


def test_a_bool_for_an_integer_argument_is_refused(store: Store) -> None:
    """The published schema says ttl_seconds is an integer, and a JSON Schema validator
    refuses true; the server took it as 1 and stored a memory that expires a second later."""

    async def test() -> None:
        async with session(store) as client:
            args = {"content": "Dana lives in Lyon", "ttl_seconds": True}
            message = await refused(client, store, "remember", args)
            assert message == (
                "Error executing tool remember: ttl_seconds: Input should be an integer or "
                "null, not a boolean (got True)"
            )
            # pydantic's lax mode would also take "3" for 3 and a number for a string
            message = await refused(client, store, "recall", {"query": "Lyon", "top_k": "3"})
            assert message.endswith("top_k: Input should be an integer, not a string (got '3')")
            batch = {"items": [{"content": "x"}, {"content": 5}]}
            message = await refused(client, store, "remember_batch", batch)
            assert "items[1].content: Input should be a string, not a number (got 5)" in message
            # A value of the right type out of its limits is still said by the SDK's check.
            message = await refused(client, store, "recall", {"query": "Lyon", "top_k": 0})
            assert message.endswith("top_k: Input should be greater than or equal to 1 (got 0)")
            # JSON Schema counts 2.0 as an integer: served as 2.
            page = data(await client.call_tool("recall", {"query": "Lyon", "top_k": 2.0}))
            assert page["keys"] == []

    anyio.run(test)


def test_a_long_list_of_the_wrong_type_is_refused_in_a_few_lines_naming_the_limit(
    store: Store,
) -> None:
    """A batch past its item limit was refused by the SDK in one line naming the limit; the
    type check walked every item first and listed one problem per item (500 wrong items made
    a 30 kB refusal, 3,000 a 206 kB one, all of it also logged), never saying the limit. Too
    many items is said as the SDK says it, and a batch within the limit lists a few problems."""

    async def test() -> None:
        async with session(store) as client:
            message = await refused(client, store, "remember_batch", {"items": [1] * 501})
            assert "items: List should have at most 500 items" in message, message[:300]
            assert len(message) < 1_000, len(message)
            batch = {"items": [{"content": 5}] * 500}
            message = await refused(client, store, "remember_batch", batch)
            assert message.startswith(
                "Error executing tool remember_batch: items[0].content: Input should be a "
                "string, not a number (got 5); items[1].content: "
            ), message[:300]
            assert len(message) < 2_000, len(message)

    anyio.run(test)


class ByNumber(BaseModel):
    value: int


class ByName(BaseModel):
    value: str


def test_a_value_fitting_any_member_of_a_union_of_objects_or_lists_is_accepted() -> None:
    """The type check took a union's property, dict value and list item schemas from its
    first member only: a new tool with `list[int] | list[str]`, `dict[str, int] | dict[str,
    str]` or a union of two models sharing a field name refused values fitting the second
    member, which the published schema (and the SDK) accept. A value fitting no member is
    still refused."""

    server = StrictArgumentsServer("unions")

    @server.tool()
    def pick(
        ids: list[int] | list[str] | None = None,
        counts: dict[str, int] | dict[str, str] | None = None,
        choice: ByNumber | ByName | None = None,
    ) -> str:
        return f"{ids} {counts} {choice!r}"

    async def test() -> None:
        async with Client(server) as client:
            for args in (
                {"ids": [1, 2]},
                {"ids": ["a", "b"]},
                {"counts": {"x": 1}},
                {"counts": {"x": "one"}},
                {"choice": {"value": 3}},
                {"choice": {"value": "three"}},
            ):
                result = await client.call_tool("pick", args)
                assert not result.is_error, (args, text_of(result))
            for args, field in (
                ({"ids": [True]}, "ids[0]"),
                ({"counts": {"x": None}}, "counts.x"),
                ({"choice": {"value": [1]}}, "choice.value"),
            ):
                result = await client.call_tool("pick", args)
                assert result.is_error and f"pick: {field}: " in text_of(result), text_of(result)

    anyio.run(test)
