"""The text projection: incremental, persisted with its seq, rebuilt, crash-safe, purgeable."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import rest_of_output

from keytrail.core import HashEmbedder, RememberItem, Settings, Store
from keytrail.events.types import micros
from keytrail.projections import text
from keytrail.projections.text import TextIndex


def index_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def test_incremental_and_the_seq_it_reflects_survives_reopening(store: Store) -> None:
    a = store.remember("The lighthouse keeper logs every passing ship", ["lighthouse"])
    index = store.text_index()
    assert index.seq == store.state.seq
    assert [h.memory_id for h in index.search("lighthouse keeper", 5)] == [a.memory_id]
    b = store.remember("Marmalade is made from bitter Seville oranges", ["marmalade"])
    # Only the new memory is indexed on the next catch-up.
    assert index.sync(store.state) == 1 and index.seq == store.state.seq
    again = TextIndex(store.home / "index" / "text")
    assert again.sync(store.state) == 0
    assert again.seq == store.state.seq
    assert [h.memory_id for h in again.search("oranges", 5)] == [b.memory_id]


def test_rebuilt_when_missing_or_corrupt(make_store: Callable[..., Store], tmp_path: Path) -> None:
    store = make_store()
    m = store.remember("Quokkas live on Rottnest Island", ["quokka"])
    store.text_index()
    store.close()
    directory = store.home / "index" / "text"
    for damage in ("delete", "corrupt"):
        if damage == "delete":
            shutil.rmtree(directory)
        else:
            for meta in directory.glob("meta.json"):
                meta.write_text("{ not json")
        fresh = make_store(home=store.home)
        index = fresh.text_index()
        assert index.seq == fresh.state.seq
        assert [h.memory_id for h in index.search("quokkas island", 5)] == [m.memory_id]


def test_filters_apply_before_the_top_k_cut(store: Store) -> None:
    store.remember_batch(
        [RememberItem(f"Harbour crane number {i} lifts containers", ["crane"]) for i in range(30)]
    )
    other = store.remember("A crane lifts containers in Rotterdam", ["crane"], namespace="nl")
    after_first = store.state.seq
    late = store.remember("The crane operator lifts containers at night", ["crane"], namespace="nl")
    index = store.text_index()
    assert [h.memory_id for h in index.search("crane lifts containers", 1, namespace="nl")] in (
        [other.memory_id],
        [late.memory_id],
    )
    assert {h.memory_id for h in index.search("crane containers", 10, namespace="nl")} == {
        other.memory_id,
        late.memory_id,
    }
    # As of an earlier seq, the later memory did not exist yet.
    as_of = index.search("crane containers", 10, namespace="nl", max_seq=after_first)
    assert [h.memory_id for h in as_of] == [other.memory_id]


def test_forgotten_memories_leave_the_index(store: Store) -> None:
    m = store.remember("The safe combination is 31-07-19", ["safe"])
    store.text_index()
    store.forget(m.memory_id)
    assert store.text_index().search("safe combination", 5) == []
    # Also when the forget happened before this process looked at the index.
    reopened = Store(store.settings, embedder=HashEmbedder())
    assert reopened.text_index().search("combination", 5) == []


def test_purge_removes_the_bytes(store: Store) -> None:
    secret = "Xylocarpaquintessence"
    kept = store.remember("Mangroves line the estuary", ["mangrove"])
    gone = store.remember(f"The password hint is {secret} and it is private", ["password"])
    index = store.text_index()
    directory = index.dir
    # The test can see the token in the files before: otherwise its absence would prove nothing.
    assert secret.lower().encode() in index_bytes(directory).lower()
    assert index.purge([gone.memory_id]) == 1
    assert secret.lower().encode() not in index_bytes(directory).lower()
    assert [h.memory_id for h in index.search("mangroves estuary", 5)] == [kept.memory_id]
    assert index.search(secret, 5) == []
    assert TextIndex(directory).search("mangroves", 5)[0].memory_id == kept.memory_id


def test_removing_the_index_survives_a_reader_that_writes_its_lock_file_meanwhile(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every opened tantivy index has a reader that reloads itself from a thread, and a reload
    creates `.tantivy-meta.lock` in the index folder by path, without our lock: one landing
    after rmtree emptied the folder made its rmdir fail (ENOTEMPTY), and a forget's purge
    with it."""
    store.remember("Mangroves line the estuary", ["mangrove"])
    directory = store.text_index().dir
    real_rmdir = os.rmdir
    refilled: list[str] = []

    def a_reload_lands_first(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path) == directory and not refilled:
            (directory / ".tantivy-meta.lock").touch()  # as the reader's reload thread does
            refilled.append(str(path))
        real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", a_reload_lands_first)
    assert str(directory) in store.text.remove()
    assert refilled and not directory.exists()


WRITER = """
import sys
import pytest

from keytrail.core import HashEmbedder, Settings, Store
store = Store(Settings(home=sys.argv[1], embedder="hash"), embedder=HashEmbedder())
print("indexing", flush=True)
while True:  # rebuild until killed, so every kill lands mid-work however fast the machine
    store.text.remove()
    store.text_index()
"""


@pytest.mark.slow
def test_a_writer_killed_mid_commit_leaves_an_index_that_reopens(tmp_path: Path) -> None:
    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    words = [
        "amber",
        "basil",
        "cedar",
        "dune",
        "ember",
        "fjord",
        "grove",
        "heron",
        "iris",
        "juniper",
        "kelp",
        "lichen",
    ]
    for batch in range(4):
        store.remember_batch(
            [
                RememberItem(
                    f"note {batch}-{i} " + " ".join(words[(i + j) % 12] for j in range(30)),
                    [words[i % 12]],
                )
                for i in range(500)
            ]
        )
    store.close()
    for delay in (0.02, 0.1, 0.3):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "indexing"
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL  # killed mid-work, not crashed
        reopened = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
        index = TextIndex(home / "index" / "text")
        index.sync(reopened.state)
        assert index.seq == reopened.state.seq
        assert len(index.search("note amber", 5000)) == 2000
        index.close()
        reopened.close()
        shutil.rmtree(home / "index" / "text")  # the next writer starts from scratch


def test_the_keys_field_adds_only_what_the_content_does_not_say(store: Store) -> None:
    # A label the content already says would count its words twice; one it lacks is searchable.
    said = store.remember("Caroline: the garden is full of tulips", ["Caroline", "tulips"])
    unsaid = store.remember("Planted bulbs along the fence", ["tulips", "spring garden"])
    index = store.text_index()
    assert {h.memory_id for h in index.search("tulips", 5)} == {said.memory_id, unsaid.memory_id}
    # "Caroline" scores only from content: a memory keyed Caroline without saying it is found.
    keyed = store.remember("Her favourite flower", ["Caroline"])
    index = store.text_index()
    found = [h.memory_id for h in index.search("Caroline", 5)]
    assert set(found) == {said.memory_id, keyed.memory_id}
    from keytrail.projections.text import _new_labels

    assert _new_labels("Caroline: the garden is full of tulips", ["Caroline", "tulips"]) == []
    assert _new_labels("Planted bulbs", ["tulips", "spring garden", "bulbs"]) == [
        "tulips",
        "spring garden",
    ]


def test_the_words_of_ascii_text_are_the_patterns() -> None:
    # ASCII text is split without the pattern (a sixth of a build's time): the same words.
    from keytrail.projections.scripts import pattern

    texts = [
        "Caroline's snake_case API-v2 (x86_64)\tTAB\nline ~!@#$%^&*+=[]{}|;:,.<>?/`\"",
        "   ",
        "",
        "__ 0 9 Zz 2026-01-02T10:00",
        "Zürich Café naïve",
        "e\u0301te\u0301 Ελλάδα 東京に住んでいる",
    ]
    texts += [chr(c) * 2 + " a" + chr(c) + "b" for c in range(128)]
    for said in texts:
        assert text._words(said) == set(pattern(text._WORD).findall(said.casefold())), said


def test_a_build_writes_the_documents_a_tantivy_document_each_would(store: Store) -> None:
    # Documents go to tantivy as JSON, each key's label split once per build: the index's
    # files must be those of a `tantivy.Document` added for each memory, its labels put by
    # `_new_labels`, as before (the same documents, the same BM25 scores).
    import tantivy

    store.remember("Caroline: the garden is full of tulips", ["Caroline", "tulips"])
    store.remember("Planted bulbs along the fence", ["tulips", "spring garden", "!!!"])
    store.remember("Cafe\u0301 near the station, Zürich", ["café", "station_7"])
    gone = store.remember("Forgotten words of a secret", ["secret"])
    store.remember("東京に住んでいる", ["Tokyo", "東京"])
    store.remember("snake_case names and x86_64", ["SNAKE_CASE", "ARM64", "x86"])
    store.forget(gone.memory_id)
    state = store.state
    meta = (state.seq, micros(state.at))
    expected = store.home / "expected"
    index = TextIndex(expected)._create(expected)
    with index.writer(heap_size=50_000_000, num_threads=1) as writer:
        for node in state.memories.values():
            if node.status == "forgotten":
                continue
            labels = [state.keys[k].label for k in node.keys if k in state.keys]
            doc = tantivy.Document(
                kind="memory",
                memory_id=node.id,
                namespace=node.namespace,
                content=text._nfc(node.content),
                keys=text._nfc(" ; ".join(text._new_labels(node.content, labels))),
                seq=node.created_seq,
                indexed=meta[0],
                at=meta[1],
                schema=text.SCHEMA_VERSION,
            )
            if text.pattern(text._UNSPACED_RUN).search(node.content):
                doc.add_text("unspaced", text._nfc(node.content))
            writer.add_document(doc)
        writer.commit()

    def segment_files(directory: Path) -> dict[str, bytes]:
        # tantivy's segment files: not its .json metadata, nor each index's own generation
        files = {
            p.suffix: p.read_bytes()
            for p in directory.iterdir()
            if p.suffix != ".json" and p.name != text.GENERATION_FILE
        }
        assert files.keys() >= {".store", ".term", ".idx", ".pos", ".fast", ".fieldnorm"}
        return files

    store.text.remove()
    built = store.text_index()  # from nothing, as after a forget
    assert built.search("Caroline tulips", 5)
    assert segment_files(built.dir) == segment_files(expected)
    built.rebuild(store.state)  # written beside it and swapped in
    assert segment_files(built.dir) == segment_files(expected)


SEARCHER = """
import sys, time
from pathlib import Path
from keytrail.core import HashEmbedder, Settings, Store
home, go = Path(sys.argv[1]), Path(sys.argv[2])
store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
index = store.text_index()
print(len(index.search("note amber", 5000)), flush=True)
"""


@pytest.mark.slow
def test_processes_building_the_index_at_once_all_search_it_whole(tmp_path: Path) -> None:
    # Several servers on one store meet a missing (or outdated) index together: the one that
    # builds it must not leave the others searching an empty or half-built index, nor delete
    # the index another process is building.
    home = tmp_path / "store"
    store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
    for batch in range(3):
        store.remember_batch(
            [RememberItem(f"note {batch}-{i} amber basil {i % 7}", ["amber"]) for i in range(500)]
        )
    store.close()
    for attempt in range(3):
        go = tmp_path / f"go-{attempt}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", SEARCHER, str(home), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        go.touch()
        for proc in procs:
            out, err = rest_of_output(proc)
            assert proc.returncode == 0, err
            assert out.strip() == "1500", err
        shutil.rmtree(home / "index" / "text")


def test_an_index_ahead_of_a_restored_log_is_rebuilt_from_it(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    first = make_store(home=tmp_path / "live")
    kept = first.remember("The kettle whistles at dawn", ["kettle"])
    first.close()
    shutil.copytree(tmp_path / "live", tmp_path / "restored")  # a backup of the log so far
    live = make_store(home=tmp_path / "live")
    lost = live.remember("The kettle was descaled with vinegar", ["kettle"])
    live.remember("The teapot is chipped", ["teapot"])
    live.text_index()
    live.close()
    # The restored store gets the live store's (newer) index, and writes on from its own log.
    shutil.rmtree(tmp_path / "restored" / "index", ignore_errors=True)
    shutil.copytree(tmp_path / "live" / "index", tmp_path / "restored" / "index")
    restored = make_store(home=tmp_path / "restored")
    new = restored.remember("The kettle needs a new lid", ["kettle"])
    assert new.seq < live.state.seq  # the index says it covers this seq: only a rebuild finds it
    found = {h.memory_id for h in restored.text_index().search("kettle", 10)}
    assert found == {kept.memory_id, new.memory_id} and lost.memory_id not in found


@pytest.mark.parametrize(
    ("content", "query"),
    [
        # Devanagari vowel signs and the virama are combining marks, which \w leaves out: the
        # query fell apart into letters ("ह न द") that no indexed word is.
        ("मुझे हिन्दी संगीत पसंद है", "हिन्दी"),
        ("मुझे हिन्दी संगीत पसंद है", "संगीत"),
        ("আমি বাংলা গান ভালোবাসি", "বাংলা"),
        # casefold rewrites letters the index only lowercases: straße -> strasse, a final ς -> σ
        ("Wir wohnen in der Hauptstraße", "Hauptstraße"),
        ("Η αγαπημένη του μουσικής", "ΜΟΥΣΙΚΉΣ"),
        # content typed decomposed (e + U+0308) and a query typed composed, and the other way
        ("Zoe\u0308 runs the bakery", "Zoë"),
        ("Zoë runs the bakery", "Zoe\u0308"),
    ],
)
def test_words_of_any_script_find_the_memory_that_says_them(
    store: Store, content: str, query: str
) -> None:
    memory = store.remember(content, ["x"])
    assert [h.memory_id for h in store.text_index().search(query, 5)] == [memory.memory_id]


@pytest.mark.parametrize(
    ("content", "query"),
    [
        # Scripts written without spaces: the content's tokenizer takes a whole clause for one
        # word, so a word of it was found only by a query that was that whole clause.
        ("東京に住んでいる", "東京"),
        ("東京に住んでいる", "東京に住んでいるのは誰ですか"),
        ("我昨天见到了张伟。", "张伟是谁"),
        ("トヨタの車を買った", "トヨタ"),
        ("ผมชอบกินข้าวผัด", "ข้าวผัด"),
        ("서울에서 살아요", "서울"),  # Korean spaces words, but its particles attach
    ],
)
def test_a_word_of_a_script_without_spaces_finds_the_memory_that_says_it(
    store: Store, content: str, query: str
) -> None:
    memory = store.remember(content, ["x"])
    store.remember("大阪で働いている", ["x"])
    store.remember("I moved to Tokyo last spring", ["x"])
    hits = [h.memory_id for h in store.text_index().search(query, 5)]
    assert hits[:1] == [memory.memory_id]
    assert store.text_index().search("大阪", 5)[0].memory_id != memory.memory_id


def test_only_a_whole_index_beside_no_index_is_taken_for_a_killed_swaps(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`text.new/` with no `text/` is renamed in as a swap killed between its renames left it
    only when its commit happened; and a removal (a forget's purge) cut short never leaves a
    whole `text.new/` with no `text/`, which would put the forgotten text back."""
    from keytrail.projections import text

    store.remember("Ravens cache food for later", ["ravens"])
    index = store.text_index()
    live, new = index.dir, index.dir.with_name("text.new")
    shutil.copytree(live, new)  # a swap's finished build, killed before its first rename
    first_only = shutil.rmtree

    def cut_short(path: Path, *args: object, **kwargs: object) -> None:
        first_only(path, *args, **kwargs)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # killed after the first folder went

    monkeypatch.setattr(text.shutil, "rmtree", cut_short)
    with pytest.raises(KeyboardInterrupt):
        index.remove()
    monkeypatch.undo()
    assert live.exists() or not new.exists()
    shutil.rmtree(live, ignore_errors=True)
    TextIndex(live)._create(new)  # a build killed before its commit: no meta document
    assert not text.finish_swap(live)
    fresh = TextIndex(live)
    assert fresh.search("ravens", 5) == [] and not new.exists()  # built anew, empty
    fresh.close()
    index.close()


def test_a_swap_killed_before_removing_the_old_index_does_not_stop_the_next_one(
    store: Store,
) -> None:
    """A swap killed after renaming its new index in, before removing the old one, left
    `text.old/`: a server still running failed its next rebuild ("Directory not empty")."""
    store.remember("Ravens cache food for later", ["ravens"])
    index = store.text_index()
    old = index.dir.with_name("text.old")
    old.mkdir()
    (old / "meta.json").write_text("the index before")
    index.rebuild(store.state)
    assert len(index.search("ravens", 5)) == 1 and not old.exists()


def test_a_big_index_write_hands_what_its_writer_freed_back(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # glibc keeps the blocks tantivy's writer freed: a server that indexed 100,000 memories at
    # its first recall_memories held 180 MiB more for the rest of its life.
    text.release_freed_memory()  # callable here, whatever the C library
    trims: list[int] = []
    monkeypatch.setattr(text, "release_freed_memory", lambda: trims.append(store.state.seq))
    monkeypatch.setattr(text, "TRIM_AFTER_DOCUMENTS", 3)
    store.remember_batch([RememberItem(f"Ferry timetable {i}", ["ferry"]) for i in range(3)])
    store.text_index()  # built from scratch: three documents
    assert trims == [store.state.seq]
    first = trims[0]
    store.remember("The ferry is late", ["ferry"])
    assert store.text_index().seq == store.state.seq  # one document caught up
    assert trims == [first]  # a small write: none
    store.remember_batch([RememberItem(f"Ferry fare {i}", ["ferry"]) for i in range(4)])
    assert store.text_index().seq == store.state.seq
    assert trims == [first, store.state.seq]


def test_the_kept_mark_runs_are_this_pythons_unicode_marks() -> None:
    """`marks` answers from a table for the Unicode version it was made with: the table must be
    what a scan of the database finds (a Python with a newer Unicode scans instead)."""
    import unicodedata

    from keytrail.projections import scripts

    assert unicodedata.unidata_version in scripts.MARK_RUNS
    assert scripts.marks() == scripts.scanned_marks()


def test_the_kept_ascii_stood_for_is_this_pythons_unicode() -> None:
    """The same-text scan looks for runs of a text without the ASCII characters that another
    one stands for in a caseless form (ß for ss): the table must be what a scan finds (a
    Python with another Unicode has none, and builds the index of every text instead)."""
    import unicodedata

    from keytrail.projections import scripts

    assert unicodedata.unidata_version in scripts.ASCII_STOOD_FOR
    assert scripts.ascii_stood_for() == scripts.scanned_ascii_stood_for()


def test_a_long_lived_index_scores_as_one_rebuilt_from_the_log(tmp_path: Path) -> None:
    # Every catch-up used to replace the meta document, and tantivy counts a deleted document
    # in BM25's statistics (documents, average length) until its segment is merged: the same
    # log scored one way in a long-lived process and another in a fresh one.
    now = [datetime(2026, 1, 1, tzinfo=UTC)]

    def open_store(home: Path) -> Store:
        return Store(
            Settings(home=home, embedder="hash"), embedder=HashEmbedder(), clock=lambda: now[0]
        )

    store = open_store(tmp_path / "store")
    words = ["harbour", "crane", "lifts", "boxes", "night", "ship", "lamp", "keeper", "jam"]
    ids = []
    for i in range(24):
        said = f"Note {i}: the {words[i % 9]} and the {words[i * 3 % 9]} {words[i * 7 % 9]}"
        ids.append(store.remember(said, [words[i % 9]], ttl_seconds=60 if i % 7 == 3 else None))
        store.recall_memories(f"{words[i * 3 % 9]} {words[i % 9]}")  # one catch-up each
        if i % 5 == 4:
            store.correct(ids[i - 2].memory_id, f"Note {i} corrected: the {words[i % 9]} crane")
        if i == 12:
            store.forget(ids[3].memory_id)
            now[0] += timedelta(minutes=5)
            store.cleanup_expired()
    queries = ["crane boxes night", "the lamp keeper", "jam ship harbour"]
    live = [store.text_index().search(q, 50) for q in queries]
    recalled = [store.recall_memories(q, learn=False).memories for q in queries]
    copy = tmp_path / "copy"
    shutil.copytree(store.home, copy, ignore=shutil.ignore_patterns("index"))
    fresh = open_store(copy)
    for query, hits, memories in zip(queries, live, recalled, strict=True):
        again_hits = fresh.text_index().search(query, 50)
        assert [(h.memory_id, h.score) for h in again_hits] == [
            (h.memory_id, h.score) for h in hits
        ]
        again = fresh.recall_memories(query, learn=False).memories
        assert [(m.memory_id, m.score) for m in again] == [(m.memory_id, m.score) for m in memories]
    store.close()
    fresh.close()


def test_equal_scores_come_oldest_first_whatever_segments_hold_them(store: Store) -> None:
    # Tantivy puts equal scores in the order of their segments, one per catch-up here and in
    # no set order: a top k cut among them kept any of them, and a rebuilt index others.
    ids = []
    for letter in "abcdefghij":
        ids.append(store.remember(f"the crane lifts box {letter}x", ["crane"]).memory_id)
        store.catch_up_text_index()
    hits = store.text_index().search("crane", 5)
    assert len({h.score for h in hits}) == 1
    assert [h.memory_id for h in hits] == ids[:5]


@pytest.mark.parametrize("first", ["long-lived", "opened after"])
def test_a_knowledge_graph_delete_writes_anew_the_memories_it_unlinks(
    make_store: Callable[..., Store], tmp_path: Path, first: str
) -> None:
    # A memory linked to a deleted entity stays, without that key: its document held the
    # entity's name in its keys field, which only a rebuild wrote anew, so a long-lived server
    # still found it by that name and one started afresh on the same log did not.
    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput

    live = make_store()
    kg = KnowledgeGraph(live)
    kg.create_entities(
        [
            EntityInput("Zanzibar", "place", ["spice island"]),
            EntityInput("Bob", "person", ["is tall"]),
            EntityInput("Carol", "person", ["rows boats"]),
        ]
    )
    pier = live.remember("met at the pier at dawn", ["Zanzibar", "Bob"]).memory_id
    live.remember("the Zanzibar ferry leaves at noon", ["ferry"])
    live.remember("sang sea shanties", ["Carol", "Bob"])
    live.catch_up_text_index()
    # Another process deletes; the index catches up first in the long-lived process (which
    # folded the deletes) or in one opened after them (which did not).
    other = make_store()
    KnowledgeGraph(other).delete_entities(["Zanzibar"])
    KnowledgeGraph(other).delete_observations([ObservationInput("Carol", ["sang sea shanties"])])
    later = make_store()
    (live if first == "long-lived" else later).catch_up_text_index()
    assert pier not in {h.memory_id for h in live.text_index().search("Zanzibar", 10)}
    copy = tmp_path / "copy"
    shutil.copytree(live.home, copy, ignore=shutil.ignore_patterns("index"))
    fresh = make_store(copy)
    for query in ["Zanzibar", "Carol shanties", "pier"]:
        want = [(h.memory_id, h.score) for h in fresh.text_index().search(query, 10)]
        recalled = [m.memory_id for m in fresh.recall_memories(query, learn=False).memories]
        for store in (live, later):
            assert [(h.memory_id, h.score) for h in store.text_index().search(query, 10)] == want
            assert [m.memory_id for m in store.recall_memories(query, learn=False).memories] == (
                recalled
            )
