"""`keytrail recall-memories`: direct hybrid recall from the command line."""

import argparse
import os
from collections.abc import Callable
from typing import Any

from .shell import (
    TOP_K_HELP,
    emit_json,
    integer_flag,
    note_namespace_never_told,
    open_store,
    preview,
)
from .time_cli import add_time_options

# Here rather than in hybrid_tools: importing that module imports mcp_server, whose tool
# schemas read the limits from the environment before `serve` has applied its flags.
ENABLE_VARIABLE = "KEYTRAIL_DIRECT_RECALL"


def cmd_recall_memories(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        result = store.recall_memories(
            args.query,
            args.top_k,
            args.namespace,
            args.hops,
            args.explain,
            not args.no_learn,
            as_of=args.as_of,
            valid_at=args.valid_at,
        )
        note_namespace_never_told(store, args)
    if args.json:
        emit_json(result)
        return 0
    if not result.memories:
        print("no memories")
    first = result.memories[0].explain if result.memories else None
    if first is not None:
        k = f" (k {first.rrf_k:g})" if first.rrf_k is not None else ""
        print(f"fusion {first.fusion}{k}: share = each signal's part of the fused score")
    for m in result.memories:
        via = "+".join(m.found_by)
        print(f"{m.memory_id}  {m.score:.4f}  hop {m.hop}  {via:<14} {preview(m.content, 70)}")
        if m.explain is not None:
            e = m.explain
            parts = [
                f"{name} #{s.rank} ({s.score:g}) share {s.share:.4f}"
                for name, s in e.signals.items()
            ]
            if e.hop:
                parts.append(f"hop {e.hop} from {e.hop_from} via {e.hop_via} {e.hop_score:.4f}")
            parts.append(f"depth x{e.depth_factor:.3f}  time x{e.time_factor:.3f}")
            if e.date_factor != 1.0:
                parts.append(f"named date x{e.date_factor:.2f}")
            if e.context:
                near = f" (next to {e.context_from})" if e.context_from else ""
                parts.append(f"session context +{e.context:.4f}{near}")
            if e.session_support:
                parts.append(f"head rank +{e.session_support:.4f} session support")
            print("    " + "; ".join(parts))
    return 0


class _EnableDirectRecall(argparse.Action):
    """`serve --direct-recall`: the same as KEYTRAIL_DIRECT_RECALL=1 for this process."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        os.environ[ENABLE_VARIABLE] = "1"
        setattr(namespace, self.dest, True)


def add_hybrid_verbs(
    sub: Any, verb: Callable[[str, str, Callable[[argparse.Namespace], int]], Any]
) -> None:
    """The recall-memories verb, and serve's --direct-recall flag."""
    sub.choices["serve"].add_argument(
        "--direct-recall",
        nargs=0,
        action=_EnableDirectRecall,
        default=False,
        help=f"offer the recall_memories tool ({ENABLE_VARIABLE}=1)",
    )
    p = verb(
        "recall-memories",
        "memories with content for a query: BM25 + keys + meaning, fused, hop-expanded",
        cmd_recall_memories,
    )
    p.add_argument("query")
    p.add_argument("--top-k", dest="top_k", type=integer_flag, help=TOP_K_HELP)
    p.add_argument(
        "--hops",
        type=integer_flag,
        help="hops over shared keys and related_to (0-5; default KEYTRAIL_HYBRID_HOPS, 1)",
    )
    p.add_argument("--explain", action="store_true", help="break each score down by signal")
    p.add_argument(
        "--no-learn",
        dest="no_learn",
        action="store_true",
        help="do not record the Hebbian link update",
    )
    add_time_options(p)
