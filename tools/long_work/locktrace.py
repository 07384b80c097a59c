"""Run the keytrail CLI, printing each appenders'-lock hold over 0.2 s and where it was taken."""

import contextlib
import sys
import time
import traceback

from keytrail.events.log import EventLog

orig = EventLog.lock


@contextlib.contextmanager
def traced(self, *a, **k):
    t0 = time.monotonic()
    with orig(self, *a, **k) as app:
        t1 = time.monotonic()
        try:
            yield app
        finally:
            held = time.monotonic() - t1
            if held > 0.2:
                st = "".join(traceback.format_stack(limit=8)[:-2])
                print(
                    f"[locktrace] held {held:.2f}s (waited {t1 - t0:.2f}s)\n{st}", file=sys.stderr
                )


EventLog.lock = traced
from keytrail.server.cli import main  # noqa: E402 (after the patch above)

sys.argv = ["keytrail", *sys.argv[1:]]
sys.exit(main())
