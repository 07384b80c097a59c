"""The `keytrail` command: serve a store over MCP, and look after it from a shell.

Every verb takes the store options (--home, --embedder, --model, --model-path, --namespace),
which override the matching KEYTRAIL_* variables. A keytrail error prints
`keytrail: error: <message>` on stderr and exits with status 2, without a traceback; so does
a verb that needs an existing store when its home holds none (only `serve`, `remember` and
`import` make one: see shell.CREATING_VERBS). Ctrl-C prints `keytrail: interrupted: <what it
left>` and exits with status 130 (see INTERRUPTED).
"""

import argparse
import errno
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import keytrail
from keytrail.core import (
    InvalidInput,
    KeytrailError,
    NoStore,
    NotFound,
    RememberItem,
    Settings,
    require_log,
)
from keytrail.core.config import tunable_variables
from keytrail.core.embedders import EMBEDDERS
from keytrail.core.results import KeyOutcome, MemoryView
from keytrail.core.store import READ_ONLY_ERRNOS, check_item
from keytrail.core.timetravel import read_memory_at, view
from keytrail.core.validation import os_error_text, quoted

from .browse_cli import add_browse_verbs, say_more
from .care import cmd_export, cmd_import, cmd_log, cmd_rebuild, cmd_verify
from .embed_cli import add_verbs as add_embed_verbs
from .hybrid_cli import add_hybrid_verbs
from .progress import end_open_line
from .shell import (
    CREATING_VERBS,
    EXIT_INTERRUPTED,
    OFFSET_HELP,
    PAGE_HELP,
    TOP_K_HELP,
    AsTyped,
    emit_json,
    float_flag,
    integer_flag,
    is_loopback,
    memories,
    note_namespace_never_told,
    open_store,
    preview,
    set_up_stdout,
    settings_from,
    short_time,
    shown_label,
    shown_text,
)
from .time_cli import add_time_options, add_time_verbs

DEFAULT_PORT = 8765


# -- serve -----------------------------------------------------------------------------------


def apply_setting_flags(args: argparse.Namespace) -> dict[str, str]:
    """Set the KEYTRAIL_* variable of every setting flag given, for this process.

    The server reads its settings (and the limits its tool schemas advertise) from the
    environment, so a flag is exactly its variable: `--max-content-chars 5000` is
    `KEYTRAIL_MAX_CONTENT_CHARS=5000`.
    """
    given = {
        var.env: str(value)  # the text typed (see AsTyped), or a name (a time zone, a fusion)
        for var in tunable_variables()
        if (value := getattr(args, var.env, None)) is not None
    }
    os.environ.update(given)
    return given


def cmd_serve(args: argparse.Namespace) -> int:
    given = apply_setting_flags(args)
    try:
        Settings.from_env()
    except InvalidInput as exc:
        if exc.field not in given:
            raise
        # Said of the flag typed, not of the variable it sets for this process.
        flag = next(v.flag for v in tunable_variables() if v.env == exc.field)
        raise InvalidInput(flag, exc.problem, limit=exc.fields.get("limit")) from None
    from .hybrid_tools import direct_recall_enabled
    from .mcp_server import check_listen, run_http, run_stdio

    if not args.http:
        # `serve --port 9000` served stdio, the address dropped without a word.
        for flag, value in (("--host", args.host), ("--port", args.port), ("--token", args.token)):
            if value is not None:
                raise InvalidInput(
                    flag, "is for serving over HTTP: add --http (stdio has no address)"
                )
    args.host = "127.0.0.1" if args.host is None else args.host
    args.port = DEFAULT_PORT if args.port is None else args.port
    if args.http and not 1 <= args.port <= 65535:
        raise InvalidInput("--port", f"{quoted(args.port)} is out of range", limit="1 to 65535")
    if args.token == "":
        # `--token "$TOKEN"` with TOKEN unset: a token was asked for, so serving without one
        # would let every client in (an empty KEYTRAIL_HTTP_TOKEN counts as unset, as every
        # KEYTRAIL_* variable does; a flag given empty is a mistake, like --home "").
        raise InvalidInput("--token", "is empty: give the bearer token clients must send")
    token = args.token or os.environ.get("KEYTRAIL_HTTP_TOKEN") or None
    if (
        args.http
        and token is not None
        and not (token.isascii() and token.isprintable() and token == token.strip())
    ):
        # HTTP strips a header's surrounding whitespace and carries only ASCII: a server with
        # such a token would refuse every client. The token itself is not echoed.
        raise InvalidInput(
            "--token",
            "the bearer token must be printable ASCII without leading or trailing whitespace "
            "(--token or KEYTRAIL_HTTP_TOKEN)",
        )
    direct_recall_enabled()  # a bad value is refused before a store is made
    if args.http and not is_loopback(args.host) and not token:
        raise InvalidInput(
            "--token",
            f"a bearer token is required to serve on non-loopback host {quoted(args.host)} "
            "(--token or KEYTRAIL_HTTP_TOKEN)",
        )
    if args.http:
        check_listen(args.host, args.port)  # before a store is opened or "serving" is said
    # A missing or stale embedding projection is built in the background once serving starts
    # (run_stdio, run_http), which then warms the store up: initialize is answered at once.
    store = open_store(args, build_projection=False)
    stopped_by = None  # the signal `serve --http` is to die of (SIGTERM), once the store is closed
    try:
        if args.http:
            # An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:8765/mcp.
            bare = args.host.strip("[]")
            url_host = f"[{bare}]" if ":" in bare else args.host
            print(
                f"keytrail {keytrail.__version__}: serving {store.home} on "
                f"http://{url_host}:{args.port}/mcp"
                + (" (bearer token required)" if token else ""),
                file=sys.stderr,
                flush=True,
            )
            stopped_by = run_http(store, args.host, args.port, token)
        else:
            # stderr is the client's server log (stdout carries the protocol): say which store.
            print(
                f"keytrail {keytrail.__version__}: serving {store.home} over stdio",
                file=sys.stderr,
                flush=True,
            )
            run_stdio(store)
    finally:
        store.close()
    if stopped_by is not None:
        sys.stderr.flush()
        signal.raise_signal(stopped_by)  # its default action: the status a supervisor expects
    if store.projection_state().status == "building":
        # The client is gone while the projection is still being built. Its thread may be
        # inside the model, and an interpreter shutting down under ONNX Runtime aborts the
        # process ("terminate called without an active exception"). Nothing is lost by leaving
        # now: the store is closed (no background step writes after that), every batch
        # embedded so far is saved, and the next start resumes from there.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# -- reading the store -----------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        queries = view(store, args.as_of)
        stats = queries.memory_stats()
        if args.json:
            emit_json(stats)
            return 0
        # Every key made stays in the graph; `keytrail keys` lists those a current memory
        # is behind, which a person comparing the two totals needs told.
        in_use = queries.browse_keys(limit=1).total
    keys = f"{stats.keys}" + (
        f" ({in_use} lead to current memories)" if in_use != stats.keys else ""
    )
    rows = [
        ("store", stats.store_id),
        ("home", str(settings_from(args).home)),
        ("events", stats.seq),
        ("memories", stats.memories),
        ("superseded", stats.superseded),
        ("expired", stats.expired),
        ("forgotten", stats.forgotten),
        ("deleted", stats.deleted),
        ("keys", keys),
        ("links", stats.links),
        ("hubs", stats.hubs),
        ("sessions", stats.sessions),
        ("embedder", stats.embedder),
        ("log bytes", stats.log_bytes),
        ("last event", short_time(stats.last_event_at)),
    ]
    rows += [(f"  namespace {ns}", n) for ns, n in stats.namespaces.items()]
    for name, value in rows:
        print(f"{name:<22} {value}")
    return 0


def concept_key(label: str) -> tuple[str, str]:
    return (label, "concept")


def name_key(label: str) -> tuple[str, str]:
    return (label, "name")


def add_key_flags(p: argparse.ArgumentParser, *, concept: str, name: str) -> None:
    """-k KEY and -n NAME, one key each, into `keys` in the order given (`split_keys`)."""
    p.add_argument(
        "-k", "--key", dest="keys", action="append", type=concept_key, metavar="KEY", help=concept
    )
    p.add_argument(
        "-n", "--name", dest="keys", action="append", type=name_key, metavar="NAME", help=name
    )


def split_keys(given: list[tuple[str, str]] | None) -> tuple[list[str], dict[str, str]]:
    """-k/-n flags, in the order given, as labels and the types of the non-concept ones."""
    pairs = given or []
    return [label for label, _ in pairs], {label: t for label, t in pairs if t != "concept"}


def cmd_remember(args: argparse.Namespace) -> int:
    keys, key_types = split_keys(args.keys)
    item = RememberItem(
        args.content,
        keys,
        key_types or None,
        args.namespace,
        args.ttl,
        args.related_to,
        args.session,
        args.source,
        args.valid_from,
    )
    refuse_before_making_a_store(args, item)
    with open_store(args) as store:
        result = store.remember(
            item.content,
            item.keys,
            item.key_types,
            item.namespace,
            item.ttl_seconds,
            item.related_to,
            item.session_id,
            item.source,
            item.valid_from,
        )
    if args.json:
        emit_json(result)
        return 0
    print(f"remembered {result.memory_id} in {result.namespace} (seq {result.seq})")
    if not result.keys:
        print("  no keys (none given, none found in the content): no key leads to it")
    for k in result.keys:
        print(key_line(k))
    if result.deduplicated:
        d = result.deduplicated
        print(f"  replaces near-duplicate {d.memory_id} (similarity {d.similarity})")
    for c in result.possible_contradictions:
        print(
            f"  possible contradiction: {c.memory_id} (similarity {c.similarity}): "
            f"{preview(c.preview, 70)}"
        )
    return 0


def refuse_before_making_a_store(args: argparse.Namespace, item: RememberItem) -> None:
    """On a home that holds no store, refuse what `remember` would refuse before opening it
    (which makes the store): a refused remember left a store of one store.created event, and
    `keytrail import` of a backup there was refused (it needs an empty store)."""
    settings = settings_from(args)
    try:
        require_log(settings.home)
    except NoStore:
        check_item(settings, item)
        if item.related_to:  # a new store holds no memory to relate to
            raise NotFound("related_to[0]", "memory", item.related_to[0]) from None


def cmd_correct(args: argparse.Namespace) -> int:
    keys, key_types = split_keys(args.keys)
    with open_store(args) as store:
        result = store.correct(
            args.memory_id,
            args.content,
            keys or None,
            key_types or None,
            args.related_to,
            args.source,
            args.valid_from,
            by_memory_id=args.by,
        )
    if args.json:
        emit_json(result)
        return 0
    print(
        f"corrected {result.old_id} -> {result.memory_id} (seq {result.seq}; old depth "
        f"{result.old_depth:.2f} x{result.weaken_factor})"
    )
    for k in result.keys:
        print(key_line(k))
    return 0


def key_line(k: KeyOutcome) -> str:
    """`  key k_..  apples [concept] alias of apple (0.77)`, as remember and correct print it."""
    how = f"alias of {k.merged_into} ({k.similarity})" if k.merged_into else k.resolution
    return f"  key {k.key_id}  {shown_label(k.label)} [{k.type}] {how}"


def cmd_recall(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = view(store, args.as_of, args.valid_at).recall(
            args.query, args.top_k, args.namespace, args.context
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(result)
        return 0
    matches = result.keys or result.nearest
    if not matches:
        print("no keys")
        return 0
    if not result.keys:
        print("no match; nearest keys:")
    for m in matches:
        hub = " hub" if m.hub else ""
        print(
            f"{m.key_id}  {shown_label(m.label)} [{m.type}] {m.match} {m.score:.3f}  "
            f"{memories(m.memory_count)}{hub}"
        )
    return 0


def cmd_read_key(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        page = view(store, args.as_of, args.valid_at).read_key(
            args.key_id, args.query, args.namespace, args.limit, args.offset
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(page)
        return 0
    label = "(label erased by a forget)" if page.label_erased else shown_label(page.label)
    print(f"{page.key_id}  {label} [{page.type}]  {memories(page.total)}")
    for ref in page.memories:
        others = ", ".join(map(shown_label, ref.keys.values()))
        print(
            f"  {ref.memory_id}  score {ref.score:.3f}  depth {ref.depth:.2f}  "
            f"keys: {others or '-'}"
        )
    say_more(page.next_offset)
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        memory = read_memory_at(
            store, args.memory_id, args.via, args.query, args.namespace, args.as_of, args.valid_at
        )
    if args.json:
        emit_json(memory)
        return 0
    print(
        f"{memory.memory_id} [{memory.namespace}] {shown_status(memory)}  depth {memory.depth:.2f}"
    )
    print(shown_text(memory.content))
    print("keys: " + ", ".join(f"{shown_label(k.label)} ({k.key_id})" for k in memory.keys))
    if memory.supersedes:
        print(f"supersedes {memory.supersedes}")
    if memory.valid_from is not None:
        # Told apart from when it was told: a correction dated ahead is not true yet.
        print(f"valid from {short_time(memory.valid_from)}")
    if memory.asked_id:
        print(f"asked for {memory.asked_id}: the version true then")
    return 0


def shown_status(memory: MemoryView) -> str:
    """The status a person reads: a corrected version is `superseded (by m_...)`."""
    if memory.superseded_by is None:
        return memory.status
    superseded = f"superseded (by {memory.superseded_by})"
    return superseded if memory.status == "superseded" else f"{memory.status}, {superseded}"


def cmd_forget(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.forget(args.memory_id, args.reason, args.all_versions)
    if args.json:
        emit_json(result)
    else:
        print(f"forgot {result.memory_id} (seq {result.seq})")
        if result.other_versions:
            print(f"  and its other versions {', '.join(result.other_versions)}")
        if result.same_text_in:
            print(f"  the same text is still held by {', '.join(result.same_text_in)}")
        for path in result.purged:
            print(f"  content removed from {path}")
        if result.labels_erased:
            print(f"  labels erased: {', '.join(result.labels_erased)}")
        for kept in result.labels_kept:
            print(f"  label kept: {kept.label} ({kept.key_id}): {kept.reason}")
    return 0


# -- the parser ------------------------------------------------------------------------------


#: Said in the help: which verbs make a store, which refuse a home without one.
CREATES_NOTE = "Creates the store when --home (KEYTRAIL_HOME) holds none."
NEEDS_NOTE = (
    "Needs an existing store: on a home without one it exits with status 2 and creates nothing."
)
STORE_SPLIT = (
    f"{', '.join(CREATING_VERBS)} create the store when --home (KEYTRAIL_HOME) holds none; "
    "every other verb needs an existing store, and on a home without one exits with status 2 "
    "and creates nothing."
)
#: Said after a NoStore error: how to get a store where one was expected.
NO_STORE_HINT = (
    "check --home / KEYTRAIL_HOME; a store is created by `keytrail "
    + "`, `keytrail ".join(CREATING_VERBS)
    + "`"
)


def home_path(value: str) -> str:
    """--home as given; an empty one names no place (it would mean the current directory)."""
    if not value:
        raise argparse.ArgumentTypeError("empty: name the store's directory")
    return value


class Parser(argparse.ArgumentParser):
    """argparse, quoting a refused value short as keytrail's own errors do: its "invalid
    choice" and "invalid TimeZone value" echoed the value whole (3,000 characters of --format)."""

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError as exc:
            raise _quoted_short(exc, action, arg_string) from None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            raise _quoted_short(exc, action, value) from None


def _quoted_short(exc: argparse.ArgumentError, action: argparse.Action, value: Any) -> Exception:
    message = exc.message
    for said in {repr(value), repr(str(value))}:  # as each Python version words it
        message = message.replace(said, quoted(value))
    return argparse.ArgumentError(action, message)


def store_options(*, after_verb: bool = True) -> Parser:
    """The options naming the store and its embedder, taken before or after the verb
    (`keytrail --home D stats` and `keytrail stats --home D`). After the verb they default to
    SUPPRESS, so a verb's parser does not overwrite with None what was given before it."""
    common = Parser(add_help=False, argument_default=argparse.SUPPRESS if after_verb else None)
    group = common.add_argument_group("store options (override KEYTRAIL_* variables)")
    group.add_argument(
        "--home", type=home_path, help="store directory (KEYTRAIL_HOME, default ~/.keytrail)"
    )
    group.add_argument(
        "--embedder",
        choices=EMBEDDERS,
        help="embedding backend (KEYTRAIL_EMBEDDER, default fastembed)",
    )
    group.add_argument("--model", help="embedding model name (KEYTRAIL_EMBED_MODEL)")
    group.add_argument(
        "--model-path",
        dest="model_path",
        help="local model directory, no download (KEYTRAIL_EMBED_MODEL_PATH)",
    )
    group.add_argument(
        "--namespace",
        help="the namespace remember and import write into (KEYTRAIL_NAMESPACE, default "
        "'default'); given to recall, read-key, read, list, keys, recall-memories, changes or "
        "export, only that namespace (default: all; the variable is no filter); other verbs "
        "refuse it",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="keytrail",
        # A prefix is no option: `--name X` must not quietly mean `--namespace X`.
        allow_abbrev=False,
        parents=[store_options(after_verb=False)],
        description="Event-sourced associative memory for LLM agents, served over MCP.",
        epilog=f"{STORE_SPLIT} Exit status: 0 done, 1 verify found problems, 2 error (the "
        "message says what), 130 stopped by Ctrl-C (one line says what that left; serve over "
        "stdio ends silently, and with 143 on SIGTERM; serve --http shuts down cleanly with 0, "
        "143 on SIGTERM, and log --follow stops with 0).",
    )
    parser.add_argument("--version", action="version", version=f"keytrail {keytrail.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = [store_options()]

    def verb(
        name: str, help_: str, func: Callable[[argparse.Namespace], int], json_flag: bool = True
    ) -> argparse.ArgumentParser:
        note = CREATES_NOTE if name in CREATING_VERBS else NEEDS_NOTE
        p = sub.add_parser(
            name,
            help=help_,
            description=f"{help_}. {note}",
            parents=common,
            allow_abbrev=False,
        )
        p.set_defaults(func=func)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON")
        return p

    p = verb(
        "serve",
        "serve the store over MCP (stdio, or streamable HTTP with --http)",
        cmd_serve,
        json_flag=False,
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    # No defaults here: given without --http they are refused, not dropped (see cmd_serve).
    p.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=integer_flag, help=f"HTTP port (default {DEFAULT_PORT})")
    p.add_argument(
        "--token",
        help="bearer token clients must send; required for a non-loopback host. Prefer "
        "KEYTRAIL_HTTP_TOKEN: a command-line argument is visible to other users in ps",
    )
    p.add_argument(
        "--toolsets",
        help="comma-separated tool sets to serve: keygraph, knowledge_graph "
        "(KEYTRAIL_TOOLSETS, default keygraph)",
    )
    p.add_argument(
        "--kg-namespace",
        dest="kg_namespace",
        help="namespace of knowledge-graph observations "
        "(KEYTRAIL_KG_NAMESPACE, default the default namespace)",
    )
    settings = p.add_argument_group("settings (each overrides the KEYTRAIL_* variable named)")
    for var in tunable_variables():
        default = var.unset if var.default is None else var.default
        settings.add_argument(
            var.flag,
            dest=var.env,
            type=(
                AsTyped(integer_flag)
                if var.kind is int
                else AsTyped(float_flag)
                if var.kind is float
                else var.kind
            ),
            choices=var.choices,
            metavar="|".join(var.choices) if var.choices else var.kind.__name__.upper(),
            help=f"{var.help} ({var.env}, default {default})",
        )

    p = verb("stats", "counts of memories, keys, links, sessions; log size", cmd_stats)
    # Counts are by record time (as memory_stats over MCP): valid time would change nothing.
    add_time_options(p, valid_at=False)

    p = verb("log", "print the events of the log", cmd_log)
    p.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="only this event type, e.g. memory.remembered (repeatable)",
    )
    p.add_argument("--memory", metavar="ID", help="only events that mention this memory id")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing events other processes append (Ctrl-C to stop)",
    )

    p = verb(
        "verify",
        "check every line of the log, that it folds, and every cache against it; exit 1 on "
        "problems",
        cmd_verify,
    )
    p = verb(
        "rebuild",
        "drop every cache, replay the log, re-embed and re-index (snapshot, vectors, text); "
        "other models' vectors are kept where verify finds them sound",
        cmd_rebuild,
        json_flag=False,
    )
    p.add_argument(
        "--all-models",
        action="store_true",
        help="drop the vectors of every model, not only this one's and those verify faults",
    )

    add_embed_verbs(verb)

    p = verb("remember", "remember a fact", cmd_remember)
    p.add_argument("content")
    add_key_flags(
        p,
        concept="a concept key, matched by meaning (repeatable)",
        name="a name key, matched literally (repeatable)",
    )
    p.add_argument(
        "--ttl",
        type=integer_flag,
        metavar="SECONDS",
        help="hide it (expired) this many seconds from now; `forget` is what erases",
    )
    p.add_argument(
        "--related-to",
        dest="related_to",
        action="append",
        metavar="MEMORY_ID",
        help="a memory this one relates to (repeatable; `related` follows it)",
    )
    p.add_argument(
        "--session",
        metavar="SESSION_ID",
        help="the conversation it came from (recall-memories reads its neighbouring turns)",
    )
    p.add_argument("--source", help="where the fact came from")
    add_time_options(p, valid_from=True)

    p = verb("recall", "keys a query leads to (never content)", cmd_recall)
    p.add_argument("query")
    p.add_argument("--top-k", dest="top_k", type=integer_flag, help=TOP_K_HELP)
    p.add_argument(
        "--context",
        metavar="TEXT",
        help="the surrounding conversation: weighs a quarter in matching concepts by meaning",
    )
    add_time_options(p)

    p = verb("read-key", "memories behind a key (no content)", cmd_read_key)
    p.add_argument("key_id")
    p.add_argument("--query", help="rank by relevance to this")
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=20))
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
    add_time_options(p)

    p = verb("read", "read a memory in full (recorded: deepens it)", cmd_read)
    p.add_argument("memory_id")
    p.add_argument("--via", metavar="KEY_ID", help="the key you came through")
    p.add_argument("--query", help="the recall query that led here (teaches aliases)")
    add_time_options(p)

    add_browse_verbs(verb)

    p = verb(
        "correct", "replace a memory with a new version (old one kept as history)", cmd_correct
    )
    p.add_argument("memory_id")
    p.add_argument("content", nargs="?", help="the new version (or --by)")
    p.add_argument(
        "--by",
        metavar="MEMORY_ID",
        help="instead of content: a memory told once (one that remember flagged this one "
        "against) that becomes the new version",
    )
    add_key_flags(
        p,
        concept="a concept key of the new version (repeatable; default: the old version's keys)",
        name="a name key of the new version (repeatable)",
    )
    p.add_argument(
        "--related-to",
        dest="related_to",
        action="append",
        metavar="MEMORY_ID",
        help="a memory the new version relates to (repeatable; default: the old version's)",
    )
    p.add_argument("--source", help="where the new version came from")
    add_time_options(p, valid_from=True)

    p = verb("forget", "forget a memory for good (its content erased from every file)", cmd_forget)
    p.add_argument("memory_id")
    p.add_argument("--reason", default="", help="why, kept in the audit record")
    p.add_argument(
        "--all-versions", action="store_true", help="also forget its earlier and later versions"
    )

    p = verb(
        "export", "write every event as JSON lines (stdout or a file)", cmd_export, json_flag=False
    )
    p.add_argument("-o", "--output", help="file to write (default stdout)")
    p.add_argument(
        "--format",
        choices=("keytrail", "memory-jsonl"),
        default="keytrail",
        help="keytrail events (default; --namespace keeps one namespace's), or the knowledge "
        "graph as the reference server's memory.jsonl",
    )

    p = verb(
        "import",
        "import a keytrail export (into an empty store), a memory.jsonl or a keymem graph.json",
        cmd_import,
        json_flag=False,
    )
    p.add_argument("input", nargs="?", help="file to import (default stdin)")
    p.add_argument(
        "--format",
        choices=("keytrail", "memory-jsonl", "keymem"),
        help="the file's format (default: detected from its content)",
    )
    add_time_verbs(verb)
    add_hybrid_verbs(sub, verb)
    return parser


def fail(message: str) -> NoReturn:
    end_open_line(sys.stderr)  # a bar the error stopped, drawn in place at a terminal
    print(f"keytrail: error: {message}", file=sys.stderr)
    raise SystemExit(2)


#: What Ctrl-C leaves of a verb's work, said on one line with exit status EXIT_INTERRUPTED.
#: Only what is true of that verb: a write is one fsynced log line, so it is in the log whole
#: or not at all, but a rebuild or what an export sent to stdout is left half done.
INTERRUPTED = {
    "verify": "verify writes nothing; run it again to check the whole store",
    "log": "log writes nothing",
    "export": "the export is unfinished: an --output file is written only once whole (one "
    "already there is unchanged), what went to stdout is incomplete; run `keytrail export` "
    "again (the store is unchanged)",
    "import": "an import is written in one step, whole or not at all; `keytrail log` shows "
    "whether it was",
    "rebuild": "the log is untouched (every cache is derived from it): run `keytrail rebuild` "
    "again to finish",
    "reembed": "every batch embedded so far is kept: run `keytrail reembed` again to resume",
    "forget": "if the forget is in the log (`keytrail log --memory ID`), the next command that "
    "opens the store finishes erasing the content",
}
INTERRUPTED_ANY = "nothing acknowledged is lost: a write is in the log whole or not at all"


def interrupted(verb: str) -> int:
    """Say, on one line on stderr, what Ctrl-C left of `verb`'s work; EXIT_INTERRUPTED."""
    # At a terminal the line starts fresh, after the ^C echoed or a bar drawn in place.
    start = "\n" if sys.stderr.isatty() else ""
    note = INTERRUPTED.get(verb, INTERRUPTED_ANY)
    print(f"{start}keytrail: interrupted: {note}", file=sys.stderr)
    return EXIT_INTERRUPTED


#: The verbs `--namespace` means something to: it filters what the readers show (`read`
#: checks the memory is in it) and is where the writers write. Every other verb answers about,
#: or acts on, the whole store, so it refuses the option rather than drop a filter unsaid
#: (`stats --namespace work` counted every namespace). KEYTRAIL_NAMESPACE is no filter.
NAMESPACE_READERS = ("recall", "read-key", "read", "list", "keys", "recall-memories", "changes")
NAMESPACE_WRITERS = ("serve", "remember", "import")


def check_namespace_option(args: argparse.Namespace) -> None:
    verb = args.command
    if getattr(args, "namespace", None) is None or verb in NAMESPACE_WRITERS:
        return
    if verb in NAMESPACE_READERS or verb == "export":
        return
    fail(
        f"--namespace: `keytrail {verb}` takes no namespace filter; "
        f"{', '.join(NAMESPACE_READERS)} and export filter by it, and "
        f"{', '.join(NAMESPACE_WRITERS)} write into it"
    )


#: The store's fields whose flag is named otherwise (`--ttl` is the tool's ttl_seconds).
FIELD_DESTS = {
    "ttl_seconds": "ttl",
    "via_key_id": "via",
    "session_id": "session",
    "by_memory_id": "by",
}


def said_of_flag(
    parser: argparse.ArgumentParser, args: argparse.Namespace, exc: KeytrailError
) -> str:
    """The message of `exc`, said of the flag typed when it refuses a flag's value: the store
    names the MCP tool's field (`ttl_seconds: -5 is out of range`), which a person typed as
    `--ttl -5`. A positional argument, or a value not given by a flag (a KEYTRAIL_* variable,
    a default), keeps the store's name."""
    if not isinstance(exc, InvalidInput):
        return exc.message
    dest = FIELD_DESTS.get(exc.field, exc.field)
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = verbs.choices[args.command]._actions
    flags = [a.option_strings[-1] for a in actions if a.dest == dest and a.option_strings]
    given = len(flags) == 1 and getattr(args, dest, None) is not None
    field = flags[0] if given else exc.field
    # The problem may point to another argument by its field name ("pass valid_at", "or
    # by_memory_id"): say it as this verb's flag, whatever the field refused (a positional's
    # problem too; a KEYTRAIL_* name only where the refused value came by a flag, as it may
    # be the variable set). Only names with an underscore, which no English word has.
    problem = exc.problem
    for action in actions:
        if (
            "_" in action.dest
            and action.option_strings
            and (given or not action.dest.startswith("KEYTRAIL_"))
        ):
            problem = re.sub(rf"\b{action.dest}\b", action.option_strings[-1], problem)
        for name, renamed in FIELD_DESTS.items():
            if renamed == action.dest and action.option_strings:
                problem = re.sub(rf"\b{name}\b", action.option_strings[-1], problem)
    if field == exc.field and problem == exc.problem:
        return exc.message
    return InvalidInput(field, problem, limit=exc.limit).message


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_namespace_option(args)
    # JSON (--json, `log --json`) and an export are UTF-8; text is in the locale's encoding.
    set_up_stdout(bool(getattr(args, "json", False)) or args.command == "export")
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        # Once, for every verb: Ctrl-C is no error, and a traceback would say nothing of what
        # it left (`serve` over stdio ends without a word: see mcp_server.run_stdio).
        return interrupted(args.command)
    except NoStore as exc:
        fail(f"{exc.message}; {NO_STORE_HINT}")
    except KeytrailError as exc:
        fail(said_of_flag(parser, args, exc))
    except BrokenPipeError:
        # The reader went away (e.g. `keytrail log | head`): not an error.
        sys.stderr.close()
        return 0
    except OSError as exc:
        if exc.errno in READ_ONLY_ERRNOS:
            fail(cannot_write(args.command, exc))
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f"cannot write {exc.filename}: " if exc.filename else ""
            fail(
                f"{where}{exc.strerror}: make room on the disk, then run it again (the log "
                "holds every command acknowledged so far, each whole)"
            )
        fail(os_error_text(exc))
    return code


def cannot_write(verb: str, exc: OSError) -> str:
    """What a verb that writes says when the store's files may be read but not written (a
    backup, a mounted snapshot): which file, and what can still be done there."""
    where = f"{exc.filename}: " if exc.filename else ""
    return (
        f"cannot write {where}{exc.strerror}. `keytrail {verb}` writes to the store (its log, "
        "lock or caches); stats, list, keys, history, log, export and verify answer from a "
        "store that cannot be written: copy it somewhere writable for the rest"
    )


if __name__ == "__main__":
    sys.exit(main())
