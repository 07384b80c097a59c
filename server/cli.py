"""The `keytrail` command: serve a store over MCP, and look after it from a shell.

Every verb takes the store options (--home, --embedder, --model, --model-path, --namespace),
which override the matching KEYTRAIL_* variables. A keytrail error prints
`keytrail: error: <message>` on stderr and exits with status 2, without a traceback.
"""

import argparse
import ipaddress
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO

import msgspec

import keytrail
from keytrail.core import InvalidInput, KeytrailError, Settings, Store, StoreError, to_dict
from keytrail.core.maintenance import drop_cache, verify
from keytrail.events import (
    AnyEvent,
    CorruptLog,
    DecodeError,
    EventLog,
    StoreCreated,
    decode_line,
    encode_event,
    event_tag,
)
from keytrail.projections import GraphState, apply

from .progress import ProgressBar

EMBEDDERS = ("fastembed", "openai", "hash")
DEFAULT_PORT = 8765
EMBED_BATCH = 256


# -- settings and output ---------------------------------------------------------------------


def settings_from(args: argparse.Namespace) -> Settings:
    """KEYTRAIL_* variables, overridden by the flags that were given."""
    return Settings.from_env(
        home=args.home,
        embedder=args.embedder,
        model=args.model,
        model_path=args.model_path,
        default_namespace=args.namespace,
    )


def open_store(args: argparse.Namespace, **kwargs: Any) -> Store:
    settings = settings_from(args)
    try:
        return Store(settings, **kwargs)
    except OSError as exc:
        raise StoreError(f"cannot open store at {settings.home}: {exc}") from exc


def emit_json(value: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    out.write(json.dumps(to_dict(value), ensure_ascii=False, indent=2) + "\n")


def short_time(at: datetime | str | None) -> str:
    if at is None:
        return "-"
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.strftime("%Y-%m-%d %H:%M:%S")


def preview(text: str, width: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


# -- serve -----------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    from .mcp_server import run_http, run_stdio

    token = args.token or os.environ.get("KEYTRAIL_HTTP_TOKEN") or None
    if args.http and not is_loopback(args.host) and not token:
        raise InvalidInput(
            "--token",
            f"a bearer token is required to serve on non-loopback host {args.host!r} "
            "(--token or KEYTRAIL_HTTP_TOKEN)",
        )
    store = open_store(args)
    try:
        if args.http:
            print(
                f"keytrail {keytrail.__version__}: serving {store.home} on "
                f"http://{args.host}:{args.port}/mcp"
                + (" (bearer token required)" if token else ""),
                file=sys.stderr,
                flush=True,
            )
            run_http(store, args.host, args.port, token)
        else:
            run_stdio(store)
    finally:
        store.close()
    return 0


# -- reading the store -----------------------------------------------------------------------


def cmd_stats(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        stats = store.memory_stats()
    if args.json:
        emit_json(stats)
        return 0
    rows = [
        ("store", stats.store_id),
        ("home", str(settings_from(args).home)),
        ("events", stats.seq),
        ("memories", stats.memories),
        ("superseded", stats.superseded),
        ("expired", stats.expired),
        ("forgotten", stats.forgotten),
        ("keys", stats.keys),
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


def cmd_remember(args: argparse.Namespace) -> int:
    keys = list(args.key or []) + list(args.name or [])
    key_types = {n: "name" for n in args.name or []}
    with open_store(args) as store:
        result = store.remember(
            args.content,
            keys,
            key_types or None,
            args.namespace,
            args.ttl,
            args.related_to,
            args.session,
            args.source,
        )
    if args.json:
        emit_json(result)
        return 0
    print(f"remembered {result.memory_id} in {result.namespace} (seq {result.seq})")
    for k in result.keys:
        extra = f" -> alias of {k.merged_into} ({k.similarity})" if k.merged_into else ""
        print(f"  key {k.key_id}  {k.label} [{k.type}] {k.resolution}{extra}")
    if result.deduplicated:
        d = result.deduplicated
        print(f"  replaces near-duplicate {d.memory_id} (similarity {d.similarity})")
    for c in result.possible_contradictions:
        print(f"  possible contradiction: {c.memory_id} (similarity {c.similarity})")
    return 0


def cmd_correct(args: argparse.Namespace) -> int:
    keys = list(args.key or []) + list(args.name or [])
    key_types = {n: "name" for n in args.name or []}
    with open_store(args) as store:
        result = store.correct(
            args.memory_id, args.content, keys or None, key_types or None, None, args.source
        )
    if args.json:
        emit_json(result)
        return 0
    print(
        f"corrected {result.old_id} -> {result.memory_id} (seq {result.seq}; old depth "
        f"{result.old_depth} x{result.weaken_factor})"
    )
    for k in result.keys:
        print(f"  key {k.key_id}  {k.label} [{k.type}] {k.resolution}")
    return 0


def cmd_recall(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.recall(args.query, args.top_k, args.namespace)
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
            f"{m.key_id}  {m.label} [{m.type}] {m.match} {m.score:.3f}  "
            f"{m.memory_count} memories{hub}"
        )
    return 0


def cmd_read_key(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        page = store.read_key(args.key_id, args.query, args.namespace, args.limit, args.offset)
    if args.json:
        emit_json(page)
        return 0
    print(f"{page.key_id}  {page.label} [{page.type}]  {page.total} memories")
    for ref in page.memories:
        others = ", ".join(k.label for k in ref.keys)
        print(
            f"  {ref.memory_id}  score {ref.score:.3f}  depth {ref.depth:.2f}  "
            f"reads {ref.access_count}  keys: {others or '-'}"
        )
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        view = store.read_memory(args.memory_id, args.via, None, args.namespace)
    if args.json:
        emit_json(view)
        return 0
    print(f"{view.memory_id} [{view.namespace}] {view.status}  depth {view.depth:.2f}")
    print(view.content)
    print("keys: " + ", ".join(f"{k.label} ({k.key_id})" for k in view.keys))
    if view.supersedes:
        print(f"supersedes {view.supersedes}")
    if view.superseded_by:
        print(f"superseded by {view.superseded_by}")
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.forget(args.memory_id, args.reason)
    if args.json:
        emit_json(result)
    else:
        print(f"forgot {result.memory_id} (seq {result.seq})")
    return 0


# -- the log ---------------------------------------------------------------------------------


def log_home(args: argparse.Namespace) -> Path:
    home = Settings.from_env(home=args.home).home
    if not (home / "log").is_dir():
        raise StoreError(f"no store at {home} (no log directory)", path=str(home))
    return home


def mentions(value: Any, ident: str) -> bool:
    """Whether `ident` appears as a whole value anywhere in a decoded event."""
    if isinstance(value, str):
        return value == ident
    if isinstance(value, dict):
        return any(mentions(v, ident) for v in value.values())
    if isinstance(value, list):
        return any(mentions(v, ident) for v in value)
    return False


def summary(event: AnyEvent) -> str:
    data: dict[str, Any] = msgspec.to_builtins(event)
    tag = data["type"]
    if tag == "memory.remembered":
        parts = []
        for m in data["memories"]:
            keys = ", ".join(k["label"] for k in m["keys"])
            parts.append(
                f"{m['memory_id']} [{m['namespace']}] {preview(m['content'], 40)!r} ({keys})"
            )
        return "; ".join(parts)
    if tag == "memory.corrected":
        m = data["memory"]
        return f"{data['old_id']} -> {m['memory_id']} {preview(m['content'], 40)!r}"
    if tag == "memory.read":
        via = f" via {data['via_key_id']}" if data.get("via_key_id") else ""
        return f"{data['memory_id']}{via}"
    if tag == "memory.forgotten":
        return f"{data['memory_id']} {data.get('reason') or ''}".strip()
    if tag == "memories.expired":
        return ", ".join(data["memory_ids"])
    if tag == "turn.recorded":
        return (
            f"{data['session_id']}#{data['turn']} {data['role']}: {preview(data['content'], 40)!r}"
        )
    if tag == "store.created":
        return f"store {data['store_id']} {data.get('software', '')}".strip()
    if tag == "links.adjusted":
        return f"{len(data['adjustments'])} link adjustments"
    if tag == "key.aliased":
        return f"{data['key_id']} + alias {data['alias']!r}"
    if tag == "key.retyped":
        return f"{data['key_id']} -> {data['key_type']}"
    return ""


def cmd_log(args: argparse.Namespace) -> int:
    log = EventLog(log_home(args))
    types = set(args.type or [])

    def show(events: Iterable[AnyEvent]) -> None:
        for event in events:
            if types and event_tag(event) not in types:
                continue
            if args.memory and not mentions(msgspec.to_builtins(event), args.memory):
                continue
            if args.json:
                sys.stdout.write(encode_event(event).decode() + "\n")
            else:
                at = event.at.strftime("%Y-%m-%d %H:%M:%S.%f")
                print(f"{event.seq:>7}  {at}  {event_tag(event):<18} {summary(event)}")
        sys.stdout.flush()

    try:
        show(log.iter_new())
        if args.follow:
            follow(log, show)
    except KeyboardInterrupt:
        pass
    return 0


def follow(
    log: EventLog, show: Callable[[Iterator[AnyEvent]], None], stop: threading.Event | None = None
) -> None:
    """Print what other processes append, as they append it (until interrupted)."""
    from watchfiles import watch

    # yield_on_timeout doubles as a slow poll, in case a change notification is missed.
    for _changes in watch(
        log.dir,
        stop_event=stop,
        debounce=50,
        step=20,
        rust_timeout=1000,
        yield_on_timeout=True,
        raise_interrupt=True,
    ):
        show(log.iter_new())


# -- maintenance -----------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    home = log_home(args)
    bar = ProgressBar("verify")
    report = verify(home, bar)
    bar.finish()
    if args.json:
        emit_json(report)
    else:
        state = "ok" if report.ok else "PROBLEMS"
        print(f"{home}: {state}: {report.events} events in {report.segments} segments")
        for problem in report.problems:
            print(f"  problem: {problem}")
        for torn in report.torn_files:
            print(f"  torn tail kept: log/torn/{torn}")
    return 0 if report.ok else 1


def cmd_rebuild(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    log_home(args)
    drop_cache(settings.home)
    bar = ProgressBar("replay")
    with open_store(args, progress=bar) as store:
        bar.finish()
        labels = store.key_vectors()
        contents = list(
            {m.content for m in store.state.memories.values() if m.status != "forgotten"}
        )
        embed_bar = ProgressBar("embed")
        for start in range(0, len(contents), EMBED_BATCH):
            store.embed(contents[start : start + EMBED_BATCH])
            embed_bar(start + EMBED_BATCH, len(contents))
        embed_bar.finish()
        store.vectors.flush()
        print(
            f"rebuilt {store.home}: {store.state.seq} events, {len(store.state.memories)} "
            f"memories, {len(store.state.keys)} keys, {len(labels)} label vectors, "
            f"{len(contents)} content vectors ({store.embedder.fingerprint})"
        )
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    log = EventLog(log_home(args))
    total = sum((log.dir / s).stat().st_size for s in log.segments())
    bar = ProgressBar("export")
    out: TextIO = (
        sys.stdout
        if args.output in (None, "-")
        else open(  # noqa: SIM115
            args.output, "w", encoding="utf-8"
        )
    )
    count = 0
    try:
        for event in log.iter_new():
            out.write(encode_event(event).decode() + "\n")
            count += 1
            if count % 1000 == 0:
                bar(_consumed(log, total), total)
        out.flush()
        if out is not sys.stdout:
            os.fsync(out.fileno())
    finally:
        if out is not sys.stdout:
            out.close()
    bar.finish()
    print(f"exported {count} events", file=sys.stderr)
    return 0


def _consumed(log: EventLog, total: int) -> int:
    pos = log.position
    done = 0
    for name in log.segments():
        if name == pos.segment:
            return done + pos.offset
        done += (log.dir / name).stat().st_size
    return total


def read_export(source: TextIO, label: str) -> list[AnyEvent]:
    """Decode and check an export: gap-free from seq 1, starting with store.created, foldable."""
    events: list[AnyEvent] = []
    state = GraphState()
    for number, raw in enumerate(source, 1):
        line = raw.strip()
        if not line:
            continue
        try:
            event = decode_line(line.encode("utf-8"))
        except DecodeError as exc:
            raise CorruptLog(label, number, exc.message) from None
        expected = len(events) + 1
        if event.seq != expected:
            raise CorruptLog(
                label,
                number,
                f"seq {event.seq} where {expected} was expected (an export is gap-free from 1)",
            )
        if events and event.at < events[-1].at:
            raise CorruptLog(label, number, "time goes backwards")
        if not events and not isinstance(event, StoreCreated):
            raise CorruptLog(label, number, "an export starts with store.created")
        try:
            apply(state, event)
        except (KeyError, IndexError, TypeError) as exc:
            raise CorruptLog(label, number, f"refers to something missing: {exc}") from None
        events.append(event)
    if not events:
        raise InvalidInput("input", "the export holds no events")
    return events


def cmd_import(args: argparse.Namespace) -> int:
    home = Settings.from_env(home=args.home).home
    label = args.input if args.input not in (None, "-") else "<stdin>"
    if args.input in (None, "-"):
        events = read_export(sys.stdin, label)
    else:
        with open(args.input, encoding="utf-8") as f:
            events = read_export(f, label)
    log = EventLog(home)
    bar = ProgressBar("import")
    with log.lock() as app:
        if app.pending or log.position.seq:
            raise InvalidInput(
                "--home",
                f"{home} already holds {log.position.seq} events; import needs an empty store",
            )
        for i, event in enumerate(events, 1):
            # Keep the original record time: expiries, time decay and as-of reads are
            # absolute times computed from it. seq is re-stamped and comes out the same.
            app.at = event.at
            app.append(event)
            if i % 200 == 0:
                bar(i, len(events))
    bar.finish()
    print(f"imported {len(events)} events into {home}", file=sys.stderr)
    return 0


# -- the parser ------------------------------------------------------------------------------


def store_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("store options (override KEYTRAIL_* variables)")
    group.add_argument("--home", help="store directory (KEYTRAIL_HOME, default ~/.keytrail)")
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
    group.add_argument("--namespace", help="namespace (KEYTRAIL_NAMESPACE; default 'default')")
    return common


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keytrail",
        description="Event-sourced associative memory for LLM agents, served over MCP.",
    )
    parser.add_argument("--version", action="version", version=f"keytrail {keytrail.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = [store_options()]

    def verb(
        name: str, help_: str, func: Callable[[argparse.Namespace], int], json_flag: bool = True
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, parents=common)
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
    p.add_argument("--host", default="127.0.0.1", help="HTTP host (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"HTTP port (default {DEFAULT_PORT})"
    )
    p.add_argument(
        "--token",
        help="bearer token clients must send (KEYTRAIL_HTTP_TOKEN); "
        "required for a non-loopback host",
    )

    verb("stats", "counts of memories, keys, links, sessions; log size", cmd_stats)

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
        "verify", "check every line of the log and that it folds; exit 1 on problems", cmd_verify
    )
    verb(
        "rebuild",
        "drop the cache, replay the log and re-embed (snapshot, vectors)",
        cmd_rebuild,
        json_flag=False,
    )

    p = verb("remember", "remember a fact", cmd_remember)
    p.add_argument("content")
    p.add_argument("-k", "--key", action="append", help="a concept key (repeatable)")
    p.add_argument(
        "-n", "--name", action="append", help="a name key, matched literally (repeatable)"
    )
    p.add_argument("--ttl", type=int, help="forget after this many seconds")
    p.add_argument("--related-to", dest="related_to", action="append", metavar="MEMORY_ID")
    p.add_argument("--session", help="session id")
    p.add_argument("--source", help="where the fact came from")

    p = verb("recall", "keys a query leads to (never content)", cmd_recall)
    p.add_argument("query")
    p.add_argument("--top-k", dest="top_k", type=int, default=10)

    p = verb("read-key", "memories behind a key (no content)", cmd_read_key)
    p.add_argument("key_id")
    p.add_argument("--query", help="rank by relevance to this")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--offset", type=int, default=0)

    p = verb("read", "read a memory in full (recorded: deepens it)", cmd_read)
    p.add_argument("memory_id")
    p.add_argument("--via", metavar="KEY_ID", help="the key you came through")

    p = verb(
        "correct", "replace a memory with a new version (old one kept as history)", cmd_correct
    )
    p.add_argument("memory_id")
    p.add_argument("content")
    p.add_argument("-k", "--key", action="append", help="new concept keys (default: keep)")
    p.add_argument("-n", "--name", action="append", help="new name keys")
    p.add_argument("--source")

    p = verb("forget", "forget a memory", cmd_forget)
    p.add_argument("memory_id")
    p.add_argument("--reason", default="")

    p = verb(
        "export", "write every event as JSON lines (stdout or a file)", cmd_export, json_flag=False
    )
    p.add_argument("-o", "--output", help="file to write (default stdout)")

    p = verb("import", "replay an export into an empty store", cmd_import, json_flag=False)
    p.add_argument("input", nargs="?", help="export file (default stdin)")
    return parser


def fail(message: str) -> NoReturn:
    print(f"keytrail: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except KeytrailError as exc:
        fail(exc.message)
    except BrokenPipeError:
        # The reader went away (e.g. `keytrail log | head`): not an error.
        sys.stderr.close()
        return 0
    except OSError as exc:
        fail(str(exc))
    return code


if __name__ == "__main__":
    sys.exit(main())
