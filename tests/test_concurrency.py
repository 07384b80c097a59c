"""Several processes on one store: no lost or duplicated writes, and no stale answers."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np
import pytest

from keytrail.core import HashEmbedder, InvalidInput, Settings, Store
from keytrail.core.maintenance import verify
from keytrail.events import EventLog, MemoryRemembered, StoreCreated
from keytrail.projections import fold
from keytrail.projections.snapshot import materialize

WRITER = r"""
import random, sys, time
from pathlib import Path
from keytrail.core import HashEmbedder, Settings, Store

home, proc, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
words = ("river stone lamp orange violin cloud pepper garden winter copper harbor"
         " meadow candle falcon pencil silver thunder marble ladder velvet").split()
rng = random.Random(proc)
store = Store(Settings(home=home, embedder="hash", segment_bytes=64 * 1024,
                       snapshot_every=150), embedder=HashEmbedder())
go = Path(home).parent / "go"
while not go.exists():
    time.sleep(0.005)
for i in range(count):
    text = f"process {proc} note {i}: " + " ".join(rng.choice(words) for _ in range(8))
    r = store.remember(text, [f"p{proc}", rng.choice(words)])
    print(r.memory_id, r.seq, flush=True)
store.close()
"""

PROCS, EACH = 4, 500


def vec(i: int) -> np.ndarray:
    """Row i of an 8-dimensional identity matrix, as a one-row matrix (a vector cache's input)."""
    v = np.zeros((1, 8), dtype=np.float32)
    v[0, i] = 1.0
    return v


@pytest.mark.slow
def test_four_processes_remembering_at_once(tmp_path: Path) -> None:
    home = tmp_path / "store"
    home.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), str(p), str(EACH)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(PROCS)
    ]
    time.sleep(0.3)
    (tmp_path / "go").touch()
    acked: list[tuple[str, int]] = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
        acked += [(line.split()[0], int(line.split()[1])) for line in out.decode().splitlines()]
    assert len(acked) == PROCS * EACH
    events = EventLog(home).read_new()
    # seqs are gap-free from 1, one store.created, one event per acknowledged remember
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert sum(isinstance(e, StoreCreated) for e in events) == 1
    assert len(events) == 1 + PROCS * EACH
    written = Counter(
        m.memory_id for e in events if isinstance(e, MemoryRemembered) for m in e.memories
    )
    assert all(n == 1 for n in written.values()), "a memory was written twice"
    assert set(written) == {m for m, _ in acked}
    # every process was told the seq its memory really got
    by_seq = {e.seq: e for e in events}
    for memory_id, seq in acked:
        event = by_seq[seq]
        assert isinstance(event, MemoryRemembered) and event.memories[0].memory_id == memory_id
    # the writes really interleaved (otherwise this test proves little)
    order = [e.memories[0].content.split()[1] for e in events if isinstance(e, MemoryRemembered)]
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches > 10
    assert len(list((home / "log").glob("*.jsonl"))) > 1  # segments rolled under contention
    report = verify(home)
    assert report.ok, report.problems
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        assert msgspec.msgpack.encode(materialize(store.state)) == msgspec.msgpack.encode(
            fold(events)
        )
        assert store.memory_stats().memories + store.memory_stats().superseded == PROCS * EACH


READER_WRITER = r"""
import sys
from keytrail.core import HashEmbedder, Settings, Store

store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
for line in sys.stdin:
    content, key = line.rstrip("\n").split("|")
    r = store.remember(content, [key])
    print(r.memory_id, r.keys[0].key_id, flush=True)
"""


def test_a_process_sees_another_process_writes_before_answering(tmp_path: Path) -> None:
    home = tmp_path / "store"
    reader = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    writer = subprocess.Popen(
        [sys.executable, "-c", READER_WRITER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        for i, (content, key) in enumerate(
            [
                ("the user lives in Lisbon", "home city"),
                ("the user's cat is called Miso", "cat"),
                ("the user plays the cello", "cello"),
            ]
        ):
            writer.stdin.write(f"{content}|{key}\n")
            writer.stdin.flush()
            memory_id, key_id = writer.stdout.readline().split()
            # No refresh, no sleep: each query must catch up with the log first.
            assert reader.read_key(key_id).memories[0].memory_id == memory_id
            assert reader.list_memories().total == i + 1
            assert reader.memory_stats().memories == i + 1
            assert any(k.key_id == key_id for k in reader.recall(key).keys)
            assert reader.related(memory_id).memory_id == memory_id
            assert reader.read_memory(memory_id).content == content
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)
    reader.close()


def test_two_stores_in_one_process_see_each_other(tmp_path: Path) -> None:
    home = tmp_path / "store"
    a = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    b = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    assert a.state.store_id == b.state.store_id
    m = a.remember("green tea every morning", ["tea"])
    assert b.read_memory(m.memory_id).content == "green tea every morning"
    assert a.read_memory(m.memory_id).access_count == 2  # a folds b's read before answering
    # Decisions see every earlier event: no lost updates.
    b.correct(m.memory_id, "black tea every morning")
    with pytest.raises(InvalidInput, match="already replaced"):
        a.correct(m.memory_id, "white tea every morning")
    b.forget(b.list_memories().memories[0].memory_id)
    assert a.list_memories().total == 0
    # Dedup across stores: b's vectors and memories are visible to a's decision.
    first = b.remember("the user is allergic to peanuts", ["allergy"])
    again = a.remember("the user is allergic to peanuts", ["allergy"])
    assert again.deduplicated is not None and again.deduplicated.memory_id == first.memory_id
    # A key made by one store is found by the other, not recreated.
    again_key = a.remember("peanuts are legumes", ["allergy"]).keys[0]
    assert again_key.resolution == "existing" and again_key.key_id == first.keys[0].key_id
    a.close()
    b.close()
    events = EventLog(home).read_new()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as c:
        assert msgspec.msgpack.encode(materialize(c.state)) == msgspec.msgpack.encode(fold(events))


def test_two_vector_caches_on_one_directory_never_lose_or_mix_rows(tmp_path: Path) -> None:
    """Each process appends its rows to the shared vector files under the store lock. A process
    whose view of the files is stale must not truncate the others' rows, nor, on its next look,
    give one text the vector of another."""
    from keytrail.projections import VectorCache, text_hash

    h = [text_hash(f"text {i}") for i in range(4)]

    one = VectorCache(tmp_path, "fp", 8)
    one.put_many([h[0]], vec(0))
    one.flush()
    two = VectorCache(tmp_path, "fp", 8)  # another process, opened now
    two.put_many([h[2]], vec(2))  # embedded outside the lock, not flushed yet
    one.put_many([h[1]], vec(1))
    one.flush()
    two.flush()  # its turn with the lock: it saw nothing of h1
    two.put_many([h[3]], vec(3))
    two.flush()
    one.refresh()
    fresh = VectorCache(tmp_path, "fp", 8)
    for cache in (one, two, fresh):
        cache.refresh()
        for i in range(4):
            assert h[i] in cache, (cache, i)
            assert np.array_equal(cache.get(h[i]), vec(i)[0]), (cache, i)
    assert len(fresh) == 4


def test_a_vector_cache_deleted_under_a_running_process_is_not_corrupted(tmp_path: Path) -> None:
    """The cache is derivable and may be deleted at any time (`keytrail rebuild`, by hand) while
    servers run. A process that had rows on disk must then not write its new rows at its old row
    numbers (padding the new files with zeros and NUL hash lines) nor map the new files' rows to
    its old vectors."""
    import shutil

    from keytrail.projections import VectorCache, text_hash
    from keytrail.projections.vectors import check_cache

    h = [text_hash(f"text {i}") for i in range(7)]

    def problems(folder: Path) -> list[str]:
        checked = check_cache(folder)
        assert checked is not None
        return checked.problems

    one = VectorCache(tmp_path, "hash:v1:8", 8)
    one.put_many([h[0]], vec(0))
    one.put_many([h[1]], vec(1))
    one.flush()
    shutil.rmtree(tmp_path / "hash_v1_8")  # deleted under the running process
    one.put_many([h[2]], vec(2))
    one.flush()
    fresh = VectorCache(tmp_path, "hash:v1:8", 8)
    assert problems(tmp_path / "hash_v1_8") == []
    assert np.array_equal(fresh.get(h[2]), vec(2)[0])
    for i in (0, 1):  # gone with the deleted files, or written again: never wrong
        assert fresh.get(h[i]) is None or np.array_equal(fresh.get(h[i]), vec(i)[0]), i

    # Deleted again, and another process writes more rows than this one had before.
    shutil.rmtree(tmp_path / "hash_v1_8")
    two = VectorCache(tmp_path, "hash:v1:8", 8)
    two.put_many(h[3:6], np.concatenate([vec(3), vec(4), vec(5)]))
    two.flush()
    one.put_many([h[6]], vec(6))
    one.flush()
    fresh = VectorCache(tmp_path, "hash:v1:8", 8)
    assert problems(tmp_path / "hash_v1_8") == []
    for cache in (one, fresh):
        for i in range(3, 7):
            assert np.array_equal(cache.get(h[i]), vec(i)[0]), (cache, i)
