"""The embedding projections a store keeps in memory: key labels and memory contents."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from keytrail.core import Store


def test_memory_vectors_follow_the_graph_and_embed_each_text_once(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    first = store.remember("Ada keeps bees on the roof", ["bees"])
    assert store.memory_vectors().ids == [first.memory_id]
    second = store.remember("The roof garden has tomatoes", ["garden"])
    third = store.correct(second.memory_id, "The roof garden has peppers now")

    vectors = store.memory_vectors()
    assert vectors.ids == [first.memory_id, second.memory_id, third.memory_id]
    expected = store.embed(
        [
            "Ada keeps bees on the roof",
            "The roof garden has tomatoes",
            "The roof garden has peppers now",
        ]
    )
    assert np.allclose(vectors.matrix, expected)
    # A second look embeds nothing new and returns the same rows.
    assert store.memory_vectors().matrix.shape == (3, store.embedder.dim)


def test_memory_vectors_see_writes_of_another_store_on_the_same_home(
    make_store: Callable[..., Store],
) -> None:
    writer = make_store()
    reader = make_store(home=writer.home)
    assert reader.memory_vectors().ids == []
    made = writer.remember("Lin runs on Sundays", ["running"])
    reader.refresh()
    assert reader.memory_vectors().ids == [made.memory_id]


def test_a_vector_cache_maps_its_saved_rows_instead_of_holding_them(tmp_path: Path) -> None:
    """Rows on disk are mapped, not read into memory: a server that never needs most content
    vectors does not hold them, and servers on one store share their pages. Rows this process
    saves are mapped too once there are enough of them; a purge's zeros show through the map."""
    from keytrail.projections import VectorCache, text_hash
    from keytrail.projections import vectors as vectors_module

    rng = np.random.default_rng(3)
    n = vectors_module.REMAP_ROWS + 10
    digests = [text_hash(f"text {i}") for i in range(n)]
    rows = rng.standard_normal((n, 8)).astype(np.float32)
    writer = VectorCache(tmp_path, "fp", 8)
    writer.put_many(digests[:5], rows[:5])
    writer.flush()
    assert writer._mapped == 0 and len(writer._mem) >= 5  # a few saved rows stay in memory
    writer.put_many(digests[5:], rows[5:])
    writer.flush()
    assert writer._mapped == n and len(writer._mem) == 0  # then they are mapped
    reader = VectorCache(tmp_path, "fp", 8)  # another process
    assert isinstance(reader._disk, np.memmap) and reader._mapped == n
    assert len(reader._mem) == 0
    for cache in (writer, reader):
        assert np.array_equal(cache.rows(digests), rows)
        assert np.array_equal(cache.rows_if_all(digests[::-7]), rows[::-7])  # type: ignore[arg-type]
    # An unsaved row sits in memory beside the mapped ones; a lookup mixes both.
    extra = text_hash("one more")
    reader.put_many([extra], np.ones((1, 8), np.float32))
    assert np.array_equal(reader.rows([digests[3], extra])[1], np.ones(8, np.float32))
    # A purge by the writer zeroes the rows in the file: the reader's map shows it at once.
    writer.purge({digests[7]})
    assert not reader.get(digests[7]).any()  # type: ignore[union-attr]
    assert np.array_equal(reader.get(digests[8]), rows[8])


def test_rows_a_reader_embedded_are_saved_when_it_closes(tmp_path: Path) -> None:
    """A server that only reads embeds, with its own model, what other processes wrote with
    theirs. It saved those rows only at a write of its own: every start of it embedded them
    all again (seconds per thousand texts with a real model)."""
    from keytrail.core import HashEmbedder, Settings

    class Counting(HashEmbedder):
        texts = 0

        def embed(self, texts: list[str]) -> np.ndarray:
            Counting.texts += len(texts)
            return super().embed(texts)

    home = tmp_path / "store"
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(64)) as writer:
        for i in range(5):
            writer.remember(f"fact number {i} about the garden", [f"topic {i}"])
    settings = Settings(home=home, embedder="hash")
    with Store(settings, embedder=Counting()) as reader:  # the other model, reading only
        reader.memory_vectors(), reader.key_vectors()
    assert Counting.texts == 10  # five contents and five labels, with this model
    Counting.texts = 0
    with Store(settings, embedder=Counting()) as again:
        assert again.memory_vectors().matrix.shape == (5, 256)
        assert again.key_vectors().matrix.shape == (5, 256)
    assert Counting.texts == 0  # read from the cache the first reader saved


def test_a_damaged_byte_in_the_hash_lines_does_not_stop_the_store(
    make_store: Callable[..., Store],
) -> None:
    """A hash line with a byte that is not UTF-8 (disk damage, which `verify` reports as a
    malformed line) stopped every command that read a vector with a UnicodeDecodeError. The
    damaged row is no text's: its text is embedded again, the others are read as before."""
    writer = make_store()
    for i in range(3):
        writer.remember(f"fact number {i} about the garden", [f"topic {i}"])
    writer.close()
    hashes = next((writer.home / "cache" / "vectors").glob("*/hashes.txt"))
    damaged = bytearray(hashes.read_bytes())
    damaged[5] = 0xFF  # in the first row's hash line
    hashes.write_bytes(bytes(damaged))

    reader = make_store(home=writer.home)
    vectors = reader.memory_vectors()
    assert len(vectors.ids) == 3
    expected = reader.embedder.embed([f"fact number {i} about the garden" for i in range(3)])
    assert np.allclose(vectors.matrix, expected)
    assert [k.label for k in reader.recall("topic 1").keys][:1] == ["topic 1"]


def test_a_store_that_ever_forgot_opens_its_vector_cache_without_indexing_it(
    make_store: Callable[..., Store],
) -> None:
    """The cache indexes its rows on the first lookup, which a command that looks none up
    skips; a store with a past forget built the index at open anyway, to drop the forgotten
    rows. It now drops them when the index is built, with the same rows read."""
    writer = make_store()
    kept = [writer.remember(f"fact number {i} about the garden", [f"topic {i}"]) for i in range(3)]
    gone = writer.remember("the door code is 4711", ["door"])
    twin = writer.remember("the door code is 4711", ["door"], namespace="work")  # same text
    reader = make_store(home=writer.home)
    writer.forget(gone.memory_id)  # another process's, folded by the reader before any lookup
    reader.refresh()
    cache = reader.vectors
    assert cache._index is None  # opened, nothing looked up, no index built
    vectors = reader.memory_vectors()
    shown = {m: vectors.matrix[i] for i, m in enumerate(vectors.ids)}
    expected = reader.embedder.embed([f"fact number {i} about the garden" for i in range(3)])
    for i, told in enumerate(kept):
        assert np.allclose(shown[told.memory_id], expected[i])
    # The text a forget dropped is embedded again for the memory still holding it.
    assert np.allclose(shown[twin.memory_id], reader.embedder.embed(["the door code is 4711"])[0])
