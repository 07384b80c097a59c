"""Run a command; print its stderr lines with seconds since start; report the longest silence."""

import subprocess
import sys
import time

t0 = time.monotonic()
last = t0
gaps = []
p = subprocess.Popen(
    sys.argv[1:], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, bufsize=1
)
for line in p.stderr:
    now = time.monotonic()
    gaps.append((now - last, line.strip()[:70]))
    last = now
    print(f"{now - t0:7.2f} {line.rstrip()[:100]}", flush=True)
p.wait()
now = time.monotonic()
gaps.append((now - last, "<exit>"))
print(f"{now - t0:7.2f} <exit rc={p.returncode}>")
g = max(gaps)
print(f"longest silence {g[0]:.2f}s before: {g[1]}")
