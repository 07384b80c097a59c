"""The reading and tidying verbs a person looking after a store needs beside recall and read:
`list`, `related`, `keys`, `cleanup-expired`, `sessions` and `conversation`, the command-line
side of the MCP tools list_memories, related, browse_keys, cleanup_expired, list_sessions and
get_conversation."""

import argparse
from collections.abc import Callable

from keytrail.core.timetravel import view

from .shell import (
    OFFSET_HELP,
    PAGE_HELP,
    PAGE_RANGE,
    counted,
    emit_json,
    integer_flag,
    memories,
    note_namespace_never_told,
    open_store,
    preview,
    short_time,
    shown_label,
    shown_text,
)
from .time_cli import add_time_options, shown

Verb = Callable[..., argparse.ArgumentParser]


def say_more(next_offset: int | None) -> None:
    """The last line of a page that is not the last: where the next starts (as `history`)."""
    if next_offset is not None:
        print(f"more: --offset {next_offset}")


def say_page(total: str, order: str, offset: int, count: int) -> None:
    """The first line of a page: the total, the order, which of them it shows."""
    print(f"{total}, {order} (showing {shown(offset, count)})")


def cmd_list(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        # A terminal shows 20 by default, not the 50 a model gets (or fewer if the page is).
        limit = store.settings.limits.default_page(20) if args.limit is None else args.limit
        page = view(store, args.as_of, args.valid_at).list_memories(
            args.namespace, limit, args.offset
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(page)
        return 0
    say_page(memories(page.total), "newest first", page.offset, len(page.memories))
    for m in page.memories:
        expires = f"  expires {short_time(m.expires_at)}" if m.expires_at else ""
        print(
            f"{m.memory_id}  [{m.namespace}]  {short_time(m.created_at)}  depth {m.depth:.2f}"
            f"  read {m.access_count}x{expires}"
        )
        print(f"    {preview(m.preview, 90)}")
        print(f"    keys: {', '.join(shown_label(k.label) for k in m.keys) or '-'}")
    say_more(page.next_offset)
    return 0


def cmd_related(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = view(store, args.as_of, args.valid_at).related(args.memory_id, args.limit)
    if args.json:
        emit_json(result)
        return 0
    if result.asked_id:
        print(f"asked for {result.asked_id}: related to {result.memory_id}, the version true then")
    if not result.related:
        print(f"nothing related to {result.memory_id}")
    for r in result.related:
        why = [shown_label(k.label) for k in r.shared_keys]
        if r.related_edge:
            why.append("related_to")
        print(f"{r.memory_id}  score {r.score:.3f}  depth {r.depth:.2f}  via: {', '.join(why)}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        page = view(store, args.as_of, args.valid_at).browse_keys(
            args.namespace, args.hubs, args.limit, args.offset
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(page)
        return 0
    what = counted(page.total, "hub key" if args.hubs else "key")
    say_page(what, "most memories first", page.offset, len(page.keys))
    for k in page.keys:
        hub = " hub" if k.hub else ""
        aliases = f"  aliases: {', '.join(map(shown_label, k.aliases))}" if k.aliases else ""
        label = shown_label(k.label)
        print(f"{k.key_id}  {label} [{k.type}]  {memories(k.memory_count)}{hub}{aliases}")
    say_more(page.next_offset)
    return 0


def cmd_cleanup_expired(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.cleanup_expired(args.limit)
    if args.json:
        emit_json(result)
        return 0
    if not result.count:
        print("nothing has expired")
        return 0
    print(f"expired {memories(result.count)} (seq {result.seq})")
    for memory_id in result.memory_ids:
        print(f"  {memory_id}")
    if result.seq is not None and result.count > len(result.memory_ids):
        print(
            f"  ... and {result.count - len(result.memory_ids)} more: keytrail changes "
            f"--since {result.seq - 1} --until {result.seq} pages through them all"
        )
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = view(store, args.as_of).list_sessions(args.limit, args.offset)
    if args.json:
        emit_json(result)
        return 0
    if not result.total:
        print("no recorded conversations")
    else:  # the total on every page, as `list` and `keys` say it
        total = counted(result.total, "session")
        say_page(total, "most recently active first", result.offset, len(result.sessions))
    for s in result.sessions:
        print(
            f"{s.session_id}  {counted(s.turns, 'turn')}  {short_time(s.first_at)} .. "
            f"{short_time(s.last_at)}"
        )
    say_more(result.next_offset)
    return 0


def cmd_conversation(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = view(store, args.as_of).get_conversation(
            args.session_id, args.turn, args.limit, args.offset
        )
    if args.json:
        emit_json(result)
        return 0
    paged = ""
    if args.turn is None and len(result.turns) < result.total:
        shown = f"{result.turns[0].turn}-{result.turns[-1].turn}" if result.turns else "none"
        more = f"; older: --offset {result.next_offset}" if result.next_offset is not None else ""
        paged = f" (showing {shown}{more})"
    print(f"{result.session_id}: {counted(result.total, 'turn')}{paged}")
    for t in result.turns:
        head = f"{t.turn:>4}  {short_time(t.at)}  {t.role}: "
        # A turn of several lines keeps the layout: its later lines are indented under its
        # first, so none reads as a turn of its own.
        first, *rest = shown_text(t.content).splitlines() or [""]
        print(head + first)
        for line in rest:
            print(" " * len(head) + line)
    return 0


def add_browse_verbs(verb: Verb) -> None:
    p = verb("list", "current memories, newest first, with a preview", cmd_list)
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=20))
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
    add_time_options(p)

    p = verb(
        "related",
        "memories sharing keys with one (rare keys count most) or linked to it by related_to",
        cmd_related,
    )
    p.add_argument("memory_id")
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=10))
    add_time_options(p)

    p = verb("keys", "keys with their memory counts, most memories first", cmd_keys)
    p.add_argument(
        "--hubs",
        action="store_true",
        help="only hubs (keys on KEYTRAIL_HUB_MIN, 3, or more current memories)",
    )
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=50))
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
    add_time_options(p)

    p = verb(
        "cleanup-expired",
        "record every memory whose ttl has passed as expired (they are already hidden); "
        "lists the first --limit of their ids, `changes --since SEQ-1 --until SEQ` all of them",
        cmd_cleanup_expired,
    )
    p.add_argument(
        "--limit",
        type=integer_flag,
        default=None,
        help="how many of the expired ids to list (all of them are expired) "
        + PAGE_RANGE.format(default=50),
    )

    p = verb(
        "sessions",
        "sessions with recorded turns (MCP record_turn), most recently active first",
        cmd_sessions,
    )
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=50))
    p.add_argument("--offset", type=integer_flag, default=0, help=OFFSET_HELP)
    # Turns are what was said when: no valid time (as memory_stats, `stats`).
    add_time_options(p, valid_at=False)

    p = verb(
        "conversation",
        "the latest turns of a session, in order (--offset pages back to older ones)",
        cmd_conversation,
    )
    p.add_argument("session_id")
    p.add_argument("--turn", type=integer_flag, help="only this turn (1-based)")
    p.add_argument("--limit", type=integer_flag, default=None, help=PAGE_HELP.format(default=20))
    p.add_argument(
        "--offset",
        type=integer_flag,
        default=0,
        help="how many of the newest turns to skip (default 0)",
    )
    add_time_options(p, valid_at=False)
