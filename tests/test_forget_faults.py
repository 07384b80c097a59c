"""kill -9 at random moments during forget, many times: the store always opens, verifies, and
is consistent: a memory is either not forgotten (content in its log line) or forgotten and, once
the next open has finished any interrupted purge, gone from every file."""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest
from conftest import rest_of_output

from keytrail.core import HashEmbedder, RememberItem, Settings, Store, forgetting
from keytrail.core.maintenance import VerifyReport, verify
from keytrail.events import EventLog, MemoryForgotten
from keytrail.projections import fold
from keytrail.projections.snapshot import materialize

FORGETTER = r"""
import sys, time
from keytrail.core import HashEmbedder, Settings, Store

home, ids = sys.argv[1], sys.argv[2:]
store = Store(Settings(home=home, embedder="hash", snapshot_every=5, segment_bytes=3000),
              embedder=HashEmbedder())
len(store.vectors)  # loaded on first use: load it now, so the kills land in forgets
print("ready", flush=True)
for memory_id in ids:
    store.forget(memory_id, reason="kill test")
    print("forgot " + memory_id, flush=True)
time.sleep(60)  # done early: wait for the kill like the others
"""


def settings(home: Path) -> Settings:
    return Settings(home=home, embedder="hash", snapshot_every=5, segment_bytes=3000)


def holding(home: Path, contents: dict[str, str]) -> dict[str, list[str]]:
    """memory id -> files under `home` holding its content (raw or as a JSON string)."""
    needles = {m: (c.encode(), msgspec.json.encode(c)[1:-1]) for m, c in contents.items()}
    found: dict[str, list[str]] = {}
    for root, _dirs, names in os.walk(home):
        for name in names:
            path = Path(root) / name
            data = path.read_bytes()
            for memory_id, forms in needles.items():
                if any(f in data for f in forms):
                    found.setdefault(memory_id, []).append(str(path.relative_to(home)))
    return found


def forgotten_in_log(home: Path) -> set[str]:
    return {e.memory_id for e in EventLog(home).read_new() if isinstance(e, MemoryForgotten)}


def verify_ok_or_torn(home: Path) -> VerifyReport:
    report = verify(home)
    if not report.ok:  # the one acceptable problem: a torn last line the next writer cuts
        assert report.cache_problems == [], report.cache_problems
        assert len(report.problems) == 1 and "torn last line" in report.problems[0], report.problems
    return report


@pytest.mark.slow
def test_kill_9_during_forget_always_leaves_old_or_new(tmp_path: Path) -> None:
    home = tmp_path / "store"
    rng = random.Random(20261121)
    contents: dict[str, str] = {}
    labels: dict[str, str] = {}  # memory id -> the label of its own key

    def add_secrets(batches: int) -> None:
        with Store(settings(home), embedder=HashEmbedder()) as store:
            for i in range(batches):
                # Each with a key of its own, whose label goes with it (and a shared one).
                batch = store.remember_batch(
                    [
                        RememberItem(
                            f'secret {i}.{j} {secrets.token_hex(6)} ü"q"',
                            [f"t{j}", f"own label {secrets.token_hex(5)}"],
                        )
                        for j in range(3)
                    ]
                )
                for out in batch:
                    contents[out.memory_id] = store.state.memories[out.memory_id].content
                    labels[out.memory_id] = next(
                        k.label for k in out.keys if k.label.startswith("own label")
                    )
                # Under the shared keys too, never forgotten: their labels stay however many
                # secrets a forgetter gets through before its kill (all of them, now and then).
                store.remember(f"unrelated filler {i} " + "z" * 50, ["filler", "t0", "t1", "t2"])

    add_secrets(20)
    acked: set[str] = set()
    kills = interrupted = 0
    deadline = time.monotonic() + 25
    # 16 kills (10 once past the deadline), and on a loaded machine, where a forgetter gets
    # little done before its kill, more until the forgets have run enough to prove something.
    for it in range(48):
        remaining = [m for m in contents if m not in forgotten_in_log(home)]
        enough = len(contents) - len(remaining) > 10
        if enough and (kills >= 16 or (time.monotonic() > deadline and kills >= 10)):
            break
        if len(remaining) < 6:  # forgets got through them all: give the next one work
            add_secrets(5)
            remaining = [m for m in contents if m not in forgotten_in_log(home)]
        rng.shuffle(remaining)
        proc = subprocess.Popen(
            [sys.executable, "-c", FORGETTER, str(home), *remaining],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"ready\n", first + proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(proc.pid, signal.SIGKILL)
        out, err = rest_of_output(proc)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        kills += 1
        acked |= {line.split()[1].decode() for line in out.split(b"\n")[:-1]}

        # Before anyone opens it: every forget acknowledged is in the log; content of a
        # forgotten memory may remain only where the pending-purge record says work is left.
        forgotten = forgotten_in_log(home)
        assert acked <= forgotten, f"iteration {it}: acknowledged forgets lost"
        report = verify_ok_or_torn(home)
        pending = {e.memory_id for e in forgetting.read_pending(home)}
        assert set(report.purges_pending) == pending
        leftover = {m for m in holding(home, contents) if m in forgotten}
        assert leftover <= pending, f"iteration {it}: content of {leftover - pending} left behind"
        interrupted += bool(leftover)

        # The next open finishes the purge: forgotten content is nowhere, the rest is intact.
        store = Store(settings(home), embedder=HashEmbedder())
        found = holding(home, contents)
        assert not (set(found) & forgotten), {m: found[m] for m in set(found) & forgotten}
        kept = holding(home, labels)
        assert not (set(kept) & forgotten), {m: kept[m] for m in set(kept) & forgotten}
        for memory_id in set(contents) - forgotten:
            assert any(p.startswith("log/") for p in found.get(memory_id, [])), memory_id
            assert store.state.memories[memory_id].content == contents[memory_id]
        assert not forgetting.pending_path(home).exists()
        replayed = fold(EventLog(home).iter_new())
        assert msgspec.msgpack.encode(materialize(store.state)) == msgspec.msgpack.encode(replayed)
        store.close()
        verify_ok_or_torn(home)
    assert kills >= 10
    assert len(forgotten_in_log(home)) > 10, "the forgets hardly ran: the test proves little"
    report = verify(home)
    assert report.ok, report.problems
    assert set(report.redacted) == forgotten_in_log(home)
    assert len(report.labels_erased) == len(report.redacted)
    print(f"kills={kills} forgotten={len(report.redacted)} interrupted_purges={interrupted}")


def test_forget_of_a_memory_on_a_damaged_line_names_the_segment_and_line(
    tmp_path: Path,
) -> None:
    """A byte flipped by hand in the line that created a memory: the store still opens from its
    snapshot, but forgetting the memory must redact that line. The error said only "checksum
    mismatch"; it must say where, as the log's reader and `keytrail verify` do."""
    from keytrail.core import KeytrailError

    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    store.remember("Alice likes tea", ["Alice"])
    victim = store.remember("my bank PIN is 7391", ["bank"])
    store.remember("Bob likes coffee", ["Bob"])
    store.close()
    segment = next((home / "log").glob("*.jsonl"))
    data = bytearray(segment.read_bytes())
    data[data.index(b"bank PIN") + 1] = ord("x")
    segment.write_bytes(bytes(data))
    before = segment.read_bytes()
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    try:
        with pytest.raises(KeytrailError) as caught:
            store.forget(victim.memory_id, reason="user asked")
    finally:
        store.close()
    assert caught.value.message == (
        f"corrupt event log: {segment.name} line 3: checksum mismatch"
    ), caught.value.message
    # Refused before anything was written: no forget event whose purge could never finish
    # (it was left pending, and every later open failed on it), and the store still opens.
    assert segment.read_bytes() == before
    assert not forgetting.pending_path(home).exists()
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as reopened:
        assert reopened.read_memory(victim.memory_id).content != ""


def test_a_full_disk_during_a_forgets_purge_says_the_forget_happened_and_who_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forget's event is fsynced, then its purge rewrites the segment and hits a full
    disk. The caller got the bare `[Errno 28] No space left on device: '...'`, as if nothing
    had happened (a retry answers 'already forgotten'). It must say the memory is forgotten,
    that its content is not yet erased, and that the next command to open the store finishes
    that; and the next open does."""
    from keytrail.core import KeytrailError

    home = tmp_path / "store"
    store = Store(settings(home), embedder=HashEmbedder())
    victim = store.remember("my bank PIN is 7391", ["bank"])
    store.remember("Bob likes coffee", ["Bob"])

    def disk_full(*_: object, **__: object) -> bool:
        raise OSError(28, "No space left on device", str(home / "log" / ".segment.tmp"))

    with monkeypatch.context() as full:
        full.setattr(forgetting, "apply_redaction", disk_full)
        with pytest.raises(KeytrailError) as caught:
            store.forget(victim.memory_id, reason="user asked")
    message = caught.value.message
    assert f"forgot {victim.memory_id}" in message and "No space left on device" in message
    assert ".segment.tmp" in message and "next command that opens the store" in message
    assert forgotten_in_log(home) == {victim.memory_id}
    assert forgetting.pending_path(home).exists()
    store.close()
    with Store(settings(home), embedder=HashEmbedder()):  # room again: the open finishes it
        pass
    assert not forgetting.pending_path(home).exists()
    assert holding(home, {victim.memory_id: "my bank PIN is 7391"}) == {}


@pytest.mark.parametrize("garbage", [b"not json", b"[]", b'[{"memory_id": 7}]'])
def test_a_forget_pending_that_reads_as_nothing_is_removed_with_a_warning(
    tmp_path: Path, garbage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """forget.pending is written atomically, so only a hand edit leaves one that holds no
    purge. Nothing can be resumed from it, and kept, it sent every open to the lock to finish
    it (export and log waited each time): the first open removes it and says so."""
    home = tmp_path / "store"
    with Store(settings(home), embedder=HashEmbedder()) as store:
        store.remember("Alice likes tea", ["tea"])
    pending = forgetting.pending_path(home)
    pending.write_bytes(garbage)
    with (
        caplog.at_level("WARNING", logger="keytrail"),
        Store(settings(home), embedder=HashEmbedder()) as store,
    ):
        assert store.list_memories().total == 1
    assert not pending.exists()
    assert "could not be read and was removed" in caplog.text
    assert verify(home).ok
