"""Where a full replay's time goes: decoding lines, checking their CRCs, folding events.

Times, per event and best of `--runs`, with the cyclic GC paused as a replay pauses it:

- `decode_us`: msgspec decoding of each line into its event, nothing else;
- `decode_line_us`: the same through `decode_line` (CRC check and version test included);
- `fold_us`: `keygraph.fold` of the decoded events, no I/O;
- `replay_us`: `fold(EventLog(home).iter_new())`, what opening without a snapshot does;
- `msgpack_decode_us`, `unpickle_us`: the same events built from msgpack or a pickle instead of
  the JSON lines: what a parent process would still pay if worker processes parsed the lines
  and handed the events back.

    .venv/bin/python tools/bench_replay_split.py --home STORE          # an existing store
    .venv/bin/python tools/bench_replay_split.py --memories 20000      # builds one (hash embedder)

Prints one JSON object. To compare two trees, run it alternately with each first on the path
(`PYTHONPATH=/path/to/other/tree`), on the same store.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.events import EventLog, decode_line
from keytrail.events.codec import _decoder
from keytrail.events.types import AnyEvent
from keytrail.projections import fold

msgpack_encoder = msgspec.msgpack.Encoder()
msgpack_decoder = msgspec.msgpack.Decoder(AnyEvent)


def build(home: Path, memories: int) -> None:
    """A store of `memories` remembers with three of 20,000 topic keys each, as bench_core."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(5000)]
    labels = [f"topic {i}" for i in range(20_000)]
    settings = Settings(home=home, embedder="hash", snapshot_every=10**12)
    with Store(settings, embedder=HashEmbedder()) as store:
        for i in range(memories):
            text = f"memory {i}: " + " ".join(rng.choice(words) for _ in range(18))
            store.remember(text, rng.sample(labels, 3))


def best(work: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        gc.collect()
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="an existing store (default: build one)")
    parser.add_argument("--memories", type=int, default=20_000, help="memories of a built store")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    home = args.home
    if home is None:
        home = Path(tempfile.mkdtemp(prefix="keytrail-replay-")) / "store"
        build(home, args.memories)
    data = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    lines = data.split(b"\n")[:-1]
    count = len(lines)
    gc.disable()  # as keygraph.fold pauses it for a replay
    try:
        decode = best(lambda: [_decoder.decode(line) for line in lines], args.runs)
        checked = best(lambda: [decode_line(line) for line in lines], args.runs)
        events = [decode_line(line) for line in lines]
        folding = best(lambda: fold(events), args.runs)
        replay = best(lambda: fold(EventLog(home).iter_new()), args.runs)
        packed = [msgpack_encoder.encode(event) for event in events]
        from_msgpack = best(lambda: [msgpack_decoder.decode(b) for b in packed], args.runs)
        pickled = pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL)
        unpickle = best(lambda: pickle.loads(pickled), args.runs)
    finally:
        gc.enable()
    per = 1e6 / count
    print(
        json.dumps(
            {
                "home": str(home),
                "events": count,
                "log_bytes": len(data),
                "decode_us": round(decode * per, 2),
                "decode_line_us": round(checked * per, 2),
                "fold_us": round(folding * per, 2),
                "replay_us": round(replay * per, 2),
                "replay_events_per_s": round(count / replay),
                "msgpack_decode_us": round(from_msgpack * per, 2),
                "unpickle_us": round(unpickle * per, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
