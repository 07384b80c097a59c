"""Time travel over MCP: the `as_of`/`valid_at`/`valid_from` parameter types the existing tools
take, and the `history` and `changes` tools."""

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field, StrictInt

from keytrail.core import Store
from keytrail.core import history as timeline
from keytrail.core.history import Changes, History
from keytrail.core.validation import TIME_CHARS

#: An ISO-8601 time as text, held to the length core holds it to (published in the schema).
TimeText = Annotated[str, Field(max_length=TIME_CHARS)]

# StrictInt: in pydantic's lax mode `true` would pass as the seq 1 (core refuses booleans).
AsOf = Annotated[
    StrictInt | TimeText | None,
    Field(
        description="Answer as the store stood back then: a log seq (int) or an ISO-8601 time "
        "(e.g. '2026-03-01T09:00:00Z'). Omit for now. Records nothing, reinforces nothing."
    ),
]
ValidAt = Annotated[
    TimeText | None,
    Field(
        description="Show what was true in the world at this ISO-8601 time (valid time): "
        "the version of each fact that held then. Omit for what is current. Records nothing, "
        "reinforces nothing."
    ),
]
ValidFrom = Annotated[
    TimeText | None,
    Field(
        description="When this became true in the world (ISO-8601), if earlier or later than "
        "now, e.g. the user moved in March but says so in April."
    ),
]
Point = Annotated[
    StrictInt | TimeText | None,
    Field(description="A log seq (int) or an ISO-8601 time."),
]


def register_time_tools(server: MCPServer[Any], store: Store) -> None:
    # Imported here: mcp_server imports this module for the parameter types above.
    from .mcp_server import (
        LIMITS,
        PAGE,
        MemoryId,
        NamespaceFilter,
        Offset,
        _hints,
        _progress_of,
        _reply,
    )

    @server.tool(annotations=_hints(title="History of a memory", read_only=True, idempotent=True))
    def history(
        memory_id: MemoryId,
        limit: Annotated[
            int,
            Field(ge=1, le=LIMITS.page, description="Most events to return (a page)."),
        ] = PAGE,
        offset: Offset = 0,
    ) -> Annotated[CallToolResult, History]:
        """How a memory changed: every version (both directions), the events that touched it
        (created, read via which key and query, corrected, links adjusted, expired, deleted,
        forgotten) with seq and time, and its depth and link weights after each of them.

        Events come a page at a time, in log order: `events_total` says how many there are;
        when `next_offset` is not null, call again with offset=next_offset for the next page.
        Depth and weights are right on every page (folded over the whole history).

        Example: history(memory_id="m_3f2a9c1b7d0e") ->
        {"versions": [{"memory_id": "m_..", "status": "superseded"}, ...], "events": [...],
        "events_total": 2051, "next_offset": 50}
        """
        return _reply(lambda: timeline.history(store, memory_id, limit, offset))

    @server.tool(annotations=_hints(title="What changed", read_only=True, idempotent=True))
    def changes(
        ctx: Context,
        since: Point = None,
        until: Point = None,
        namespace: NamespaceFilter = None,
        top: Annotated[int, Field(ge=1, le=1000, description="Most-read memories shown.")] = 10,
        limit: Annotated[
            int,
            Field(ge=1, le=LIMITS.page, description="Most items of each list (a page)."),
        ] = PAGE,
        offset: Offset = 0,
    ) -> Annotated[CallToolResult, Changes]:
        """What changed after `since` up to `until` (seqs or ISO-8601 times; default the whole
        log): memories added, corrected (old -> new), read most, expired, forgotten (erased),
        deleted (knowledge-graph observations: hidden, still shown as of earlier points), and
        keys merged as aliases.

        Each list holds at most `limit` items from `offset` on, in log order, and has a total
        beside it (`added_total`, `corrected_total`, ...), exact however the lists are cut.
        When `next_offset` is not null some list has more: call again with
        offset=next_offset. `read_most` is not paged: the `top` most read of the
        `read_most_total` memories read. Reports progress (events scanned) when the client asks.

        Example: changes(since="2026-03-01T00:00:00Z") ->
        {"added": ["m_..", ...], "added_total": 312, ..., "next_offset": 50}
        """
        scanned = _progress_of(ctx, "scanning the log", stop=True)  # read only: may stop
        return _reply(
            lambda: timeline.changes(
                store, since, until, namespace, top, limit, offset, progress=scanned
            )
        )
