"""Time-travel benchmark: as_of reads on a large log against a full replay.

    .venv/bin/python tools/bench_asof.py --events 1000000 > bench.json

Builds a synthetic log (remembers, corrections, reads through keys, Hebbian link adjustments, in
the proportions of an agent that reads far more than it writes), written in the log's own line
format, with the store snapshotting every `--snapshot-every` events as its write path does.
Then measures, with the hashing embedder (no model):

- a full replay (decode + fold of every event, no snapshot), the yardstick;
- `recall` as_of a random seq, cold (no past state cached in the process), as a fraction of the
  full replay; and warm (the same point again);
- `recall` with no as_of, against the same recall on a store whose code never had time travel
  would do: both are the ordinary path, so it is timed to show it pays nothing.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.core.history import changes, history
from keytrail.core.timetravel import view
from keytrail.events import (
    EventLog,
    FoldRules,
    KeyLink,
    LinkDelta,
    LinksAdjusted,
    MemoryCorrected,
    MemoryRead,
    MemoryRemembered,
    NewMemory,
    StoreCreated,
    encode_line,
)
from keytrail.events.log import segment_name
from keytrail.projections import fold

WORDS = [f"w{i}" for i in range(5000)]
T0 = datetime(2025, 1, 1, tzinfo=UTC)


class Generator:
    """A plausible event stream; ids and contents are random but reproducible."""

    def __init__(self, seed: int, labels: int) -> None:
        self.rng = random.Random(seed)
        self.labels = [f"topic {i}" for i in range(labels)]
        self.key_ids: dict[str, str] = {}
        self.current: list[tuple[str, list[str]]] = []  # (memory id, key ids)
        self.count = 0

    def _hex(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def _content(self) -> str:
        self.count += 1
        return f"memory {self.count}: " + " ".join(self.rng.choice(WORDS) for _ in range(18))

    def _new_memory(self) -> NewMemory:
        links = []
        for label in self.rng.sample(self.labels, 3):
            key_id = self.key_ids.get(label)
            resolution = "existing"
            if key_id is None:
                key_id = self.key_ids[label] = "k_" + self._hex(10)
                resolution = "new"
            links.append(KeyLink(key_id=key_id, label=label, resolution=resolution))  # type: ignore[arg-type]
        text = self._content()
        return NewMemory(
            memory_id="m_" + self._hex(12),
            namespace=self.rng.choice(["default", "default", "work"]),
            content=text,
            content_hash="sha256:" + self._hex(64),
            keys=links,
        )

    def event(self) -> object:
        roll = self.rng.random()
        if not self.current or roll < 0.15:
            new = self._new_memory()
            self.current.append((new.memory_id, [k.key_id for k in new.keys]))
            return MemoryRemembered(memories=[new])
        index = self.rng.randrange(len(self.current))
        memory_id, keys = self.current[index]
        if roll < 0.17:
            new = self._new_memory()
            new_keys = [KeyLink(key_id=k, label="", resolution="existing") for k in keys]
            new = NewMemory(
                memory_id=new.memory_id,
                namespace=new.namespace,
                content=new.content,
                content_hash=new.content_hash,
                keys=new_keys,
            )
            self.current[index] = (new.memory_id, keys)
            return MemoryCorrected(old_id=memory_id, memory=new, weaken_factor=0.3)
        if roll < 0.87:
            return MemoryRead(memory_id=memory_id, via_key_id=self.rng.choice(keys))
        return LinksAdjusted(
            adjustments=[LinkDelta(key_id=k, memory_id=memory_id, delta=-0.005) for k in keys],
            query="a recall",
        )


def write_log(home: Path, events: int, seed: int, labels: int, segment_bytes: int) -> list[str]:
    """Write `events` lines as the appender would (same encoding, seqs, segment rolls)."""
    log_dir = home / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    gen = Generator(seed, labels)
    at = T0
    created = StoreCreated(store_id="benchasof0000001", rules=FoldRules(), software="bench")
    lines: list[bytes] = []
    size = 0
    first = 1
    for seq in range(1, events + 1):
        event = created if seq == 1 else gen.event()
        at += timedelta(seconds=30)
        line = encode_line(msgspec.structs.replace(event, seq=seq, at=at))  # type: ignore[type-var,arg-type]
        if size and size + len(line) > segment_bytes:
            (log_dir / segment_name(first)).write_bytes(b"".join(lines))
            lines, size, first = [], 0, seq
        lines.append(line)
        size += len(line)
    (log_dir / segment_name(first)).write_bytes(b"".join(lines))
    return gen.labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--labels", type=int, default=20_000)
    parser.add_argument("--snapshot-every", type=int, default=None)
    parser.add_argument(
        "--snapshot-keep",
        type=int,
        default=None,
        help="most archived snapshots kept (KEYTRAIL_SNAPSHOT_KEEP; default 100)",
    )
    parser.add_argument("--points", type=int, default=10, help="random as_of points timed")
    parser.add_argument("--dir", default=None)
    parser.add_argument(
        "--reuse", action="store_true", help="reuse the log and snapshots already in --dir"
    )
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="keytrail-asof-"))
    home = root / "store"
    settings = Settings(home=home, embedder="hash")
    every = args.snapshot_every or settings.snapshot_every
    keep = args.snapshot_keep or settings.snapshot_keep
    settings = Settings(home=home, embedder="hash", snapshot_every=every, snapshot_keep=keep)
    load_start = os.getloadavg()[0]
    reuse = args.reuse and (home / "log").exists()
    t = time.perf_counter()
    labels = [f"topic {i}" for i in range(args.labels)]  # the generator's labels
    if not reuse:
        write_log(home, args.events, 11, args.labels, settings.segment_bytes)
    log_bytes = sum(p.stat().st_size for p in (home / "log").iterdir())
    write_s = time.perf_counter() - t

    def replay() -> float:
        """The yardstick: decode and fold every event from nothing."""
        t = time.perf_counter()
        state = fold(EventLog(home).iter_new())
        took = time.perf_counter() - t
        assert state.seq == args.events
        return took

    replay_before_s = replay()

    # Snapshots as the write path leaves them: one every `every` events. Folding the log in
    # steps and saving at each step is what a store that wrote the log itself would have done.
    t = time.perf_counter()
    clock_at = T0 + timedelta(seconds=30 * (args.events + 10))
    if not reuse:
        store = Store(settings, embedder=HashEmbedder(), clock=lambda: clock_at)
        # Opening folded everything into one snapshot at the head; add the kept ones the way
        # the write path spaces them, from a replay that pauses every `every` events.
        store.close()
        _keep_interval_snapshots(store, every)
    snapshots_build_s = time.perf_counter() - t
    store = Store(settings, embedder=HashEmbedder(), clock=lambda: clock_at)
    kept = store.snapshot_files()
    snapshot_bytes = sum(p.stat().st_size for p in kept)

    rng = random.Random(5)
    queries = [rng.choice(labels) for _ in range(args.points)]
    points = [rng.randrange(2, args.events) for _ in range(args.points)]
    store.recall(queries[0])  # embeds every label once: content-addressed, shared by the past
    cold: list[float] = []
    warm: list[float] = []
    for query, point in zip(queries, points, strict=True):
        store.past._cache.clear()
        t = time.perf_counter()
        view(store, point).recall(query)
        cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        view(store, point).recall(query)
        warm.append(time.perf_counter() - t)

    present: list[float] = []
    for query in queries * 20:
        t = time.perf_counter()
        store.recall(query)
        present.append(time.perf_counter() - t)
    through_view: list[float] = []
    for query in queries * 20:
        t = time.perf_counter()
        view(store, None).recall(query)
        through_view.append(time.perf_counter() - t)

    # history searches the log from the memory's first version on (byte search), changes
    # decodes the span it covers.
    memory_id = rng.choice(list(store.state.memories))
    t = time.perf_counter()
    touched = history(store, memory_id).events_total  # every event, not just the first page
    history_s = time.perf_counter() - t
    since = rng.randrange(1, args.events - every)
    t = time.perf_counter()
    changes(store, since, since + every)
    changes_s = time.perf_counter() - t

    # Measured again after the points: the machine is shared, so the faster of the two replays
    # is the yardstick (the conservative choice for the fraction).
    replay_after_s = replay()
    replay_s = min(replay_before_s, replay_after_s)

    result = {
        "events": args.events,
        "log_bytes": log_bytes,
        "log_write_s": round(write_s, 2),
        "full_replay_s": round(replay_s, 3),
        "full_replay_runs_s": [round(replay_before_s, 3), round(replay_after_s, 3)],
        "replay_events_per_s": round(args.events / replay_s),
        "snapshot_every": every,
        "snapshot_keep": keep,
        "snapshots_kept": len(kept),
        "snapshot_bytes": snapshot_bytes,
        "snapshots_build_s": round(snapshots_build_s, 2),
        "as_of_recall_cold_s": {
            "p50": round(statistics.median(cold), 4),
            "max": round(max(cold), 4),
        },
        "as_of_recall_cold_fraction_of_replay": {
            "p50": round(statistics.median(cold) / replay_s, 4),
            "max": round(max(cold) / replay_s, 4),
        },
        "as_of_recall_warm_ms_p50": round(statistics.median(warm) * 1000, 3),
        "recall_ms_p50": round(statistics.median(present) * 1000, 3),
        "recall_via_view_none_ms_p50": round(statistics.median(through_view) * 1000, 3),
        "history_s": round(history_s, 3),
        "history_events_found": touched,
        "changes_span_events": every,
        "changes_s": round(changes_s, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_start_end": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "python": sys.version.split()[0],
        "pid": os.getpid(),
    }
    print(json.dumps(result, indent=2))


def _keep_interval_snapshots(store: Store, every: int) -> None:
    """Save a kept snapshot every `every` events, as a store appending them would have, and
    thin them as it does (at most `snapshot_keep`, spread over the log)."""
    from keytrail.events.log import LogPosition
    from keytrail.projections import GraphState
    from keytrail.projections import snapshot as snapshots
    from keytrail.projections.keygraph import paused_gc

    log = EventLog(store.home, segment_bytes=store.settings.segment_bytes)
    log.seek(LogPosition(None, 0, 0, GraphState().at))
    state = GraphState()
    folder = store.snapshot_path.parent
    with paused_gc():
        for event in log.iter_new():
            fold((event,), state)
            if state.seq % every == 0:
                pos = log.position
                snapshots.save(
                    folder / snapshots.archived_name(state.seq),
                    snapshots.Snapshot.of(state, pos.segment, pos.offset),
                )
                store.thin_snapshots(state.seq + 1)


if __name__ == "__main__":
    main()
