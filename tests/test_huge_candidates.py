"""KEYTRAIL_HYBRID_CANDIDATES has no ceiling, and the text index was asked for that many hits:
Tantivy reserves room for `limit` hits up front, so 2**40 aborted the whole process (a Rust
out-of-memory abort, exit 134: a served store's server gone) and a value past 2**64 raised an
OverflowError traceback. The search asks for no more hits than the index holds documents."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_cli import REPO, env_for, kt

from keytrail.core import Store
from keytrail.core.config import HybridParams


def test_the_text_search_asks_for_no_more_hits_than_there_are_documents(
    make_store: Callable[..., Store],
) -> None:
    store = make_store(hybrid=HybridParams(candidates=2**70))
    store.remember("Dana moved to Lyon", ["Dana", "Lyon"])
    store.remember("Dana likes tea", ["Dana", "tea"])
    found = store.recall_memories("Dana Lyon", learn=False).memories
    assert found and found[0].content == "Dana moved to Lyon"


@pytest.mark.parametrize("candidates", [str(2**40), str(2**70)])
def test_recall_memories_with_huge_candidates_answers(tmp_path: Path, candidates: str) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Dana moved to Lyon", "-n", "Dana", "-n", "Lyon")
    kt(home, "remember", "Dana likes tea", "-n", "Dana", "-k", "tea")
    # a subprocess: before the fix, 2**40 aborts the interpreter running it
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "recall-memories", "Dana Lyon", "--no-learn"],
        env=env_for(home) | {"KEYTRAIL_HYBRID_CANDIDATES": candidates},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Dana moved to Lyon" in proc.stdout
