import contextlib
import json
import sys
import time

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.events.log import EventLog

orig = EventLog.lock
holds = []


@contextlib.contextmanager
def traced(self, *a, **k):
    with orig(self, *a, **k) as app:
        t1 = time.monotonic()
        try:
            yield app
        finally:
            holds.append(time.monotonic() - t1)


EventLog.lock = traced
s = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
s.recall("warm up w1")  # load vectors and key matrix before timing
holds.clear()
items = [
    RememberItem(
        f"batch fact {i} about subject {i} and more words here",
        [f"subj {i}", "batchy", f"area {i % 50}"],
    )
    for i in range(500)
]
t = time.perf_counter()
s.remember_batch(items)
print(
    json.dumps(
        {
            "code": sys.argv[2],
            "wall_s": round(time.perf_counter() - t, 2),
            "lock_held_s": round(max(holds), 2),
        }
    )
)
