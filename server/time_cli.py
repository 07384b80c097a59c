"""Time travel on the command line: --as-of/--valid-at on the read verbs, --valid-from on the
writing ones, and the `history` and `changes` verbs.

core.history is imported by those two verbs, not at the top: every other command, even
`keytrail --help`, paid a share of its start for it.
"""

import argparse
from collections.abc import Callable
from typing import Any

from .progress import ProgressBar
from .shell import (
    OFFSET_HELP,
    PAGE_RANGE,
    counted,
    emit_json,
    integer_flag,
    note_namespace_never_told,
    open_store,
    preview,
    short_time,
    shown_label,
    shown_text,
)

Verb = Callable[..., argparse.ArgumentParser]

#: `changes` shows a bar on stderr only for a scan at least this long (the whole log of 100,000
#: memories takes seconds); a short one would only add two lines of noise.
SCAN_BAR_EVENTS = 10_000


def add_time_options(
    parser: argparse.ArgumentParser, *, valid_from: bool = False, valid_at: bool = True
) -> None:
    """--as-of (and --valid-at unless the verb's answer does not depend on valid time), or
    --valid-from on a writing verb."""
    if valid_from:
        parser.add_argument(
            "--valid-from",
            dest="valid_from",
            metavar="TIME",
            help="when it became true in the world (ISO-8601), if not when it is told",
        )
        return
    parser.add_argument(
        "--as-of",
        dest="as_of",
        metavar="SEQ|TIME",
        help="answer as the store stood right after this log seq or ISO-8601 time "
        "(records nothing)",
    )
    if not valid_at:
        return
    parser.add_argument(
        "--valid-at",
        dest="valid_at",
        metavar="TIME",
        help="show what was true in the world at this ISO-8601 time (valid time)",
    )


def shown(offset: int, count: int) -> str:
    """'3-4' for a page of two from offset 2, 'none' for an empty one."""
    return f"{offset + 1}-{offset + count}" if count else "none"


def cmd_history(args: argparse.Namespace) -> int:
    from keytrail.core.history import history  # see the module's docstring

    with open_store(args) as store:
        result = history(store, args.memory_id, args.limit, args.offset)
    if args.json:
        emit_json(result)
        return 0
    print(f"history of {result.memory_id}: {counted(len(result.versions), 'version')}")
    for i, v in enumerate(result.versions, 1):
        valid = f", valid from {short_time(v.valid_from)}" if v.valid_from else ""
        print(
            f"  v{i} {v.memory_id}  {v.status:<10} told {short_time(v.created_at)} "
            f"(seq {v.created_seq}){valid}"
        )
        # A forgotten version's content is erased: say so, as `keytrail log` does, not a blank.
        print(f"       {preview(v.preview, 70) if v.preview else '[content forgotten]'}")
    more = f" (more: --offset {result.next_offset})" if result.next_offset is not None else ""
    print(f"events {shown(result.offset, len(result.events))} of {result.events_total}{more}:")
    for e in result.events:
        line = f"  seq {e.seq:<6} {short_time(e.at)}  {e.memory_id}  {shown_label(e.what)}"
        if e.query:
            line += f'  query "{shown_text(e.query)}"'
        if e.reason:
            line += f"  reason: {shown_text(e.reason)}"
        if e.deltas:
            line += "  " + ", ".join(f"{k} {d:+g}" for k, d in e.deltas.items())
        print(line)
    print("depth and link weights after these events:")
    for t in result.trajectory:
        weights = "  ".join(f"{shown_label(label)} {w:.2f}" for label, w in t.weights.items())
        print(
            f"  seq {t.seq:<6} {t.memory_id}  depth {t.depth:.3f}  reads {t.access_count}  "
            f"{weights}"
        )
    return 0


def scan_bar() -> Callable[[int, int], None]:
    """A `progress(done, total)` drawing a 'scan log' bar once the scan is long enough."""
    bar: list[ProgressBar] = []

    def progress(done: int, total: int) -> None:
        if not bar and total >= SCAN_BAR_EVENTS:
            bar.append(ProgressBar("scan log"))
        if bar:
            bar[0](done, total)

    return progress


def cmd_changes(args: argparse.Namespace) -> int:
    from keytrail.core.history import changes  # see the module's docstring

    with open_store(args) as store:
        result = changes(
            store,
            args.since,
            args.until,
            args.namespace,
            args.top,
            args.limit,
            args.offset,
            progress=scan_bar(),
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(result)
        return 0
    scope = f" in {result.namespace}" if result.namespace else ""
    if result.since_seq == 0:  # before the first event (since_at: when the store began)
        print(
            f"changes{scope} since the store began, up to seq {result.until_seq} "
            f"({short_time(result.until_at)})"
        )
    else:
        print(
            f"changes{scope} after seq {result.since_seq} up to seq {result.until_seq} "
            f"({short_time(result.since_at)} .. {short_time(result.until_at)})"
        )

    def count(total: int, listed: list[Any], ids: bool = False) -> str:
        """The total, which of them this page shows when it does not show them all, and with
        `ids` the listed ids themselves."""
        said = str(total)
        if total and (result.offset or len(listed) != total):
            said += f" (showing {shown(result.offset, len(listed))})"
        return f"{said}  {' '.join(listed)}" if ids and listed else said

    print(f"  added      {count(result.added_total, result.added, ids=True)}")
    print(f"  corrected  {count(result.corrected_total, result.corrected)}")
    for c in result.corrected:
        print(f"    seq {c.seq}  {c.old_id} -> {c.new_id}")
    print(
        "  read most  " + (", ".join(f"{r.memory_id} x{r.reads}" for r in result.read_most) or "-")
    )
    print(f"  expired    {count(result.expired_total, result.expired, ids=True)}")
    print(f"  forgotten  {count(result.forgotten_total, result.forgotten, ids=True)}")
    print(f"  deleted    {count(result.deleted_total, result.deleted, ids=True)}")
    print(f"  keys merged {count(result.keys_merged_total, result.keys_merged)}")
    for m in result.keys_merged:
        sim = f" ({m.similarity:.3f})" if m.similarity is not None else ""
        print(f"    seq {m.seq}  {m.alias!r} -> {shown_label(m.label)} {m.key_id}{sim}")
    if result.next_offset is not None:
        print(f"more: --offset {result.next_offset}")
    return 0


def add_time_verbs(verb: Verb) -> None:
    p = verb(
        "history",
        "a memory's versions, the events that touched it a page at a time (--limit, "
        "--offset), and its depth and link weights after each",
        cmd_history,
    )
    p.add_argument("memory_id")
    p.add_argument(
        "--limit",
        type=integer_flag,
        default=None,
        help="how many events to show, in log order " + PAGE_RANGE.format(default=50),
    )
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
    p = verb(
        "changes",
        "memories added, corrected, read most, expired, forgotten, deleted (knowledge-graph "
        "observations) and keys merged between two points (seqs or ISO-8601 times); each list "
        "a page (--limit, --offset) beside its exact count",
        cmd_changes,
    )
    p.add_argument("--since", metavar="SEQ|TIME", help="after this point (default: the start)")
    p.add_argument("--until", metavar="SEQ|TIME", help="up to this point (default: now)")
    p.add_argument(
        "--top",
        type=integer_flag,
        default=10,
        help="how many most-read memories (default 10; 1 to 1000)",
    )
    p.add_argument(
        "--limit",
        type=integer_flag,
        default=None,
        help="how many of each list to show, in log order (each total is always exact) "
        + PAGE_RANGE.format(default=50),
    )
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
