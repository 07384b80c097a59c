"""Round-trip latency of MCP tool calls over stdio: keytrail's tools against a bare echo tool.

Both servers run as subprocesses on the same SDK, driven by the SDK's stdio client in the same
run, so the difference is what keytrail itself adds (validation, store, JSON). Prints JSON.

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


async def timed(calls: int, one: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    for i in range(min(20, calls)):  # warm up
        await one(i)
    samples = []
    for i in range(calls):
        start = time.perf_counter()
        result = await one(i)
        samples.append(time.perf_counter() - start)
        if getattr(result, "is_error", False):
            raise RuntimeError(f"tool call failed: {result.content}")
    return summary(samples)


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
    }
    with open(work / "stderr.txt", "w") as err:
        echo_params = StdioServerParameters(
            command=sys.executable, args=[str(echo_script)], env=env
        )
        async with stdio_client(echo_params, errlog=err) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            results["echo"] = await timed(
                args.calls, lambda i: s.call_tool("echo", {"text": f"hello {i}"})
            )

        kt_params = StdioServerParameters(
            command=sys.executable, args=["-m", "keytrail.server.cli", "serve"], env=env
        )
        async with stdio_client(kt_params, errlog=err) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
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

            results["memory_stats"] = await timed(
                args.calls, lambda i: s.call_tool("memory_stats", {})
            )
            results["recall"] = await timed(
                args.calls,
                lambda i: s.call_tool(
                    "recall", {"query": f"{rng.choice(NAMES)} {rng.choice(WORDS)}"}
                ),
            )
            results["read_key"] = await timed(
                args.calls, lambda i: s.call_tool("read_key", {"key_id": key_id, "limit": 20})
            )

            # The SDK client checks every structured result against the tool's output schema
            # (jsonschema, client side). A 20-item page makes that the bulk of read_key's time:
            # measure once more without it to tell the client's cost from the server's.
            async def no_check(name: str, result: Any) -> None:
                return None

            checking = s.validate_tool_result
            s.validate_tool_result = no_check  # type: ignore[method-assign]
            results["read_key_without_client_schema_check"] = await timed(
                args.calls, lambda i: s.call_tool("read_key", {"key_id": key_id, "limit": 20})
            )
            s.validate_tool_result = checking  # type: ignore[method-assign]
            results["read_memory"] = await timed(
                args.calls,
                lambda i: s.call_tool(
                    "read_memory",
                    {"memory_id": memory_ids[i % len(memory_ids)], "via_key_id": key_id},
                ),
            )
            results["remember"] = await timed(
                args.calls,
                lambda i: s.call_tool(
                    "remember",
                    {
                        "content": f"bench fact {i} {rng.random():.9f}",
                        "keys": [rng.choice(WORDS), rng.choice(NAMES)],
                    },
                ),
            )
    echo_p50 = results["echo"]["p50_ms"]
    results["overhead_p50_ms_vs_echo"] = {
        tool: round(results[tool]["p50_ms"] - echo_p50, 3)
        for tool in ("memory_stats", "recall", "read_key", "read_memory", "remember")
    }
    return results


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
