"""The MCP face of a store: one small tool per core command or query, and a usage prompt.

Tools are plain synchronous functions over `Store`; each call runs on a worker thread of the
tools' own (see `_on_tool_threads`), so a slow embedding or an fsync never blocks the event
loop (the Store serialises itself with its own lock). A `KeytrailError` becomes a
`ToolError`: the client sees `isError` with the message, which names the field and the limit.
Nothing is ever returned as error text. An argument a tool does not have is refused the same
way (see strict_arguments.py).
"""

import errno
import functools
import hmac
import inspect
import ipaddress
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, cast

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import msgspec
import uvicorn
from anyio.lowlevel import RunVar
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp.types import (
    CallToolResult,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette.sse import AppStatus

import keytrail
from keytrail.core import (
    InvalidInput,
    KeytrailError,
    Limits,
    RememberItem,
    Settings,
    Store,
    to_dict,
)
from keytrail.core.config import CONVERSATION_PAGE as CONVERSATION_PAGE_PREFERRED
from keytrail.core.config import KEY_PAGE as KEY_PAGE_PREFERRED
from keytrail.core.config import RELATED_PAGE as RELATED_PAGE_PREFERRED
from keytrail.core.results import (
    Conversation,
    Corrected,
    Expired,
    Forgotten,
    KeyBrowse,
    KeyPage,
    MemoryPage,
    MemoryView,
    Recall,
    Related,
    Remembered,
    SessionList,
    Stats,
    TurnSaved,
)
from keytrail.core.timetravel import read_memory_at, view
from keytrail.core.validation import NAMESPACE_CHARS, SESSION_CHARS, quoted

from .output_schemas import FlatSchemaServer
from .shell import EXIT_INTERRUPTED, is_loopback
from .strict_arguments import StrictArgumentsServer
from .time_tools import AsOf, ValidAt, ValidFrom, register_time_tools
from .unparsed import answer_unparsed

T = TypeVar("T")

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$"
KeyType = Literal["concept", "name", "proper_noun"]
Role = Annotated[
    Literal["user", "assistant", "system", "tool"], Field(description="Who spoke the turn.")
]

MEMORY_SYSTEM_PROMPT = """\
You have a long-term associative memory (keytrail). Use it quietly and well.

Recall before you answer
- Before your first reply in a conversation, call `recall` with the user's request (and the
  names, places and topics in it). Do it silently: never tell the user you are checking,
  searching or using a memory, and never mention keys, ids or tools.
- `recall` returns keys (concepts and names), never content. Walk the graph:
  Key -> Memory -> Key. `read_key(key_id)` lists the memories behind a key (ids, depth, other
  keys, no content); `read_memory(memory_id, via_key_id=...)` reads one in full and strengthens
  that path. The other keys of what you read lead on to more: follow them when they matter.
- Prefer specific keys (low memory_count, not hubs) over hubs; pass `query` to `read_key` to
  rank a hub's memories by relevance. If nothing matches, try the `nearest` keys or a
  differently worded recall.

Remember what will matter later
- Store durable facts, preferences, decisions, people and plans - not small talk.
- One fact per memory, written so it stands alone ("Dana's daughter Mia starts school in
  September 2025"), with several diverse keys: the people and named things (typed as `name`
  in key_types, e.g. {"Dana": "name"}), the topic, and a broader concept or two
  ("school", "family", "children"). Diverse keys are what let a later recall find it.
- Use `remember_batch` for several facts at once, `related_to` to tie a memory to others,
  `ttl_seconds` for things that stop being true (a trip next week).

Keep it true
- When a fact changes, `correct` the memory that holds it (find it with recall/read_key) rather
  than remembering a second, contradicting one. The old version is kept as history.
- When `remember` reports `possible_contradictions`, look at their previews. If the memory
  you just stored replaces a flagged stale one, call
  `correct(memory_id=<the stale id>, by_memory_id=<the id remember returned>)`: the new memory
  becomes its next version (correcting with the same text as content would keep two copies).
  To fix a stale one in other words, `correct` it with `content`. Most are only related facts.
- `forget` only when the user asks you to forget something.
- For what you knew earlier ("where did the user live, as I knew it last March?"), the reads
  take `as_of` (a time or a seq) and answer as the memory was then; `history(memory_id)` lists
  every version of a memory.
"""

#: The instructions of a server that serves the knowledge-graph tools without the keygraph
#: ones (`--toolsets knowledge_graph`): MEMORY_SYSTEM_PROMPT names tools it does not have.
KG_SYSTEM_PROMPT = """\
You have a long-term memory (keytrail) kept as a knowledge graph: entities (people, places,
organisations, things) with observations (facts about them) and typed relations between them.
Use it quietly and well.

Recall before you answer
- Before your first reply in a conversation, call `search_nodes` with the names and topics of
  the user's request (any word matches entity names, types and observations), and
  `open_nodes` with the names of entities you already know. Do it silently: never tell the
  user you are checking, searching or using a memory.
- Answers are pages: an entity lists its newest observations and relations with
  `observations_total` and `relations_total`; `read_entity(name, offset=...)` pages back
  through the rest, and `read_graph` pages through every entity (`next_offset`).

Remember what will matter later
- Store durable facts, preferences, decisions, people and plans - not small talk.
- `create_entities` for the people and named things (with an `entityType`),
  `add_observations` for facts about an entity (one fact per observation, written so it
  stands alone), `create_relations` for how entities relate (active voice: "works_at").

Keep it true
- When a fact changes, `delete_observations` the stale observation and add the new one;
  `delete_relations` and `delete_entities` what no longer holds.
"""


#: Added to MEMORY_SYSTEM_PROMPT when direct recall is served: an agent told only to walk keys
#: never learns what the extra tool is for.
DIRECT_RECALL_PROMPT = """
Direct recall
- `recall_memories(query)` answers with the memories themselves (content, ranked by words,
  keys and meaning, with what is one hop away). Use it when the question is plain and walking
  keys would take several calls; walk the keys when you need to see what is connected.
"""


#: Added to MEMORY_SYSTEM_PROMPT when the knowledge-graph tools are served beside the keygraph
#: ones: an agent told only to walk keys never learns what the other ten tools are for.
BOTH_TOOLSETS_PROMPT = """
Knowledge graph (the same memory, seen as entities)
- An entity is a name key, an observation a memory linked to it, a relation a typed edge
  between two entities. Use `create_entities`, `add_observations` and `create_relations` when
  the user or a tool speaks in entities and relations, and `search_nodes`/`open_nodes` to read
  them back; `recall` and `read_key` find what they stored too.
"""


def system_prompt(toolsets: Sequence[str], direct_recall: bool = False) -> str:
    """The instructions for the tools served: they name only tools the server has."""
    if "keygraph" not in toolsets:
        return KG_SYSTEM_PROMPT
    both = BOTH_TOOLSETS_PROMPT if "knowledge_graph" in toolsets else ""
    return MEMORY_SYSTEM_PROMPT + (DIRECT_RECALL_PROMPT if direct_recall else "") + both


def prompt_description(toolsets: Sequence[str]) -> str:
    """What `memory_system_prompt` teaches, as the prompt listing says it (of `system_prompt`)."""
    if "keygraph" not in toolsets:
        return (
            "How an agent should use keytrail's knowledge graph: search_nodes and open_nodes "
            "first, then record entities, relations and observations and keep them true."
        )
    return "How an agent should use keytrail: recall first, walk keys, remember and correct."


#: What waits on a vector build besides recall, in memory_stats' description: only the tools
#: served (recall_memories is served when direct recall is on).
STATS_WAITING = {
    True: "remember, read_key with a query and recall_memories",
    False: "remember and read_key with a query",
}

Fn = TypeVar("Fn", bound=Callable[..., Any])


def _doc_filled(**fields: str) -> Callable[[Fn], Fn]:
    """Fill `fields` into a tool's docstring, its description for the model."""

    def fill(tool: Fn) -> Fn:
        tool.__doc__ = (tool.__doc__ or "").format(**fields)
        return tool

    return fill


def _limits_from_env() -> Limits:
    """The input limits the schemas advertise: KEYTRAIL_MAX_* if set, else the defaults.

    Core checks the store's own limits again on every call, so a schema is a first line only.
    """
    try:
        return Settings.from_env().limits
    except KeytrailError:
        return Limits()


LIMITS = _limits_from_env()

NamespaceStr = Annotated[str, Field(min_length=1, max_length=NAMESPACE_CHARS, pattern=NAME_PATTERN)]
SessionStr = Annotated[str, Field(min_length=1, max_length=SESSION_CHARS, pattern=NAME_PATTERN)]
NamespaceFilter = Annotated[
    NamespaceStr | None,
    Field(description="Only this namespace (letters, digits, _ . : @ -); omit for all."),
]
MemoryId = Annotated[
    str, Field(min_length=1, max_length=64, description="A memory id, e.g. 'm_3f2a9c1b7d0e'.")
]
KeyId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description="A key id from recall/browse_keys, e.g. 'k_9a1b2c3d4e'.",
    ),
]
Content = Annotated[
    str,
    Field(
        min_length=1,
        max_length=LIMITS.content_chars,
        description="The fact, written to stand alone.",
    ),
]
TurnContent = Annotated[
    str,
    Field(
        min_length=1,
        max_length=LIMITS.content_chars,
        description="What was said in the turn, as said (facts to keep go to remember).",
    ),
]
TurnSession = Annotated[
    SessionStr,
    Field(description="The conversation (session) the turn belongs to, e.g. 'chat-2025-06-01'."),
]
KeyLabel = Annotated[str, Field(min_length=1, max_length=LIMITS.key_chars)]
Keys = Annotated[
    list[KeyLabel] | None,
    Field(
        max_length=LIMITS.keys_per_memory,
        description="Several diverse keys: names, topics and broader concepts. "
        "Omit to have names and salient terms extracted from the content (small talk may "
        "yield none: then no key leads to the memory).",
    ),
]
KeyTypes = Annotated[
    dict[str, KeyType] | None,
    Field(
        description="Type of some keys: 'name' or 'proper_noun' match literally; "
        "the default 'concept' matches by meaning (naming an existing concept key makes it a "
        'name). E.g. {"Dana": "name"}.'
    ),
]
RelatedTo = Annotated[
    list[MemoryId] | None,
    Field(
        max_length=LIMITS.related_to,
        description="Ids of memories (of the same namespace) this one relates to.",
    ),
]
Source = Annotated[
    str | None, Field(max_length=LIMITS.source_chars, description="Where the fact came from.")
]
Ttl = Annotated[
    int | None,
    Field(
        ge=1,
        le=LIMITS.ttl_seconds,
        description="Seconds until it stops being true (604800: a week); then it is hidden "
        "from reads as expired. Not erased: only `forget` erases.",
    ),
]
Query = Annotated[str, Field(min_length=1, max_length=LIMITS.query_chars)]
Limit = Annotated[int, Field(ge=1, le=LIMITS.page, description="Page size.")]
#: A call without `limit` gets this many (50, or KEYTRAIL_MAX_PAGE if lower); read_key 20.
PAGE = LIMITS.default_page()
KEY_PAGE = LIMITS.default_page(KEY_PAGE_PREFERRED)
CONVERSATION_PAGE = LIMITS.default_page(CONVERSATION_PAGE_PREFERRED)
RELATED_PAGE = LIMITS.default_page(RELATED_PAGE_PREFERRED)
Offset = Annotated[int, Field(ge=0, le=10**9, description="Items to skip.")]


class MemoryItem(BaseModel):
    """One memory of a remember_batch call (the arguments of remember)."""

    model_config = ConfigDict(extra="forbid")
    content: Content
    keys: Keys = None
    key_types: KeyTypes = None
    namespace: Annotated[
        NamespaceStr | None, Field(description="Namespace to store in; omit for the default.")
    ] = None
    ttl_seconds: Ttl = None
    related_to: RelatedTo = None
    source: Source = None
    session_id: Annotated[
        SessionStr | None, Field(description="The conversation this came from.")
    ] = None
    valid_from: ValidFrom = None


def _guard(call: Callable[[], T]) -> T:
    """Run a core call; a keytrail error becomes a tool error with the same message, and an
    OS error one naming the file and the reason (the SDK reports any other exception as
    "Error executing tool X" alone: a full disk or an unwritable store said nothing more)."""
    try:
        return call()
    except KeytrailError as exc:
        raise ToolError(exc.message) from exc
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise ToolError(f"{where}{exc.strerror or exc}") from exc


def _types(key_types: dict[str, KeyType] | None) -> dict[str, str] | None:
    return None if key_types is None else {label: str(kind) for label, kind in key_types.items()}


def _reply(call: Callable[[], Any]) -> CallToolResult:
    """The result as structured content (its type, in each tool's annotation, drives the
    output schema) and the same JSON, compact, as text for clients that read only text."""
    data = to_dict(_guard(call))
    # msgspec writes the same compact UTF-8 JSON as json.dumps(ensure_ascii=False), 3x faster.
    text = msgspec.json.encode(data).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


class CallProgress:
    """The notifications/progress of one call, which may go through several steps that each
    count from 0 (waiting for the projection, then embedding its own texts). MCP requires a
    call's progress to increase, so each step goes on from where the one before stopped.

    Calls come from core work in the SDK's worker thread, and are sent through the event loop
    (a no-op unless the client asked, or when the tool is called outside a client's request,
    e.g. `server.call_tool` directly).

    A step that may `stop` is where a call the client cancelled (notifications/cancelled)
    ends, at its next report: the SDK cancels the call's task, but not the thread that runs it,
    which would otherwise go on to the end (a cancelled batch embedded and wrote every item).
    Only steps before anything is written may stop: never once a command holds the log lock,
    nor while the text index is written."""

    def __init__(self, ctx: Context) -> None:
        try:
            _ = ctx.request_context  # raises outside a request
            self._ctx: Context | None = ctx
        except ValueError:
            self._ctx = None
        self._sent = -1.0  # the last progress sent

    def step(self, message: str, *, stop: bool = False) -> Callable[[int, int], None]:
        """A `progress(done, total)` for the next step of the call; with `stop`, one that
        raises the call's cancellation once the client has cancelled it."""
        ctx = self._ctx
        if ctx is None:
            return lambda done, total: None
        base: list[float] = []  # where this step starts, fixed by its first report

        def report(done: int, total: int) -> None:
            if stop:
                anyio.from_thread.check_cancelled()
            if not base:
                base.append(max(self._sent, 0.0))
            progress = base[0] + done
            if progress <= self._sent:
                return  # nothing new to say (a step's first report repeats the last one)
            self._sent = progress
            anyio.from_thread.run(
                functools.partial(ctx.report_progress, progress, base[0] + total, message)
            )

        return report


def _progress_of(ctx: Context, message: str, *, stop: bool = False) -> Callable[[int, int], None]:
    """A `progress(done, total)` for a call of one step (see CallProgress)."""
    return CallProgress(ctx).step(message, stop=stop)


#: What a client that sent a progress token hears while a call waits for the projection.
BUILDING = "building the embedding projection (texts embedded)"


def _once_built(
    store: Store,
    ctx: Context,
    need: Literal["keys", "all"],
    call: Callable[[], T],
    steps: CallProgress | None = None,
) -> Callable[[], T]:
    """`call`, run once the vectors it reads are built: while `keytrail serve` builds a missing
    projection in the background, wait for it (outside the store's mutex), telling the client
    how far it is (the first step of `steps`, when `call` reports steps of its own). Core waits
    too, but silently; a failed build raises the error naming its cause (a tool error, through
    `_guard`)."""
    # Waiting writes nothing (the build goes on for later calls): a cancelled call stops.
    progress = (steps or CallProgress(ctx)).step(BUILDING, stop=True)

    def run() -> T:
        store.wait_for_vectors(need, progress)
        return call()

    return run


def _hints(
    *, read_only: bool = False, destructive: bool = False, idempotent: bool = False, title: str
) -> ToolAnnotations:
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


#: Worker threads for tool calls at once (as many as anyio's default threads); more wait.
TOOL_THREADS = 40
_tool_threads: RunVar[anyio.CapacityLimiter] = RunVar("keytrail_tool_threads")


def _tool_limiter() -> anyio.CapacityLimiter:
    """The tool calls' threads of the running event loop."""
    try:
        return _tool_threads.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(TOOL_THREADS)
        _tool_threads.set(limiter)
        return limiter


def _on_tool_threads(tool: Fn) -> Fn:
    """`tool` (synchronous) run on a tool thread rather than one of anyio's default threads.

    The SDK runs a synchronous tool on a default thread, and the stdio transport reads stdin
    and writes stdout on those threads too. A call that reports progress while it holds the
    store waits for the notification to be written; with every default thread taken by calls
    waiting for the store, nothing could write it, and the server hung for good (40 calls at
    once were enough). On threads of their own, calls leave the transport its threads.
    """

    @functools.wraps(tool)
    async def call(**arguments: Any) -> Any:
        run = functools.partial(tool, **arguments)
        return await anyio.to_thread.run_sync(run, limiter=_tool_limiter())

    return cast(Fn, call)


class KeytrailServer(StrictArgumentsServer, FlatSchemaServer):
    """The SDK's MCPServer with flat output schemas and tools that refuse unknown arguments,
    run on threads of their own (see `_on_tool_threads`)."""

    def add_tool(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(fn):
            fn = _on_tool_threads(fn)
        super().add_tool(fn, *args, **kwargs)


@dataclass(frozen=True)
class BatchRemembered:
    """What `remember_batch` returns: one outcome per item, in order."""

    memories: list[Remembered]


def build_server(store: Store, toolsets: tuple[str, ...] | None = None) -> MCPServer[Any]:
    """An MCPServer whose tools work on `store` (opened and closed by the caller).

    `toolsets` (default: the store's settings, KEYTRAIL_TOOLSETS) picks the tool sets served.
    """
    toolsets = toolsets or store.settings.toolsets
    from .hybrid_tools import direct_recall_enabled  # it imports this module

    direct_recall = direct_recall_enabled()
    prompt = system_prompt(toolsets, direct_recall)
    server: MCPServer[Any] = KeytrailServer(
        "keytrail",
        title="keytrail associative memory",
        description="Event-sourced associative memory: recall keys, walk to memories.",
        instructions=prompt,
        version=keytrail.__version__,
        # No subscriptions/listen: served, the SDK tells 2026-07-28 clients that tools, prompts
        # and resources change (listChanged, subscribe), and nothing here ever does.
        subscriptions=False,
    )

    read_only = dict(read_only=True, idempotent=True)

    @server.tool(annotations=_hints(title="Recall keys", **read_only))
    def recall(
        query: Annotated[
            Query,
            Field(description="What you want to remember about: the user's words, names, topics."),
        ],
        ctx: Context,
        top_k: Annotated[
            int, Field(ge=1, le=LIMITS.top_k, description="Most keys to return.")
        ] = LIMITS.default_top_k(),
        namespace: NamespaceFilter = None,
        context: Annotated[
            str | None,
            Field(
                max_length=LIMITS.query_chars,
                description="Optional surrounding conversation, weighs a quarter.",
            ),
        ] = None,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, Recall]:
        """Find the keys (concepts and names) a query leads to. Never returns content.

        Use first, silently, before answering. Names match literally (whole words, accents
        optional; a part of a hyphenated name scores 0.9), concepts by meaning. Each key has
        memory_count, hub (many memories, less specific) and specificity. Next:
        read_key(key_id) on the most specific keys. When nothing matches, `nearest` holds the
        closest keys to try.
        Example: recall(query="What does Dana's daughter like?") ->
        {"keys": [{"key_id": "k_..", "label": "Dana", "type": "name", "memory_count": 3, ...}]}
        """
        return _reply(
            _once_built(
                store,
                ctx,
                "keys",
                lambda: view(store, as_of, valid_at).recall(query, top_k, namespace, context),
            )
        )

    @server.tool(annotations=_hints(title="Memories behind a key", **read_only))
    def read_key(
        key_id: KeyId,
        ctx: Context,
        query: Annotated[
            Query | None, Field(description="Rank the key's memories by relevance to this.")
        ] = None,
        namespace: NamespaceFilter = None,
        limit: Limit = KEY_PAGE,
        offset: Offset = 0,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, KeyPage]:
        """List the memories a key leads to, best first: ids, score, depth, their other keys.

        No content: choose which to read with read_memory. The `keys` of each memory
        ({key_id: label}) are the next hops of the walk (Key -> Memory -> Key). `total` counts
        them all; when `next_offset` is not null, call again with offset=next_offset for the
        next page. A key whose label a forget erased (it led to forgotten memories alone)
        answers `label` "" with `label_erased` true, and leads to no memory. Example:
        read_key(key_id="k_9a1b2c3d4e", query="school") -> {"label": "Mia", "total": 2,
        "memories": [{"memory_id": "m_..", "score": 0.9, "keys": {"k_2f859b7cba": "school"}}],
        "next_offset": null}
        """

        def page() -> KeyPage:
            return view(store, as_of, valid_at).read_key(key_id, query, namespace, limit, offset)

        # Only ranking by a query reads vectors (every one of the key's memories' contents).
        return _reply(page if query is None else _once_built(store, ctx, "all", page))

    @server.tool(annotations=_hints(title="Read a memory"))
    def read_memory(
        memory_id: MemoryId,
        via_key_id: Annotated[
            str | None,
            Field(max_length=64, description="The key you came through: strengthens that link."),
        ] = None,
        namespace: NamespaceFilter = None,
        query: Annotated[
            Query | None, Field(description="The recall query that led here (teaches aliases).")
        ] = None,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, MemoryView]:
        """Read one memory in full (content, keys, versions). Recorded: it deepens the memory
        (not with as_of or valid_at, which read without recording).

        Pass via_key_id when you reached it from read_key. A `status` of "superseded" means a
        newer version replaced it (`superseded_by`, null if forgotten): for what is true now,
        read that one. But with valid_at, the answer is the version true then (`asked_id`: the
        id passed, when that is another version), superseded since or not: use it for that
        time. Example:
        read_memory(memory_id="m_3f2a9c1b7d0e", via_key_id="k_9a1b2c3d4e")
        -> {"content": "Mia starts school in September 2025", "keys": [...], "depth": 0.05}
        """
        return _reply(
            lambda: read_memory_at(store, memory_id, via_key_id, query, namespace, as_of, valid_at)
        )

    @server.tool(annotations=_hints(title="Browse keys", **read_only))
    def browse_keys(
        namespace: NamespaceFilter = None,
        hubs_only: Annotated[
            bool, Field(description="Only hubs (keys with many memories).")
        ] = False,
        limit: Limit = PAGE,
        offset: Offset = 0,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, KeyBrowse]:
        """List keys with their memory counts, most-used first. For an overview of what is known.

        `total` counts them all; when `next_offset` is not null, call again with
        offset=next_offset for the next page. Example: browse_keys(hubs_only=True) ->
        {"total": 4, "keys": [{"label": "family", "memory_count": 12, "hub": true, ...}],
        "next_offset": null}
        """
        return _reply(
            lambda: view(store, as_of, valid_at).browse_keys(namespace, hubs_only, limit, offset)
        )

    @server.tool(annotations=_hints(title="Remember a fact"))
    def remember(
        content: Content,
        ctx: Context,
        keys: Keys = None,
        key_types: KeyTypes = None,
        namespace: Annotated[
            NamespaceStr | None, Field(description="Namespace to store in; omit for the default.")
        ] = None,
        ttl_seconds: Ttl = None,
        related_to: RelatedTo = None,
        source: Source = None,
        session_id: Annotated[
            SessionStr | None, Field(description="The conversation this came from.")
        ] = None,
        valid_from: ValidFrom = None,
    ) -> Annotated[CallToolResult, Remembered]:
        """Store one fact, reachable through several diverse keys.

        Type people and named things as 'name'. A near-duplicate replaces the old memory
        (`deduplicated`); similar-but-different memories come back as
        `possible_contradictions`, each with the start of its text (`preview`); most are
        only related facts. If this memory replaces a stale one, call
        correct(memory_id=<stale id>, by_memory_id=<this memory_id>); otherwise `correct` the
        stale one with content. To change a known fact use `correct`, not remember. Example:
        remember(content="Dana's daughter Mia starts school in September 2025",
                 keys=["Dana", "Mia", "school", "children"],
                 key_types={"Dana": "name", "Mia": "name"})
        """
        return _reply(
            _once_built(
                store,
                ctx,
                "all",
                lambda: store.remember(
                    content,
                    keys,
                    _types(key_types),
                    namespace,
                    ttl_seconds,
                    related_to,
                    session_id,
                    source,
                    valid_from,
                ),
            )
        )

    @server.tool(annotations=_hints(title="Remember several facts"))
    def remember_batch(
        items: Annotated[
            list[MemoryItem],
            Field(
                min_length=1,
                max_length=LIMITS.batch_items,
                description="The memories, each with the arguments of remember.",
            ),
        ],
        ctx: Context,
    ) -> Annotated[CallToolResult, BatchRemembered]:
        """Store several facts at once, all or none (one bad item stores nothing).

        Reports progress (texts embedded of all to embed) when the client asks for it.

        Example: remember_batch(items=[{"content": "Dana lives in Lyon",
        "keys": ["Dana", "Lyon", "home"], "key_types": {"Dana": "name", "Lyon": "name"}}, ...])
        -> {"memories": [{"memory_id": "m_..", ...}, ...]}
        """
        batch = [
            RememberItem(
                content=i.content,
                keys=i.keys,
                key_types=_types(i.key_types),
                namespace=i.namespace,
                ttl_seconds=i.ttl_seconds,
                related_to=i.related_to,
                session_id=i.session_id,
                source=i.source,
                valid_from=i.valid_from,
            )
            for i in items
        ]
        steps = CallProgress(ctx)
        building = _once_built(
            store,
            ctx,
            "all",
            lambda: BatchRemembered(
                # Embedding comes before the batch takes the log lock: a cancelled call stops.
                memories=store.remember_batch(batch, progress=steps.step("embedding", stop=True))
            ),
            steps,
        )
        return _reply(building)

    @server.tool(annotations=_hints(title="Correct a memory"))
    def correct(
        memory_id: MemoryId,
        ctx: Context,
        content: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=LIMITS.content_chars,
                description="The new version, written to stand alone. Give this or by_memory_id.",
            ),
        ] = None,
        by_memory_id: Annotated[
            str | None,
            Field(
                min_length=1,
                max_length=64,
                description="Instead of content: a memory already stored (one told once, "
                "e.g. the id remember just returned) that becomes the new version. Takes no "
                "keys, key_types, related_to, source or valid_from.",
            ),
        ] = None,
        keys: Annotated[
            list[KeyLabel] | None,
            Field(
                max_length=LIMITS.keys_per_memory,
                description="New keys; omit to keep the old version's keys. Pass them when "
                "the names change (moved from Lyon to Paris: 'Paris', not 'Lyon'): omitted, a "
                "new name in the content gets no key and no key walk reaches it.",
            ),
        ] = None,
        key_types: KeyTypes = None,
        related_to: RelatedTo = None,
        source: Source = None,
        valid_from: ValidFrom = None,
    ) -> Annotated[CallToolResult, Corrected]:
        """Replace a fact that changed with its new version (the old one is kept as history).

        Use instead of remember when a known fact is outdated or wrong. Returns the new id.
        When remember flagged the stale memory as a possible contradiction of the one it just
        stored, pass that one as by_memory_id instead of content: it becomes the new version.
        Examples: correct(memory_id="m_3f2a9c1b7d0e",
                          content="Mia starts school in September 2026")
        correct(memory_id="m_3f2a9c1b7d0e", by_memory_id="m_8c1d0e2f4a6b")
        """

        def corrected() -> Corrected:
            return store.correct(
                memory_id,
                content,
                keys,
                _types(key_types),
                related_to,
                source,
                valid_from,
                by_memory_id=by_memory_id,
            )

        # New concept keys may merge into aliases: that reads every key label's vector.
        return _reply(_once_built(store, ctx, "keys", corrected) if keys else corrected)

    @server.tool(annotations=_hints(title="Related memories", **read_only))
    def related(
        memory_id: MemoryId,
        limit: Annotated[
            int, Field(ge=1, le=LIMITS.page, description="Most memories to return.")
        ] = RELATED_PAGE,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, Related]:
        """Memories sharing keys with this one (rare keys count most) or linked by related_to.
        Its own other versions are not listed (read_memory names them: supersedes, superseded_by).

        With valid_at, the neighbours of the version true then (`asked_id`: the id passed, when
        that is another version). Example: related(memory_id="m_3f2a9c1b7d0e") ->
        {"related": [{"memory_id": "m_..", "score": 1.5, "shared_keys": [...]}]}
        """
        return _reply(lambda: view(store, as_of, valid_at).related(memory_id, limit))

    @server.tool(annotations=_hints(title="Forget a memory", destructive=True, idempotent=True))
    def forget(
        memory_id: MemoryId,
        reason: Annotated[
            str,
            Field(max_length=LIMITS.source_chars, description="Why, for the audit record."),
        ] = "",
        all_versions: Annotated[
            bool,
            Field(description="Also forget every earlier and later version of it (corrections)."),
        ] = False,
    ) -> Annotated[CallToolResult, Forgotten]:
        """Forget a memory for good: hidden from every read, and its content erased from every
        file of the store (log, snapshots, vectors, index). Its key labels (those extracted
        from its text too) go with it where the key leads to nothing but forgotten memories
        and nothing else names it: `labels_erased` lists those keys by id. Every other label
        of its keys stays, listed in `labels_kept` with why (a key of other memories too, an
        alias learned or a key made an entity, ...). Also kept: the record of the forget (id,
        a hash of the content, time, `reason`) and what else the log says of the memory: its
        link weights, which `history` shows, its namespace, session, source, expiry,
        valid_from, related_to and versions, the queries recorded with reads of it, and
        conversation turns. Only when the user asks; it cannot be undone. Other
        memories holding the same text (a retelling, the fact in another namespace) are listed
        in `same_text_in`: forget those too if the words must go.

        Example: forget(memory_id="m_3f2a9c1b7d0e", reason="user asked") ->
        {"memory_id": "m_3f2a9c1b7d0e", "seq": 42, "purged": ["log/000...1.jsonl", ...],
         "same_text_in": [], "labels_erased": ["k_8ade6b305f"], "labels_kept": [{"key_id":
         "k_ca13dfa57a", "label": "bank", "reason": "also a key of m_0c1d2e3f4a5b"}]}
        """
        return _reply(lambda: store.forget(memory_id, reason, all_versions))

    @server.tool(annotations=_hints(title="List memories", **read_only))
    def list_memories(
        namespace: NamespaceFilter = None,
        limit: Limit = PAGE,
        offset: Offset = 0,
        as_of: AsOf = None,
        valid_at: ValidAt = None,
    ) -> Annotated[CallToolResult, MemoryPage]:
        """Current memories, newest first, with a short preview. For review, not for recall.

        `total` counts them all; when `next_offset` is not null, call again with
        offset=next_offset for the next page. Example: list_memories(limit=10) ->
        {"total": 57, "memories": [{"preview": "..."}, ...], "offset": 0, "next_offset": 10}
        """
        return _reply(lambda: view(store, as_of, valid_at).list_memories(namespace, limit, offset))

    @server.tool(annotations=_hints(title="Memory statistics", **read_only))
    @_doc_filled(waiting=STATS_WAITING[direct_recall])
    def memory_stats(as_of: AsOf = None) -> Annotated[CallToolResult, Stats]:
        """Counts of the store (as_of: as it stood then), the embedder and the log size
        (today's, even as_of).

        Each memory is counted once: `memories` (current, split by `namespaces`),
        `superseded`, `expired`, `forgotten` or `deleted` (knowledge-graph observations).
        Forgetting reaches back: as_of a point before a forget, a memory forgotten since
        counts as forgotten. `keys` counts every key made, those leading to no current memory
        too (browse_keys lists only those leading to current memories); `links` every link of
        a key to a memory, superseded, expired, forgotten and deleted ones included; `hubs`
        the keys browse_keys(hubs_only=True) lists; `sessions` the conversations with turns
        recorded.

        `projection` says whether the embedder's vectors are being built (after a model switch,
        a lost cache, or many memories another process wrote) and how far: meanwhile recall
        waits for the key labels and {waiting} for all of it."""
        return _reply(lambda: view(store, as_of).memory_stats())

    @server.tool(annotations=_hints(title="Expire old memories", destructive=True, idempotent=True))
    def cleanup_expired(
        limit: Annotated[
            int,
            Field(ge=1, le=LIMITS.page, description="Most expired ids to list (all expire)."),
        ] = PAGE,
    ) -> Annotated[CallToolResult, Expired]:
        """Mark every memory whose ttl_seconds has passed as expired, however many, in one
        event; returns `count` and at most `limit` of their ids.

        Expired memories are already hidden from reads; this records it in the log. When
        count > len(memory_ids), changes(since=seq - 1, until=seq) pages through every id.
        Example: cleanup_expired() -> {"count": 3, "memory_ids": ["m_..", ...], "seq": 812}
        """
        return _reply(lambda: store.cleanup_expired(limit))

    @server.tool(annotations=_hints(title="Record a conversation turn"))
    def record_turn(
        session_id: TurnSession, role: Role, content: TurnContent
    ) -> Annotated[CallToolResult, TurnSaved]:
        """Append one turn to a session's conversation log (numbered from 1).

        Example: record_turn(session_id="chat-2025-06-01", role="user", content="Hi!")
        -> {"session_id": "chat-2025-06-01", "turn": 1, "seq": 17}
        """
        return _reply(lambda: store.record_turn(session_id, role, content))

    @server.tool(annotations=_hints(title="Read a conversation", **read_only))
    def get_conversation(
        session_id: Annotated[
            SessionStr, Field(description="The conversation (session) to read, as recorded.")
        ],
        turn: Annotated[int | None, Field(ge=1, description="Only this turn (1-based).")] = None,
        limit: Limit = CONVERSATION_PAGE,
        offset: Annotated[
            int, Field(ge=0, le=10**9, description="How many of the newest turns to skip.")
        ] = 0,
        as_of: AsOf = None,
    ) -> Annotated[CallToolResult, Conversation]:
        """The latest turns of a session, in order (or the one turn asked for); `total` counts
        them all. For older turns call again with offset=next_offset, until it is null.

        Example: get_conversation(session_id="chat-2025-06-01") -> {"total": 48, "turns":
        [...turns 29-48...], "offset": 0, "next_offset": 20}
        """
        return _reply(lambda: view(store, as_of).get_conversation(session_id, turn, limit, offset))

    @server.tool(annotations=_hints(title="List conversations", **read_only))
    def list_sessions(
        limit: Limit = PAGE, offset: Offset = 0, as_of: AsOf = None
    ) -> Annotated[CallToolResult, SessionList]:
        """Sessions with recorded turns, most recently active first, with turn counts; a page
        of them, `total` counting all. When `next_offset` is not null, call again with
        offset=next_offset for the next page."""
        return _reply(lambda: view(store, as_of).list_sessions(limit, offset))

    @server.prompt(title="How to use the memory", description=prompt_description(toolsets))
    def memory_system_prompt() -> str:
        return prompt

    register_time_tools(server, store)
    from .hybrid_tools import register_hybrid_tools  # it imports this module's schema types

    register_hybrid_tools(server, store)
    from .kg_tools import apply_toolsets

    # Everything registered above is the keygraph set; this adds or drops whole sets.
    apply_toolsets(server, store, toolsets)
    return server


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an `Authorization: Bearer <token>` header.

    The scheme is case-insensitive (RFC 7235 2.1: `bearer` is `Bearer`); the token is not.
    """
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.lstrip(" ").encode(), token.encode())


class BearerAuth:
    """ASGI middleware refusing HTTP requests without the bearer token (401)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            raw = headers.get(b"authorization")
            if not token_matches(raw.decode("latin-1") if raw else None, self.token):
                body = b'{"error":"unauthorized: send Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="keytrail"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def loopback_security(host: str) -> TransportSecuritySettings | None:
    """Host and Origin checks against DNS rebinding, for a server on a loopback address.

    A loopback server needs no token, so these checks are all that keeps a web page whose name
    was rebound to 127.0.0.x from driving it. The SDK turns them on only for the literal hosts
    127.0.0.1, localhost and ::1; this covers every loopback address (127.0.0.2,
    0:0:0:0:0:0:0:1, [::1]) and a Host without a port (port 80). None elsewhere: the SDK's
    default (no checks), where a token is required instead.
    """
    if not is_loopback(host):
        return None
    names = {"127.0.0.1", "localhost", "[::1]"}
    bare = host.strip("[]")
    if bare != "localhost":
        address = ipaddress.ip_address(bare)
        names |= {f"[{bare}]", f"[{address.compressed}]"} if address.version == 6 else {bare}
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(h for name in names for h in (name, f"{name}:*")),
        allowed_origins=sorted(o for name in names for o in (f"http://{name}", f"http://{name}:*")),
    )


def _build_while_serving(store: Store) -> None:
    """Start what `serve` does beside answering: bring the embedding projection up to the log
    in the background, then warm up (see embed_cli.build_while_serving)."""
    from .embed_cli import build_while_serving
    from .hybrid_tools import direct_recall_enabled  # it imports this module

    build_while_serving(store, memory_vectors=direct_recall_enabled())


def run_stdio(store: Store) -> None:
    """Serve `store` over stdio: initialize and every call that reads no vectors are answered
    at once, while a missing or stale projection is built in the background.

    Returns when the client closes stdin (Ctrl-D). On Ctrl-C (SIGINT) or SIGTERM it does not
    return: it closes the store and ends the process with 128 + the signal's number (130,
    143), silently (see `_end_on_interrupt`).
    """
    server = build_server(store)
    lowlevel = server._lowlevel_server  # what run_stdio_async runs, given streams of ours

    async def serve() -> None:
        async with anyio.create_task_group() as tasks:
            await tasks.start(_end_on_interrupt, store)
            _build_while_serving(store)  # only now: Ctrl-C must find its handler in place
            try:
                async with stdio_server() as (stdin, stdout), anyio.create_task_group() as relays:
                    unanswered = _Unanswered()
                    to_server, read = anyio.create_memory_object_stream[
                        SessionMessage | Exception
                    ]()
                    write, from_server = anyio.create_memory_object_stream[SessionMessage]()
                    relays.start_soon(_pass_requests, stdin, to_server, write.clone(), unanswered)
                    relays.start_soon(_pass_answers, from_server, stdout, unanswered)
                    await lowlevel.run(read, write, lowlevel.create_initialization_options())
            except* BrokenPipeError:
                pass  # the client is gone (killed): no one is left to answer
            tasks.cancel_scope.cancel()  # stdin ended: stop listening for Ctrl-C

    anyio.run(serve)


class _Unanswered:
    """The ids of the client's requests read from stdin and not answered yet (counted: a
    client may reuse an id while its first request is still running)."""

    def __init__(self) -> None:
        self.ids: Counter[str | int] = Counter()
        self._changed = anyio.Event()

    def add(self, request_id: str | int) -> None:
        self.ids[coerce_request_id(request_id)] += 1

    def discard(self, request_id: str | int | None, every: bool = False) -> None:
        """One request of that id answered, or `every` one of them cancelled."""
        if request_id is not None:
            request_id = coerce_request_id(request_id)
            self.ids[request_id] = 0 if every else self.ids[request_id] - 1
            if self.ids[request_id] <= 0:
                del self.ids[request_id]
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for_none(self) -> None:
        while self.ids:
            await self._changed.wait()


async def _pass_requests(
    stdin: anyio.abc.ObjectReceiveStream[SessionMessage | Exception],
    to_server: anyio.abc.ObjectSendStream[SessionMessage | Exception],
    answers: anyio.abc.ObjectSendStream[SessionMessage],
    unanswered: _Unanswered,
) -> None:
    """Pass what stdin brings to the server; at its end, wait for every request to be answered
    before the server hears of it.

    The SDK cancels the calls still running when its input ends: `printf '<requests>' |
    keytrail serve` had a remember land in the log unanswered (a tool's thread runs to its
    end), so the client could not tell it had been stored. A request the client cancelled is
    never answered, so it is not waited for. SIGTERM still ends a server that waits.

    A request line the SDK could not parse, or JSON that is no JSON-RPC message, is answered
    here (see `answer_unparsed`): the SDK only logs it, and its client waited for ever."""
    async with to_server, answers:
        async for item in stdin:
            if isinstance(item, Exception) and (answer := answer_unparsed(item)) is not None:
                if answer.id is not None:  # None: no JSON, so no request to wait for
                    unanswered.add(answer.id)
                await answers.send(SessionMessage(answer))
                continue
            if isinstance(item, SessionMessage):
                message = item.message
                if isinstance(message, JSONRPCRequest):
                    unanswered.add(message.id)
                elif (
                    isinstance(message, JSONRPCNotification)
                    and message.method == "notifications/cancelled"
                ):
                    unanswered.discard(cancelled_request_id_from_params(message.params), every=True)
            await to_server.send(item)
        await unanswered.wait_for_none()


async def _pass_answers(
    from_server: anyio.abc.ObjectReceiveStream[SessionMessage],
    stdout: anyio.abc.ObjectSendStream[SessionMessage],
    unanswered: _Unanswered,
) -> None:
    """Pass what the server writes to stdout, noting the requests it answers."""
    async with from_server, stdout:
        async for item in from_server:
            await stdout.send(item)
            if isinstance(item.message, JSONRPCResponse | JSONRPCError):
                unanswered.discard(item.message.id)


async def _end_on_interrupt(
    store: Store, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """On Ctrl-C or SIGTERM, close the store and leave the process at once with os._exit.

    SIGTERM is how an MCP client stops a server that has not left after stdin closed, and how
    a service manager stops one: without this it killed the process mid-command and left the
    snapshot unwritten (safe, the log is the truth, but the next open replays more).

    Leaving any other way waits for stdin: the SDK reads it on a worker thread blocked in
    read(2), which no cancellation wakes, and the interpreter joins that thread at exit (and
    then prints the KeyboardInterrupt as a traceback). Closing first waits for the command in
    flight, if any, under the store's mutex: what was acknowledged is in the log either way
    (it is fsynced first), and the close saves the snapshot. It runs on a worker thread, so
    the event loop goes on serving a call that reports progress meanwhile. A second Ctrl-C
    leaves without waiting: a write it cuts short is in the log whole or not at all.
    """
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        status = EXIT_INTERRUPTED
        async for signum in signals:
            status = 128 + signum
            break
        async with anyio.create_task_group() as tasks:

            async def again() -> None:
                async for _ in signals:
                    _leave(status)

            tasks.start_soon(again)
            try:
                await anyio.to_thread.run_sync(store.close)
            except Exception as exc:  # raised here, it would wait for stdin like the rest
                cause = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                print(f"keytrail: error: closing the store: {cause}", file=sys.stderr)
            _leave(status)


def _leave(status: int) -> None:
    sys.stderr.flush()
    os._exit(status)


def check_listen(host: str, port: int) -> None:
    """InvalidInput unless `host`:`port` can be listened on now, tried as uvicorn will bind it
    (asyncio's create_server: every address the host resolves to, SO_REUSEADDR, v6 only).

    uvicorn reports a failed bind itself, on several lines, and exits with status 3 after
    `serve` has said it is serving there: a port in use or an unknown host is an error like
    any other instead, one line and status 2, before the store is opened.
    """
    try:
        infos = socket.getaddrinfo(
            host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise InvalidInput("--host", f"cannot resolve {quoted(host)}: {reason}") from None
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
        except OSError as exc:
            field = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
            raise InvalidInput(
                field, f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from None


def request_body_limit(limits: Limits) -> int:
    """The largest request body a call within `limits` can take: a `remember_batch` of
    `batch_items` items, each at every limit, each character escaped as JSON escapes it at
    most (12 bytes: one outside the BMP as two \\uXXXX, as Python's json.dumps sends it), and
    a MiB for the rest. The SDK's own cap (4 MiB) refused batches the limits allow, with a bare
    413; this one stands only against a body no call could need."""
    item = (
        limits.content_chars
        + limits.keys_per_memory * limits.key_chars
        + limits.related_to * 32
        + 4 * limits.source_chars
    )
    return limits.batch_items * item * 12 + (1 << 20)


#: How long `serve --http`, stopped (SIGTERM, Ctrl-C), waits for the calls already running to
#: be answered: four times a `remember_batch` at the batch limit with the default model (5.8 s,
#: BENCHMARKS), and under the 30 s a Kubernetes pod is given. Past it the calls are cancelled
#: unanswered (a `remember_batch` still embedding stops; a write under way finishes first).
SHUTDOWN_GRACE_SECONDS = 25


class RequestsInFlight:
    """ASGI middleware counting the HTTP requests being answered, but for GETs: a session's
    GET is its stream for the server's own messages, open for as long as the session is.

    At shutdown (`ending_streams`), sse-starlette ends those streams by cancelling them in the
    middle of their response, which then never ends: the client read a broken connection
    (`incomplete chunked read`) and uvicorn logged `ASGI callable returned without completing
    response`. Such a stream's response is ended here, so the client reads a closed stream."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.ending_streams = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET":
            await self._stream(scope, receive, send)
            return
        self.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1

    async def _stream(self, scope: Any, receive: Any, send: Any) -> None:
        started = ended = False

        async def watched(message: Any) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                ended = True
            await send(message)

        await self.app(scope, receive, watched)
        if started and not ended and self.ending_streams:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class AnsweringServer(uvicorn.Server):
    """uvicorn's server, whose shutdown lets the calls running send their answers.

    Stopped, uvicorn stops listening, closes idle connections and waits for the others to end
    (up to its timeout_graceful_shutdown), then shuts the app down. But the SDK answers a call
    on an SSE stream, and sse-starlette ended every such stream as soon as shutdown began: a
    call at work ran on in its thread (a remember landed in the log) while its answer was
    dropped, so the client saw a failure and might store it again. With sse-starlette's
    automatic drain off (see run_http), the answers go out; the sessions' GET streams, which
    never end of themselves, are ended here once every other request has been answered."""

    def __init__(self, config: uvicorn.Config, requests: RequestsInFlight) -> None:
        super().__init__(config)
        self.requests = requests

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        async def end_streams_once_answered() -> None:
            while self.requests.count:
                await anyio.sleep(0.1)  # as uvicorn waits for connections
            self.requests.ending_streams = True
            AppStatus.should_exit = True  # what sse-starlette ends its streams on

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(end_streams_once_answered)
            await super().shutdown(sockets)
            tasks.cancel_scope.cancel()


def run_http(
    store: Store, host: str, port: int, token: str | None, log_level: str = "warning"
) -> int | None:
    """Serve streamable HTTP at http://host:port/mcp, behind the bearer token if given.

    On SIGTERM or Ctrl-C it stops taking requests and answers the calls already running (for
    up to SHUTDOWN_GRACE_SECONDS) before it returns; a second Ctrl-C stops waiting.
    Returns SIGTERM if that stopped it, for the caller to die of once it has closed the store;
    None otherwise."""
    app: Any = build_server(store).streamable_http_app(
        host=host,
        transport_security=loopback_security(host),
        max_request_body_size=request_body_limit(store.settings.limits),
    )
    if token:
        app = BearerAuth(app, token)
    requests = RequestsInFlight(app)
    server = AnsweringServer(
        uvicorn.Config(
            requests,
            host=host,
            port=port,
            log_level=log_level,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        ),
        requests,
    )
    _build_while_serving(store)  # as over stdio: answer at once, build in the background
    # uvicorn shuts down on SIGTERM, then raises it again to die of it: by default that killed
    # the process in uvicorn.run, before the caller closed the store (no snapshot saved).
    stopped: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _: stopped.append(signum))
    # sse-starlette (untyped) ends its streams on shutdown only when told: AnsweringServer tells it.
    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # Ctrl-C, raised again by uvicorn once it has shut down (as uvicorn.run ignores it)
    finally:
        AppStatus.enable_automatic_graceful_drain_mode()  # type: ignore[no-untyped-call]
        AppStatus.should_exit = False  # process-wide: it would end a later server's streams
        signal.signal(signal.SIGTERM, previous)
    return stopped[0] if stopped else None
