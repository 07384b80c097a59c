"""Each care verb run while another process keeps writing to the same store.

A real subprocess remembers (and reads) in a loop, with small segments and frequent snapshots
so that rolls and snapshot writes happen during the verb; the verb runs here through the CLI's
`main`. No timing: the test waits for the writer's acknowledgements before starting the verb
and stops it through a file afterwards. Then the promises of the README: nothing acknowledged
is lost or written twice, the store verifies, and the verb's own output is consistent.

test_live_care.py drives single interleavings explicitly; this drives the verbs whole.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import msgspec
import pytest
from conftest import rest_of_output

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.core.maintenance import verify
from keytrail.events import (
    AnyEvent,
    EventLog,
    MemoriesExpired,
    MemoryForgotten,
    MemoryRemembered,
    decode_line,
)
from keytrail.projections import fold
from keytrail.projections.snapshot import materialize
from keytrail.server.cli import main

FIXTURES = Path(__file__).parent / "fixtures"

WRITER = r"""
import itertools, sys
from datetime import timedelta
from pathlib import Path
from keytrail.core import HashEmbedder, Settings, Store
from keytrail.events import utc_now

home, stop, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
ttl = "t" in mode
# With ttl: a clock 10 s on at each look, so a 1 s TTL has passed by the next event.
ticks, start = itertools.count(), utc_now()
clock = (lambda: start + timedelta(seconds=10 * next(ticks))) if ttl else utc_now
store = Store(Settings(home=home, embedder="hash", segment_bytes=8 * 1024, snapshot_every=15),
              embedder=HashEmbedder(), clock=clock)
i = 0
while not stop.exists():
    expiring = ttl and i % 2 == 1
    r = store.remember(f"writer note {i} about topic {i % 7}", [f"topic {i % 7}"],
                       ttl_seconds=1 if expiring else None)
    if not expiring:
        store.read_memory(r.memory_id)
    print(r.memory_id, r.seq, flush=True)
    if "r" in mode and i % 4 == 0:
        store.recall_memories(f"topic {i % 7}")  # writes the text index
    if "f" in mode and i % 5 == 4:
        store.forget(r.memory_id, reason="writer")
        print("F", r.memory_id, flush=True)
    i += 1
store.close()
"""


class Writer:
    def __init__(self, home: Path, tmp: Path, mode: str = "") -> None:
        self.stop_file = tmp / "stop"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), str(self.stop_file), mode or "-"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.acked: list[tuple[str, int]] = []
        #: memories the writer forgot (each acknowledged)
        self.forgotten: list[str] = []

    def _take(self, line: str) -> None:
        first, second = line.split()
        if first == "F":
            self.forgotten.append(second)
        else:
            self.acked.append((first, int(second)))

    def wait_for(self, count: int) -> None:
        """Block until the writer has acknowledged `count` remembers in all."""
        assert self.proc.stdout is not None
        while len(self.acked) < count:
            line = self.proc.stdout.readline()
            assert line, self.proc.stderr.read() if self.proc.stderr else "writer died"
            self._take(line)

    def finish(self) -> list[tuple[str, int]]:
        self.stop_file.touch()
        out, err = rest_of_output(self.proc, timeout=60)
        assert self.proc.returncode == 0, err
        for line in out.splitlines():
            self._take(line)
        return self.acked


@contextmanager
def writing(home: Path, tmp: Path, mode: str = "fr", first: int = 20) -> Iterator[Writer]:
    """A writer that remembers and reads, with "f" forgets every fifth memory it made, with
    "r" searches (writing the text index), with "t" makes every other memory expire."""
    writer = Writer(home, tmp, mode)
    try:
        writer.wait_for(first)
        yield writer
    finally:
        if writer.proc.poll() is None:
            writer.stop_file.touch()
            writer.proc.wait(timeout=60)


@pytest.fixture(autouse=True)
def hash_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    monkeypatch.delenv("KEYTRAIL_HOME", raising=False)


def check_store(
    home: Path, acked: list[tuple[str, int]], forgotten: Sequence[str] = ()
) -> list[MemoryRemembered]:
    """Every acknowledged remember is in the log once, at the seq it was told, and every
    acknowledged forget once, its content gone from the log; the log is gap-free and
    verifies, and a store opened on it folds to what the log folds to."""
    events = EventLog(home).read_new()
    forgets = Counter(e.memory_id for e in events if isinstance(e, MemoryForgotten))
    assert all(forgets[m] == 1 for m in forgotten), "a forget lost or applied twice"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    remembered = [e for e in events if isinstance(e, MemoryRemembered)]
    written = Counter(m.memory_id for e in remembered for m in e.memories)
    assert all(n == 1 for n in written.values()), "a memory was written twice"
    by_seq = {e.seq: e for e in events}
    for memory_id, seq in acked:
        event = by_seq[seq]
        assert isinstance(event, MemoryRemembered) and event.memories[0].memory_id == memory_id
        assert (event.memories[0].content == "") == (memory_id in forgets)
    report = verify(home)
    assert report.ok, (report.problems, report.cache_problems)
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as store:
        assert msgspec.msgpack.encode(materialize(store.state)) == msgspec.msgpack.encode(
            fold(events)
        )
    return remembered


def test_export_while_another_process_writes_is_a_prefix_that_imports_the_same(
    tmp_path: Path,
) -> None:
    home, out = tmp_path / "store", tmp_path / "export.jsonl"
    with writing(home, tmp_path) as writer:
        assert main(["export", "--home", str(home), "-o", str(out)]) == 0
        writer.wait_for(len(writer.acked) + 5)  # the writer went on past the export
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)
    lines = out.read_bytes().splitlines()
    log = EventLog(home).read_new()
    assert len(log) > len(lines) > 20
    exported = [decode_line(line) for line in lines]
    # The log as it stood: a memory the writer forgot after the export began has its content
    # in the export (its forget is not), and blanked in the log now.
    later = {e.memory_id for e in log[len(lines) :] if isinstance(e, MemoryForgotten)}
    assert [as_if_forgotten(e, later) for e in exported] == [
        as_if_forgotten(e, later) for e in log[: len(lines)]
    ]
    assert all(
        m.content == ""
        for e in exported
        if isinstance(e, MemoryRemembered)
        for m in e.memories
        if m.memory_id in {f.memory_id for f in exported if isinstance(f, MemoryForgotten)}
    )
    copy = tmp_path / "copy"
    assert main(["import", "--home", str(copy), str(out)]) == 0
    assert verify(copy).ok
    with Store(Settings(home=copy, embedder="hash"), embedder=HashEmbedder()) as store:
        assert msgspec.msgpack.encode(materialize(store.state)) == msgspec.msgpack.encode(
            fold(exported)
        )


def as_if_forgotten(event: AnyEvent, forgotten: set[str]) -> object:
    """The event as builtins, the content of `forgotten` memories blanked as a forget does."""
    data = msgspec.to_builtins(event)
    data.pop("crc", None)
    for memory in data.get("memories", []):
        if isinstance(memory, dict) and memory.get("memory_id") in forgotten:
            memory["content"] = ""
    return data


def test_verify_while_another_process_writes_finds_nothing(tmp_path: Path) -> None:
    home = tmp_path / "store"
    with writing(home, tmp_path) as writer:
        for _ in range(3):
            report = verify(home)
            assert report.ok, (report.problems, report.cache_problems)
            writer.wait_for(len(writer.acked) + 5)
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)


@pytest.mark.parametrize("verb", ["rebuild", "reembed"])
def test_a_rebuild_or_reembed_while_another_process_writes_leaves_caches_that_agree(
    tmp_path: Path, verb: str
) -> None:
    home = tmp_path / "store"
    with writing(home, tmp_path) as writer:
        assert main([verb, "--home", str(home)]) == 0
        writer.wait_for(len(writer.acked) + 5)
        report = verify(home)  # the caches it left (a reembed's recorded coverage too), the
        assert report.ok, (report.problems, report.cache_problems)  # writer still going
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)


def test_import_into_a_store_another_process_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export is refused (the store is not empty) and leaves the log as it was; a
    memory.jsonl goes in as one event among the writer's."""
    home, out = tmp_path / "store", tmp_path / "export.jsonl"
    seed = tmp_path / "seed"
    with Store(Settings(home=seed, embedder="hash"), embedder=HashEmbedder()) as store:
        store.remember("Dana lives in Lyon", ["Lyon"])
    assert main(["export", "--home", str(seed), "-o", str(out)]) == 0
    with writing(home, tmp_path) as writer:
        with pytest.raises(SystemExit):
            main(["import", "--home", str(home), str(out)])
        assert "import needs an empty store" in capsys.readouterr().err
        assert not (home / "import.partial").exists()
        assert main(["import", "--home", str(home), str(FIXTURES / "memory.jsonl")]) == 0
        writer.wait_for(len(writer.acked) + 5)
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)
    events = EventLog(home).read_new()
    assert sum(type(e).__name__ == "GraphImported" for e in events) == 1


def test_forget_while_another_process_writes(tmp_path: Path) -> None:
    home = tmp_path / "store"
    with writing(home, tmp_path) as writer:
        gone = [writer.acked[i][0] for i in (3, 10)]
        for memory_id in gone:
            assert main(["forget", "--home", str(home), memory_id, "--reason", "race"]) == 0
        writer.wait_for(len(writer.acked) + 5)
        acked = writer.finish()
    remembered = check_store(home, acked, writer.forgotten)
    contents = {
        m.memory_id: m.content for e in remembered for m in e.memories if m.memory_id in gone
    }
    assert contents == dict.fromkeys(gone, "")
    order = [m for m, _ in acked]
    for memory_id in gone:
        secret = f"writer note {order.index(memory_id)} about".encode()
        for path in home.rglob("*"):
            if path.is_file():
                assert secret + b" " not in path.read_bytes(), path


def test_cleanup_expired_twice_at_once_while_another_process_writes(tmp_path: Path) -> None:
    """Two cleanups and a writer whose every other memory expires at once: each expired
    memory is expired by one event, never twice."""
    home = tmp_path / "store"
    with writing(home, tmp_path, "t") as writer:
        second = subprocess.Popen(
            [sys.executable, "-m", "keytrail.server.cli", "cleanup-expired", "--home", str(home)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert main(["cleanup-expired", "--home", str(home)]) == 0
        _, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        writer.wait_for(len(writer.acked) + 5)
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)
    expired = Counter(
        m for e in EventLog(home).read_new() if isinstance(e, MemoriesExpired) for m in e.memory_ids
    )
    assert expired and all(n == 1 for n in expired.values())


def test_recall_memories_while_another_process_forgets_and_reindexes(tmp_path: Path) -> None:
    """An agent searching while another process forgets (each forget removes the text index,
    which the writer's own searches rebuild): every search answers, a memory forgotten before
    it began is never in it, and one acknowledged before it began is found by its words in the
    text index (BM25), which the search caught up with the other process's writes."""
    home = tmp_path / "store"
    with (
        writing(home, tmp_path, "fr") as writer,
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as reader,
    ):
        for _ in range(30):
            writer.wait_for(len(writer.acked) + 5)  # at least one forget since the last round
            order = [m for m, _ in writer.acked]
            # The writer forgets every fifth memory it makes (its F line may be unread yet).
            kept = next(m for i, m in reversed(list(enumerate(order))) if i % 5 != 4)
            gone = writer.forgotten[-1]
            for memory_id in (kept, gone):
                words = f"writer note {order.index(memory_id)}"
                found = {
                    m.memory_id: m.found_by
                    for m in reader.recall_memories(words, learn=False).memories
                }
                if memory_id == kept:
                    assert "bm25" in found.get(memory_id, []), (words, memory_id, found)
                else:
                    assert memory_id not in found, (words, memory_id, found)
        acked = writer.finish()
    check_store(home, acked, writer.forgotten)
