"""`keytrail reembed`, and building the embedding projection when a verb opens a store.

Opening a store with an embedder whose projection is behind the log (a new model, a deleted
cache, writes by other processes) builds it before the verb runs, with a progress bar on stderr
when there is more than a handful of texts to embed. An interrupted build resumes where it
stopped.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from keytrail.core import Store
from keytrail.core import reembed as projection

from .progress import ProgressBar
from .shell import emit_json, open_store

#: Fewer texts than this to embed are built silently (e.g. the labels of the last write).
QUIET_BELOW = 64


def ensure_projection(store: Store) -> projection.Reembedded | None:
    """Build the projection of `store`'s embedder if it is behind; None when it was current."""
    if projection.status(store).current:
        return None
    bar: list[ProgressBar] = []

    def progress(done: int, total: int) -> None:
        if total < QUIET_BELOW:
            return
        if not bar:
            bar.append(ProgressBar(f"embedding {total} texts with {store.embedder.fingerprint}"))
        bar[0](done, total)

    result = projection.build(store, progress)
    if bar:
        bar[0].finish()
    return result


def cmd_reembed(args: argparse.Namespace) -> int:
    if args.list:
        with open_store(args, build_projection=False) as store:
            current = store.embedder.fingerprint
            found = projection.list_projections(store.home)
        if args.json:
            emit_json(
                [
                    {"fingerprint": fp, "rows": rows, "seq": seq, "current": fp == current}
                    for fp, rows, seq in found
                ]
            )
        else:
            for fp, rows, seq in found:
                mark = "*" if fp == current else " "
                covered = "not recorded" if seq is None else f"up to seq {seq}"
                print(f"{mark} {fp}: {rows} vectors, {covered}")
        return 0
    with open_store(args, build_projection=False) as store:
        bar = ProgressBar(f"embed {store.embedder.fingerprint}")
        result = projection.build(store, bar)
        bar.finish()
    if args.json:
        emit_json(result)
    else:
        rate = result.embedded / result.seconds if result.seconds > 0 else 0.0
        print(
            f"{store.home}: projection {result.fingerprint} at seq {result.seq}: "
            f"{result.texts} texts ({result.embedded} embedded, "
            f"{result.texts - result.embedded} from the cache), {result.key_rows} key rows, "
            f"{result.memory_rows} memory rows in {result.seconds:.1f} s"
            + (f" ({rate:.0f} texts/s)" if result.embedded else "")
        )
    return 0


def add_verbs(
    verb: Callable[..., argparse.ArgumentParser],
) -> None:
    """Register `reembed` with the parser's `verb` helper."""
    p = verb(
        "reembed",
        "build the embedding projection for the chosen embedder by replaying history "
        "(resumable; earlier models' vectors are kept)",
        cmd_reembed,
    )
    p.add_argument("--list", action="store_true", help="list the models this store has vectors for")
