"""The mapped vector cache under several processes on one home (one VectorCache each, sharing
the files): whatever they interleave, a text a cache has a row for reads its own vector, never
a purge's zeros, another text's row or a fault from a cut file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from keytrail.core import Store
from keytrail.projections import VectorCache, text_hash
from keytrail.projections import vectors as vectors_module

DIM = 8


def vector_of(digest: str) -> np.ndarray:
    """A unit vector fixed by the digest: what any process embeds for that text."""
    seed = int(digest[:8], 16)
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def put(cache: VectorCache, *texts: str) -> list[str]:
    digests = [text_hash(t) for t in texts]
    cache.put_many(digests, np.stack([vector_of(d) for d in digests]))
    return digests


def reads_right(cache: VectorCache, forgotten: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Every row the cache answers for is that text's vector; no forgotten text answers."""
    live = [d for d in cache._rows if not d.startswith("-")]  # erased lines: no text's
    for digest in live:
        got = cache.get(digest)
        assert got is not None
        assert digest not in forgotten, digest
        assert np.array_equal(np.asarray(got), vector_of(digest)), digest
    if live:
        digests = live
        assert np.array_equal(cache.rows(digests), np.stack([vector_of(d) for d in digests]))


def told_again_is_read(folder: Path, reader: VectorCache, text: str) -> None:
    """A process that folded the forget of `text` tells it again: `reader` reads its new row."""
    teller = VectorCache(folder, "fp", DIM)
    (digest,) = put(teller, text)
    teller.flush()
    reader.refresh()
    assert np.array_equal(reader.get(digest), vector_of(digest))  # type: ignore[arg-type]
    reads_right(reader)


@pytest.fixture
def small_remap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vectors_module, "REMAP_ROWS", 3)


@pytest.mark.parametrize("seed", range(12))
def test_interleaved_processes_around_the_remap_boundary_read_only_their_texts(
    tmp_path: Path, small_remap: None, seed: int
) -> None:
    """Three processes put, flush (under the lock, one at a time), refresh, purge and forget in
    a random order; texts repeat across processes. After each step every process reads every
    text it has a row for as that text's vector."""
    rng = np.random.default_rng(seed)
    caches = [VectorCache(tmp_path, "fp", DIM) for _ in range(3)]
    forgotten: set[str] = set()
    for step in range(120):
        cache = caches[int(rng.integers(3))]
        op = rng.choice(["put", "put", "flush", "refresh", "purge", "forget"])
        if op == "put":
            texts = [f"text {int(t)}" for t in rng.integers(0, 40, size=int(rng.integers(1, 5)))]
            texts = [t for t in texts if text_hash(t) not in forgotten]
            if texts:
                put(cache, *texts)
        elif op == "flush":
            cache.flush()
        elif op == "refresh":
            cache.refresh()
        elif op == "purge":
            live = sorted(d for d in cache._rows if not d.startswith("-"))
            if not live:
                continue
            victim = live[int(rng.integers(len(live)))]
            forgotten.add(victim)
            # The forgetting process folds it first, then purges; the others fold it later.
            for other in caches:
                other.discard_unsaved({victim})
            cache.purge({victim})
            for other in caches:
                other.forget_saved(victim)
        for c in caches:
            reads_right(c, forgotten)
        del step


def test_a_forget_folded_before_its_purge_stays_dropped_across_a_refresh(tmp_path: Path) -> None:
    """A reader folds a forget from the log while the forgetting process is still purging (the
    log line comes first). If the reader's cache reloads the hash lines then (they grew: the
    purge's own flush appended the forgetter's unsaved rows), the text must not come back into
    its index, or the purge's zeros that follow are what it reads for a memory that shares
    the text."""
    forgetter = VectorCache(tmp_path, "fp", DIM)
    (shared,) = put(forgetter, "a text two memories hold")
    forgetter.flush()
    reader = VectorCache(tmp_path, "fp", DIM)
    assert np.array_equal(reader.get(shared), vector_of(shared))  # type: ignore[arg-type]
    reader.forget_saved(shared)  # folded the forget
    put(forgetter, "something the forgetter embedded before it")
    forgetter.flush()  # what purge's own flush does before it erases
    reader.refresh()  # e.g. a miss elsewhere made the reader look for new rows
    forgetter.purge({shared})
    got = reader.get(shared)
    assert got is None or np.array_equal(got, vector_of(shared))


@pytest.mark.parametrize("looked_up", [True, False])
def test_a_forget_of_a_row_not_read_yet_keeps_it_unread_until_told_again(
    tmp_path: Path, looked_up: bool
) -> None:
    """Another process saved the text's row after the reader's last look, then forgot the
    text: the reader folds the forget (the log line comes first) while the purge is still
    under way. Its drop named no row, so a refresh then (before the hash line is dashed)
    read the row, and the purge's zeros were what it answered for the text (told again by a
    live memory, it was never embedded again). A row saved after the purge, of the text told
    again, is read."""
    reader = VectorCache(tmp_path, "fp", DIM)
    put(reader, "a text the reader saved")
    reader.flush()
    if looked_up:
        reader.get(text_hash("anything"))  # the row index is built
    forgetter = VectorCache(tmp_path, "fp", DIM)
    # Not its last row, which a purge dashes: see the test of a reader's last row below.
    secret, _ = put(forgetter, "the door code is 4711", "a text saved after it")
    forgetter.flush()
    reader.forget_saved(secret)  # folded the forget
    reader.refresh()  # before the purge dashes the line
    forgetter.purge({secret})
    assert reader.get(secret) is None
    reads_right(reader)
    told_again_is_read(tmp_path, reader, "the door code is 4711")


def test_a_text_dropped_before_the_cache_was_made_anew_is_read_once_told_again(
    tmp_path: Path,
) -> None:
    """A process folded the forget of a text, then found the cache deleted and made anew (a
    rebuild while it runs). Its drop then kept every row of the text unread for good: told
    again by a live memory, the text was embedded anew and another row of it saved at each
    of its writes after another process's rows were read."""
    text = "a text forgotten, then told again"
    reader, forgetter = VectorCache(tmp_path, "fp", DIM), VectorCache(tmp_path, "fp", DIM)
    (digest,) = put(forgetter, text)
    forgetter.flush()
    reader.refresh()
    assert reader.get(digest) is not None
    forgetter.purge({digest})
    reader.forget_saved(digest)  # folded the forget
    shutil.rmtree(tmp_path / "fp")
    other = VectorCache(tmp_path, "fp", DIM)
    put(other, "a text of the rebuild")
    other.flush()
    reader.refresh()  # the files are new: it starts over
    for i in range(3):
        if digest not in reader:  # told again, and needed: embedded here, saved at a write
            put(reader, text)
            reader.flush()
        put(other, f"another process's text {i}")
        other.flush()
        reader.refresh()
        reads_right(reader)
    assert digest in reader
    assert (tmp_path / "fp" / "hashes.txt").read_text().split().count(digest) == 1


def test_a_late_purge_by_another_process_does_not_zero_a_row_this_process_embedded_again(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two memories share a text; `writer` forgets one (purging the text's row), then embeds
    the text again for the live one and saves that new row (mapped here: REMAP_ROWS is 1).
    `late`, opened before the forget, folds it afterwards and purges the text at its next
    write, as every process that folds a forget does: that zeroes the new row too, which the
    writer reads through its map, so its dedup no longer finds the live memory."""
    monkeypatch.setattr(vectors_module, "REMAP_ROWS", 1)
    writer = make_store()
    text = "the user keeps the lamp in the drawer"
    kept = writer.remember(text, keys=["user"], namespace="default").memory_id
    gone = writer.remember(text, keys=["user"], namespace="other").memory_id
    late = make_store(home=writer.home)
    late.remember("an unrelated note", keys=["misc"])  # its cache is loaded, T in it
    writer.forget(gone)
    writer.remember("another unrelated note", keys=["misc"])
    digest = text_hash(text)
    writer.embed([text])  # the live memory's text, embedded again
    writer.remember("a third unrelated note", keys=["misc"])  # saves (and maps) the new row
    assert np.array_equal(writer.vectors.get(digest), writer.embedder.embed([text])[0])  # type: ignore[arg-type]
    late.remember("a fourth unrelated note", keys=["misc"])  # folds the forget: purges T
    got = writer.vectors.get(digest)
    assert got is None or np.array_equal(got, writer.embedder.embed([text])[0])
    again = writer.remember(text, keys=["user"], namespace="default")
    assert again.deduplicated is not None and again.deduplicated.memory_id == kept


def count_hash_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the cache's reads of hash lines from now on."""
    hashes_read: list[int] = []

    class Counted:
        def __init__(self, path: str, mode: str) -> None:
            self._file, self._hashes = open(path, mode), path.endswith("hashes.txt")  # noqa: SIM115

        def __getattr__(self, name: str) -> object:
            return getattr(self._file, name)

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc: object) -> None:
            self._file.close()

        def read(self, n: int = -1) -> bytes:
            data: bytes = self._file.read(n)
            if self._hashes:
                hashes_read.append(len(data))
            return data

    monkeypatch.setattr(vectors_module, "open", Counted, raising=False)
    return hashes_read


def test_a_refresh_reads_only_the_hash_lines_another_process_added(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row another process saved made this one's next refresh read every hash line and
    index them all again (57 ms at 100,000 rows, paid by the next write or embed of each server
    on a shared store). Lines are of one length: only ours last and those after it are read;
    this process's unsaved rows still go after the new ones."""
    reader = VectorCache(tmp_path, "fp", DIM)
    put(reader, *[f"text {i}" for i in range(200)])
    reader.flush()
    writer = VectorCache(tmp_path, "fp", DIM)
    added = put(writer, "another's first", "another's second")
    writer.flush()
    (unsaved,) = put(reader, "the reader's own, unsaved")
    hashes_read = count_hash_reads(monkeypatch)
    reader.refresh()

    assert sum(hashes_read) == 3 * vectors_module._HASH_LINE
    assert len(reader) == 203 and reader.unsaved == 1
    assert [reader._rows[d] for d in [*added, unsaved]] == [200, 201, 202]
    reads_right(reader)
    reader.flush()
    again = VectorCache(tmp_path, "fp", DIM)
    assert [again._rows[d] for d in [*added, unsaved]] == [200, 201, 202]
    reads_right(again)


@pytest.mark.parametrize("longer", ["vectors", "hashes"])
def test_a_torn_last_row_then_a_writer_leaves_every_reader_its_rows(
    tmp_path: Path, small_remap: None, longer: str
) -> None:
    """A crash left one file a row (or part of one) longer than the other; a reader maps what
    is valid, a writer writes over the torn part, and both read every text right after."""
    first = VectorCache(tmp_path, "fp", DIM)
    put(first, *[f"text {i}" for i in range(5)])
    first.flush()
    folder = tmp_path / "fp"
    name = "vectors.f32" if longer == "vectors" else "hashes.txt"
    with open(folder / name, "ab") as f:
        f.write(b"\x01" * (4 * DIM + 3 if longer == "vectors" else 20))
    reader = VectorCache(tmp_path, "fp", DIM)
    assert len(reader) == 5
    writer = VectorCache(tmp_path, "fp", DIM)
    put(writer, *[f"more {i}" for i in range(4)])
    writer.flush()
    for cache in (first, reader, writer):
        cache.refresh()
        reads_right(cache)
        assert len(cache) == 9


def test_a_cache_deleted_under_a_mapping_process_is_made_anew_and_read_right(
    tmp_path: Path, small_remap: None
) -> None:
    """`rm -r cache/vectors` (or a rebuild) while a process maps the rows: its map keeps the old
    file; another process starts the cache again, with other texts at the same row numbers; the
    first reads only right vectors, before and after it notices, and its writes land after the
    new rows."""
    old = VectorCache(tmp_path, "fp", DIM)
    put(old, *[f"text {i}" for i in range(6)])
    old.flush()
    assert old._mapped == 6
    shutil.rmtree(tmp_path / "fp")
    reads_right(old)  # the deleted file stays mapped, nothing faults
    new = VectorCache(tmp_path, "fp", DIM)
    put(new, *[f"other {i}" for i in range(7)])
    new.flush()
    reads_right(old)
    put(old, "after")
    old.flush()
    for cache in (old, new, VectorCache(tmp_path, "fp", DIM)):
        cache.refresh()
        reads_right(cache)
    assert text_hash("after") in VectorCache(tmp_path, "fp", DIM)
    assert os.path.getsize(tmp_path / "fp" / "hashes.txt") == 8 * 33


def test_a_reembed_to_another_model_and_back_keeps_a_mapping_process_reading_right(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server maps the first model's rows; another process builds a second model's cache,
    forgets a memory that shares its text with a live one, and builds the first model again:
    the server still reads every text it has a row for as that model embeds it."""
    from keytrail.core import HashEmbedder, reembed

    monkeypatch.setattr(vectors_module, "REMAP_ROWS", 2)
    server = make_store()
    text = "the user keeps the lamp in the drawer"
    kept = server.remember(text, keys=["user"], namespace="default").memory_id
    gone = server.remember(text, keys=["user"], namespace="other").memory_id
    for i in range(5):
        server.remember(f"note number {i}", keys=["misc"])
    other = make_store(home=server.home, embedder=HashEmbedder(dim=64))
    reembed.build(other)
    other.forget(gone)
    back = make_store(home=server.home)
    reembed.build(back)
    server.refresh()
    texts = [n.content for n in server.state.memories.values() if n.content]
    assert np.array_equal(server.embed(texts), server.embedder.embed(texts))
    assert server.remember(text, keys=["user"], namespace="default").deduplicated.memory_id == kept  # type: ignore[union-attr]
    assert np.array_equal(server.embed([text])[0], server.embedder.embed([text])[0])


REPLACED_BETWEEN_OPENS = r"""
import builtins, shutil, sys
from pathlib import Path
import numpy as np
from keytrail.projections import VectorCache, text_hash
from keytrail.projections import vectors as vectors_module

home, dim = Path(sys.argv[1]), 8
old = VectorCache(home, "fp", dim)
texts = [f"old {i}" for i in range(2000)]
old.put_many([text_hash(t) for t in texts], np.ones((len(texts), dim), dtype=np.float32))
old.flush()
armed = True


def replaced_between_opens(path, mode="r", *args, **kwargs):
    # The cache is deleted and made anew between a reader's opening of hashes.txt and of
    # vectors.f32: a writer killed after writing its 1000 rows, before their hash lines.
    global armed
    if armed and str(path).endswith("vectors.f32"):
        armed = False
        shutil.rmtree(home / "fp")
        (home / "fp").mkdir()
        (home / "fp" / "vectors.f32").write_bytes(bytes(4 * dim * 1000))
    return builtins.open(path, mode, *args, **kwargs)


vectors_module.open = replaced_between_opens
reader = VectorCache(home, "fp", dim)
del vectors_module.open
writer = VectorCache(home, "fp", dim)  # writes over the rows that have no hash line
writer.put_many([text_hash("new")], np.ones((1, dim), dtype=np.float32))
writer.flush()
for digest in reversed(list(reader._rows)):  # the last first: past the end page
    assert float(np.asarray(reader.get(digest)).sum()) == dim, digest
reader.refresh()
assert list(reader._rows) == [text_hash("new")], len(reader._rows)
print("answered")
"""


def test_a_cache_made_anew_between_a_readers_two_opens_is_not_mapped_past_its_end(
    tmp_path: Path,
) -> None:
    """A reader opens hashes.txt, then vectors.f32, by name and unlocked: a cache deleted and
    made anew in between paired the old hash lines with the new file's rows, mapping rows no
    hash line vouches for; a writer then cut them, and touching a page past the file's end is
    a SIGBUS, which kills the process (an MCP server). The reader must see one pair."""
    child = subprocess.run(
        [sys.executable, "-c", REPLACED_BETWEEN_OPENS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr}"
    assert child.stdout == "answered\n"


@pytest.mark.parametrize("looked_up", [True, False])
def test_a_purge_of_the_readers_last_row_is_not_taken_for_files_made_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, looked_up: bool
) -> None:
    """A forget of the text in the last row a reader had read dashes that row's hash line,
    the line the reader checks to tell its files from ones made anew. Taken for new files,
    its next look read every hash line again (57 ms at 100,000 rows) and the texts it had
    dropped stayed unread whatever the new files held. A forget it folded explains the
    dashes: only the lines added since are read, and the text told again is read."""
    reader = VectorCache(tmp_path, "fp", DIM)
    *_, last = put(reader, *[f"text {i}" for i in range(200)])
    reader.flush()
    if looked_up:
        reader.get(text_hash("anything"))  # the row index is built
    forgetter = VectorCache(tmp_path, "fp", DIM)
    forgetter.forget_saved(last)
    forgetter.purge({last})
    reader.forget_saved(last)  # folded the forget
    added = put(forgetter, "another's first", "another's second")
    forgetter.flush()
    hashes_read = count_hash_reads(monkeypatch)
    reader.refresh()
    assert sum(hashes_read) == 3 * vectors_module._HASH_LINE
    assert reader.get(last) is None
    assert [reader._rows[d] for d in added] == [200, 201]
    reads_right(reader, {last})
    (unsaved,) = put(reader, "the reader's own")
    reader.flush()  # under the lock, the dashed line is checked again
    assert reader._rows[unsaved] == 202 and reader.unsaved == 0
    told_again_is_read(tmp_path, reader, "text 199")


def test_a_purge_zeroes_every_erased_row_an_earlier_purge_left_holding_a_vector(
    tmp_path: Path,
) -> None:
    """A purge dashes hash lines, then zeroes their vectors; one killed between leaves rows
    whose text is gone but whose vector stays. Any later purge zeroes every such row (a -0.0
    is not a zero), and leaves the rows of live texts and the other erased rows as they are."""
    cache = VectorCache(tmp_path, "fp", DIM)
    digests = put(cache, *[f"text {i}" for i in range(40)])
    cache.flush()
    cache.purge({digests[3], digests[17], digests[30]})
    path = tmp_path / "fp" / "vectors.f32"
    rows = np.fromfile(path, dtype=np.float32).reshape(40, DIM)
    assert not rows[[3, 17, 30]].any()
    # What a purge killed after its dashes left: rows 17 and 30 hold a vector again.
    rows[17] = vector_of(digests[17])
    rows[30] = 0.0
    rows[30, 5] = -0.0
    rows.tofile(path)
    before = os.stat(path).st_mtime_ns
    cache.purge({digests[8]})
    after = np.fromfile(path, dtype=np.float32).reshape(40, DIM)
    assert not after[[3, 8, 17]].any()
    assert after[30].tobytes() == bytes(4 * DIM)  # the -0.0 too
    live = [i for i in range(40) if i not in (3, 8, 17, 30)]
    assert np.array_equal(after[live], np.stack([vector_of(digests[i]) for i in live]))
    assert os.stat(path).st_mtime_ns > before  # rewritten in place: a backup sees it
    reads_right(VectorCache(tmp_path, "fp", DIM))
