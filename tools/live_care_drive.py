"""Drive two `keytrail serve` processes on one store while the care verbs run beside them.

Each server (a real MCP stdio client) loops remember -> recall_memories -> read_memory ->
recall -> read_key, and reads what the other server remembered; meanwhile a third process runs
rebuild, reembed, verify, export, import, forget, cleanup-expired (and `log --follow` runs
throughout). At the end: every acknowledged remember is in the log exactly once, every answer
was right, verify is clean at rest, and a fresh open equals a full replay.

    python tools/live_care_drive.py --seconds 60 [--real-model]

Prints JSON: counts, every wrong answer or error, every care verb that failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

REPO = Path(__file__).resolve().parent.parent


#: --snapshot-every: small, so servers write snapshots while rebuild and forget touch them
SNAPSHOT_EVERY = ""


def env_for(home: Path, real: bool) -> dict[str, str]:
    # The model as CI finds it (../shared beside the checkout) unless the caller names one.
    model = os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or str(
        (REPO.parent / "shared" / "models" / "all-MiniLM-L6-v2-onnx").resolve()
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYTRAIL_")}
    if SNAPSHOT_EVERY:
        env["KEYTRAIL_SNAPSHOT_EVERY"] = SNAPSHOT_EVERY
    env.update(KEYTRAIL_HOME=str(home), PYTHONUNBUFFERED="1", KEYTRAIL_DIRECT_RECALL="1")
    if real:
        env.update(
            KEYTRAIL_EMBEDDER="fastembed",
            KEYTRAIL_EMBED_MODEL_PATH=model,
            HF_HUB_OFFLINE="1",
        )
    else:
        env["KEYTRAIL_EMBEDDER"] = "hash"
    return env


def cli(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=600,
    )


class Record:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[str, str] = {}  # memory id -> content
        self.wrong: list[str] = []
        self.calls = Counter[str]()
        self.care: list[dict[str, Any]] = []

    def bad(self, what: str) -> None:
        with self.lock:
            self.wrong.append(what)
            print("WRONG:", what[:400], file=sys.stderr, flush=True)


def texts(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def worker(
    name: str, home: Path, env: dict[str, str], rec: Record, stop: anyio.Event, errlog: Path
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "keytrail.server.cli", "serve"],
        env=env,
        cwd=str(REPO),
    )
    rng = random.Random(name)
    with open(errlog, "a") as err:
        async with stdio_client(params, errlog=err) as (r, w), ClientSession(r, w) as s:
            await s.initialize()

            async def call(tool: str, **args: Any) -> Any:
                rec.calls[tool] += 1
                try:
                    result = await s.call_tool(tool, args)
                except Exception as exc:
                    rec.bad(f"{name} {tool}({args}) raised {exc!r}")
                    return None
                if result.is_error:
                    rec.bad(f"{name} {tool}({args}) is_error: {texts(result)}")
                    return None
                return result.structured_content

            i = 0
            while not stop.is_set():
                i += 1
                token = f"{name}x{i}q{rng.randrange(10**6)}"
                content = f"{name} note {i}: the {token} lives in cupboard {i}"
                ttl = {"ttl_seconds": 1} if i % 7 == 0 else {}
                if ttl:
                    content += " ttl"
                got = await call("remember", content=content, keys=[token, f"cupboard {i}"], **ttl)
                if got is None:
                    continue
                mid = got["memory_id"]
                with rec.lock:
                    rec.acked[mid] = content
                if ttl:
                    continue
                found = await call("recall_memories", query=token, top_k=5)
                if found is not None and mid not in [m["memory_id"] for m in found["memories"]]:
                    rec.bad(f"{name} recall_memories({token}) missed {mid}: {found['memories']}")
                view = await call("read_memory", memory_id=mid)
                if view is not None and view.get("content") != content:
                    rec.bad(f"{name} read_memory({mid}) gave {view.get('content')!r}")
                keys = await call("recall", query=token)
                key_ids = [k["key_id"] for k in keys["keys"]] if keys else []
                if keys is not None and not key_ids:
                    rec.bad(f"{name} recall({token}) found no key")
                mine = [k["key_id"] for k in got["keys"] if k["label"] == token]
                if mine:
                    page = await call("read_key", key_id=mine[0])
                    if page is not None and mid not in [m["memory_id"] for m in page["memories"]]:
                        rec.bad(f"{name} read_key({mine[0]}) lacks {mid}")
                # Someone else's acknowledged memory (not one the care loop forgets).
                with rec.lock:
                    others = [
                        (m, c)
                        for m, c in rec.acked.items()
                        if not c.startswith(name)
                        and " note " in c
                        and "cupboard" in c
                        and not c.endswith("ttl")
                    ]
                if others:
                    m, c = rng.choice(others[-20:])
                    view = await call("read_memory", memory_id=m)
                    if view is not None and view.get("content") != c:
                        rec.bad(f"{name} read_memory({m}) (other) gave {view.get('content')!r}")


def care_loop(
    home: Path,
    env: dict[str, str],
    rec: Record,
    stop: threading.Event,
    work: Path,
    verbs: list[str],
) -> None:
    rng = random.Random(7)
    n = 0
    while not stop.is_set():
        n += 1
        verb = verbs[(n - 1) % len(verbs)] if n <= len(verbs) else rng.choice(verbs)
        time.sleep(rng.uniform(0, 1.5))
        t0 = time.monotonic()
        if verb == "forget":
            made = cli(
                env,
                "remember",
                f"care secret {n} zz{rng.randrange(10**6)}",
                "-k",
                f"secret {n}",
                "--json",
            )
            if made.returncode:
                outcome = made
            else:
                mid = json.loads(made.stdout)["memory_id"]
                outcome = cli(env, "forget", mid, "--reason", "drive")
        elif verb == "export":
            outcome = cli(env, "export", "-o", str(work / f"export{n}.jsonl"))
            if outcome.returncode == 0:
                fresh = work / f"imported{n}"
                imp = cli(env_for(fresh, False), "import", str(work / f"export{n}.jsonl"))
                ver = cli(env_for(fresh, False), "verify")
                if imp.returncode or ver.returncode:
                    rec.care.append(
                        {
                            "verb": "import-fresh",
                            "rc": imp.returncode,
                            "err": imp.stderr[-800:],
                            "verify": ver.stdout[-800:],
                        }
                    )
        elif verb == "import":
            graph = work / f"g{n}.jsonl"
            graph.write_text(
                json.dumps(
                    {
                        "type": "entity",
                        "name": f"Imported {n}",
                        "entityType": "person",
                        "observations": [f"imported observation {n}"],
                    }
                )
                + "\n"
            )
            outcome = cli(env, "import", str(graph))
        elif verb == "import-refused":
            exports = sorted(work.glob("export*.jsonl")) or [work / "none.jsonl"]
            outcome = cli(env, "import", str(exports[0]))
            if outcome.returncode == 2 and "needs an empty store" in outcome.stderr:
                outcome = subprocess.CompletedProcess(outcome.args, 0, "", "")
        else:
            outcome = cli(env, *verb.split())
        entry = {"verb": verb, "rc": outcome.returncode, "s": round(time.monotonic() - t0, 2)}
        if outcome.returncode:
            entry["err"] = outcome.stderr[-1500:] + outcome.stdout[-1500:]
            print("CARE FAILED:", entry, file=sys.stderr, flush=True)
        rec.care.append(entry)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--real-model", action="store_true")
    ap.add_argument(
        "--verbs",
        default="verify,rebuild,forget,export,reembed,cleanup-expired,"
        "import,verify,import-refused,rebuild",
    )
    ap.add_argument("--keep", help="work dir to keep")
    ap.add_argument("--snapshot-every", default="")
    opts = ap.parse_args()
    global SNAPSHOT_EVERY
    SNAPSHOT_EVERY = opts.snapshot_every
    work = Path(opts.keep or tempfile.mkdtemp(prefix="live-care-"))
    if work.exists() and opts.keep:
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    home = work / "store"
    env = env_for(home, opts.real_model)
    first = cli(env, "remember", "seed memory about the garden", "-k", "garden")
    assert first.returncode == 0, first.stderr
    rec = Record()
    follow_out = open(work / "follow.txt", "w")  # noqa: SIM115 - open for the whole run
    follower = subprocess.Popen(
        [sys.executable, "-m", "keytrail.server.cli", "log", "--follow", "--json"],
        env=env,
        cwd=str(REPO),
        stdout=follow_out,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop_care = threading.Event()
    care = threading.Thread(
        target=care_loop, args=(home, env, rec, stop_care, work, opts.verbs.split(","))
    )

    async def drive() -> None:
        stop = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker, "alpha", home, env, rec, stop, work / "alpha.err")
            tg.start_soon(worker, "beta", home, env, rec, stop, work / "beta.err")
            await anyio.sleep(3)
            care.start()
            await anyio.sleep(opts.seconds)
            stop.set()

    anyio.run(drive)
    stop_care.set()
    care.join()
    time.sleep(3)
    follower.terminate()
    _, follow_err = follower.communicate(timeout=30)
    follow_out.close()

    # At rest: the log, verify, a fresh open against a full replay.
    sys.path.insert(0, str(REPO))
    import msgspec

    from keytrail.events import EventLog, MemoryRemembered
    from keytrail.projections import fold
    from keytrail.projections.snapshot import materialize

    seen = Counter[str]()
    contents: dict[str, str] = {}
    events = list(EventLog(home).iter_new())
    for e in events:
        if isinstance(e, MemoryRemembered):
            for m in e.memories:
                seen[m.memory_id] += 1
                contents[m.memory_id] = m.content
    lost = [m for m in rec.acked if seen[m] != 1]
    changed = [m for m, c in rec.acked.items() if seen[m] == 1 and contents[m] != c]
    followed = [json.loads(line)["seq"] for line in (work / "follow.txt").read_text().splitlines()]
    verify = cli(env, "verify")
    from keytrail.core import Settings, Store
    from keytrail.core.embedders import HashEmbedder

    fresh_equal = None
    if not opts.real_model:
        with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
            fresh_equal = msgspec.msgpack.encode(
                materialize(store.state)
            ) == msgspec.msgpack.encode(fold(events))
    report = {
        "work": str(work),
        "events": len(events),
        "acked": len(rec.acked),
        "calls": dict(rec.calls),
        "wrong": rec.wrong[:40],
        "wrong_count": len(rec.wrong),
        "lost_or_doubled": lost[:20],
        "content_changed": changed[:20],
        "follow_gapfree": followed == list(range(1, len(followed) + 1)),
        "followed": len(followed),
        "follow_err": follow_err[-800:],
        "care_failed": [c for c in rec.care if c["rc"]],
        "care_runs": Counter(c["verb"] for c in rec.care),
        "verify_rc": verify.returncode,
        "verify_out": verify.stdout[-2000:] if verify.returncode else "",
        "fresh_open_equals_replay": fresh_equal,
    }
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
