"""Output schemas a client validates fast: inlined, nullable fields as type lists, no titles.

The SDK client checks every structured result against the tool's advertised output schema
with `jsonschema`, whose cost grows with each subschema it enters. Pydantic's schemas put
nested types behind `$ref` (resolved through the `referencing` registry on every use) and
write an optional field as `anyOf: [{type: X}, {type: null}]` (two more subschemas per
field). The same constraints written flat, `{type: [X, "null"]}` with the nested object
inlined, accept exactly the same documents and validate two to three times faster.
Titles pydantic derives from field names say nothing the name does not.

The SDK builds a dataclass result's model from the class's type hints alone, so the class's
docstring, where the result says what its fields mean ("events_total > len(events): call again
with offset=next_offset"), would be lost; the listing puts it back as the schema's description.

One deliberate loosening: a map whose values have one scalar type (`{key_id: label}`) is
listed as a plain object, its value type said in its description. `jsonschema` enters a
subschema for every entry of every map, about 8 µs each, and a `read_key` page carries some
eighty such entries: a third of the client's check. The server still validates every result
against the tool's full output model before sending it, so a non-string label never leaves.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, get_args

from mcp.server.mcpserver import MCPServer
from mcp.types import Tool

#: Keywords that only annotate: dropped from output schemas (descriptions are kept).
_NOISE = frozenset({"title", "default"})
#: Keywords whose values are data or names, not subschemas: copied as they are.
SCHEMA_DATA = frozenset({"required", "enum", "const", "examples", "dependentRequired", "default"})
#: Keywords whose values map names to subschemas.
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "dependentSchemas", "$defs"})
_DEFS_PREFIX = "#/$defs/"
#: Value types a map may have for `_scalar_map_as_object`, as its description names them.
_SCALARS = {
    "string": "a string",
    "number": "a number",
    "integer": "an integer",
    "boolean": "a boolean",
}


class SchemaShapeError(ValueError):
    """An output schema uses a construct `flat_output_schema` cannot inline (a bug of ours)."""


def flat_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every `$ref` into `$defs` inlined, `anyOf [X, null]` as a type list and
    maps of scalars as described plain objects."""
    flat: dict[str, Any] = _flatten(schema, schema.get("$defs", {}), ())
    return flat


def _flatten(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_flatten(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if ref is not None:
        name = ref.removeprefix(_DEFS_PREFIX)
        if not ref.startswith(_DEFS_PREFIX) or name not in defs or name in seen:
            raise SchemaShapeError(f"cannot inline $ref {ref!r} (recursive or not in $defs)")
        own = {k: v for k, v in node.items() if k != "$ref"}
        return _flatten({**defs[name], **own}, defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NOISE or key == "$defs":
            continue
        if key in SCHEMA_MAPS:
            out[key] = {name: _flatten(sub, defs, seen) for name, sub in value.items()}
        elif key in SCHEMA_DATA:
            out[key] = value
        else:
            out[key] = _flatten(value, defs, seen)
    return _nullable_as_type_list(_scalar_map_as_object(out))


def _scalar_map_as_object(node: dict[str, Any]) -> dict[str, Any]:
    """`{type: object, additionalProperties: {type: T}}` as `{type: object}`, T described."""
    values = node.get("additionalProperties")
    if (
        node.get("type") != "object"
        or "properties" in node
        or not isinstance(values, dict)
        or set(values) != {"type"}
        or values["type"] not in _SCALARS
    ):
        return node
    said = f"A map: every value is {_SCALARS[values['type']]}."
    loose = {k: v for k, v in node.items() if k != "additionalProperties"}
    loose["description"] = f"{node['description']} {said}" if "description" in node else said
    return loose


def _nullable_as_type_list(node: dict[str, Any]) -> dict[str, Any]:
    """`{anyOf: [X, {type: null}]}` as X with `null` added to its type, when X has one type."""
    options = node.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or {"type": "null"} not in options:
        return node
    other = options[0] if options[1] == {"type": "null"} else options[1]
    kind = other.get("type")
    if "description" in node:  # the field's own description says more than its type's
        other = {k: v for k, v in other.items() if k != "description"}
    if not isinstance(kind, str) or set(other) & (set(node) - {"anyOf"}):
        return node
    merged = {k: v for k, v in node.items() if k != "anyOf"}
    merged.update(other)
    merged["type"] = [kind, "null"]
    return merged


def result_description(fn: Callable[..., Any]) -> str | None:
    """The docstring of the result type a tool returns (`Annotated[CallToolResult, X]` or `X`),
    or None when it has none (a dataclass without one gets its signature as `__doc__`)."""
    try:
        returned = inspect.signature(fn, eval_str=True).return_annotation
    except (NameError, TypeError, SyntaxError):
        return None
    kind = next((a for a in get_args(returned)[1:] if isinstance(a, type)), returned)
    doc = kind.__doc__ if isinstance(kind, type) and "__doc__" in vars(kind) else None
    if not doc or doc.startswith(f"{kind.__name__}("):
        return None
    return inspect.cleandoc(doc)


class FlatSchemaServer(MCPServer[Any]):
    """An MCPServer advertising flat output schemas (see the module docstring), each described
    by its result type's docstring.

    Only what is listed changes: the server still validates each result against the tool's
    own output model, which accepts the same documents as the flat schema apart from the
    value types of maps. Tools are listed
    once per client session, so flattening on each listing costs nothing that matters.
    """

    async def list_tools(self) -> list[Tool]:
        listed = []
        for tool in await super().list_tools():
            if tool.output_schema is not None:
                schema = flat_output_schema(tool.output_schema)
                registered = self._tool_manager.get_tool(tool.name)
                said = result_description(registered.fn) if registered is not None else None
                if said and "description" not in schema:
                    schema = {"description": said, **schema}
                tool = tool.model_copy(update={"output_schema": schema})
            listed.append(tool)
        return listed
