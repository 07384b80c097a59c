"""Drive `keytrail serve` over stdio with a client that sends a progressToken.

usage: mcp_drive.py HOME CALLS_JSON [serve flags...]
CALLS_JSON: list of [tool, args]. Prints per call: seconds, answer bytes, progress count, error.
Also: time to initialize, and the server's peak RSS (VmHWM) at the end.
"""

import json
import os
import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

home, calls = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
flags = sys.argv[3:]
env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
env.update(
    KEYTRAIL_HOME=str(home),
    KEYTRAIL_EMBEDDER=os.environ.get("DRIVE_EMBEDDER", "hash"),
    PYTHONUNBUFFERED="1",
)
for k, v in os.environ.items():
    if k.startswith("DRIVE_KEYTRAIL_"):
        env[k[6:]] = v


def server_hwm() -> str:
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            st = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        if f"PPid:\t{me}\n" in st:
            for line in st.splitlines():
                if line.startswith("VmHWM"):
                    return line.split(":")[1].strip()
    return "?"


async def main() -> None:
    params = StdioServerParameters(
        command=str(Path(sys.executable)),
        args=["-m", "keytrail.server.cli", "serve", *flags],
        env=env,
    )
    with open(f"/tmp/keytrail-serve-{os.getpid()}.err", "w") as err:
        t0 = time.perf_counter()
        async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            print(json.dumps({"initialize_s": round(time.perf_counter() - t0, 2)}), flush=True)
            for tool, args in calls:
                seen: list = []

                async def on_progress(p, total, msg, seen=seen):
                    seen.append((p, total, msg))

                t = time.perf_counter()
                res = await s.call_tool(
                    tool, args, progress_callback=on_progress, read_timeout_seconds=None
                )
                dt = time.perf_counter() - t
                size = sum(len(getattr(c, "text", "")) for c in res.content)
                print(
                    json.dumps(
                        {
                            "tool": tool,
                            "s": round(dt, 2),
                            "text_bytes": size,
                            "progress": len(seen),
                            "first": seen[:1],
                            "last": seen[-1:],
                            "error": res.is_error and res.content[0].text[:300],
                        }
                    ),
                    flush=True,
                )
            print(json.dumps({"server_VmHWM": server_hwm()}), flush=True)


anyio.run(main)
