"""`keytrail reembed`, and building the embedding projection when a verb opens a store.

Opening a store for a verb that reads vectors (`shell.VECTOR_VERBS`) with an embedder whose
projection is behind the log (a new model, a deleted cache, writes by other processes) builds it
before the verb runs, with a progress bar on stderr
when there is more than a handful of texts to embed. An interrupted build resumes where it
stopped. `serve` is the exception: it answers at once and builds in the background
(`build_while_serving`), the tools that read vectors waiting for what they need.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from keytrail.core import Store
from keytrail.core import reembed as projection
from keytrail.core.embedders import name_of

from .progress import ProgressBar
from .shell import counted, emit_json, open_store

#: Fewer texts than this to embed are built silently (e.g. the labels of the last write).
QUIET_BELOW = 64


class BuildBar:
    """`bar(done, total)`: a projection build's bar on stderr, shown only for a build of at
    least QUIET_BELOW texts."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.bar: ProgressBar | None = None

    @property
    def fingerprint(self) -> str:
        """Asked when told: at the start of a server, the endpoint that would say an OpenAI
        model's dimension may be down."""
        return name_of(self.store.embedder)

    def __call__(self, done: int, total: int) -> None:
        if total < QUIET_BELOW:
            return
        if self.bar is None or done == 0:  # a build tried again starts a bar again
            self.bar = ProgressBar(f"embedding {total} texts with {self.fingerprint}")
        self.bar(done, total)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.finish()


def ensure_projection(store: Store) -> projection.Reembedded | None:
    """Build the projection of `store`'s embedder if it is behind; None when it was current."""
    if projection.status(store).current or projection.cover_since_recorded(store):
        return None
    bar = BuildBar(store)
    result = projection.build(store, bar)
    bar.finish()
    return result


def build_while_serving(store: Store, memory_vectors: bool = False) -> projection.BackgroundBuild:
    """For a server that answers at once: bring the projection up to the log in the background
    (if it is behind), with its bar on stderr (the client's server log) as before, and a line
    there if it fails; then warm the store up (see `Store.warm_up`). Until it is built, the
    calls that read vectors wait for what they need (see `Store.wait_for_vectors`)."""
    bar = BuildBar(store)

    def built() -> None:
        bar.finish()
        store.warm_up(memory_vectors=memory_vectors)

    def failed(exc: BaseException) -> None:
        cause = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
        print(
            f"keytrail: building the embedding projection for {bar.fingerprint} failed: "
            f"{cause}. The tools that need it (recall, remember, correct, read_key with a "
            "query, recall_memories) report this; the next such call tries again.",
            file=sys.stderr,
            flush=True,
        )

    return projection.build_in_background(store, bar, then=built, failed=failed)


def cmd_reembed(args: argparse.Namespace) -> int:
    if args.list:
        with open_store(args, build_projection=False) as store:
            # A cache with no readable manifest is listed by its folder's name: ours too.
            folder = store.vectors.dir
            assert folder is not None  # a store's cache always lives under its home
            current = {store.embedder.fingerprint, folder.name}
            found = projection.list_projections(store.home)
        if args.json:
            emit_json(
                [
                    {"fingerprint": fp, "rows": rows, "seq": seq, "current": fp in current}
                    for fp, rows, seq in found
                ]
            )
        else:
            for fp, rows, seq in found:
                mark = "*" if fp in current else " "
                covered = "not recorded" if seq is None else f"up to seq {seq}"
                print(f"{mark} {fp}: {counted(rows, 'vector')}, {covered}")
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
            f"{counted(result.texts, 'text')} ({result.embedded} embedded, "
            f"{result.texts - result.embedded} from the cache), "
            f"{counted(result.key_rows, 'key row')}, {counted(result.memory_rows, 'memory row')} "
            f"in {result.seconds:.1f} s" + (f" ({rate:.0f} texts/s)" if result.embedded else "")
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
