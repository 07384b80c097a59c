"""The server's instructions and its `memory_system_prompt` name only tools it serves.

With `--toolsets knowledge_graph` the server served the ten knowledge-graph tools but still
sent the keygraph instructions ("call `recall` ...", `read_key`, `remember`, `correct`,
`forget`): an agent following them called tools that do not exist on that server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client
from test_server import TOOLS

from keytrail.core import Store
from keytrail.server.kg_tools import KG_TOOLS
from keytrail.server.mcp_server import build_server

KEYGRAPH_TOOLS = (*TOOLS, "recall_memories")


def named_tools(text: str) -> set[str]:
    """The tool names a text mentions in backticks, `tool` or `tool(...)`."""
    every = set(KEYGRAPH_TOOLS) | set(KG_TOOLS)
    return {m for m in re.findall(r"`([a-z_]+)[`(]", text) if m in every}


@pytest.mark.parametrize("direct", ["0", "1"])
@pytest.mark.parametrize(
    "toolsets", [("keygraph",), ("knowledge_graph",), ("keygraph", "knowledge_graph")]
)
def test_instructions_name_only_served_tools(
    make_store: Callable[..., Store],
    toolsets: tuple[str, ...],
    direct: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """And with direct recall served, they say what `recall_memories` is for."""
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", direct)
    store = make_store()

    async def check() -> None:
        async with Client(build_server(store, toolsets)) as client:
            served = {t.name for t in (await client.list_tools()).tools}
            instructions = client.instructions or ""
            prompt = await client.get_prompt("memory_system_prompt")
            text = " ".join(getattr(m.content, "text", "") for m in prompt.messages)
            for said in (instructions, text):
                named = named_tools(said)
                assert named, said  # it does tell the agent what to call
                assert named <= served, named - served
                assert ("recall_memories" in named) == ("recall_memories" in served)
                # ... and every tool set served is taught: with both, the graph tools too.
                assert ("search_nodes" in named) == ("search_nodes" in served)
                assert ("recall" in named) == ("recall" in served)

    anyio.run(check)


@pytest.mark.parametrize(
    "toolsets", [("keygraph",), ("knowledge_graph",), ("keygraph", "knowledge_graph")]
)
def test_the_prompt_listing_describes_the_prompt_served(
    make_store: Callable[..., Store], toolsets: tuple[str, ...]
) -> None:
    # A knowledge-graph-only server listed its prompt as "recall first, walk keys, remember and
    # correct": tools and keys that server does not have, beside a prompt that names none.
    keygraph_words = {"recall", "keys", "remember", "correct"}
    store = make_store()

    async def check() -> None:
        async with Client(build_server(store, toolsets)) as client:
            (prompt,) = (await client.list_prompts()).prompts
            words = set(re.findall(r"[a-z_]+", (prompt.description or "").lower()))
            served = {t.name for t in (await client.list_tools()).tools}
            assert bool(words & keygraph_words) == ("recall" in served), prompt.description
            assert bool(words & set(KG_TOOLS)) == ("keygraph" not in toolsets), prompt.description

    anyio.run(check)


def mentioned_tools(text: str) -> set[str]:
    """The tool names a description mentions: `tool`, tool(...), or a name with an underscore
    anywhere (unambiguous); a bare "recall" or "remember" is also an English word."""
    every = set(KEYGRAPH_TOOLS) | set(KG_TOOLS)
    quoted = {a or b for a, b in re.findall(r"`([a-z_]+)`|\b([a-z_]+)\(", text)}
    words = set(re.findall(r"\b[a-z]+_[a-z_]+\b", text))
    return (quoted | words) & every


@pytest.mark.parametrize("direct", ["0", "1"])
@pytest.mark.parametrize(
    "toolsets", [("keygraph",), ("knowledge_graph",), ("keygraph", "knowledge_graph")]
)
def test_tool_descriptions_name_only_served_tools(
    make_store: Callable[..., Store],
    monkeypatch: pytest.MonkeyPatch,
    toolsets: tuple[str, ...],
    direct: str,
) -> None:
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", direct)
    store = make_store()

    async def check() -> None:
        async with Client(build_server(store, toolsets)) as client:
            tools = (await client.list_tools()).tools
            served = {t.name for t in tools}
            for tool in tools:
                text = (tool.description or "") + " " + json.dumps(tool.input_schema)
                named = mentioned_tools(text)
                assert named <= served, (tool.name, named - served)

    anyio.run(check)


def test_record_turn_describes_a_turn_not_a_fact(make_store: Callable[..., Store]) -> None:
    """record_turn's `content` said "The fact, written to stand alone." (remember's words): an
    agent rewrote what the user said into a fact instead of logging the turn as said."""
    store = make_store()

    async def check() -> None:
        async with Client(build_server(store, ("keygraph",))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            params = tools["record_turn"].input_schema["properties"]
            assert "written to stand alone" not in params["content"]["description"]
            assert "turn" in params["content"]["description"]
            assert "session" in params["session_id"].get("description", "")

    anyio.run(check)


def undescribed(schema: dict[str, Any], where: str) -> list[str]:
    """The parameters of an input schema, nested item objects too, that carry no description."""
    missing = []
    defs = schema.get("$defs", {})
    for name, prop in schema.get("properties", {}).items():
        if not prop.get("description"):
            missing.append(f"{where}.{name}")
        item_ref = prop.get("items", {}).get("$ref", "")
        if item_ref.startswith("#/$defs/"):
            missing += undescribed(defs[item_ref.removeprefix("#/$defs/")], f"{where}.{name}[]")
    return missing


def test_every_tool_parameter_is_described(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent reads a parameter's meaning from its description alone: record_turn's `role`,
    get_conversation's `session_id` and the knowledge-graph tools' lists (`entities`,
    `relations`, `names`, ...) had none, only a type."""
    monkeypatch.setenv("KEYTRAIL_DIRECT_RECALL", "1")
    store = make_store()

    async def check() -> None:
        async with Client(build_server(store, ("keygraph", "knowledge_graph"))) as client:
            tools = (await client.list_tools()).tools
            missing = [m for t in tools for m in undescribed(t.input_schema, t.name)]
            assert missing == []

    anyio.run(check)
