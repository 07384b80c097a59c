"""The `recall_memories` MCP tool: direct hybrid recall, off unless asked for.

Registered only when `KEYTRAIL_DIRECT_RECALL` is set to a true value (`keytrail serve
--direct-recall` sets it), because it returns content in one call and so bypasses the
Key -> Memory walk the usage prompt teaches.
"""

import os
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from keytrail.core import InvalidInput, Store
from keytrail.core.config import MAX_HOPS
from keytrail.core.hybrid import MemoryRecall
from keytrail.core.validation import quoted

from .hybrid_cli import ENABLE_VARIABLE
from .mcp_server import (
    LIMITS,
    CallProgress,
    NamespaceFilter,
    Query,
    _hints,
    _once_built,
    _reply,
)
from .time_tools import AsOf, ValidAt

_OFF = ("", "0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


def direct_recall_enabled() -> bool:
    """Whether `KEYTRAIL_DIRECT_RECALL` asks for the tool. A value that is neither on nor off
    ("maybe", "ture") is refused, naming the variable, rather than quietly read as on."""
    value = os.environ.get(ENABLE_VARIABLE, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise InvalidInput(
        ENABLE_VARIABLE,
        f"{quoted(value)} is neither on nor off",
        limit="one of " + ", ".join(repr(v) for v in (*_ON, *_OFF[1:])),
    )


def register_hybrid_tools(server: MCPServer[Any], store: Store) -> None:
    """Add `recall_memories` to `server` when direct recall is enabled."""
    if not direct_recall_enabled():
        return

    @server.tool(annotations=_hints(title="Recall memories directly"))
    def recall_memories(
        query: Annotated[
            Query, Field(description="What you want to remember: the user's words, names.")
        ],
        ctx: Context,
        top_k: Annotated[
            int, Field(ge=1, le=LIMITS.top_k, description="Most memories to return.")
        ] = LIMITS.default_top_k(),
        namespace: NamespaceFilter = None,
        hops: Annotated[
            int | None,
            Field(
                ge=0,
                le=MAX_HOPS,
                description="Hops over shared keys and related_to to follow (default 1).",
            ),
        ] = None,
        explain: Annotated[
            bool, Field(description="Break each score down (fusion, signals, hop, date, session).")
        ] = False,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, MemoryRecall]:
        """Memories with their content for a query, in one call (no key walk needed).

        Combines text search (BM25), the query's keys and meaning, then follows shared keys
        and related_to edges for `hops` hops. Each result has its score, hop (0 = direct)
        and found_by: the signals that matched it (bm25, dense, keys), else "hop" or
        "session" (a turn next to a result in its session, matched by nothing itself).
        Results are not in score order: the first half (rounded up) are the best direct
        matches, by their own score and spread over sessions; the rest are ranked with
        session context (the turns around a match, where answers often are), and the score
        of the rest includes that context, so a later result may score higher than an
        earlier one (explain shows `context` and `context_from`). Naming a date ("on 3
        March", "in July") favours memories from then. Links that led to returned memories
        are strengthened.
        Example: recall_memories(query="When does Mia start school?", top_k=5) ->
        {"memories": [{"memory_id": "m_..", "content": "Mia starts school in ...", "score": 0.9}]}
        """
        steps = CallProgress(ctx)

        def answer() -> MemoryRecall:
            # A missing or far-behind index is built first, with progress the client can see.
            store.catch_up_text_index(steps.step("indexing text"))
            return store.recall_memories(
                query, top_k, namespace, hops, explain, as_of=as_of, valid_at=valid_at
            )

        # The content path reads every memory's vector: a projection being built in the
        # background is waited for (with progress) before the text index is caught up.
        return _reply(_once_built(store, ctx, "all", answer, steps))
