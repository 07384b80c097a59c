"""A store written by an older keytrail opens and answers with the current code.

Each fixture `tests/fixtures/store-<commit>/` was written by keytrail at that commit, with
`tests/fixtures/build_old_store.py` (what that code answered is beside it, `store-<commit>.json`):
its log and every derived file it left, the key-graph snapshots (kept ones for past reads
included), the vector cache and the text index. The current code may use a derived file or pass
it over, never crash on one, answer otherwise than a replay of the log alone, or change a line
of the log.

- b4e7d52 (21 Nov): snapshots of format 2, a text index of schema 1: all passed over, rebuilt.
- 600cd1a (27 Nov): snapshots of format 4 with today's state layout (used as they are, past
  reads start from the kept ones), a text index of schema 4 (rebuilt).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from keytrail.core import HashEmbedder, NotFound, Settings, Store, to_dict
from keytrail.core.history import history
from keytrail.core.maintenance import verify
from keytrail.core.timetravel import read_memory_at, view
from keytrail.projections import snapshot as snapshots

FIXTURES = Path(__file__).parent / "fixtures"
OLD_STORES = ["store-b4e7d52", "store-600cd1a"]


def open_store(home: Path) -> Store:
    # The fixtures were written with the 32-dimension hashing embedder (small vector files).
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(32))


def log_bytes(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((home / "log").iterdir()) if p.is_file()}


def answers_of(store: Store, old: dict[str, Any]) -> dict[str, Any]:
    """What the store answers to the questions the old code was asked, and a few more."""
    first, deadline, corrected = old["ids"][0], old["ids"][2], old["corrected"]
    tea = next(k.key_id for k in store.recall("tea").keys if k.label == "tea")
    try:
        store.read_memory(old["forgotten"])
        forgotten = "readable"
    except NotFound as exc:
        forgotten = exc.message
    return {
        "stats": {k: v for k, v in to_dict(store.memory_stats()).items() if k != "log_bytes"},
        "recall tea": [k.key_id for k in store.recall("tea").keys],
        "read_key tea": to_dict(store.read_key(tea)),
        "recall_memories green tea": to_dict(store.recall_memories("green tea", learn=False)),
        "past recall_memories": to_dict(
            store.recall_memories("deadline", learn=False, as_of=old["past_seq"])
        ),
        "read as of past": to_dict(read_memory_at(store, deadline, as_of=old["past_seq"])),
        "read as of now": to_dict(read_memory_at(store, deadline, as_of=store.state.seq)),
        "read first as of now": to_dict(read_memory_at(store, first, as_of=store.state.seq)),
        "history": to_dict(history(store, corrected)),
        "forgotten": forgotten,
    }


@pytest.mark.parametrize("name", OLD_STORES)
def test_an_older_store_answers_as_a_replay_of_its_log(name: str, tmp_path: Path) -> None:
    old = json.loads((FIXTURES / f"{name}.json").read_text())
    home = tmp_path / "upgraded"
    shutil.copytree(FIXTURES / name, home)
    replayed = tmp_path / "replayed"  # the log alone: every derived file made by this code
    shutil.copytree(FIXTURES / name / "log", replayed / "log")
    logged = log_bytes(home)

    assert verify(home).ok  # old derived files are checked or passed over, never a problem
    with open_store(home) as store, open_store(replayed) as fresh:
        upgraded = answers_of(store, old)
        assert upgraded == answers_of(fresh, old)

    # And as the old code answered (later fields aside; rankings may since have changed).
    stats = upgraded["stats"]
    for field in ("store_id", "seq", "memories", "superseded", "forgotten", "keys", "links"):
        assert stats[field] == old["stats"][field], field
    assert upgraded["recall tea"] == old["recall tea"]
    found = [m["memory_id"] for m in upgraded["recall_memories green tea"]["memories"]]
    assert set(found) == set(old["recall_memories green tea"])
    for read in ("read as of past", "read corrected"):
        ours = upgraded["read as of now" if read == "read corrected" else read]
        for field in ("content", "superseded_by", "keys", "created_at"):
            assert ours[field] == old[read][field], (read, field)
    # (b4e7d52 called a replaced version "active"; fixed since, e44596f)
    assert upgraded["read as of past"]["status"] == "active"
    assert upgraded["read as of now"]["status"] == "superseded"
    assert upgraded["read as of past"]["content"] == "The project deadline is March 3"
    assert "forgotten" in upgraded["forgotten"]
    assert log_bytes(home) == logged  # queries as of now or the past, learn=False: no event

    # Written on: the new event follows the old ones, which stay as they were.
    with open_store(home) as store:
        new = store.remember("Heidi brings green tea to standup", keys=["tea"])
        hits = store.recall_memories("Heidi green tea", learn=False).memories
        assert hits[0].memory_id == new.memory_id
    after = log_bytes(home)
    assert all(after[segment].startswith(lines) for segment, lines in logged.items())
    report = verify(home)
    assert report.ok and report.cache_problems == []
    checked = " | ".join(report.caches_checked)
    assert "index/text (seq" in checked and "cache/snapshot/keygraph.msgpack (seq" in checked
    content = b"The staging server is in Frankfurt"  # forgotten by the old code
    assert not [p for p in home.rglob("*") if p.is_file() and content in p.read_bytes()]


def older_layout(path: Path) -> None:
    """Make the snapshot at `path` one of another state layout (schema digest), as every
    snapshot an older keytrail kept becomes once the layout changes."""
    data = path.read_bytes()
    length = int.from_bytes(data[:4], "big")
    header = msgspec.msgpack.decode(data[4 : 4 + length], type=snapshots.Header)
    older = msgspec.msgpack.encode(msgspec.structs.replace(header, schema="0" * 16))
    path.write_bytes(len(older).to_bytes(4, "big") + older + data[4 + length :])


def test_kept_snapshots_of_an_older_layout_make_way_for_this_versions(tmp_path: Path) -> None:
    """Archived snapshots this version cannot read count for nothing: a past read that folds a
    long tail keeps its state again (the cap is not held by files no read can start from), and
    the next archive deletes them (each holds a whole graph, for good otherwise)."""
    settings = Settings(home=tmp_path / "s", embedder="hash", snapshot_every=3, snapshot_keep=4)
    store = Store(settings, embedder=HashEmbedder())
    for i in range(40):
        store.remember(f"fact number {i}", ["facts"])
    store.close()
    assert store.archived_snapshots() == 4
    for path in store.snapshot_files():
        older_layout(path)

    shutil.copytree(settings.home, tmp_path / "written")

    # Read only: a past read folded from the log's start (nothing readable before seq 30)
    # keeps its state.
    upgraded = Store(settings, embedder=HashEmbedder())
    key_id = upgraded.state.key_for_label("facts").id  # type: ignore[union-attr]
    point = 30
    assert len(view(upgraded, point).read_key(key_id, limit=50).memories) == point - 1
    kept = upgraded.snapshot_path.with_name(snapshots.archived_name(point))
    assert snapshots.read_header(kept) is not None
    upgraded.close()

    # Written on: the first archive of this version's own snapshot deletes them.
    written = Store(
        dataclasses.replace(settings, home=tmp_path / "written"), embedder=HashEmbedder()
    )
    for i in range(6):  # two snapshots: the second archives the first and thins the rest
        written.remember(f"later fact {i}", ["facts"])
    written.close()
    unreadable = [p.name for p in written.snapshot_files() if snapshots.read_header(p) is None]
    assert unreadable == [] and 0 < written.archived_snapshots() <= settings.snapshot_keep
