"""Round-trip latency of MCP tool calls over stdio: keytrail's tools against a bare echo tool.

Both servers run as subprocesses on the same SDK, driven by the SDK's stdio client in the same
run, so the difference is what keytrail itself adds (validation, store, JSON). Prints JSON.

Each timed call follows an echo call, and each tool's ratio is against the echo calls of its
own block, so load from other work on the machine slows both sides of a ratio alike.
`split_ms` tells where each tool's time over echo goes: `core` (the same store command or
query called in this process on the same store, after the round trips), `client_check` (the
SDK client validating one recorded result against the tool's output schema) and
`server_and_wire`, what is left (argument and result conversion, the larger message).

    .venv/bin/python tools/bench_mcp.py [--calls 300] [--memories 500] [--embedder hash]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

ECHO_SERVER = '''
from mcp.server.mcpserver import MCPServer

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> dict[str, str]:
    """Return the text."""
    return {"text": text}


server.run("stdio")
'''

WORDS = [
    "apple",
    "strawberry",
    "garden",
    "cello",
    "music",
    "school",
    "Lyon",
    "nurse",
    "tea",
    "coffee",
    "travel",
    "train",
    "birthday",
    "daughter",
    "project",
    "deadline",
    "python",
    "rust",
    "kitchen",
    "recipe",
    "bicycle",
    "mountain",
]
NAMES = ["Alice", "Bob", "Carol", "Dana", "Emil", "Fatima", "Goro", "Hana", "Ivan", "Julia"]


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3),
        "p99_ms": round(ms[int(0.99 * (len(ms) - 1))], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


Call = Callable[[int], Awaitable[Any]]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pids() -> dict[str, int]:
    """The echo and keytrail server processes this benchmark started (children of this one)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != os.getpid():
            continue
        if "echo_server.py" in cmdline:
            found["echo"] = int(entry.name)
        elif "keytrail.server.cli" in cmdline:
            found["keytrail"] = int(entry.name)
    return found


async def paired(
    calls: int, one: Call, echo: Call, pids: dict[str, int], server: str = "keytrail"
) -> tuple[dict[str, float], dict[str, float], Any]:
    """Time `one`, each call right after an echo call: a load spike on the shared machine then
    slows both alike, so their ratio holds. CPU time per call (this client process plus the
    server process, which only these calls keep busy) does not depend on load at all.
    `server` names the process that serves `one`. Returns the tool's summary, the echo
    calls' summary, and the last result."""
    for i in range(min(20, calls)):  # warm up
        await echo(i)
        await one(i)
    samples, echo_samples = [], []
    client_cpu = echo_client_cpu = 0.0
    servers_before = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
    result = None
    for i in range(calls):
        start, start_cpu = time.perf_counter(), time.process_time()
        await echo(i)
        middle, middle_cpu = time.perf_counter(), time.process_time()
        result = await one(i)
        samples.append(time.perf_counter() - middle)
        client_cpu += time.process_time() - middle_cpu
        echo_samples.append(middle - start)
        echo_client_cpu += middle_cpu - start_cpu
        if getattr(result, "is_error", False):
            raise RuntimeError(f"tool call failed: {result.content}")
    used = {name: process_cpu_seconds(pid) - servers_before[name] for name, pid in pids.items()}
    tool, echoed = summary(samples), summary(echo_samples)
    if server == "echo":  # both halves ran on the echo server: share its time by call
        used["echo"] /= 2
    for out, client, server_cpu in (
        (tool, client_cpu, used.get(server, 0.0)),
        (echoed, echo_client_cpu, used.get("echo", 0.0)),
    ):
        out["cpu_ms_per_call"] = round((client + server_cpu) / calls * 1000, 3)
        out["client_cpu_ms_per_call"] = round(client / calls * 1000, 3)
        out["server_cpu_ms_per_call"] = round(server_cpu / calls * 1000, 3)
    return tool, echoed, result


def timed_sync(calls: int, one: Callable[[int], Any]) -> dict[str, float]:
    for i in range(min(20, calls)):
        one(i)
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        one(i)
        samples.append(time.perf_counter() - start)
    return summary(samples)


TOOLS = ("memory_stats", "recall", "read_key", "read_memory", "remember")


async def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    echo_script = work / "echo_server.py"
    echo_script.write_text(ECHO_SERVER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(work / "store"), KEYTRAIL_EMBEDDER=args.embedder)
    if args.model_path:
        env["KEYTRAIL_EMBED_MODEL_PATH"] = args.model_path
    rng = random.Random(7)
    results: dict[str, Any] = {
        "calls": args.calls,
        "memories": args.memories,
        "embedder": args.embedder,
        "transport": "stdio",
        "python": sys.version.split()[0],
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    echo_params = StdioServerParameters(command=sys.executable, args=[str(echo_script)], env=env)
    kt_params = StdioServerParameters(
        command=sys.executable, args=["-m", "keytrail.server.cli", "serve"], env=env
    )
    with open(work / "stderr.txt", "w") as err:
        async with (
            stdio_client(echo_params, errlog=err) as (er, ew),
            ClientSession(er, ew) as e,
            stdio_client(kt_params, errlog=err) as (r, w),
            ClientSession(r, w) as s,
        ):
            await e.initialize()
            await s.initialize()

            def echo(i: int) -> Awaitable[Any]:
                return e.call_tool("echo", {"text": f"hello {i}"})

            items = []
            for i in range(args.memories):
                name = rng.choice(NAMES)
                topics = rng.sample(WORDS, 3)
                items.append(
                    {
                        "content": f"{name} note {i}: {' '.join(topics)} ({rng.random():.6f})",
                        "keys": [name, *topics],
                        "key_types": {name: "name"},
                    }
                )
            start = time.perf_counter()
            for chunk in range(0, len(items), 250):
                res = await s.call_tool("remember_batch", {"items": items[chunk : chunk + 250]})
                if res.is_error:
                    raise RuntimeError(res.content)
            results["seed_seconds"] = round(time.perf_counter() - start, 3)
            rec = (await s.call_tool("recall", {"query": "Alice strawberry"})).structured_content
            assert rec is not None
            key_id = rec["keys"][0]["key_id"]
            page = (await s.call_tool("read_key", {"key_id": key_id})).structured_content
            assert page is not None
            memory_ids = [m["memory_id"] for m in page["memories"]]

            calls: dict[str, Call] = {
                "memory_stats": lambda i: s.call_tool("memory_stats", {}),
                "recall": lambda i: s.call_tool(
                    "recall", {"query": f"{rng.choice(NAMES)} {rng.choice(WORDS)}"}
                ),
                "read_key": lambda i: s.call_tool("read_key", {"key_id": key_id, "limit": 20}),
                "read_memory": lambda i: s.call_tool(
                    "read_memory",
                    {"memory_id": memory_ids[i % len(memory_ids)], "via_key_id": key_id},
                ),
                "remember": lambda i: s.call_tool(
                    "remember",
                    {
                        "content": f"bench fact {i} {rng.random():.9f}",
                        "keys": [rng.choice(WORDS), rng.choice(NAMES)],
                    },
                ),
            }
            pids = server_pids()
            echo_blocks: dict[str, dict[str, float]] = {}
            last: dict[str, Any] = {}
            results["echo"], _, _ = await paired(args.calls, echo, echo, pids, server="echo")
            for tool in TOOLS:
                results[tool], echo_blocks[tool], last[tool] = await paired(
                    args.calls, calls[tool], echo, pids
                )
                if tool == "read_key":
                    # The SDK client checks every structured result against the tool's output
                    # schema (jsonschema, client side); once more without it, to tell the
                    # client's cost from the server's.
                    async def no_check(name: str, result: Any) -> None:
                        return None

                    checking = s.validate_tool_result
                    s.validate_tool_result = no_check  # type: ignore[method-assign]
                    key = "read_key_without_client_schema_check"
                    results[key], echo_blocks[key], _ = await paired(
                        args.calls, calls["read_key"], echo, pids
                    )
                    s.validate_tool_result = checking  # type: ignore[method-assign]
            client_check = {}
            for tool in TOOLS:
                client_check[tool] = await timed_async(
                    args.calls, lambda i, t=tool: s.validate_tool_result(t, last[t])
                )
    core = core_timings(args, work / "store", key_id, memory_ids)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    results["echo_per_block"] = echo_blocks
    results["ratio_p50_vs_echo_same_block"] = {
        t: round(results[t]["p50_ms"] / b["p50_ms"], 2) for t, b in echo_blocks.items()
    }
    if pids.keys() == {"echo", "keytrail"}:
        results["ratio_cpu_per_call_vs_echo_same_block"] = {
            t: round(results[t]["cpu_ms_per_call"] / b["cpu_ms_per_call"], 2)
            for t, b in echo_blocks.items()
        }
    results["split_ms"] = {}
    for tool in TOOLS:
        echo_p50 = echo_blocks[tool]["p50_ms"]
        over = results[tool]["p50_ms"] - echo_p50
        core_ms = core[tool]["p50_ms"]
        check_ms = client_check[tool]["p50_ms"]
        results["split_ms"][tool] = {
            "echo_p50": echo_p50,
            "over_echo": round(over, 3),
            "core": core_ms,
            "client_check": check_ms,
            "server_and_wire": round(over - core_ms - check_ms, 3),
        }
    return results


async def timed_async(calls: int, one: Call) -> dict[str, float]:
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        await one(i)
        samples.append(time.perf_counter() - start)
    return summary(samples)


def core_timings(
    args: argparse.Namespace, home: Path, key_id: str, memory_ids: list[str]
) -> dict[str, dict[str, float]]:
    """The store's own time for each benchmarked call, in this process, on the same store
    (after the server has exited, so the appends of read_memory and remember are no one's)."""
    from keytrail.core import Settings, Store

    saved = dict(os.environ)
    os.environ.update(KEYTRAIL_EMBEDDER=args.embedder)
    if args.model_path:
        os.environ["KEYTRAIL_EMBED_MODEL_PATH"] = args.model_path
    try:
        settings = Settings.from_env()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    rng = random.Random(11)
    with Store(settings, home=home) as store:
        return {
            "memory_stats": timed_sync(args.calls, lambda i: store.memory_stats()),
            "recall": timed_sync(
                args.calls,
                lambda i: store.recall(f"{rng.choice(NAMES)} {rng.choice(WORDS)}"),
            ),
            "read_key": timed_sync(args.calls, lambda i: store.read_key(key_id, limit=20)),
            "read_memory": timed_sync(
                args.calls,
                lambda i: store.read_memory(memory_ids[i % len(memory_ids)], key_id),
            ),
            "remember": timed_sync(
                args.calls,
                lambda i: store.remember(
                    f"core fact {i} {rng.random():.9f}", [rng.choice(WORDS), rng.choice(NAMES)]
                ),
            ),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--memories", type=int, default=500)
    parser.add_argument("--embedder", default="hash", choices=("hash", "fastembed"))
    parser.add_argument("--model-path", default=os.environ.get("KEYTRAIL_EMBED_MODEL_PATH"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="keytrail-bench-") as tmp:
        results = anyio.run(bench, args, Path(tmp))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
