"""Stores for measuring long operations (BENCHMARKS.md, "Long operations").

    .venv/bin/python tools/long_work/build.py main /tmp/long-work/main 100000
    .venv/bin/python tools/long_work/build.py expiry /tmp/long-work/expiry 60000
    .venv/bin/python tools/long_work/build_kg.py /tmp/long-work/kg 5000

`main`: memories remembered one command at a time (three keys each from 20,000 labels), one
memory corrected every 5,000 (a 19-version chain for history) and every 50th read (a long log).
`expiry`: five of every six memories with a 30 s ttl. Hashing embedder throughout. Measure on
copies (`cp -a`): forget, rebuild and import change what they touch. The other scripts here:
timed.sh (wall, peak RSS and a second process taking the appenders' lock every 50 ms beside a
command: prober.py), gaps.py (the longest silence on stderr), mcp_drive.py (an MCP stdio client
sending a progressToken), batch_hold.py (how long a 500-item remember_batch holds the lock),
locktrace.py / embtrace.py (the CLI with lock holds / embedded texts counted), sigint.py,
read_many.py (one memory read 2,000 times, for a long `history`).
"""

import random
import sys
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store

WORDS = [f"w{i}" for i in range(5000)]
kind, home, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
labels = [f"topic {i}" for i in range(20000)]
store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
t = time.perf_counter()
chain = None
for i in range(n):
    text = f"memory {i}: " + " ".join(rng.choice(WORDS) for _ in range(18))
    ttl = 30 if (kind == "expiry" and i % 6 != 0) else None
    r = store.remember(text, rng.sample(labels, 3), ttl_seconds=ttl)
    if kind == "main":
        if i == 10:
            chain = r.memory_id
        if chain and i % 5000 == 0 and i > 10:
            chain = store.correct(chain, f"corrected fact at {i}: " + text).memory_id
        if i % 50 == 0:
            store.read_memory(r.memory_id)
    if i % 10000 == 0:
        print(i, round(time.perf_counter() - t, 1), file=sys.stderr, flush=True)
print("done", store.state.seq, chain, round(time.perf_counter() - t, 1), file=sys.stderr)
store.close()
