"""Embedding projections: switching model by replaying history, switching back for free,
resuming an interrupted build, rebuilding a deleted cache to the same answers, profiles."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from keytrail.core import HashEmbedder, InvalidInput, Settings, Store, profile_for, to_dict
from keytrail.core import reembed as projection
from keytrail.core.embedders import Embedder, FastEmbedder
from keytrail.core.profiles import PROFILES
from keytrail.projections import VectorCache
from keytrail.projections.snapshot import LazyNodes, materialize
from keytrail.projections.vectors import Matrix

REPO = Path(__file__).resolve().parent.parent


class Counting:
    """Wraps an embedder and records every text it is asked to embed."""

    def __init__(self, inner: Embedder, fail_after_calls: int | None = None) -> None:
        self.inner = inner
        self.backend, self.model_id = inner.backend, inner.model_id
        self.texts: list[str] = []
        self.calls = 0
        self.fail_after_calls = fail_after_calls

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def fingerprint(self) -> str:
        return self.inner.fingerprint

    def embed(self, texts: Sequence[str]) -> Matrix:
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt  # what Ctrl-C in the middle of a long build looks like
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.embed(texts)


def fill(store: Store) -> dict[str, str]:
    """A small store with depth, Hebbian weights, a correction and a merged alias."""
    lisbon = store.remember("The user lives in Lisbon near the river", ["home city"])
    newton = store.remember(
        "Newton saw an apple fall and thought about gravity",
        ["gravity", "Newton"],
        key_types={"Newton": "name"},
    )
    tea = store.remember("The user drinks green tea every morning", ["tea", "morning routine"])
    store.remember("The user drinks green tea every morning!", ["tea"])  # a dedup by hash
    home_key = lisbon.keys[0].key_id
    for _ in range(3):
        store.read_memory(lisbon.memory_id, via_key_id=home_key)
    fixed = store.correct(newton.memory_id, "Newton saw an apple fall and described gravity")
    return {"lisbon": lisbon.memory_id, "tea": tea.memory_id, "newton": fixed.memory_id}


def graph(store: Store) -> Any:
    return msgspec.to_builtins(materialize(store.state))


def log_bytes(store: Store) -> bytes:
    return b"".join((store.log.dir / name).read_bytes() for name in store.log.segments())


@pytest.mark.slow
def test_hash_store_switched_to_minilm_keeps_graph_and_recalls_with_it(
    make_store: Callable[..., Store], real_embedder: FastEmbedder
) -> None:
    hashed = make_store()
    ids = fill(hashed)
    query = "Where does the user live?"
    # Hashing knows words, not meaning: no word of the query is in "home city".
    assert "home city" not in [k.label for k in hashed.recall(query).keys]
    projection.build(hashed)  # as every command-line open does
    before, log_before = graph(hashed), log_bytes(hashed)
    depth_before = hashed.state.memories[ids["lisbon"]].depth
    hashed.close()

    minilm = make_store(home=hashed.home, embedder=Counting(real_embedder))
    assert not projection.status(minilm).current  # the switch is detected by fingerprint
    built = projection.build(minilm)
    assert built.fingerprint == real_embedder.fingerprint and built.embedded == built.texts
    # Nothing was re-decided: graph (depth, weights, dedup, merges) and log are as they were.
    assert graph(minilm) == before and log_bytes(minilm) == log_before
    assert depth_before > 0 and minilm.state.memories[ids["lisbon"]].depth == depth_before
    assert minilm.state.memories[ids["tea"]].superseded_by is not None  # hash's dedup stands
    assert minilm.thresholds == PROFILES[real_embedder.model_id]
    found = minilm.recall(query)
    assert found.keys[0].label == "home city" and found.keys[0].match == "similar"
    matrices = minilm.memory_vectors().matrix.tobytes(), minilm.key_vectors().matrix.tobytes()
    minilm.close()

    back = Counting(HashEmbedder())
    hashed_again = make_store(home=hashed.home, embedder=back)
    rebuilt = projection.build(hashed_again)
    assert rebuilt.embedded == 0 and back.calls == 0  # switching back embeds nothing
    assert len(hashed_again.memory_vectors()) == len(hashed_again.state.memories)
    hashed_again.recall("green tea")
    assert back.texts == ["green tea"]  # only the query itself
    assert {fp for fp, _, _ in projection.list_projections(hashed.home)} == {
        HashEmbedder().fingerprint,
        real_embedder.fingerprint,
    }
    hashed_again.close()

    # The real model rebuilds a deleted cache to the same vectors and the same answers.
    shutil.rmtree(hashed.home / "cache")
    again = make_store(home=hashed.home, embedder=real_embedder)
    projection.build(again)
    assert to_dict(again.recall(query)) == to_dict(found)
    assert (again.memory_vectors().matrix.tobytes(), again.key_vectors().matrix.tobytes()) == (
        matrices
    )
    again.close()


def test_listing_the_texts_to_embed_leaves_a_lazily_loaded_state_undecoded(
    make_store: Callable[..., Store],
) -> None:
    """A build lists every text the projection needs: through `values()`, which decoded a
    lazily loaded state whole (~0.4-0.5 s at 100,000 memories, under the store's mutex). It
    reads the contents undecoded, the same texts in the same order."""
    writer = make_store()
    fill(writer)
    writer.close()
    eager = make_store(home=writer.home)
    materialize(eager.state)
    expected = projection.needed_texts(eager)
    store = make_store(home=writer.home)
    memories = store.state.memories
    assert isinstance(memories, LazyNodes)
    assert projection.needed_texts(store) == expected
    assert [m for m, v in dict.items(memories) if type(v) is not int] == []


def test_an_interrupted_build_resumes_where_it_stopped(
    make_store: Callable[..., Store],
) -> None:
    writer = make_store()
    fill(writer)
    for i in range(20):
        writer.remember(f"Filler fact number {i} about topic {i}", [f"topic {i}"])
    writer.close()
    other = HashEmbedder(dim=128)  # another "model": nothing of it is cached yet
    failing = Counting(other, fail_after_calls=3)
    store = make_store(home=writer.home, embedder=failing)
    needed = len(projection.needed_texts(store))
    with pytest.raises(KeyboardInterrupt):
        projection.build(store, batch=5)
    # The three batches embedded before the interrupt are on disk; the seq is not recorded.
    on_disk = VectorCache(store.home / "cache" / "vectors", other.fingerprint, other.dim)
    assert len(on_disk) == 15 and on_disk.manifest() is None
    assert not projection.status(store).current
    store.close()

    resumed = Counting(HashEmbedder(dim=128))
    store = make_store(home=writer.home, embedder=resumed)
    seen: list[tuple[int, int]] = []
    result = projection.build(store, lambda done, total: seen.append((done, total)), batch=5)
    assert result.embedded == needed - 15 and len(resumed.texts) == needed - 15
    assert not set(resumed.texts) & set(failing.texts)  # nothing embedded twice
    assert seen[0] == (0, needed - 15) and seen[-1] == (needed - 15, needed - 15)
    assert projection.status(store).current
    assert np.allclose(
        store.memory_vectors().matrix,
        other.embed([m.content for m in store.state.memories.values()]),
    )


def test_deleting_the_cache_and_reopening_gives_identical_results(
    make_store: Callable[..., Store],
) -> None:
    first = make_store()
    ids = fill(first)
    projection.build(first)

    def answers(store: Store) -> Any:
        key = store.recall("tea").keys[0].key_id
        return (
            to_dict(store.recall("green tea in the morning")),
            to_dict(store.recall("where the user lives", top_k=3)),
            to_dict(store.read_key(key, query="morning tea")),
            store.memory_vectors().matrix.tobytes(),
            store.key_vectors().matrix.tobytes(),
            to_dict(store.memory_view(store.state.memories[ids["tea"]])),
        )

    before = answers(first)
    first.close()
    shutil.rmtree(first.home / "cache")
    again = make_store(home=first.home)
    assert not projection.status(again).current
    projection.build(again)
    assert answers(again) == before
    assert projection.status(again).current


CLOSE_DURING_A_BUILD = """
import sys, time
from keytrail.core import HashEmbedder, RememberItem, Settings, Store, reembed
home, model_path = sys.argv[1], sys.argv[2] or None
with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder()) as writer:
    for start in range(0, 2000, 500):
        ids = range(start, start + 500)
        writer.remember_batch([RememberItem(f"fact {i}", [f"topic {i}"]) for i in ids])
store = Store(Settings(home=home, embedder="fastembed", model_path=model_path))
reembed.build_in_background(store)  # 4,000 texts the model has no vectors for
time.sleep(1.0)  # inside a model call
store.close()
print("closed", flush=True)
"""


def test_a_process_that_closes_its_store_during_a_build_exits_cleanly(tmp_path: Path) -> None:
    """close stopped a build in the background only at its next step: a process exiting while
    the build's thread was inside a model call aborted in the model's runtime ("terminate
    called without an active exception", status 134), 3 runs in 3 here."""
    from conftest import model_path

    done = subprocess.run(
        [sys.executable, "-c", CLOSE_DURING_A_BUILD, str(tmp_path / "store"), model_path() or ""],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stdout) == (0, "closed\n"), done.stderr[-2000:]
    assert "terminate called" not in done.stderr


def test_reembed_verb_builds_and_lists(tmp_path: Path) -> None:
    home = tmp_path / "store"
    env = {"KEYTRAIL_HOME": str(home), "KEYTRAIL_EMBEDDER": "hash", "PATH": "/usr/bin:/bin"}

    def kt(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "keytrail.server.cli", *args],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    kt("remember", "Ada keeps bees on the roof", "-k", "bees", "-n", "Ada")
    built = json.loads(kt("reembed", "--json"))
    # key labels, then contents: two keys, one memory
    assert built["texts"] == 3 and built["seq"] == 2
    assert built["fingerprint"] == HashEmbedder().fingerprint
    again = json.loads(kt("reembed", "--json"))
    assert again["embedded"] == 0
    listed = json.loads(kt("reembed", "--list", "--json"))
    assert listed == [
        {"fingerprint": HashEmbedder().fingerprint, "rows": 3, "seq": 2, "current": True}
    ]
    assert "from the cache" in kt("reembed")
    # A cache whose manifest was lost (never recorded, or damaged) is listed by its folder
    # name: still the one in use.
    (cache,) = (home / "cache" / "vectors").iterdir()
    (cache / "manifest.json").unlink()
    (unrecorded,) = json.loads(kt("reembed", "--list", "--json"))
    assert unrecorded["seq"] is None and unrecorded["current"] is True
    assert kt("reembed", "--list").startswith("* ")


def test_reembed_list_counts_the_vectors_each_model_holds_not_the_rows_forgets_erased(
    tmp_path: Path,
) -> None:
    """Two models on one store (a server on each): each projection is listed with the vectors it
    holds. A forget erases its text's row in every model's cache (the row stays, dashed and
    zeroed, so row numbers hold): it holds no vector any more and is not counted as one. So
    does the row of a label it erased (a key that led to that memory alone): no live label
    has that vector either."""
    home = tmp_path / "store"
    stores = [
        Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(dim)) for dim in (256, 64)
    ]
    first = stores[0].remember("Ada keeps bees on the roof", ["bees"])
    stores[1].remember("Omar plays the cello", ["cello"])
    for store in stores:
        projection.build(store)
    listed = {fp: rows for fp, rows, _ in projection.list_projections(home)}
    assert listed == {"hash:v1:256": 4, "hash:v1:64": 4}  # two labels and two contents each
    bees = stores[1].state.key_for_label("bees").id  # type: ignore[union-attr]
    assert stores[1].forget(first.memory_id).labels_erased == [bees]
    listed = {fp: rows for fp, rows, _ in projection.list_projections(home)}
    assert listed == {"hash:v1:256": 2, "hash:v1:64": 2}  # "cello" and Omar's fact each
    for store in stores:
        store.close()


def test_the_local_model_runs_on_the_threads_its_settings_give(tmp_path: Path) -> None:
    """One ONNX thread unless told: a query embeds a text or two, which more threads do not
    speed up, and the runtime's threads spin between calls. 0 leaves it one per core."""
    from keytrail.core.embedders import make_embedder

    def session_threads(embedder: Embedder) -> tuple[int, int]:
        assert isinstance(embedder, FastEmbedder)
        embedder.embed(["a text"])
        options = embedder._model.model.model.get_session_options()
        return options.intra_op_num_threads, options.inter_op_num_threads

    path = os.environ.get("KEYTRAIL_EMBED_MODEL_PATH") or None
    assert session_threads(make_embedder("fastembed", None, path)) == (1, 1)
    assert session_threads(make_embedder("fastembed", None, path, threads=3)) == (3, 3)
    assert session_threads(make_embedder("fastembed", None, path, threads=0)) == (0, 0)
    with Store(Settings(home=tmp_path / "store", model_path=path, embed_threads=2)) as store:
        assert session_threads(store.embedder) == (2, 2)


@pytest.mark.parametrize(
    ("verb", "variable", "threads"),
    [
        ("recall", None, 1),
        ("serve", None, 1),
        ("reembed", None, 0),
        ("rebuild", None, 0),
        ("import", None, 0),
        ("reembed", "2", 2),
        ("recall", "4", 4),
    ],
)
def test_bulk_verbs_embed_on_every_core_unless_the_variable_says(
    monkeypatch: pytest.MonkeyPatch, verb: str, variable: str | None, threads: int
) -> None:
    from keytrail.server.cli import build_parser
    from keytrail.server.shell import settings_from

    monkeypatch.delenv("KEYTRAIL_EMBED_THREADS", raising=False)
    if variable is not None:
        monkeypatch.setenv("KEYTRAIL_EMBED_THREADS", variable)
    args = build_parser().parse_args([verb] + (["a query"] if verb == "recall" else []))
    if verb == "import":
        args = build_parser().parse_args(["import", "export.jsonl"])
    assert settings_from(args).embed_threads == threads


@pytest.mark.parametrize("value", ["-1", "100000", "two"])
def test_an_embed_threads_no_runtime_can_use_is_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        Settings.from_env({"KEYTRAIL_EMBED_THREADS": value})
    assert refused.value.field == "KEYTRAIL_EMBED_THREADS"


def test_profiles_for_known_models_and_closest_for_unknown() -> None:
    for model in (
        "sentence-transformers/all-MiniLM-L6-v2",
        "BAAI/bge-small-en-v1.5",
        "BAAI/bge-m3",
        "intfloat/multilingual-e5-large",
        "text-embedding-3-small",
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            t = profile_for(model)
        # the bands are ordered the same way for every model
        assert t.key_recall < t.merge < t.dedup and t.contradiction < t.dedup
    with pytest.warns(UserWarning, match="text-embedding-3-small"):
        assert profile_for("text-embedding-3-large") == PROFILES["text-embedding-3-small"]
    with pytest.warns(UserWarning, match="bge-small-en-v1.5"):
        assert profile_for("BAAI/bge-base-en-v1.5") == PROFILES["BAAI/bge-small-en-v1.5"]
    assert profile_for("BAAI/bge-m3", {"merge": 0.5}).merge == 0.5


def _hash_vector_reference(text: str, dim: int) -> np.ndarray:
    """hash:v1 as first written: feature by feature into float32, then float32 normalisation."""
    row = np.zeros((1, dim), dtype=np.float32)
    for word in re.findall(r"\w+", text.casefold()):
        padded = f"<{word}>"
        for feat in [word, *(padded[i : i + 3] for i in range(len(padded) - 2))]:
            h = zlib.crc32(feat.encode())
            row[0, h % dim] += 1.0 if (h >> 31) & 1 else -1.0
    norms = np.linalg.norm(row, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    result: np.ndarray = row / norms
    return result[0]


@pytest.mark.parametrize("dim", [16, 256, 384])
def test_hash_vectors_stay_bit_identical_to_hash_v1(dim: int) -> None:
    # Cached vectors are keyed by fingerprint: a faster embedder must give the same bytes.
    rng = random.Random(dim)
    words = ["apple", "Apples", "naïve", "Straße", "日本語", "x", "42", "a_b", "running"]
    words += [f"w{i}" for i in range(500)]
    texts = ["", "!!", "topic 5"] + [
        " ".join(rng.choice(words) for _ in range(rng.choice([1, 3, 18, 80, 600])))
        for _ in range(150)
    ]
    embedder = HashEmbedder(dim)
    batch = embedder.embed(texts)
    for i, text in enumerate(texts):
        expected = _hash_vector_reference(text, dim).tobytes()
        assert batch[i].tobytes() == expected
        assert embedder.embed([text])[0].tobytes() == expected


def test_the_hashing_embedder_makes_the_embed_dim_asked_for(tmp_path: Path) -> None:
    """KEYTRAIL_EMBED_DIM was ignored by the hashing embedder: a store asked for 64 dimensions
    got 256 (`hash:v1:256`) without a word."""
    home = tmp_path / "store"
    with Store(Settings(home=home, embedder="hash", embed_dim=64)) as store:
        store.remember("Dana lives in Lyon", ["Lyon"])
        assert store.embedder.fingerprint == "hash:v1:64"
        assert store.memory_stats().embedder == "hash:v1:64"
    with Store(Settings(home=home, embedder="hash")) as default:
        assert default.embedder.fingerprint == "hash:v1:256"


def test_an_embed_dim_a_local_model_does_not_make_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """KEYTRAIL_EMBED_DIM is for OpenAI-compatible models keytrail does not know; left set
    from one (or mistyped) with the local model, it made the first remember fail with a numpy
    broadcast error after the store had been created."""
    from keytrail.core import Settings, StoreError

    with pytest.raises(StoreError, match=r"KEYTRAIL_EMBED_DIM.*512.*384") as err:
        FastEmbedder(dim=512)
    assert err.value.fields["field"] == "embed_dim"
    assert FastEmbedder(dim=384).dim == 384  # the model's own dimension is fine
    home = tmp_path / "store"
    with pytest.raises(StoreError, match="KEYTRAIL_EMBED_DIM"):
        Store(Settings(home=home, embedder="fastembed", embed_dim=512))
    assert not home.exists()


def test_a_command_after_another_process_remembered_builds_nothing(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `remember` by a process still running (a server: it records the seq at its close)
    embeds and saves its rows but records no seq: the next command's open finds them all (the
    new contents and every label) and records the projection current, without a build listing
    and hashing every text of the store. A text without a row still takes the build, which
    embeds just it."""
    from keytrail.server.embed_cli import ensure_projection

    writer = make_store()
    fill(writer)
    projection.build(writer)
    writer.close()
    other = make_store(home=writer.home)
    other.remember("The user bought a red bicycle", ["bicycle"])
    store = make_store(home=writer.home)
    assert not projection.status(store).current
    built: list[Store] = []
    build = projection.build
    monkeypatch.setattr(projection, "build", lambda s, *a, **k: built.append(s) or build(s))
    assert ensure_projection(store) is None and not built
    assert projection.status(store).current
    store.close()
    other.close()
    # Told by a process with another model: its rows went to that model's cache.
    elsewhere = make_store(home=writer.home, embedder=HashEmbedder(dim=128))
    elsewhere.remember("The user sold the old scooter", ["scooter"])
    elsewhere.close()
    counting = Counting(HashEmbedder())
    store = make_store(home=writer.home, embedder=counting)
    result = ensure_projection(store)
    assert built == [store] and result is not None
    assert sorted(counting.texts) == ["The user sold the old scooter", "scooter"]
    assert projection.status(store).current
