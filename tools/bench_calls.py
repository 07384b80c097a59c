"""Per-call latency of the commands and queries whose answer is small, at a given store size.

A call whose answer is one memory or one page should not cost a walk over the whole store.
This times single calls (p50 over `--calls`, interleaved, one process) on a store built the way
`bench_core.py` builds one (hashing embedder; three of 20,000 topic keys per memory, every
memory also under the hub key "user"), with some memories in a second namespace and some
recorded conversations:

    .venv/bin/python tools/bench_calls.py --memories 100000 --dir /tmp/scale-store

The store is built once under `--dir` (kept: later runs reuse it) and copied for each run, since
`forget` changes it. Each round first remembers one memory, as a serving store sees writes
between reads, so no answer is left over from the last round; then each call is timed once.
`valid_at_*` ask what was true in the world at the middle of the log (valid time), and
`as_of_now_*` ask as of a time after the last event (the present's state at that time).
`history_old` is the history of one memory told at the start and read three times (its events
span the whole log), `history_new` that of the memory remembered in the same round.
Prints one JSON object of p50 milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store  # noqa: E402
from keytrail.core.history import history  # noqa: E402
from keytrail.core.timetravel import view  # noqa: E402

WORDS = [f"w{i}" for i in range(5000)]
LABELS = [f"topic {i}" for i in range(20_000)]
SESSIONS = 50
TURNS = 20


def settings(home: Path) -> Settings:
    return Settings(home=home, embedder="hash", snapshot_every=10**12)


def content(rng: random.Random, i: int) -> str:
    return f"memory {i}: " + " ".join(rng.choice(WORDS) for _ in range(18))


def build(home: Path, memories: int) -> None:
    """bench_core's store (with its hub), 1 in 100 memories in namespace "side", 1 in 50 told
    in one of SESSIONS sessions, and TURNS recorded turns in each session."""
    rng = random.Random(7)
    with Store(settings(home), embedder=HashEmbedder()) as store:
        for i in range(memories):
            store.remember(
                content(rng, i),
                [*rng.sample(LABELS, 3), "user"],
                namespace="side" if i % 100 == 0 else None,
                session_id=f"s{i % SESSIONS}" if i % 50 == 1 else None,
            )
            if i % 10_000 == 0:
                print(f"# built {i}", file=sys.stderr)
        for t in range(TURNS):
            for s in range(SESSIONS):
                store.record_turn(f"s{s}", "user" if t % 2 else "assistant", f"turn {t} of s{s}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=20, help="timed calls of each")
    parser.add_argument("--dir", required=True, help="where the built store is kept")
    args = parser.parse_args()
    root = Path(args.dir)
    built = root / f"built-{args.memories}"
    if not (built / "log").exists():
        shutil.rmtree(built, ignore_errors=True)
        build(built, args.memories)
    home = root / f"run-{args.memories}"
    shutil.rmtree(home, ignore_errors=True)
    shutil.copytree(built, home)
    # A snapshot this tree can read (another tree's may have another schema): what a store
    # opened by this version holds from its second open on.
    Store(settings(home), embedder=HashEmbedder()).close()

    rng = random.Random(11)
    store = Store(settings(home), embedder=HashEmbedder())
    store.warm_up().join()
    ids = list(store.state.memories)
    key_ids = [k for k in store.state.keys if k != store.state.labels["user"]]
    hub = store.state.labels["user"]
    middle_seq = store.state.seq // 2
    old_key_ids = [k for k in key_ids if store.state.keys[k].created_seq <= middle_seq]
    # An old memory, read a few times, never forgotten here: its history spans the whole log.
    old_id = ids.pop(1)
    for _ in range(3):
        store.read_memory(old_id)
    timed: dict[str, list[float]] = {}

    def time_it(name: str, call: Callable[..., object], *args: object, **kwargs: object) -> None:
        t = time.perf_counter()
        call(*args, **kwargs)
        timed.setdefault(name, []).append(time.perf_counter() - t)

    def as_of(method: str, *args: object, **kwargs: object) -> object:
        """A query as of the middle of the log, as the MCP tools make it (the view included)."""
        return getattr(view(store, as_of=middle_seq), method)(*args, **kwargs)

    # The same point named by its record time, as a person asks ("as of last March").
    middle_at = store.past.state(middle_seq).at.isoformat()

    def as_of_time(method: str, *args: object, **kwargs: object) -> object:
        return getattr(view(store, as_of=middle_at), method)(*args, **kwargs)

    def valid_at(method: str, *args: object, **kwargs: object) -> object:
        """A query of what was true in the world at the middle of the log (valid time)."""
        return getattr(view(store, valid_at=middle_at), method)(*args, **kwargs)

    def as_of_now(method: str, *args: object, **kwargs: object) -> object:
        """A query as of a time after the last event ("as of now"): the present's state."""
        at = store.clock().isoformat()
        return getattr(view(store, as_of=at), method)(*args, **kwargs)

    for i in range(args.calls):
        new_id = store.remember(content(rng, 10**9 + i), rng.sample(LABELS, 3)).memory_id
        mid = rng.choice(ids)
        kid = rng.choice(key_ids)
        old_kid = rng.choice(old_key_ids)
        hub_total = store.read_key(hub, limit=1).total
        time_it("memory_stats", store.memory_stats)
        time_it("list_memories_limit10", store.list_memories, limit=10)
        time_it("list_memories_namespace_limit10", store.list_memories, "side", limit=10)
        time_it("related", store.related, mid)
        time_it("read_key", store.read_key, kid)
        time_it("read_key_hub_offset_end", store.read_key, hub, offset=hub_total - 10)
        time_it("browse_keys_limit10", store.browse_keys, limit=10)
        time_it("browse_keys_hubs_only", store.browse_keys, hubs_only=True, limit=10)
        time_it("browse_keys_namespace_limit10", store.browse_keys, "side", limit=10)
        time_it("get_conversation", store.get_conversation, f"s{i % SESSIONS}")
        time_it("list_sessions", store.list_sessions, limit=10)
        time_it("history", history, store, mid)
        time_it("history_old", history, store, old_id)
        time_it("history_new", history, store, new_id)
        time_it("as_of_read_key", as_of, "read_key", old_kid)
        time_it("as_of_list_memories", as_of, "list_memories", limit=10)
        time_it("as_of_memory_stats", as_of, "memory_stats")
        time_it("as_of_browse_keys_limit10", as_of, "browse_keys", limit=10)
        time_it("as_of_time_read_key", as_of_time, "read_key", old_kid)
        time_it("as_of_browse_keys_namespace_limit10", as_of, "browse_keys", "side", limit=10)
        time_it("valid_at_list_memories", valid_at, "list_memories", limit=10)
        time_it("valid_at_browse_keys_limit10", valid_at, "browse_keys", limit=10)
        time_it("valid_at_related", valid_at, "related", mid)
        time_it("valid_at_read_key", valid_at, "read_key", kid)
        time_it("as_of_now_memory_stats", as_of_now, "memory_stats")
        time_it("as_of_now_list_memories", as_of_now, "list_memories", limit=10)
        time_it("as_of_now_browse_keys_limit10", as_of_now, "browse_keys", limit=10)
        time_it("forget", store.forget, mid)
        ids.remove(mid)
    store.close()
    shutil.rmtree(home, ignore_errors=True)
    print(
        json.dumps(
            {
                "memories": args.memories,
                "calls": args.calls,
                **{
                    f"{name}_p50_ms": round(statistics.median(s) * 1000, 3)
                    for name, s in timed.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
