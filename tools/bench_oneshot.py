"""What a one-shot command costs on a big store: wall-clock time of `keytrail` verbs, end to end
(interpreter start, imports, open, the verb, close), two trees alternated round by round.

    .venv/bin/python tools/bench_oneshot.py --store BUILT_100000 \\
        --before OLD_TREE --after . --rounds 6    # OLD_TREE: a `git archive` of the older commit

`--store` is copied once to a work copy that is opened once (by `--before`, so both trees find
a snapshot of this code's layout and a recorded projection) and never written after: the
reading verbs run on a copy of it, and each writing run on a fresh copy. The store is
`bench_calls.py`'s (hashing embedder, 100,000 memories, "topic N" keys, memory ids as there).
Prints each verb's median and range per tree, and whether both trees printed the same.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEYTRAIL = str(Path(sys.executable).with_name("keytrail"))
#: name -> (writes?, arguments, what runs first on the fresh copy, or None); that first command
#: runs under `--before`, or under the tree measured for a name that ends with "(same tree)"
#: (what that tree's own close left: a snapshot, or a tail for this open to fold)
VERBS: dict[str, tuple[bool, list[str], list[str] | None]] = {
    "stats": (False, ["stats"], None),
    "recall": (False, ["recall", "topic 42"], None),
    "read-key": (False, ["read-key", "k_fa3db567fc"], None),
    "log --memory": (False, ["log", "--memory", "m_80a9302f07bb"], None),
    "remember": (
        True,
        ["remember", "a fresh fact about topic 42 and its owner", "-k", "topic 42", "-k", "owner"],
        None,
    ),
    "recall after a remember": (
        True,
        ["recall", "topic 42"],
        ["remember", "another fact about topic 42", "-k", "topic 42"],
    ),
    "recall after a remember (same tree)": (
        True,
        ["recall", "topic 42"],
        ["remember", "another fact about topic 42", "-k", "topic 42"],
    ),
    "remember after a remember (same tree)": (
        True,
        ["remember", "a fresh fact about topic 42 and its owner", "-k", "topic 42", "-k", "owner"],
        ["remember", "another fact about topic 42", "-k", "topic 42"],
    ),
}


def run(tree: str, home: Path, args: list[str]) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=tree, KEYTRAIL_EMBEDDER="hash", KEYTRAIL_HOME=str(home))
    started = time.perf_counter()
    done = subprocess.run([KEYTRAIL, *args], env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{args} under {tree} failed: {done.stderr}")
    return took, "\n".join(line for line in done.stdout.splitlines() if "log bytes" not in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--before", required=True, help="tree for PYTHONPATH (e.g. a git archive)")
    parser.add_argument("--after", required=True)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument(
        "--work", type=Path, help="a folder for the copies (emptied first; default: a new one)"
    )
    parser.add_argument("--only", help="comma-separated verb names")
    opts = parser.parse_args()
    trees = {"before": opts.before, "after": opts.after}
    work = opts.work or Path(tempfile.mkdtemp(prefix="bench-oneshot-"))
    base, reads, writes = work / "base", work / "reads", work / "writes"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(opts.store, base, symlinks=True)
    run(opts.before, base, ["recall", "topic 42"])  # its snapshot and projection, recorded
    shutil.copytree(base, reads, symlinks=True)
    verbs = {n: v for n, v in VERBS.items() if not opts.only or n in opts.only.split(",")}
    times: dict[tuple[str, str], list[float]] = {(n, t): [] for n in verbs for t in trees}
    outputs: dict[tuple[str, str], str] = {}
    for round_ in range(opts.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name, (writing, args, first) in verbs.items():
            for tree in order:
                home = reads
                if writing:
                    shutil.rmtree(writes, ignore_errors=True)
                    shutil.copytree(base, writes, symlinks=True)
                    home = writes
                    if first is not None:
                        same = name.endswith("(same tree)")
                        run(trees[tree] if same else opts.before, home, first)
                took, outputs[(name, tree)] = run(trees[tree], home, args)
                times[(name, tree)].append(took)
    for name, (writing, _, _) in verbs.items():
        cells = [
            f"{tree} {statistics.median(ts):.2f} s ({min(ts):.2f}-{max(ts):.2f})"
            for tree in trees
            if (ts := times[(name, tree)])
        ]
        same = "-" if writing else outputs[(name, "before")] == outputs[(name, "after")]
        print(f"{name}: {' | '.join(cells)} | same output: {same}")
    print("load average", " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
