"""Time `keytrail export --namespace default -o /dev/null` three ways in one process, alternated:
without the namespace pre-pass (as at 99fa08d), with main's full pre-pass, and with the pre-pass
that stops at the namespace's first memory. Prints JSON.

    python tools/bench_export_namespace.py HOME [ROUNDS]
"""

import json
import os
import statistics
import sys
import time

os.environ["KEYTRAIL_EMBEDDER"] = "hash"
from keytrail.core.exporters import memory_namespaces
from keytrail.server import care
from keytrail.server.cli import main


def full(log, ns):  # main's pre-pass: reads the whole log before exporting
    found = memory_namespaces(log.iter_new())
    log.rewind()
    care._require_namespace_in(found, ns)


modes = {
    "no_prepass": lambda log, ns: None,
    "full_prepass_main": full,
    "early_exit": care._require_namespace,
}
res = {k: [] for k in modes}
for _round in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    for mode, fn in modes.items():
        care._require_namespace = fn
        t = time.perf_counter()
        rc = main(["export", "--home", sys.argv[1], "--namespace", "default", "-o", "/dev/null"])
        res[mode].append(round(time.perf_counter() - t, 2))
        assert rc == 0
med = {k: statistics.median(v) for k, v in res.items()}
print(
    json.dumps(
        {
            "runs_s": res,
            "median_s": med,
            "ratio_vs_no_prepass": {k: round(v / med["no_prepass"], 2) for k, v in med.items()},
        }
    )
)
