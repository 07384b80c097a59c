"""verify checks the derived files too: each snapshot, the text index and every vector cache
against the log folded to the seq it claims; it writes nothing; rebuild mends what it finds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tantivy
from test_cli import REPO, env_for

from keytrail.core import HashEmbedder, Settings, Store, forgetting, maintenance
from keytrail.core import store as store_module
from keytrail.core.forgetting import PendingPurge
from keytrail.core.history import history
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph
from keytrail.core.maintenance import drop_cache, verify
from keytrail.core.store import content_hash
from keytrail.events import CorruptLog, EventLog, KeyLink, MemoryRemembered, NewMemory
from keytrail.projections import snapshot as snapshots
from keytrail.projections.vectors import text_hash


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A store with every kind of derived file: snapshot, text index, vector cache with a
    recorded coverage, and one forgotten memory."""
    home = tmp_path / "store"
    store = open_store(home)
    try:
        for i, text in enumerate(["Alice likes green tea", "Bob sails on Sundays", "Dana cooks"]):
            store.remember(text, [f"topic {i}", "hobby"])
        gone = store.remember("The door code is 4711", ["door"])
        store.forget(gone.memory_id)
        store.index_text()
        store.memory_vectors()
        store.key_vectors()
        store.save_vectors((store.state.store_id, store.state.seq))
    finally:
        store.close()
    return home


def files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


def vectors_dir(home: Path) -> Path:
    return next((home / "cache" / "vectors").iterdir())


def keytrail(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command line on the store at `home` (with the hashing embedder, at 256 dimensions
    unless KEYTRAIL_EMBED_DIM is given)."""
    return subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env_for(home) | env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_healthy_store_checks_every_cache_and_writes_nothing(home: Path) -> None:
    before = files(home)
    report = verify(home)
    assert report.ok and report.cache_problems == [] and report.caches_ignored == []
    checked = " | ".join(report.caches_checked)
    assert "cache/snapshot/keygraph.msgpack (seq 6)" in checked
    assert "index/text (seq 6, 3 memories)" in checked  # the forgotten one is not indexed
    assert "covers seq 6" in checked
    assert files(home) == before


def test_a_process_that_saved_every_row_records_the_coverage_at_close(tmp_path: Path) -> None:
    """A server's remembers save their rows but recorded no coverage: after a session verify
    (and `reembed --list`) said the cache covered the seq of its start, though it held every
    row. At close the coverage is recorded where every text has a row, and only there."""
    home = tmp_path / "s"
    store = open_store(home)
    try:
        store.remember("Alice likes green tea", ["tea"])
        store.save_vectors((store.state.store_id, store.state.seq))  # as a build at start does
        store.remember("Bob sails on Sundays", ["sailing", "Bob"])
        store.remember("Dana cooks", ["cooking"])
    finally:
        store.close()
    assert recorded(home) == 4
    report = verify(home)
    assert report.ok and any("covers seq 4" in c for c in report.caches_checked)
    # Another model's process told a memory this model has no row for: nothing is recorded.
    store = open_store(home)
    other = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(dim=64))
    try:
        store.remember("Eve rides a bike", ["cycling"])
        other.remember("Finn plays chess", ["chess"])
    finally:
        other.close()
        store.close()
    assert recorded(home) == 4
    assert verify(home).ok


def test_a_close_after_a_remember_hashes_no_label_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close's coverage check hashed every key label again, moments after `key_vectors`
    had hashed them all for the remember's new key (~45-90 ms at 20,000 labels): each label
    is hashed once per process."""
    home = tmp_path / "s"
    store = open_store(home)
    try:
        for i in range(5):
            store.remember(f"fact number {i} about the garden", [f"topic {i}", "garden"])
        store.save_vectors((store.state.store_id, store.state.seq))
    finally:
        store.close()
    hashed: list[str] = []

    def counting(text: str) -> str:
        hashed.append(text)
        return text_hash(text)

    monkeypatch.setattr(store_module, "text_hash", counting)
    store = open_store(home)
    try:
        held = set(store.state.labels)  # the request's own keys are hashed as queries too
        store.remember("a fresh fact about topic 2 and its keeper", ["topic 2", "keeper"])
    finally:
        store.close()
    assert recorded(home) == 7  # the close checked every label, and recorded the coverage
    told = [text for text in hashed if text in held - {"topic 2"}]
    assert sorted(told) == sorted(held - {"topic 2"})  # each hashed once, not twice


def test_a_write_after_another_process_forgot_hashes_no_label_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that folds another's forget checks, at its next write, whether a key label
    holds the forgotten text (its row stays then): the labels of the text's length were each
    hashed again there, not taken from the process's memo of label digests."""
    home = tmp_path / "s"
    writer = open_store(home)
    forgetter = open_store(home)
    try:
        secret = "my PIN is 739100"
        same_length = ["the garden paths", "a kitchen shelfs", "the orchard rows"]
        assert {len(label) for label in same_length} == {len(secret)}
        writer.remember("the garden has an orchard", same_length)
        doomed = writer.remember(secret, ["PIN"])
        writer.key_vectors()  # every label hashed, as a server's first recall does
        forgetter.forget(doomed.memory_id)
        hashed: list[str] = []

        def counting(text: str) -> str:
            hashed.append(text)
            return text_hash(text)

        monkeypatch.setattr(store_module, "text_hash", counting)
        writer.remember("the orchard is pruned in March", ["pruning"])
        assert writer.state.memories[doomed.memory_id].status == "forgotten"
        assert not [text for text in hashed if text in {s.casefold() for s in same_length}]
    finally:
        forgetter.close()
        writer.close()


def test_an_erased_or_dropped_label_leaves_the_memo_of_label_digests(tmp_path: Path) -> None:
    """The labels' digests are kept for the process's life: a forgotten label's text must not
    stay in it after the forget, nor a dropped alias's after the labels dropped it."""
    store = open_store(tmp_path / "s")
    try:
        secret = store.remember("my bank PIN is 7391", ["PIN 7391"])
        store.remember("Alice likes green tea", ["tea", "Alice"])
        store.key_vectors()
        assert {"pin 7391", "tea", "alice"} <= set(store._label_digests)
        store.forget(secret.memory_id)
        assert "pin 7391" not in store._label_digests
        del store.state.labels["alice"]  # as key.unaliased drops a learned alias
        store.state.labels_dropped += 1
        store.key_vectors()
        assert set(store._label_digests) == {"tea"}
    finally:
        store.close()


def test_a_close_with_only_the_coverage_to_record_does_not_wait_for_another_writer(
    tmp_path: Path,
) -> None:
    """Recording the coverage is a shortcut: a one-shot command must not hang at its close
    while another process holds the log lock (a long import)."""
    home = tmp_path / "s"
    # A snapshot at every write: none is due at close (one would be waited for).
    store = Store(Settings(home=home, embedder="hash", snapshot_every=1), embedder=HashEmbedder())
    store.remember("Alice likes green tea", ["tea"])
    store.save_vectors((store.state.store_id, store.state.seq))
    store.remember("Bob sails on Sundays", ["sailing"])
    importer = EventLog(home)
    with importer.lock():
        closing = threading.Thread(target=store.close)
        closing.start()
        closing.join(30)  # it waited for the lock, for as long as the other writer held it
        waited = closing.is_alive()
    importer.close()
    closing.join()
    assert not waited
    assert recorded(home) == 2
    store = open_store(home)
    store.remember("Dana cooks", ["cooking"])
    store.close()
    assert recorded(home) == 4


def recorded(home: Path) -> int:
    """The seq the 256-dimension hash cache's manifest records."""
    manifest = home / "cache" / "vectors" / "hash_v1_256" / "manifest.json"
    seq: int = json.loads(manifest.read_text())["seq"]
    return seq


def test_a_memory_forgotten_after_the_vector_coverage_is_no_gap(tmp_path: Path) -> None:
    """The coverage was recorded while the memory lived; forget then erased its row and
    redacted the log. Neither is a coverage gap."""
    store = open_store(tmp_path / "s")
    try:
        secret = store.remember("my bank PIN is 7391", ["bank", "PIN"])
        store.memory_vectors()
        store.key_vectors()
        store.save_vectors((store.state.store_id, store.state.seq))
        store.forget(secret.memory_id)
    finally:
        store.close()
    report = verify(tmp_path / "s")
    assert report.ok, report.cache_problems
    assert any("covers seq 2" in c for c in report.caches_checked)


def test_forgetting_one_of_two_memories_of_the_same_text_leaves_the_coverage_whole(
    tmp_path: Path,
) -> None:
    """Two entities with the same observation are two memories of one text (one vector row).
    Forgetting one erases no secret while the other holds the text: its row stays, so the
    recorded coverage stays true (verify found a gap, and told the user to rebuild)."""
    store = open_store(tmp_path / "s")
    try:
        kg = KnowledgeGraph(store)
        kg.create_entities(
            [
                EntityInput("Anna", "person", ["likes tea"]),
                EntityInput("Bob", "person", ["likes tea"]),
            ]
        )
        store.memory_vectors()
        store.key_vectors()
        store.save_vectors((store.state.store_id, store.state.seq))
        first = next(m for m in store.state.memories.values() if m.content == "likes tea")
        store.forget(first.id)
    finally:
        store.close()
    report = verify(tmp_path / "s")
    assert report.ok, report.cache_problems


@pytest.mark.parametrize("interrupted", [False, True])
def test_forgetting_a_memory_whose_text_is_a_key_label_leaves_every_coverage_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, interrupted: bool
) -> None:
    """A memory may hold exactly a key's (case-folded) label: "bees" under the key bees. Its
    text is no secret after a forget (the label stays in the log), and every model's key row
    of it is needed: erasing it (the forgetting process's own model, another model's cache on
    disk, another process's unsaved row) left recorded coverages untrue, and verify told the
    user to rebuild. Interrupted, the purge is finished by the next open, which does not know
    the forgotten text."""
    home = tmp_path / "s"
    a = open_store(home)
    other = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(dim=64))
    try:
        gone = a.remember("bees", ["bees"]).memory_id
        a.remember("Ada keeps bees on the roof", ["bees", "Ada"])
        for store in (a, other):
            store.refresh()
            store.key_vectors()
            store.memory_vectors()
        a.save_vectors((a.state.store_id, a.state.seq))  # `other`'s rows are still unsaved
        if interrupted:
            with monkeypatch.context() as m:
                m.setattr(forgetting, "purge", _killed)
                with pytest.raises(KeyboardInterrupt):
                    a.forget(gone)
            open_store(home).close()  # the next open finishes the purge
        else:
            a.forget(gone)
        other.save_vectors((other.state.store_id, other.state.seq))
    finally:
        a.close()
        other.close()
    report = verify(home)
    assert report.ok, report.cache_problems
    assert sum("covers seq 3" in c for c in report.caches_checked) == 2
    for folder in (home / "cache" / "vectors").iterdir():
        assert text_hash("bees") in (folder / "hashes.txt").read_text()


def _killed(*args: object, **kwargs: object) -> list[str]:
    raise KeyboardInterrupt("killed mid-purge")


def test_a_snapshot_that_differs_from_the_log_is_a_problem_and_rebuild_mends_it(
    home: Path,
) -> None:
    path = home / "cache" / "snapshot" / "keygraph.msgpack"
    loaded = snapshots.load(path)
    assert loaded is not None
    state = snapshots.materialize(loaded.state)
    next(iter(state.memories.values())).depth = 0.9  # reads that never happened
    snapshots.save(path, snapshots.Snapshot(**{**_fields(loaded), "state": state}))
    report = verify(home)
    assert not report.ok and report.problems == []  # the log itself is fine
    assert any("keygraph.msgpack: differs from the log" in p for p in report.cache_problems)
    assert "keytrail rebuild" in report.cache_problems[-1]
    drop_cache(home)
    open_store(home).close()
    assert verify(home).ok


def test_a_snapshot_ahead_of_the_log_is_a_problem(home: Path) -> None:
    path = home / "cache" / "snapshot" / "keygraph.msgpack"
    loaded = snapshots.load(path)
    assert loaded is not None
    ahead = snapshots.Snapshot(
        **{**_fields(loaded), "seq": loaded.seq + 5, "state": snapshots.materialize(loaded.state)}
    )
    snapshots.save(path, ahead)
    report = verify(home)
    assert any("reflects seq 11, but the log ends at seq 6" in p for p in report.cache_problems)


def test_an_unreadable_snapshot_is_ignored_not_a_problem(home: Path) -> None:
    (home / "cache" / "snapshot" / "keygraph.msgpack").write_bytes(b"\x00garbage")
    report = verify(home)
    assert report.ok
    assert report.caches_ignored == [
        "cache/snapshot/keygraph.msgpack: unreadable or of another format"
    ]


def test_a_forgotten_memorys_text_left_in_the_index_is_a_problem(
    home: Path, tmp_path: Path
) -> None:
    store = open_store(home)
    try:
        kept = store.remember("Erin keeps bees", ["bees"])
        store.index_text()
        shutil.copytree(home / "index" / "text", tmp_path / "before-forget")
        store.forget(kept.memory_id)  # removes the index; searches build it anew
        store.index_text()
    finally:
        store.close()
    assert verify(home).ok  # forget purged it
    shutil.rmtree(home / "index" / "text")
    shutil.copytree(tmp_path / "before-forget", home / "index" / "text")
    report = verify(home)
    assert any(
        "1 forgotten memory whose text is still indexed" in p and kept.memory_id in p
        for p in report.cache_problems
    )
    # The same traces while that forget's purge is recorded as unfinished (a forget killed
    # midway): expected, and finished by the next open.
    forgetting.write_pending(
        home, [PendingPurge(memory_id=kept.memory_id, created_seq=7, vector_digest="0" * 32)]
    )
    report = verify(home)
    assert report.ok and report.purges_pending == [kept.memory_id]
    open_store(home).close()  # finishes the purge: the index goes, rebuilt when searched
    assert forgetting.read_pending(home) == [] and not (home / "index" / "text").exists()
    assert verify(home).ok


def test_a_memory_missing_from_the_index_is_a_problem(home: Path) -> None:
    store = open_store(home)
    victim = next(m.id for m in store.state.memories.values() if m.status == "active")
    store.close()
    index = tantivy.Index.open(str(home / "index" / "text"))
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    writer.delete_documents_by_term("memory_id", victim)
    writer.commit()
    writer.wait_merging_threads()
    report = verify(home)
    assert any("1 memory of the log missing" in p and victim in p for p in report.cache_problems)
    drop_cache(home)
    store = open_store(home)
    store.index_text()
    store.close()
    report = verify(home)
    assert report.ok and any("index/text (seq 6, 3 memories)" in c for c in report.caches_checked)


def test_damaged_vector_rows_and_a_coverage_gap_are_problems(home: Path) -> None:
    folder = vectors_dir(home)
    dim = int(folder.name.rsplit("_", 1)[1])
    data = np.fromfile(folder / "vectors.f32", dtype=np.float32)
    data[:dim] = np.nan  # row 0: not a vector any more
    data.tofile(folder / "vectors.f32")
    report = verify(home)
    assert any("1 row that is not a unit vector (row 0)" in p for p in report.cache_problems)

    # Erase row 1's hash as forget would, but leave its vector: the text's vector lingers, and
    # the manifest now claims a row that is not there.
    hashes = bytearray((folder / "hashes.txt").read_bytes())
    hashes[33:65] = b"-" * 32
    (folder / "hashes.txt").write_bytes(bytes(hashes))
    report = verify(home)
    problems = " | ".join(report.cache_problems)
    assert "1 erased row (a forgotten text) whose vector was not zeroed (row 1)" in problems
    assert "1 label or content up to seq 6 has no row" in problems


def test_the_command_line_reports_cache_problems_and_rebuild_mends_them(home: Path) -> None:
    ok = keytrail(home, "verify")
    assert ok.returncode == 0 and "cache ok: index/text (seq 6, 3 memories)" in ok.stdout
    path = home / "cache" / "snapshot" / "keygraph.msgpack"
    loaded = snapshots.load(path)
    assert loaded is not None
    state = snapshots.materialize(loaded.state)
    next(iter(state.keys.values())).label = "renamed behind the log's back"
    snapshots.save(path, snapshots.Snapshot(**{**_fields(loaded), "state": state}))
    bad = keytrail(home, "verify")
    assert bad.returncode == 1 and "ok:" in bad.stdout  # the log is fine, a cache is not
    assert "cache problem: cache/snapshot/keygraph.msgpack: differs from the log" in bad.stdout
    rebuilt = keytrail(home, "rebuild")
    assert rebuilt.returncode == 0 and "3 memories in the text index" in rebuilt.stdout
    again = keytrail(home, "verify")
    assert again.returncode == 0 and "cache problem" not in again.stdout


SECRET = "The door code is 4711"


@pytest.fixture
def two_models(tmp_path: Path) -> Path:
    """A store shared by two clients with different models: the hashing embedder at 64
    dimensions (hash:v1:64) and at 256 (hash:v1:256, what `keytrail(...)` runs with), each
    with a cache covering the whole log; a memory both had embedded was forgotten since."""
    home = tmp_path / "store"

    def embed_all(dim: int, told: str) -> str:
        with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(dim)) as store:
            memory_id = store.remember(told, ["topic", told.split()[0]]).memory_id
            store.memory_vectors()
            store.key_vectors()
            store.save_vectors((store.state.store_id, store.state.seq))
            return memory_id

    embed_all(64, "Alice likes green tea")
    secret = embed_all(64, SECRET)
    embed_all(256, "Bob sails on Sundays")
    with open_store(home) as store:
        store.forget(secret)  # erases its row in every model's cache
    embed_all(64, "Dana cooks")
    return home


def other_cache(home: Path) -> Path:
    return home / "cache" / "vectors" / "hash_v1_64"


def cache_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_rebuild_keeps_another_models_sound_vectors(two_models: Path) -> None:
    """rebuild dropped the caches of every model: the other client's next start embedded the
    whole store again (paid per token, with an API's model), though a row is a function of
    (model, text) alone. It keeps those verify finds sound, and still makes its own anew."""
    home = two_models
    other, own = other_cache(home), home / "cache" / "vectors" / "hash_v1_256"
    before = cache_files(other)
    erased = "-" * 32
    # Already purged: the forget erased the secret's row in this model's cache too.
    assert text_hash(SECRET) not in before["hashes.txt"].decode()
    assert (
        erased in before["hashes.txt"].decode() and erased in own.joinpath("hashes.txt").read_text()
    )
    assert keytrail(home, "verify").returncode == 0
    rebuilt = keytrail(home, "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    rows = len(before["hashes.txt"]) // 33  # as verify counts them, the erased one too
    assert (
        f"  kept another model's vectors: cache/vectors/hash_v1_64 ({rows} rows, covers seq 6)"
        in rebuilt.stdout
    )
    assert "dropped" not in rebuilt.stdout
    assert cache_files(other) == before
    assert erased not in own.joinpath("hashes.txt").read_text()  # made anew from the log
    checked = keytrail(home, "verify")
    assert checked.returncode == 0, checked.stdout
    assert f"cache ok: cache/vectors/hash_v1_64 ({rows} rows, covers seq 6)" in checked.stdout
    # The other client finds its projection whole: nothing to embed.
    assert "(0 embedded, " in keytrail(home, "reembed", KEYTRAIL_EMBED_DIM="64").stdout


def _not_unit(folder: Path) -> str:
    data = np.fromfile(folder / "vectors.f32", dtype=np.float32)
    data[:64] *= 2
    data.tofile(folder / "vectors.f32")
    return "1 row that is not a unit vector (row 0)"


def _gap(folder: Path) -> str:
    for name, size in (("hashes.txt", 33), ("vectors.f32", 4 * 64)):
        with open(folder / name, "r+b") as f:  # its last row gone
            f.truncate(f.seek(0, 2) - size)
    return "1 label or content up to seq 6 has no row, though its manifest says they all do"


def _ahead(folder: Path) -> str:
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "seq": 99}))
    return "reflects seq 99, but the log ends at seq 6"


@pytest.mark.parametrize("damage", [_not_unit, _gap, _ahead])
def test_rebuild_drops_another_models_vectors_that_verify_faults(
    two_models: Path, damage: Callable[[Path], str]
) -> None:
    home = two_models
    said = damage(other_cache(home))
    checked = keytrail(home, "verify")
    assert checked.returncode == 1
    assert f"cache problem: cache/vectors/hash_v1_64: {said}" in checked.stdout
    rebuilt = keytrail(home, "rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert f"  dropped another model's vectors: cache/vectors/hash_v1_64: {said}" in rebuilt.stdout
    assert "kept" not in rebuilt.stdout
    assert not other_cache(home).exists()
    again = keytrail(home, "verify")
    assert again.returncode == 0, again.stdout


def test_a_forget_between_rebuilds_check_and_its_drop_leaves_the_kept_cache_whole(
    two_models: Path,
) -> None:
    """rebuild reads the log without the lock, then decides holding it. A forget another
    process made in between erased a row the fold saw the text of: still no gap, as verify
    says, so the cache is kept, its row erased."""
    home = two_models
    others = maintenance.OtherModels(home, "hash_v1_256")
    maintenance.check_replay(home, None, others)
    with open_store(home) as store:
        dana = next(m.id for m in store.state.memories.values() if m.content == "Dana cooks")
        store.forget(dana)
    drop_cache(home, others)
    # Contents, labels and erased rows; none of the secret's blank content, which is never
    # embedded (a zero row in memory, no row in the cache)
    assert others.dropped == [] and others.kept == [
        "cache/vectors/hash_v1_64 (12 rows, covers seq 6)"
    ]
    assert text_hash("Dana cooks") not in (other_cache(home) / "hashes.txt").read_text()
    report = verify(home)
    assert report.ok, report.cache_problems
    assert "cache/vectors/hash_v1_64 (12 rows, covers seq 6)" in report.caches_checked


def test_a_coverage_recorded_while_rebuild_read_the_log_is_not_taken_unchecked(
    two_models: Path,
) -> None:
    home = two_models
    others = maintenance.OtherModels(home, "hash_v1_256")
    maintenance.check_replay(home, None, others)
    with Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder(64)) as store:
        store.remember("Erin rows at dawn", ["rowing"])
        store.memory_vectors()
        store.key_vectors()
        store.save_vectors((store.state.store_id, store.state.seq))
    drop_cache(home, others)
    assert others.dropped == [
        "cache/vectors/hash_v1_64: its coverage (seq 7) was recorded while rebuild ran"
    ]
    assert not other_cache(home).exists()


def test_rebuild_all_models_drops_every_models_vectors(two_models: Path) -> None:
    home = two_models
    rebuilt = keytrail(home, "rebuild", "--all-models")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (
        "  dropped another model's vectors: cache/vectors/hash_v1_64 (--all-models)"
        in rebuilt.stdout
    )
    assert not other_cache(home).exists()
    assert (home / "cache" / "vectors" / "hash_v1_256" / "manifest.json").exists()
    assert keytrail(home, "verify").returncode == 0


def _fields(snapshot: snapshots.Snapshot) -> dict[str, object]:
    return {f: getattr(snapshot, f) for f in snapshot.__struct_fields__}


def test_an_erased_row_whose_vector_a_killed_forget_had_not_zeroed_is_unfinished_work(
    home: Path,
) -> None:
    """The vector purge erases the hash line, then zeroes the vector. A forget killed between
    the two leaves its purge pending: verify lists it as unfinished (README), not as a broken
    cache, and the next open finishes it."""
    store = open_store(home)
    try:
        kept = store.remember("Erin keeps bees", ["bees"])
        digest = text_hash("Erin keeps bees")
        entry = PendingPurge(memory_id=kept.memory_id, created_seq=kept.seq, vector_digest=digest)
        store.forget(kept.memory_id)
    finally:
        store.close()
    assert verify(home).ok
    # Put back what the kill would have left: the vector not yet zeroed, the purge pending.
    folder = vectors_dir(home)
    lines = (folder / "hashes.txt").read_bytes().split(b"\n")[:-1]
    row = max(i for i, line in enumerate(lines) if line == b"-" * 32)
    rows = np.fromfile(folder / "vectors.f32", dtype=np.float32).reshape(len(lines), -1)
    rows[row] = HashEmbedder().embed(["Erin keeps bees"])[0]
    rows.tofile(folder / "vectors.f32")
    forgetting.write_pending(home, [entry])
    report = verify(home)
    assert report.ok and report.purges_pending == [kept.memory_id], report.cache_problems
    open_store(home).close()  # finishes the purge
    assert verify(home).ok


def test_forgotten_content_put_back_in_the_log_is_a_problem_and_forget_erases_it_again(
    tmp_path: Path,
) -> None:
    """A segment restored from a backup taken before a forget brings the content back."""
    home = tmp_path / "store"
    store = open_store(home)
    gone = store.remember("The door code is 4711", ["door"])
    store.remember("Alice likes green tea", ["tea"])
    segment = next((home / "log").glob("*.jsonl"))
    backup = segment.read_bytes()
    store.forget(gone.memory_id)
    store.close()
    assert verify(home).ok
    # The backup's lines, then what was appended after it (a redaction keeps every length).
    segment.write_bytes(backup + segment.read_bytes()[len(backup) :])
    assert b"4711" in segment.read_bytes()

    bad = keytrail(home, "verify")
    assert bad.returncode == 1
    assert f"memory {gone.memory_id}: forgotten at seq" in bad.stdout
    assert f"`keytrail forget {gone.memory_id}` erases it again" in bad.stdout
    erased = keytrail(home, "forget", gone.memory_id)
    assert erased.returncode == 0, erased.stderr
    assert b"4711" not in segment.read_bytes()
    assert keytrail(home, "verify").returncode == 0


def test_a_line_another_process_appends_while_verify_runs_is_no_torn_tail(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify reads without the appenders' lock: a whole line appended after its fold (here a
    forget by another process, between the fold and the tail check) is the log growing, not a
    torn tail."""
    other = open_store(home)
    try:
        victim = other.remember("The alarm code is 1234", ["alarm"]).memory_id
        unerased = maintenance._unerased

        def appended_meanwhile(*args: Any) -> list[str]:
            other.forget(victim)
            return unerased(*args)

        monkeypatch.setattr(maintenance, "_unerased", appended_meanwhile)
        report = verify(home)
    finally:
        other.close()
    assert report.problems == []
    monkeypatch.undo()
    assert verify(home).ok


def test_a_segment_cut_short_before_later_ones_is_the_problem_not_the_caches(
    home: Path,
) -> None:
    """A middle segment whose last line was cut by hand: the fold stops there, and verify
    reported only `cache problem: ... reflects seq 7, but the log ends at seq 3` with
    `keytrail rebuild` as the cure, blaming the caches for the log's damage. Only the last
    segment can have a torn tail (appenders cut it), so a partial line before later segments
    is the log's problem, named with its segment and line, and a rebuild (which verify pointed
    to) must not replay the short log: its next write overwrote the damaged segment."""
    store = Store(Settings(home=home, embedder="hash", segment_bytes=1000), embedder=HashEmbedder())
    for i in range(6):
        store.remember(f"fact {i} here", [f"k{i}"])
    store.close()
    segments = sorted((home / "log").glob("*.jsonl"))
    assert len(segments) >= 4
    victim = segments[2]
    victim.write_bytes(victim.read_bytes()[:-20])
    report = verify(home)
    assert not report.ok
    assert report.problems == [
        f"corrupt event log: {victim.name} line 1: a partial line (569 bytes) ends this "
        "segment, though later segments follow"
    ], report.problems
    assert report.cache_problems == [], report.cache_problems
    before = {p.name: p.read_bytes() for p in segments}
    drop_cache(home)  # what `keytrail rebuild` does first, then it replays the log
    with pytest.raises(CorruptLog, match=victim.name):
        open_store(home)
    assert {p.name: p.read_bytes() for p in segments} == before
    # Whole again: no problem.
    shutil.rmtree(home)
    store = Store(Settings(home=home, embedder="hash", segment_bytes=1000), embedder=HashEmbedder())
    for i in range(6):
        store.remember(f"fact {i} here", [f"k{i}"])
    store.close()
    assert verify(home).ok


def test_lines_without_a_checksum_are_named_though_they_decode(home: Path) -> None:
    """Every line keytrail writes ends in its checksum. A line whose `"crc"` key was damaged
    decodes without one (hand-written lines are accepted), so damage to the rest of it goes
    unseen: verify names such lines, without calling the store broken."""
    report = verify(home)
    assert report.ok and report.unchecked_lines == []
    segment = next((home / "log").glob("*.jsonl"))
    lines = segment.read_bytes().split(b"\n")
    assert b"Bob sails" in lines[2]
    lines[2] = lines[2].replace(b',"crc":"', b',"crx":"')  # the line still decodes
    segment.write_bytes(b"\n".join(lines))
    report = verify(home)
    assert report.unchecked_lines == [f"{segment.name} line 3"]
    shown = keytrail(home, "verify")
    assert shown.returncode == 0 and report.ok
    assert "no checksum, so damage to them cannot be seen" in shown.stdout
    assert f"{segment.name} line 3" in shown.stdout


def test_temp_files_a_killed_writer_left_are_named_and_left_in_place(home: Path) -> None:
    segment = sorted(p.name for p in (home / "log").glob("*.jsonl"))[0]
    left = home / "log" / f".{segment}.redact.tmp"
    left.write_bytes(b"a redaction cut short")
    before = files(home)
    result = keytrail(home, "verify")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"temp file left by a write cut short (the next open removes it): log/.{segment}.redact.tmp"
        in result.stdout
    )
    assert files(home) == before  # verify writes nothing, removes nothing


def test_a_store_of_one_event_in_one_segment_is_said_in_the_singular(tmp_path: Path) -> None:
    """It read "ok: 1 events in 1 segments"."""
    home = tmp_path / "store"
    open_store(home).close()
    shown = keytrail(home, "verify")
    assert shown.stdout.startswith(f"{home}: ok: 1 event in 1 segment\n"), shown.stdout


def forked(store: Store) -> tuple[str, str, NewMemory]:
    """A memory corrected, then given a second new version the way a hand-edited log (or a
    keymem import before it refused one) wrote it: (the old one, its correction, the stray)."""
    old = store.remember("Alice lives in Paris", ["Alice"]).memory_id
    first = store.correct(old, "Alice lives in Lyon", ["Alice"]).memory_id
    key = store.state.keys[store.state.labels["alice"]]
    stray = NewMemory(
        memory_id="m_0000000000ff",
        namespace="default",
        content="Alice lives in Nice",
        content_hash=content_hash("Alice lives in Nice"),
        keys=[KeyLink(key_id=key.id, label=key.label)],
        supersedes=old,
        supersede_reason="correction",
    )
    store._write(lambda app: store._append(app, MemoryRemembered(memories=[stray])))
    return old, first, stray


def test_two_versions_of_one_memory_are_a_fork_that_forgetting_the_stray_one_mends(
    tmp_path: Path,
) -> None:
    """A keymem import before it refused them (or a hand-edited log) could give a memory a
    second new version: the fold keeps the last as its successor, so the first is current
    beside it yet missing from its own history. verify names the fork and how to mend it."""
    home = tmp_path / "store"
    store = open_store(home)
    old, first, stray = forked(store)
    # Each walk follows the chain through the memory it starts from: history of `first`
    # shows `first`, that of the others the successor the fold kept.
    assert [v.memory_id for v in history(store, first).versions] == [old, first]
    assert [v.memory_id for v in history(store, old).versions] == [old, stray.memory_id]
    store.close()

    report = verify(home)
    assert not report.ok
    assert report.caches_checked  # a fork leaves the caches checkable
    assert report.problems == [
        f"memory {old}: 2 versions replace it, {first} (seq 3) and {stray.memory_id} (seq 4); "
        f"its next version is {stray.memory_id}, so history and forget --all-versions of "
        f"either miss {first}: `keytrail forget {first}` leaves one chain (to keep its text, "
        f"correct {stray.memory_id} with it first)"
    ]
    bad = keytrail(home, "verify")
    assert bad.returncode == 1 and f"  problem: memory {old}: 2 versions" in bad.stdout
    assert keytrail(home, "forget", first).returncode == 0
    assert keytrail(home, "verify").returncode == 0
    store = open_store(home)
    try:
        assert [v.memory_id for v in history(store, stray.memory_id).versions] == [
            old,
            stray.memory_id,
        ]
    finally:
        store.close()


def test_forgetting_every_version_of_a_forked_memory_forgets_it(tmp_path: Path) -> None:
    """On a fork the chain walked is the one through the memory named: `forget --all-versions`
    of the version the fold did not keep as successor forgets it and what it replaced, and
    says so; it was left in place (its text in the log) while the other branch went."""
    home = tmp_path / "store"
    store = open_store(home)
    old, first, stray = forked(store)
    store.close()
    shown = keytrail(home, "forget", "--all-versions", first)
    assert shown.returncode == 0, shown.stderr
    store = open_store(home)
    try:
        memories = store.state.memories
        assert memories[first].status == "forgotten"
        assert memories[old].status == "forgotten"
        assert memories[stray.memory_id].status == "active"
    finally:
        store.close()
    log = b"".join(p.read_bytes() for p in sorted((home / "log").iterdir()))
    assert b"Alice lives in Lyon" not in log and b"Alice lives in Paris" not in log
    assert b"Alice lives in Nice" in log
