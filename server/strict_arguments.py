"""Tools refuse arguments they do not know, and say plainly what is wrong with the ones they do.

The SDK builds each tool's argument model with pydantic's default `extra="ignore"`, so a
misspelled argument is dropped and the call runs with that parameter's default:
`remember(..., namspace="work")` stores into the default namespace and reports success
(python-sdk issue #3067, open, with no hook to change it). `StrictArgumentsServer` checks
every call's argument names against the tool's published input schema before the SDK binds
them, and publishes that schema with `additionalProperties: false`. The check and what clients
are told come from the same schema, so they cannot disagree, and a new tool is covered without
being touched. Only public `MCPServer` methods are overridden.

An argument that breaks its schema (too long, out of range, wrong pattern) is refused by the SDK
with pydantic's whole report: the model's name, the input echoed back, an error-type tag and a
documentation URL per problem. `InvalidArguments` says the same as `field: problem (got value)`,
one per problem, like keytrail's own input errors.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult, Tool
from pydantic import ValidationError

from keytrail.core import KeytrailError


class UnknownArguments(KeytrailError, ToolError):
    """A tool call named arguments the tool does not have. Nothing ran, nothing was written.

    A `ToolError` too, so the SDK reports it as an anticipated failure (`isError`, logged
    at INFO) rather than as a crash.
    """

    def __init__(self, tool: str, unknown: list[str], accepted: list[str]) -> None:
        names = ", ".join(repr(name) for name in unknown)
        what = f"unknown argument{'s' if len(unknown) > 1 else ''} {names} for {tool}"
        guesses = [g for name in unknown for g in difflib.get_close_matches(name, accepted, 1)]
        if guesses:
            what += f" (did you mean {', '.join(repr(g) for g in guesses)}?)"
        allowed = f"accepted: {', '.join(accepted)}" if accepted else "it takes no arguments"
        # Prefixed like the SDK's own argument errors, so every refused call reads alike.
        super().__init__(
            f"Error executing tool {tool}: {what}; {allowed}",
            tool=tool,
            unknown=unknown,
            accepted=accepted,
        )
        self.tool = tool
        self.unknown = unknown
        self.accepted = accepted


class InvalidArguments(KeytrailError, ToolError):
    """A tool call's arguments break the tool's input schema. Nothing ran, nothing was written.

    `problems` holds one `{"field", "problem"}` per broken argument, the field written as
    keytrail's own errors write it (`keys[0]`, `items[2].content`).
    """

    def __init__(self, tool: str, problems: list[dict[str, str]]) -> None:
        said = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
        super().__init__(f"Error executing tool {tool}: {said}", tool=tool, problems=problems)
        self.tool = tool
        self.problems = problems

    @classmethod
    def from_validation(
        cls, tool: str, error: ValidationError, schema: dict[str, Any] | None = None
    ) -> InvalidArguments:
        """`schema`, the tool's input schema, tells fields and dict keys in an error's
        location from the union member tags pydantic also puts there (`as_of.int`)."""
        said: dict[str, list[str]] = {}
        got_by_field: dict[str, str] = {}
        for item in error.errors(include_url=False):
            field = _field_name(item["loc"], schema) or "arguments"
            if item["msg"] not in said.setdefault(field, []):
                said[field].append(item["msg"])
            got = item.get("input")
            # A short value helps the caller see its mistake; a long one only repeats it.
            if isinstance(got, str | int | float | bool) and len(repr(got)) <= 60:
                got_by_field.setdefault(field, f" (got {got!r})")
        # One problem per field: each member of a union says why the value is not it.
        problems = [
            {"field": field, "problem": " or ".join(msgs) + got_by_field.get(field, "")}
            for field, msgs in said.items()
        ]
        return cls(tool, problems)


def _field_name(loc: tuple[str | int, ...], schema: dict[str, Any] | None) -> str:
    """`items[2].content` for a pydantic error location, written as keytrail's own errors
    write fields. A name part that is neither a property nor a dict key where `schema` stands
    at a union is a member's tag, and is left out; without a schema every part is kept."""
    defs = (schema or {}).get("$defs", {})
    node: dict[str, Any] | None = schema
    name = ""
    for part in loc:
        if node is None:
            name += f"[{part}]" if isinstance(part, int) else f".{part}"
            continue
        if isinstance(part, int):
            name += f"[{part}]"
            node = _alternative(node, "items", defs)
            continue
        properties = _alternative(node, "properties", defs)
        values = _alternative(node, "additionalProperties", defs)
        if properties is not None and part in properties:
            node = properties[part]
        elif values is not None:
            node = values  # a dict key: part of the name, like a list index
        elif "anyOf" in node:
            continue  # a union member's tag, not a field of the argument
        else:
            node = None  # a name the object does not have (extra inputs are not permitted)
        name += f".{part}"
    return name.lstrip(".")


def _alternative(node: dict[str, Any], keyword: str, defs: dict[str, Any]) -> Any:
    """`node[keyword]` as a dict, looking through $ref and into each anyOf alternative."""
    for candidate in (node, *node.get("anyOf", ())):
        ref = candidate.get("$ref", "")
        if ref.startswith("#/$defs/"):
            candidate = defs.get(ref.removeprefix("#/$defs/"), {})
        found = candidate.get(keyword)
        if isinstance(found, dict):
            return found
    return None


class StrictArgumentsServer(MCPServer[Any]):
    """An MCPServer whose tools refuse unknown arguments and say so in their input schemas."""

    _accepted_by_tool: dict[str, list[str]] | None = None
    _schema_by_tool: dict[str, dict[str, Any]] = {}  # noqa: RUF012 (replaced, never mutated)

    def add_tool(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().add_tool(fn, *args, **kwargs)
        self._accepted_by_tool = None

    def remove_tool(self, name: str) -> None:
        super().remove_tool(name)
        self._accepted_by_tool = None

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            for tool in await super().list_tools()
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        accepted = (await self._accepted()).get(name)
        # An unknown tool name is left to the SDK, which refuses it with its own message.
        if accepted is not None:
            unknown = [arg for arg in arguments if arg not in accepted]
            if unknown:
                raise UnknownArguments(name, unknown, accepted)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # Only the SDK's argument check raises a plain ToolError caused by a ValidationError;
            # one raised inside a tool body reaches here as an UnexpectedToolError.
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
                schema = (await self._schemas()).get(name)
                raise InvalidArguments.from_validation(name, cause, schema) from cause
            raise

    async def _accepted(self) -> dict[str, list[str]]:
        """Each tool's argument names, in signature order, as its input schema lists them.

        Built on the first call after the tool set changes; a call then costs a dict lookup.
        """
        if self._accepted_by_tool is None:
            self._schema_by_tool = {
                tool.name: tool.input_schema for tool in await super().list_tools()
            }
            self._accepted_by_tool = {
                name: list(schema.get("properties", {}))
                for name, schema in self._schema_by_tool.items()
            }
        return self._accepted_by_tool

    async def _schemas(self) -> dict[str, dict[str, Any]]:
        """Each tool's input schema, built with `_accepted`."""
        await self._accepted()
        return self._schema_by_tool
