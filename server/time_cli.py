"""Time travel on the command line: --as-of/--valid-at on the read verbs, --valid-from on the
writing ones, and the `history` and `changes` verbs."""

import argparse
from collections.abc import Callable

from keytrail.core.history import changes, history

from .shell import emit_json, open_store, preview, short_time

Verb = Callable[..., argparse.ArgumentParser]


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


def cmd_history(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = history(store, args.memory_id)
    if args.json:
        emit_json(result)
        return 0
    print(f"history of {result.memory_id}: {len(result.versions)} version(s)")
    for i, v in enumerate(result.versions, 1):
        valid = f", valid from {short_time(v.valid_from)}" if v.valid_from else ""
        print(
            f"  v{i} {v.memory_id}  {v.status:<10} told {short_time(v.created_at)} "
            f"(seq {v.created_seq}){valid}"
        )
        print(f"       {preview(v.preview, 70)}")
    print("events:")
    for e in result.events:
        line = f"  seq {e.seq:<6} {short_time(e.at)}  {e.memory_id}  {e.what}"
        if e.query:
            line += f'  query "{e.query}"'
        if e.reason:
            line += f"  reason: {e.reason}"
        if e.deltas:
            line += "  " + ", ".join(f"{k} {d:+g}" for k, d in e.deltas.items())
        print(line)
    print("depth and link weights:")
    for t in result.trajectory:
        weights = "  ".join(f"{label} {w:.2f}" for label, w in t.weights.items())
        print(
            f"  seq {t.seq:<6} {t.memory_id}  depth {t.depth:.3f}  reads {t.access_count}  "
            f"{weights}"
        )
    return 0


def cmd_changes(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = changes(store, args.since, args.until, args.namespace, args.top)
    if args.json:
        emit_json(result)
        return 0
    scope = f" in {result.namespace}" if result.namespace else ""
    print(
        f"changes{scope} after seq {result.since_seq} up to seq {result.until_seq} "
        f"({short_time(result.since_at)} .. {short_time(result.until_at)})"
    )
    print(f"  added      {len(result.added)}  " + " ".join(result.added[:20]))
    print(f"  corrected  {len(result.corrected)}")
    for c in result.corrected:
        print(f"    seq {c.seq}  {c.old_id} -> {c.new_id}")
    print(
        "  read most  " + (", ".join(f"{r.memory_id} x{r.reads}" for r in result.read_most) or "-")
    )
    print(f"  expired    {len(result.expired)}  " + " ".join(result.expired[:20]))
    print(f"  forgotten  {len(result.forgotten)}  " + " ".join(result.forgotten[:20]))
    print(f"  deleted    {len(result.deleted)}  " + " ".join(result.deleted[:20]))
    print(f"  keys merged {len(result.keys_merged)}")
    for m in result.keys_merged:
        sim = f" ({m.similarity:.3f})" if m.similarity is not None else ""
        print(f"    seq {m.seq}  {m.alias!r} -> {m.label} {m.key_id}{sim}")
    return 0


def add_time_verbs(verb: Verb) -> None:
    p = verb(
        "history",
        "a memory's versions, every event that touched it, its depth and link weights over time",
        cmd_history,
    )
    p.add_argument("memory_id")
    p = verb(
        "changes",
        "memories added, corrected, read most, expired, forgotten, deleted (knowledge-graph "
        "observations) and keys merged between two points (seqs or ISO-8601 times)",
        cmd_changes,
    )
    p.add_argument("--since", metavar="SEQ|TIME", help="after this point (default: the start)")
    p.add_argument("--until", metavar="SEQ|TIME", help="up to this point (default: now)")
    p.add_argument(
        "--top", type=int, default=10, help="how many most-read memories (default 10; 1 to 1000)"
    )
