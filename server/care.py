"""The verbs that look after a store: log (and --follow), verify, rebuild, export, import.

They read the log directly, so `log`, `verify` and `export` need no embedder and never write.

The core modules behind export, import, verify and rebuild are imported by the verb that
uses them: at the top they cost every command, even `keytrail --help`, a share of its start.
"""

import argparse
import io
import os
import stat
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import msgspec

from keytrail.core import (
    InvalidInput,
    Settings,
    StoreError,
    forgetting,
    make_embedder,
    tempfiles,
)
from keytrail.core import validation as check
from keytrail.core.store import content_hash
from keytrail.events import (
    BY_TAG,
    AnyEvent,
    CorruptLog,
    DecodeError,
    EventLog,
    LogCutBack,
    LogPosition,
    MemoryForgotten,
    StoreCreated,
    decode_line,
    encode_event,
    event_tag,
    refuse_nested_store,
    utc_now,
)
from keytrail.events.durable import sync_dir
from keytrail.events.log import sync_log
from keytrail.events.redact import created_memories, without_content
from keytrail.projections import GraphState, apply, fold
from keytrail.projections.vectors import folder_name

from .progress import ProgressBar
from .shell import (
    counted,
    emit_json,
    existing_home,
    memories,
    open_store,
    preview,
    settings_from,
    shown_label,
)

EMBED_BATCH = 256


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
            # A blank label was erased by a forget: the key goes by its id.
            keys = ", ".join(shown_label(k["label"]) or k["key_id"] for k in m["keys"])
            parts.append(f"{m['memory_id']} [{m['namespace']}] {_content(m['content'])} ({keys})")
        return "; ".join(parts)
    if tag == "memory.corrected":
        m = data["memory"]
        return f"{data['old_id']} -> {m['memory_id']} {_content(m['content'])}"
    if tag == "memory.replaced":
        return f"{data['old_id']} -> {data['new_id']}"
    if tag == "memory.read":
        via = f" via {data['via_key_id']}" if data.get("via_key_id") else ""
        return f"{data['memory_id']}{via}"
    if tag == "memory.forgotten":
        erased = data.get("erased_keys") or []
        labels = f" (labels erased: {', '.join(erased)})" if erased else ""
        return f"{data['memory_id']} {shown_label(data.get('reason') or '')}".strip() + labels
    if tag == "memories.expired":
        return ", ".join(data["memory_ids"])
    if tag == "turn.recorded":
        said = preview(data["content"], 40, escape=False)
        return f"{data['session_id']}#{data['turn']} {data['role']}: {said!r}"
    if tag == "store.created":
        return f"store {data['store_id']} {data.get('software', '')}".strip()
    if tag == "links.adjusted":
        return counted(len(data["adjustments"]), "link adjustment")
    if tag == "key.aliased":
        learned = " (learned)" if data.get("learned") else ""
        return f"{data['key_id']} + alias {data['alias']!r}{learned}"
    if tag == "key.unaliased":
        return f"{data['key_id']} - alias {data['alias']!r}"
    if tag == "key.retyped":
        return f"{data['key_id']} -> {data['key_type']}"
    return kg_summary(tag, data)


def kg_summary(tag: str, data: dict[str, Any]) -> str:
    """One line for the knowledge-graph and import events."""
    if tag == "entities.created":
        names = ", ".join(
            f"{shown_label(e['name'])} [{shown_label(e['entity_type'])}]" for e in data["entities"]
        )
        return f"{names}; {counted(len(data.get('observations', [])), 'observation')}"
    if tag in ("relations.added", "relations.removed"):
        return ", ".join(
            f"{r['from_key']} -{shown_label(r['relation_type'])}-> {r['to_key']}"
            for r in data["relations"]
        )
    if tag == "observations.deleted":
        deleted = ", ".join(data["memory_ids"])
        cut = data.get("unlinked", [])
        if not cut:
            return deleted
        unlinked = ", ".join(f"{u['memory_id']} from {u['key_id']}" for u in cut)
        return f"{deleted}; unlinked {unlinked}" if deleted else f"unlinked {unlinked}"
    if tag == "entities.deleted":
        return (
            f"{', '.join(data['key_ids'])}; "
            f"{counted(len(data.get('forgotten', [])), 'observation')} deleted, "
            f"{counted(len(data.get('relations', [])), 'relation')} removed"
        )
    if tag == "graph.imported":
        return (
            f"{data['format']} {data.get('source', '')}: "
            f"{counted(len(data.get('keys', [])), 'key')}, "
            f"{memories(len(data.get('memories', [])))}, "
            f"{counted(len(data.get('relations', [])), 'relation')}"
        )
    return ""


def _content(content: str) -> str:
    # Empty content in a creating event only ever means forget removed it (events/redact.py).
    return repr(preview(content, 40, escape=False)) if content else "[content forgotten]"


def pinned_log(home: Path, verb: str) -> EventLog:
    """The log for a verb that reads it without opening a store, with every forget in it
    purged (see `forgetting.settled_log`); a purge a dead process left is said on stderr."""
    log, unfinished = forgetting.settled_log(home)
    if unfinished:
        ids = ", ".join(p.memory_id for p in unfinished)
        print(
            f"keytrail {verb}: a forget's purge was left unfinished ({ids}); their content may "
            "show here until a command that opens the store (e.g. `keytrail stats`) finishes it",
            file=sys.stderr,
        )
    return log


#: The type column of `keytrail log`, as wide as the longest event type: a longer one pushed the
#: rest of its line out of line with the others.
TAG_WIDTH = max(len(tag) for tag in BY_TAG)


def cmd_log(args: argparse.Namespace) -> int:
    home = existing_home(args)
    types = set(args.type or [])
    unknown = sorted(types - set(BY_TAG))
    if unknown:
        # A misspelt type would otherwise print nothing and look like an empty log.
        raise InvalidInput(
            "--type", f"no event type {check.quoted(unknown[0])}", limit=", ".join(sorted(BY_TAG))
        )

    if args.memory == "":
        # Taken as not given, it listed every event as if each named the id.
        raise InvalidInput("--memory", "must not be empty")

    # An event that holds the id as a value holds its JSON string in its JSON, which msgspec
    # finds in C: the walk of `mentions` over every event (most name other memories) took
    # 5 s at 100,000 events; it now only confirms the few that hold the string somewhere.
    needle = msgspec.json.encode(args.memory) if args.memory else b""

    def show(events: Iterable[AnyEvent]) -> None:
        for event in events:
            if types and event_tag(event) not in types:
                continue
            if args.memory and (
                needle not in encode_event(event)
                or not mentions(msgspec.to_builtins(event), args.memory)
            ):
                continue
            if args.json:
                sys.stdout.write(encode_event(event).decode() + "\n")
            else:
                at = event.at.strftime("%Y-%m-%d %H:%M:%S.%f")
                print(f"{event.seq:>7}  {at}  {event_tag(event):<{TAG_WIDTH}} {summary(event)}")
        sys.stdout.flush()

    pinned = pinned_log(home, "log")
    shown = Shown()
    try:
        if not args.follow:
            show(pinned.iter_new())
        else:
            # Go on from where the pinned read stopped, reading the files as they are now.
            log = EventLog(home)
            try:
                show(shown.read(pinned))
                placed = log.seek(pinned.position)
            except LogCutBack:
                placed = False
            if not placed:
                shown.resume(log, pinned.position.seq)
            follow(log, show, first_read=False, shown=shown)
    except KeyboardInterrupt:
        if not args.follow:
            raise  # a listing cut short: main says so (status 130)
        # Ctrl-C is how --follow is stopped: its normal end, status 0.
    finally:
        pinned.close()
    return 0


#: Read the log this often even without a change notification, in case one is lost (ms).
FOLLOW_SAFETY_POLL_MS = 2000
#: Polling interval when file-system notifications cannot be set up (ms).
FOLLOW_POLL_MS = 100
#: How many of the events it showed last a follower keeps the place of: lines a failed write
#: cuts back are those of one command, so where the log still holds what it showed is there.
FOLLOW_MARKS = 10_000


class Shown:
    """Where the events a follower showed last end in the log, to go on after a cut."""

    def __init__(self) -> None:
        self.marks: deque[LogPosition] = deque(maxlen=FOLLOW_MARKS)

    def read(self, log: EventLog) -> Iterator[AnyEvent]:
        """`log.iter_new()`, noting where each event's line ends."""
        for event in log.iter_new():
            self.marks.append(log.position)
            yield event

    def resume(self, log: EventLog, last: int) -> None:
        """Lines shown up to seq `last` are no longer in the log (a writer's failed append cut
        them back): say so on stderr, and put `log` right after the last event shown that the
        log still holds, so that the events that take the cut seqs are shown next."""
        while self.marks and (self.marks[-1].seq >= last or not log.seek(self.marks[-1])):
            self.marks.pop()
        if self.marks:
            first = self.marks[-1].seq + 1
            seqs = f"seq {first}" if first == last else f"seq {first}..{last}"
            again = "following the log as it now is"
        else:  # cut back further than the places kept: read it all again
            log.rewind()
            seqs, again = f"up to seq {last}", "showing the log again from its start"
        print(
            f"keytrail: the events shown as {seqs} were cut back by a failed write (they were "
            f"never recorded); {again}",
            file=sys.stderr,
            flush=True,
        )


def follow(
    log: EventLog,
    show: Callable[[Iterator[AnyEvent]], None],
    stop: threading.Event | None = None,
    *,
    safety_poll_ms: int = FOLLOW_SAFETY_POLL_MS,
    first_read: bool = True,
    shown: Shown | None = None,
) -> None:
    """Show what other processes append, as they append it, until interrupted or `stop` is set.

    Event-driven: a watchfiles watch on the log directory wakes this loop within tens of
    milliseconds of an append, a new segment or a redaction's rename (a redaction keeps every
    offset, so reading on from the cursor stays right). The watch is set up before the log is
    read, so nothing appended in between is missed. Polling is used only when notifications
    cannot be set up (no inotify, or out of watches).

    Lines a writer's failed append cut back after they were shown are said on stderr, and the
    events that take their seqs shown next (`Shown.resume`). `shown`: the places of the events
    shown before (by a first read of the caller's).
    """
    # RustNotify is what watchfiles.watch() wraps; using it directly lets the first read come
    # after the watch exists.
    from watchfiles._rust_notify import RustNotify, WatchfilesRustInternalError

    try:
        watcher = RustNotify([str(log.dir)], False, False, 0, False, True)
    except (OSError, WatchfilesRustInternalError) as exc:
        print(f"keytrail: cannot watch {log.dir} ({exc}); polling instead", file=sys.stderr)
        watcher = RustNotify([str(log.dir)], False, True, FOLLOW_POLL_MS, False, True)
    if shown is None:
        shown = Shown()

    def show_new() -> None:
        while True:
            try:
                show(shown.read(log))
                return
            except LogCutBack as cut:
                shown.resume(log, cut.seq)

    with watcher:
        if first_read:
            show_new()
        while True:
            changes = watcher.watch(20, 10, safety_poll_ms, stop)
            if changes == "signal":
                raise KeyboardInterrupt
            if changes == "stop":
                return
            show_new()


def cmd_verify(args: argparse.Namespace) -> int:
    from keytrail.core.maintenance import verify  # only here: see the module's docstring

    home = existing_home(args)
    bar = ProgressBar("verify")
    report = verify(home, bar)
    bar.finish()
    if args.json:
        emit_json(report)
    else:
        state = "ok" if report.ok else "PROBLEMS"
        events, segments = counted(report.events, "event"), counted(report.segments, "segment")
        print(f"{home}: {state}: {events} in {segments}")
        lines = [f"problem: {p}" for p in report.problems]
        lines += [f"torn tail kept: log/torn/{t}" for t in report.torn_files]
        if report.redacted:
            ids = ", ".join(report.redacted)
            lines.append(f"redacted (forgotten, content removed): {len(report.redacted)}: {ids}")
        if report.labels_erased:
            ids = ", ".join(report.labels_erased)
            lines.append(
                f"redacted (forgotten, labels removed): {len(report.labels_erased)}: {ids}"
            )
        lines += [f"cache ok: {c}" for c in report.caches_checked]
        lines += [f"cache problem: {p}" for p in report.cache_problems]
        ignored = report.caches_ignored
        lines += [f"cache ignored (costs a replay, not answers): {c}" for c in ignored]
        if report.purges_pending:
            ids = ", ".join(report.purges_pending)
            lines.append(
                "purge unfinished (a forget running in another process finishes it; one cut "
                f"short is finished by the next open or write): {ids}"
            )
        if report.unchecked_lines:
            lines.append(
                "no checksum, so damage to them cannot be seen (written by hand, or damaged "
                f"where the checksum was): {', '.join(report.unchecked_lines)}"
            )
        lines += [f"{tempfiles.described(home, t)}: {t}" for t in report.temp_files]
        for line in lines:
            print(f"  {line}")
    return 0 if report.ok else 1


def cmd_rebuild(args: argparse.Namespace) -> int:
    from keytrail.core.maintenance import OtherModels, check_replay, drop_cache  # see docstring

    settings = settings_from(args)
    existing_home(args)
    torn_dir = settings.home / "log" / "torn"
    torn_before = set(os.listdir(torn_dir)) if torn_dir.is_dir() else set()
    # Made before anything is dropped: its cache is the one made anew (an endpoint asked its
    # dimension that does not answer stops the rebuild here, with every cache still there).
    embedder = make_embedder(
        settings.embedder,
        settings.model,
        settings.model_path,
        settings.embed_dim,
        settings.embed_threads,
    )
    others = OtherModels(settings.home, folder_name(embedder.fingerprint), keep=not args.all_models)
    # Only a log that replays whole may replace the caches: a store opens from its snapshot,
    # which may be all that still holds what a damaged line or a lost segment held.
    bar = ProgressBar("check log")
    try:
        check_replay(settings.home, bar, others)
    except CorruptLog as exc:
        raise StoreError(
            f"{exc.message}; rebuild stopped with nothing dropped (the caches may hold what "
            "the log cannot give): mend the log first (a damaged one comes back from a "
            "backup), then run `keytrail verify`",
            segment=exc.segment,
            line=exc.line,
        ) from None
    bar.finish()
    drop_cache(settings.home, others)
    bar = ProgressBar("replay")
    with open_store(args, progress=bar, embedder=embedder) as store:
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
        store.save_vectors()  # under the log lock, like every other process's appends
        index_bar = ProgressBar("index text")
        indexed = store.index_text(index_bar)
        index_bar.finish()
        print(
            f"rebuilt {store.home}: {counted(store.state.seq, 'event')}, "
            f"{memories(len(store.state.memories))}, {counted(len(store.state.keys), 'key')}, "
            f"{counted(len(labels), 'label vector')}, "
            f"{counted(len(contents), 'content vector')} ({store.embedder.fingerprint}), "
            f"{memories(indexed)} in the text index"
        )
    for kept in others.kept:
        print(f"  kept another model's vectors: {kept}")
    for dropped in others.dropped:
        print(f"  dropped another model's vectors: {dropped}")
    # The lock the rebuild took cut a crashed writer's unfinished last line, if there was one.
    for name in sorted(set(os.listdir(torn_dir)) - torn_before if torn_dir.is_dir() else []):
        print(f"  cut a torn last line (a write that never finished) into log/torn/{name}")
    return 0


@contextmanager
def _output(path: str | None, home: Path) -> Iterator[TextIO]:
    """Where an export writes: stdout, or the file named by --output (refused, naming the
    option, when it cannot be created: a missing folder, a directory, no permission; or when it
    lies inside the store, where opening it for writing could wipe a log segment).

    A file is written beside its name and renamed over it only once whole and fsynced: an
    export cut short (Ctrl-C, a full disk, a crash) leaves no file that looks like a backup,
    and a backup already at that name stays as it was. A device or a pipe is written directly.
    """
    if path in (None, "-"):
        yield sys.stdout
        return
    resolved = Path(os.path.realpath(path))
    if resolved.is_relative_to(home.resolve()):
        raise InvalidInput("--output", f"{path} is inside the store {home}: write it elsewhere")
    in_place = Path(path).exists() and not Path(path).is_file()  # /dev/stdout, a fifo
    # A file is replaced through a symlink to it (as `> FILE` writes through one): renamed
    # over, the link itself became a file and the backup it points to stayed old.
    target = Path(path) if in_place else resolved
    written = target if in_place else target.with_name(f".{target.name}.partial")
    try:
        # A file replaced keeps its permissions: a backup kept 0600 must not come back 0644.
        mode = stat.S_IMODE(target.stat().st_mode) if target.is_file() else None
        if mode is not None and not os.access(target, os.W_OK):
            raise PermissionError(13, os.strerror(13))  # renaming over it would get past that
        out = open(written, "w", encoding="utf-8")  # noqa: SIM115 (closed below; its errors first)
    except OSError as exc:
        raise InvalidInput(
            "--output", f"cannot write {check.quoted(path, check.PATH_CHARS)}: {exc.strerror}"
        ) from None
    try:
        with out:
            if mode is not None and not in_place:
                os.fchmod(out.fileno(), mode)  # before a line of it is written
            yield out
            out.flush()
            if not in_place:
                os.fsync(out.fileno())
        if not in_place:
            os.replace(written, target)
    except BaseException:
        if not in_place:
            written.unlink(missing_ok=True)
        raise


def cmd_export(args: argparse.Namespace) -> int:
    from keytrail.core.exporters import namespace_events  # see the module's docstring

    if getattr(args, "format", None) == "memory-jsonl":
        return export_memory_jsonl(args)
    home = existing_home(args)
    log, unfinished = forgetting.settled_log(home)
    if unfinished:
        log.close()
        ids = ", ".join(p.memory_id for p in unfinished)
        raise StoreError(
            f"a forget's purge was left unfinished by a process that died ({ids}): open the "
            "store once (e.g. `keytrail stats`) to finish it, then export",
            path=str(home),
        )
    events: Iterable[AnyEvent] = log.iter_new()
    count = 0
    try:
        if args.namespace is not None:
            namespace = check.namespace(args.namespace, "default")
            _require_namespace(log, namespace)
            events = namespace_events(log.iter_new(), namespace)
        total = sum(log.segment_size(s) for s in log.segments())
        bar = ProgressBar("export")
        with _output(args.output, home) as out:
            for event in events:
                out.write(encode_event(event).decode() + "\n")
                count += 1
                if count % 1000 == 0:
                    bar(_consumed(log, total), total)
    finally:
        log.close()
    bar.finish()
    print(f"exported {counted(count, 'event')}", file=sys.stderr)
    return 0


def _require_namespace(log: EventLog, namespace: str) -> None:
    """Refuse, before writing anything, a namespace no memory of the log was ever made in: a
    mistyped `--namespace` would otherwise export only the store-wide events and exit 0, a
    backup that looks fine and holds none of the memories meant. Leaves the cursor at the
    start, for the export's own pass."""
    # Stops at the namespace's first memory: the common case (it exists) reads a few lines,
    # not a second pass over the whole log. Only a refusal, which lists them all, reads it all.
    from keytrail.core.exporters import memory_namespaces  # see the module's docstring

    found = memory_namespaces(log.iter_new(), until=namespace)
    log.rewind()
    _require_namespace_in(found, namespace)


def _require_namespace_in(found: set[str], namespace: str) -> None:
    if namespace not in found:
        raise InvalidInput(
            "--namespace",
            f"no memory in this store was ever in namespace {namespace!r} "
            f"(its namespaces: {', '.join(sorted(found)) or 'none'})",
            value=namespace,
        )


def _consumed(log: EventLog, total: int) -> int:
    pos = log.position
    done = 0
    for name in log.segments():
        if name == pos.segment:
            return done + pos.offset
        done += log.segment_size(name)
    return total


def read_export(
    source: TextIO, label: str, progress: Callable[[int, int], None] | None = None, lines: int = 0
) -> list[AnyEvent]:
    """Decode and check an export: gap-free from seq 1, starting with store.created, foldable.

    `progress(done, lines)` hears how many of its `lines` lines are checked."""
    events: list[AnyEvent] = []
    state = GraphState()
    #: memory id -> the line creating it with empty content, until a forget of it is read
    emptied: dict[str, int] = {}
    #: memory id -> the index in `events` of the event creating it with its content
    told: dict[str, int] = {}
    for number, raw in enumerate(source, 1):
        if progress is not None and number % 1000 == 0:
            progress(number, lines)
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
        # An export carries no line checksums; each memory's content_hash is what says its text
        # is the text that was told (a forget's audit record repeats it), so check it.
        for memory in created_memories(event):
            if not memory.content:  # a forget's redaction mark: the export must forget it
                emptied[memory.memory_id] = number
            elif content_hash(memory.content) != memory.content_hash:
                raise CorruptLog(
                    label,
                    number,
                    f"the content of {memory.memory_id} does not match its content_hash "
                    "(the line was edited or damaged)",
                )
            else:
                told[memory.memory_id] = len(events)
        if isinstance(event, MemoryForgotten):
            emptied.pop(event.memory_id, None)
            at = told.pop(event.memory_id, None)
            if at is not None:
                # Its text is still in the export (a log segment put back from a backup): the
                # line is written as the forget left it, never with the text.
                events[at] = without_content(events[at], [event.memory_id])
        try:
            apply(state, event)
        except (KeyError, IndexError, TypeError) as exc:
            raise CorruptLog(label, number, f"refers to something missing: {exc}") from None
        events.append(event)
    if not events:  # every other line is an event or refused: the file is blank
        raise InvalidInput(label, "the file is empty: a keytrail export starts with store.created")
    if emptied:
        # Remember refuses empty content: only a forget empties it, and it is in the export.
        memory_id, number = next(iter(emptied.items()))  # the first such line
        raise CorruptLog(
            label,
            number,
            f"the content of {memory_id} is empty but the export never forgets it, so it "
            "was never forgotten (the line was edited or damaged)",
        )
    return events


def export_memory_jsonl(args: argparse.Namespace) -> int:
    """The knowledge graph as the reference server's memory.jsonl (stdout or -o FILE)."""
    from keytrail.core.exporters import memory_jsonl_lines  # see the module's docstring

    home = existing_home(args)
    settings = Settings.from_env(home=args.home)
    namespace = check.namespace(args.namespace or settings.kg_namespace, settings.default_namespace)
    state = fold(EventLog(home).iter_new())
    if args.namespace is not None:
        _require_namespace_in({m.namespace for m in state.memories.values()}, namespace)
    lines = memory_jsonl_lines(state, namespace, utc_now())
    count = 0
    with _output(args.output, home) as out:
        for line in lines:
            out.write(line + "\n")
            count += 1
    lines_out = counted(count, "memory.jsonl line")
    print(f"exported {lines_out} (namespace {namespace})", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from keytrail.core.importers import check_import, detect_format  # see the module's docstring

    settings = Settings.from_env(home=args.home)
    home = settings.home
    refuse_nested_store(home)  # before reading and checking a file that may be large
    label = args.input if args.input not in (None, "-") else "<stdin>"
    if args.input in (None, "-") and sys.stdin.isatty():
        # It would sit waiting, without a word, for an export to be typed.
        raise InvalidInput(
            "input", "stdin is a terminal: name the file to import, or pipe it in (< FILE)"
        )
    try:
        if args.input in (None, "-"):
            # UTF-8, as from a file (and as `keytrail export` writes), not the locale's encoding.
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(args.input, encoding="utf-8") as f:
                text = f.read()
    except OSError as exc:
        raise InvalidInput(
            "input", f"cannot read {check.quoted(label, check.PATH_CHARS)}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(label, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    # A byte order mark (Windows editors save one) is no part of the text: with it the file
    # was "of no format keytrail can tell".
    text = text.removeprefix("\ufeff")
    fmt = getattr(args, "format", None) or detect_format(text)
    if fmt == "keytrail" and args.namespace is not None:
        # The events are replayed byte for byte, each memory in the namespace it had: a
        # namespace asked for would be dropped without a word.
        raise InvalidInput(
            "--namespace",
            "a keytrail export is imported as it was, each memory in its own namespace; "
            "import it without --namespace (`keytrail export --namespace NS` keeps one)",
        )
    if fmt == "memory-jsonl" and args.namespace is not None:
        # `import` writes into --namespace, as `export --format memory-jsonl --namespace NS`
        # reads NS: the observations go there, not into KEYTRAIL_KG_NAMESPACE.
        args.kg_namespace = args.namespace
    if fmt != "keytrail":
        fresh = not (home / "log").is_dir()
        write = check_import(text, label, settings_from(args), fmt, fresh)  # before opening
        with open_store(args) as store:
            report = write(store)
        if report.seq is None and not text.strip():
            # An empty graph's memory.jsonl, not a graph "already in" a home it may have made.
            print(
                f"nothing to import: {label} is empty (a memory.jsonl of no entity)",
                file=sys.stderr,
            )
        elif report.seq is None:
            held = (
                f"its {counted(report.entities, 'entity', 'entities')}, their observations and "
                "relations are"
                if report.format == "memory-jsonl"
                else "every memory and key in it is"
            )
            print(
                f"nothing new in {label} ({report.format}): {held} in {store.home} already",
                file=sys.stderr,
            )
        else:
            print(
                f"imported {label} ({report.format}) into {store.home} at seq {report.seq}: "
                f"{counted(report.keys, 'key')}, {counted(report.entities, 'entity', 'entities')}, "
                f"{memories(report.memories)}, {counted(report.relations, 'relation')}",
                file=sys.stderr,
            )
        for note in report.skipped:
            print(f"  note: {note}", file=sys.stderr)
        return 0
    check_bar = ProgressBar("check export")
    events = read_export(io.StringIO(text), label, check_bar, text.count("\n"))
    check_bar.finish()
    log = EventLog(home)

    def waiting() -> None:
        print(f"waiting for another import into {home} to finish", file=sys.stderr)

    try:
        # Written beside the store and moved into place whole: an import cut short (Ctrl-C, a
        # full disk) must not leave a store of its first half, which would look sound. Killed,
        # it leaves the folder to the store's next open (core/tempfiles.py).
        with tempfiles.import_staging(home, waiting) as staging:
            with log.lock() as app:
                _require_empty(log, app.pending, home)
            _write_staged(staging, events, settings.segment_bytes)
            with log.lock() as app:
                # A process that made the store meanwhile keeps it; this import is refused.
                _require_empty(log, app.pending, home)
                _clear_half_made(log, staging / "log")
                try:
                    os.rename(staging / "log", log.dir)  # over the empty log folder, atomically
                except OSError as exc:
                    raise InvalidInput(
                        "--home", f"cannot move the import into {log.dir}: {exc.strerror}"
                    ) from None
                sync_dir(home)  # the rename itself must survive a crash
    finally:
        log.close()
    print(f"imported {counted(len(events), 'event')} into {home}", file=sys.stderr)
    return 0


def _require_empty(log: EventLog, pending: list[AnyEvent], home: Path) -> None:
    if pending or log.position.seq:
        raise InvalidInput(
            "--home",
            f"{home} already holds {counted(log.position.seq, 'event')}; "
            "import needs an empty store",
        )


def _clear_half_made(log: EventLog, staged: Path) -> None:
    """Empty the log folder of an empty store (hold its lock) of what a first open that died
    before its first line was whole left there: segments holding nothing (the lock has cut a
    torn line off), and its `torn/`, moved into the staged log to stay kept. The rename over
    the folder failed on them ("Directory not empty"), though import finishes such a store."""
    if (log.dir / "torn").is_dir():
        os.rename(log.dir / "torn", staged / "torn")
    for name in log.segments(fresh=True):
        if os.path.getsize(log.dir / name) == 0:
            os.unlink(log.dir / name)


def _write_staged(staging: Path, events: list[AnyEvent], segment_bytes: int) -> None:
    bar = ProgressBar("import")
    # Split as the store's own appends would be: one segment of the whole log would make
    # every forget in it rewrite all of it.
    staged = EventLog(staging, segment_bytes=segment_bytes)
    try:
        with staged.lock() as app:
            for i, event in enumerate(events, 1):
                # Keep the original record time: expiries, time decay and as-of reads are
                # absolute times computed from it. seq is re-stamped and comes out the same.
                app.at = event.at
                app.append(event, sync=False)  # synced whole below, before it goes live
                if i % 200 == 0:
                    bar(i, len(events))
    finally:
        staged.close()
    sync_log(staging)
    bar.finish()
