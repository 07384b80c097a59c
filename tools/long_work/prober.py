"""Take and release the appenders' lock every 50 ms until killed or --seconds; print the
longest wait and how many waits exceeded 1 s (the lock hold time of whatever else ran)."""

import json
import signal
import sys
import time
from pathlib import Path

from keytrail.events import EventLog

home, seconds, out = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
log = EventLog(home)
with log.lock():
    pass  # catch up with the whole log once, before measuring
Path(out + ".ready").write_text("1")
waits = []
stop = [False]
signal.signal(signal.SIGTERM, lambda *a: stop.__setitem__(0, True))
end = time.monotonic() + seconds
while not stop[0] and time.monotonic() < end:
    t = time.monotonic()
    with log.lock():
        pass
    waits.append(time.monotonic() - t)
    time.sleep(0.05)
waits.sort()
Path(out).write_text(
    json.dumps(
        {
            "n": len(waits),
            "max_wait_s": round(waits[-1], 3) if waits else None,
            "p50_s": round(waits[len(waits) // 2], 4) if waits else None,
            "over_1s": sum(w > 1 for w in waits),
            "total_over_0.2s": round(sum(w for w in waits if w > 0.2), 2),
        }
    )
)
