"""Replay MCP tool calls against `keytrail serve`; print the session as the README shows it.

The README's `>>>` transcripts are real: this reruns them, so a change to a tool's output can be
pasted back instead of edited by hand. The input has one call per line, `tool {json arguments}`
(blank lines and `#` comments skipped); each call prints as

    >>> tool({...})
    {compact JSON of the structured answer}      or      ERROR <the error text>

The server runs on a fresh store in a temporary directory with the hash embedder, so the
output depends only on the calls (and the clock: ids of stores and times differ per run).

    .venv/bin/python tools/mcp_session.py calls.txt [serve flags]

(for the knowledge-graph session: `--toolsets keygraph,knowledge_graph`).

The server's own stderr (its start line, logged tool failures) is discarded.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client


def parse_calls(text: str) -> list[tuple[str, dict[str, Any], str]]:
    calls = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        tool, _, arguments = line.partition(" ")
        calls.append((tool, json.loads(arguments or "{}"), arguments or "{}"))
    return calls


async def run(calls: list[tuple[str, dict[str, Any], str]], home: Path, flags: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    env.update(KEYTRAIL_HOME=str(home), KEYTRAIL_EMBEDDER="hash")
    server = StdioServerParameters(
        command=str(Path(sys.executable).with_name("keytrail")), args=["serve", *flags], env=env
    )
    with open(os.devnull, "w") as quiet:
        async with (
            stdio_client(server, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await talk(session, calls)


async def talk(session: ClientSession, calls: list[tuple[str, dict[str, Any], str]]) -> None:
    await session.initialize()
    for tool, arguments, as_written in calls:
        print(f">>> {tool}({as_written})")
        result = await session.call_tool(tool, arguments)
        if result.is_error:
            print("ERROR " + " ".join(c.text for c in result.content if c.type == "text"))
        else:
            answer = result.structured_content
            print(json.dumps(answer, ensure_ascii=False, separators=(",", ":")))


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    calls = parse_calls(Path(sys.argv[1]).read_text())
    with tempfile.TemporaryDirectory(prefix="keytrail-session-") as tmp:
        anyio.run(run, calls, Path(tmp) / "store", sys.argv[2:])


if __name__ == "__main__":
    main()
