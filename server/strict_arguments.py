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

from .output_schemas import SCHEMA_DATA, SCHEMA_MAPS


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


#: JSON types as a refusal says them
_JSON_TYPES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


#: JSON type -> the Python types json decodes it to
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _json_type(value: object) -> str:
    """What JSON type a decoded value is, as a refusal says it."""
    kind = type(value)
    if value is None:
        return "null"
    if kind is bool:
        return "a boolean"
    if kind is int or kind is float:
        return "a number"
    if kind is str:
        return "a string"
    return "an array" if kind is list else "an object"


#: a union member that cannot hold the value at all (`additionalProperties: false`)
_EXCLUDED: dict[str, Any] = {}


class _Node:
    """What the type check needs of one schema node, worked out once per tool."""

    __slots__ = ("allowed", "exact", "integral", "items", "max_items", "properties", "values")

    def __init__(self, node: dict[str, Any], defs: dict[str, Any]) -> None:
        members = []
        for member in node.get("anyOf", [node]):
            ref = member.get("$ref", "")
            members.append(defs.get(ref.removeprefix("#/$defs/"), {}) if ref else member)
        typed = [m for m in members if "type" in m]
        #: the JSON types a value here may have; None: not said by every member, so unchecked
        self.allowed: tuple[str, ...] | None = (
            tuple(dict.fromkeys(t for m in typed for t in _listed(m["type"])))
            if typed and len(typed) == len(members)
            else None
        )
        #: the Python types of decoded JSON that fit `allowed` as they are (bool is not int)
        self.exact = frozenset(t for j in self.allowed or () for t in _PYTHON_TYPES[j])
        #: a float fits only if integral (JSON Schema's integer)
        self.integral = "integer" in (self.allowed or ()) and float not in self.exact
        # A value inside a union fits if it fits the schema of any member that may hold it,
        # so each child is checked against all of theirs; None: some member takes anything.
        objects = [m for m in members if "object" in _listed(m.get("type", "object"))]
        arrays = [m for m in members if "array" in _listed(m.get("type", "array"))]
        #: property name -> its node (None: unchecked); `values` for any other name
        self.properties: dict[str, _Node | None] = {
            key: _either([_child(m, key) for m in objects], defs)
            for key in dict.fromkeys(k for m in objects for k in m.get("properties") or {})
        }
        self.values = _either([_child(m, None) for m in objects], defs)
        self.items = _either(
            [m["items"] if isinstance(m.get("items"), dict) else None for m in arrays], defs
        )
        #: the most items a list here may hold (the largest any member allows); None: no limit
        limits = [m.get("maxItems") for m in arrays]
        self.max_items: int | None = max(limits) if limits and None not in limits else None


def _child(member: dict[str, Any], key: str | None) -> dict[str, Any] | None:
    """The schema `member` (an object) gives property `key` (None: a name it does not list):
    None if anything goes there, `_EXCLUDED` if nothing may."""
    if key is not None and key in (member.get("properties") or {}):
        sub: dict[str, Any] = member["properties"][key]
        return sub
    extra = member.get("additionalProperties", True)
    if isinstance(extra, dict):
        return extra
    return _EXCLUDED if extra is False else None


def _either(schemas: list[dict[str, Any] | None], defs: dict[str, Any]) -> _Node | None:
    """The node for a value that must fit one of `schemas` (None among them: anything)."""
    fitting = [s for s in schemas if s is not _EXCLUDED]
    if not fitting or any(s is None for s in fitting):
        return None
    flat = [m for s in fitting if s is not None for m in s.get("anyOf", [s])]
    return _Node(flat[0] if len(flat) == 1 else {"anyOf": flat}, defs)


def type_plan(schema: dict[str, Any]) -> _Node:
    """A tool's input schema made ready for `wrong_json_types`."""
    return _Node(schema, schema.get("$defs", {}))


#: wrong types listed in one refusal (the caller fixes those and learns of any others next)
MAX_PROBLEMS = 10


def wrong_json_types(plan: _Node, arguments: dict[str, Any]) -> list[dict[str, str]]:
    """The arguments whose JSON type the published schema does not allow, as problems.

    The SDK validates in pydantic's lax mode, which takes `true` for 1 and "3" for 3 where the
    schema says integer: a client that sent the wrong type would be served as if it had not
    (`ttl_seconds: true` stored a memory that expired a second later). Only types are checked
    here, walking the arguments beside the schema (a full JSON Schema validation cost 74 ms on
    a 500-item remember_batch); a value of the right type out of its limits is left to the
    SDK's check, reworded by `InvalidArguments.from_validation`.

    A list longer than its schema allows is not walked: the SDK refuses it in one line that
    names the limit, where one problem per item would be a refusal (and a log line) as long as
    the list. At most `MAX_PROBLEMS` problems are listed, then how many more there were."""
    problems: list[dict[str, str]] = []
    more = 0

    def walk(value: Any, node: _Node, field: str) -> None:
        nonlocal more
        allowed = node.allowed
        kind = type(value)
        if (
            allowed is not None
            and kind not in node.exact
            and not (kind is float and node.integral and value.is_integer())
        ):
            said = " or ".join(_JSON_TYPES.get(t, t) for t in allowed)
            problem = f"Input should be {said}, not {_json_type(value)}"
            if isinstance(value, str | int | float | bool) and len(repr(value)) <= 60:
                problem += f" (got {value!r})"
            if len(problems) < MAX_PROBLEMS:
                problems.append({"field": field or "arguments", "problem": problem})
            else:
                more += 1
        elif kind is dict:
            for key, item in value.items():
                child = node.properties.get(key, node.values)
                if child is not None:
                    walk(item, child, f"{field}.{key}" if field else key)
        elif (
            kind is list
            and node.items is not None
            and (node.max_items is None or len(value) <= node.max_items)
        ):
            for i, item in enumerate(value):
                walk(item, node.items, f"{field}[{i}]")

    walk(arguments, plan, "")
    if more:
        problems.append(
            {"field": "arguments", "problem": f"{more} more of the wrong type, not listed"}
        )
    return problems


def _listed(types: str | list[str]) -> list[str]:
    return [types] if isinstance(types, str) else list(types)


def untitled(schema: Any) -> Any:
    """`schema` without the titles pydantic derives from names ("As Of" for `as_of`,
    "read_keyArguments"): they say nothing the name does not, and a client hands every
    tool's input schema to the model in each conversation (about 2,000 characters of 19,000).
    """
    if isinstance(schema, list):
        return [untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in SCHEMA_DATA:
            out[key] = value
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: untitled(sub) for name, sub in value.items()}
        else:
            out[key] = untitled(value)
    return out


class StrictArgumentsServer(MCPServer[Any]):
    """An MCPServer whose tools refuse unknown arguments and say so in their input schemas."""

    _accepted_by_tool: dict[str, list[str]] | None = None
    _schema_by_tool: dict[str, dict[str, Any]] = {}  # noqa: RUF012 (replaced, never mutated)
    _type_plans: dict[str, _Node] = {}  # noqa: RUF012 (replaced, never mutated)

    def add_tool(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().add_tool(fn, *args, **kwargs)
        self._accepted_by_tool = None

    def remove_tool(self, name: str) -> None:
        super().remove_tool(name)
        self._accepted_by_tool = None

    async def list_tools(self) -> list[Tool]:
        return [
            tool.model_copy(
                update={
                    "input_schema": {
                        **untitled(tool.input_schema),
                        "additionalProperties": False,
                    }
                }
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
            wrong = wrong_json_types(self._type_plans[name], arguments)
            if wrong:
                raise InvalidArguments(name, wrong)
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
            self._type_plans = {
                name: type_plan(schema) for name, schema in self._schema_by_tool.items()
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
