"""Answers to lines on stdin the MCP SDK could not read as a message.

The SDK's stdio reader only logs a line its parser (pydantic's) refuses, so the client that
sent it waited for ever for an answer. Some such lines are JSON all the same: a lone surrogate
escape ("\\ud800"), an integer of over 4,300 digits, nesting over 201 deep; others are JSON but
no JSON-RPC message (`42`, `{"foo":1}`), or no JSON at all. `answer_unparsed` gives each the
answer JSON-RPC 2.0 asks for, where there is someone to answer; `run_stdio`'s relay sends it.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from mcp.types import (
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    TextContent,
)
from pydantic import ValidationError

from keytrail.core import InvalidInput
from keytrail.core.validation import unicode

#: The most digits of an integer, and the deepest nesting of arrays and objects (the message's
#: own object is the first), that the SDK's JSON parser (pydantic's) reads in a message
_PARSED_DIGITS = 4300
_PARSED_DEPTH = 201


class _LongInteger(str):
    """The digits of an integer longer than the SDK's parser reads (Python's `int` refuses it
    too)."""


def _integer(digits: str) -> int | _LongInteger:
    return _LongInteger(digits) if len(digits.lstrip("-")) > _PARSED_DIGITS else int(digits)


def answer_unparsed(error: Exception) -> JSONRPCResponse | JSONRPCError | None:
    """The answer to a request whose line the SDK's parser refused, though it is JSON: a lone
    surrogate escape ("\\ud800"), an integer of over 4,300 digits, nesting over 201 deep. A
    tool call is refused like any argument that breaks its schema, naming the argument; another
    request gets a parse error. A line that is no JSON at all (`{not json`, nesting deeper than
    Python's recursion limit) gets a parse error with id null, as JSON-RPC 2.0 says; JSON that
    is no JSON-RPC message gets Invalid Request (see `_invalid_request`). None: a blank line,
    or JSON of a notification or a client's answer: no one to answer (the SDK logs it)."""
    if not isinstance(error, ValidationError):
        return None
    [*problems] = error.errors(include_url=False)
    if len(problems) != 1 or problems[0]["type"] != "json_invalid":
        # JSON, but none of the messages the SDK knows (it was read: the line is gone)
        return _invalid_request(_message_in(problems))
    line = problems[0]["input"]
    parse_error = ErrorData(code=PARSE_ERROR, message=f"Parse error: {problems[0]['msg']}")
    try:
        message = json.loads(line, parse_int=_integer)
    except (ValueError, RecursionError):
        if isinstance(line, str | bytes) and not line.strip():
            return None  # no message at all, not a broken one
        return JSONRPCError(jsonrpc="2.0", id=None, error=parse_error)
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return _invalid_request(message)  # None for a client's answer (to a ping)
    request_id = message.get("id")
    if type(request_id) not in (int, str) or not _writable(request_id):
        return None  # a notification, or an id no answer could carry back
    request_id = cast(int | str, request_id)
    params = message.get("params")
    tool = params.get("name") if isinstance(params, dict) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    if message.get("method") == "tools/call" and isinstance(tool, str) and _writable(tool):
        said = _unparsed_argument(arguments, "arguments", 3)
        if said is not None:
            text = f"Error executing tool {tool}: {said}"
            result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
            answer = result.model_dump(mode="json", by_alias=True, exclude_unset=True)
            return JSONRPCResponse(jsonrpc="2.0", id=request_id, result=answer)
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=parse_error)


#: `_message_in` found no message in a validation error's problems
_UNREAD = object()


def _message_in(problems: list[Any]) -> object:
    """The JSON value of a line that is no message the SDK knows, from the problems its
    validation found: one at the value itself (not an object) or at a field the object lacks
    has the value as its input. _UNREAD if none is (an object holding every field)."""
    for problem in problems:
        if len(problem["loc"]) == 1 or (len(problem["loc"]) == 2 and problem["type"] == "missing"):
            return problem["input"]
    return _UNREAD


def _invalid_request(message: object) -> JSONRPCError | None:
    """-32600 Invalid Request for JSON that is no JSON-RPC message (`42`, `[]`, `{"foo":1}`, a
    request whose method is no string), with its id where one can be read and null otherwise,
    as JSON-RPC 2.0 says: the SDK only logged it, and its client waited for ever. None for
    one shaped as a notification (a method, no id) or a client's answer (a result or an error,
    no method): no one to answer."""
    if isinstance(message, dict):
        if "id" not in message and isinstance(message.get("method"), str):
            return None
        if "method" not in message and ("result" in message or "error" in message):
            return None
    request_id = message.get("id") if isinstance(message, dict) else None
    if type(request_id) not in (int, str) or not _writable(request_id):
        request_id = None
    said = (
        'a request is an object with "jsonrpc": "2.0", a string "method" and an "id" '
        "(a string or an integer)"
        if isinstance(message, dict) or message is _UNREAD
        else "a JSON-RPC message is an object"
    )
    return JSONRPCError(
        jsonrpc="2.0",
        id=cast(int | str | None, request_id),
        error=ErrorData(code=INVALID_REQUEST, message=f"Invalid Request: {said}"),
    )


def _writable(value: object) -> bool:
    """Whether `value` can go into an answer (a string with a lone surrogate cannot: the
    SDK's writer would fail on it)."""
    return not isinstance(value, str) or _is_unicode(value)


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unparsed_argument(value: object, field: str, depth: int) -> str | None:
    """`field: problem` for the first part of a tool's arguments (`value`, at `field`, opened
    `depth` arrays or objects deep in its message) that the SDK's parser cannot read, named as
    keytrail's own errors name fields (`items[0].content`)."""
    if isinstance(value, _LongInteger):
        digits = len(value.lstrip("-"))
        limit = f"{_PARSED_DIGITS:,} digits"
        return str(InvalidInput(field, f"is an integer of {digits:,} digits", limit=limit))
    if isinstance(value, str):
        try:
            unicode(field, value)
        except InvalidInput as exc:
            return str(exc)
        return None
    if not isinstance(value, dict | list):
        return None
    if depth > _PARSED_DEPTH:
        # Named where the nesting starts, not at its 200th level.
        start = re.sub(r"(\[\d+\])+$", "", field) or field
        deep = "is nested too deep"
        limit = f"{_PARSED_DEPTH} levels of arrays and objects, the message's own included"
        return str(InvalidInput(start, deep, limit=limit))
    parts = value.items() if isinstance(value, dict) else enumerate(value)
    for part, inner in parts:
        if isinstance(part, str) and not _is_unicode(part):
            return str(InvalidInput(field, f"has a name that is not valid Unicode text: {part!r}"))
        inside = f"{field}[{part}]" if isinstance(part, int) else f"{field}.{part}"
        said = _unparsed_argument(inner, inside.removeprefix("arguments."), depth + 1)
        if said is not None:
            return said
    return None
