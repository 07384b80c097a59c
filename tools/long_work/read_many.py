"""Read one memory of a store many times through its first key: a much-read memory, whose
`history` lists one event per read (BENCHMARKS.md, "Long operations").

    .venv/bin/python tools/long_work/read_many.py HOME [READS]   # default 2,000 reads

Reads the oldest current memory; prints its id, the seconds the reads took and the head seq.
"""

import sys
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store

home, reads = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2000
store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
node = next(
    n for n in store.state.memories.values() if n.status == "active" and n.superseded_by is None
)
t = time.perf_counter()
for _ in range(reads):
    store.read_memory(node.id, node.keys[0])
print(node.id, round(time.perf_counter() - t, 1), store.state.seq)
store.close()
