"""Importing memory.jsonl and keymem graph.json, exporting a namespace and memory.jsonl.

Fixture files in tests/fixtures/ were written for these tests, valid and malformed in both
formats. Malformed input is reported with its line or JSON path and leaves the log untouched;
export then import gives the same state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from keytrail.core import InvalidInput, Settings, Store
from keytrail.core.exporters import memory_jsonl_lines
from keytrail.core.history import history
from keytrail.core.importers import check_import, detect_format, import_text
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.core.maintenance import verify
from keytrail.core.validation import TIME_CHARS
from keytrail.events import EventLog, GraphImported, segment_name
from keytrail.projections import GraphState, fold
from keytrail.projections.snapshot import materialize
from keytrail.server.cli import main

FIXTURES = Path(__file__).parent / "fixtures"


def text(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def whole_graph(store: Store) -> dict[str, Any]:
    """Every entity and relation, read page by page as a client of the reference server would
    (the fields it knows; these graphs are small enough that nothing is cut)."""
    kg = KnowledgeGraph(store)
    entities: list[Any] = []
    relations: list[Any] = []
    offset: int | None = 0
    while offset is not None:
        page = msgspec.to_builtins(kg.read_graph(limit=2, offset=offset))
        for e in page["entities"]:
            assert e["observations_total"] == len(e["observations"])
            entities.append({k: e[k] for k in ("name", "entityType", "observations")})
        assert page["relations_total"] == len(page["relations"])
        relations += page["relations"]
        offset = page["next_offset"]
    return {"entities": entities, "relations": relations}


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KEYTRAIL_HOME", "KEYTRAIL_NAMESPACE", "KEYTRAIL_KG_NAMESPACE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")


# -- memory.jsonl -----------------------------------------------------------------------------


def test_memory_jsonl_becomes_entities_observations_and_relations(store: Store) -> None:
    report = import_text(store, text("memory.jsonl"), "memory.jsonl")
    assert (report.format, report.entities, report.memories, report.relations) == (
        "memory-jsonl",
        3,
        3,
        2,
    )
    assert whole_graph(store) == {
        "entities": [
            {
                "name": "David Barnett",
                "entityType": "person",
                "observations": ["Speaks fluent Spanish", "Prefers morning meetings"],
            },
            {
                "name": "QuintoAndar",
                "entityType": "organization",
                "observations": ["Rental platform based in São Paulo"],
            },
            {"name": "Lyon", "entityType": "city", "observations": []},
        ],
        "relations": [  # the duplicate line is skipped
            {"from": "David Barnett", "to": "QuintoAndar", "relationType": "works_at"},
            {"from": "David Barnett", "to": "Lyon", "relationType": "lives_in"},
        ],
    }
    # one event for the whole file, and the observations are memories behind name keys
    events = EventLog(store.home).read_new()
    assert [type(e) for e in events[1:]] == [GraphImported]
    david = store.state.key_for_label("david barnett")
    assert david is not None and david.type == "name" and david.entity_type == "person"
    assert store.read_key(david.id).total == 2


def test_memory_jsonl_into_a_store_that_has_the_entity_adds_only_new_observations(
    store: Store,
) -> None:
    KnowledgeGraph(store).create_entities(
        [EntityInput("David Barnett", "human", ["Speaks fluent Spanish"])]
    )
    report = import_text(store, text("memory.jsonl"), "memory.jsonl")
    assert report.skipped and "David Barnett" in report.skipped[0]
    david = whole_graph(store)["entities"][0]
    assert david["entityType"] == "human"  # an existing entity keeps its type
    assert david["observations"] == ["Speaks fluent Spanish", "Prefers morning meetings"]


def test_memory_jsonl_observations_compare_as_add_observations_does(store: Store) -> None:
    """An observation in the file that differs from one the entity has only in how its
    accents are encoded is no new observation (nor one repeated in the file)."""
    KnowledgeGraph(store).create_entities([EntityInput("Ana", "person", ["likes café"])])
    observations = ["likes cafe\u0301", "reads cafe\u0301", "reads café"]
    line = {"type": "entity", "name": "Ana", "entityType": "person", "observations": observations}
    import_text(store, json.dumps(line) + "\n", "memory.jsonl")
    ana = whole_graph(store)["entities"][0]
    assert ana["observations"] == ["likes café", "reads cafe\u0301"]


@pytest.mark.parametrize(
    ("fixture", "needles"),
    [
        ("memory-bad-json.jsonl", ["line 3", "not JSON"]),
        ("memory-bad-relation.jsonl", ["line 4", "Atlantis"]),
        ("memory-bad-field.jsonl", ["line 2", "entityType"]),
        ("keymem-bad-time.json", ["$.memories.m_lyon.created_at", "last tuesday"]),
        ("keymem-bad-link.json", ["$.links[4].key_id", "k_nowhere"]),
        ("keymem-bad-chain.json", ["$.memories.m_trip.supersedes", "already superseded"]),
        ("keymem-truncated.json", ["$", "not JSON"]),
    ],
)
def test_malformed_files_name_the_line_or_path_and_write_nothing(
    store: Store, fixture: str, needles: list[str]
) -> None:
    KnowledgeGraph(store).create_entities([EntityInput("Someone", "person", ["was here"])])
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, text(fixture), fixture)
    for needle in needles:
        assert needle in err.value.message, err.value.message
    assert err.value.message.startswith(fixture)
    assert log_bytes(store.home) == before


def test_keymem_times_are_held_to_the_length_of_a_time(store: Store) -> None:
    """fromisoformat read a megabyte of zeros after the "T" as midnight, and a refused time
    came back whole in the error: held and quoted as the time arguments are."""
    doc = msgspec.json.decode(text("keymem-graph.json"))
    doc["memories"]["m_lyon"]["created_at"] = "2025-01-10T" + "0" * 1_000_000
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, msgspec.json.encode(doc).decode(), "graph.json")
    assert err.value.field == "graph.json $.memories.m_lyon.created_at"
    assert err.value.limit == f"{TIME_CHARS} characters"
    assert len(str(err.value)) < 300
    assert log_bytes(store.home) == before


@pytest.mark.parametrize(
    ("alias", "needles"),
    [
        ("D\x1b[2J", ["$.keys.k_dana.aliases[1]", "control character"]),
        ("D" * 201, ["$.keys.k_dana.aliases[1]", "201 characters", "200 characters"]),
        ("\u200b", ["$.keys.k_dana.aliases[1]", "empty"]),
    ],
)
def test_keymem_aliases_are_held_to_the_rules_of_labels(
    store: Store, alias: str, needles: list[str]
) -> None:
    # A key's label in the file is checked as remember checks one; its aliases, labels of the
    # key as much, took anything: a terminal escape, any length, nothing visible.
    doc = msgspec.json.decode(text("keymem-graph.json"))
    doc["keys"]["k_dana"]["aliases"].append(alias)
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, msgspec.json.encode(doc).decode(), "graph.json")
    for needle in needles:
        assert needle in str(err.value), str(err.value)
    assert log_bytes(store.home) == before


def test_a_label_refused_in_a_file_names_its_field(store: Store) -> None:
    # "line 1: is 201 characters long" said neither the name nor the entityType was too long
    line = '{"type": "entity", "name": "Ann", "entityType": "%s", "observations": []}'
    with pytest.raises(InvalidInput) as err:
        import_text(store, line % ("x" * 201), "memory.jsonl")
    assert str(err.value).startswith("memory.jsonl line 1: 'entityType' is 201 characters long")


@pytest.mark.parametrize(
    ("fixture", "where"),
    [("keymem-bad-link.json", "$.links[4].key_id"), ("memory-bad-relation.jsonl", "line 4")],
)
def test_a_failed_import_does_not_even_create_the_store(
    tmp_path: Path, cli_env: None, fixture: str, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "fresh"
    with pytest.raises(SystemExit) as exit_:
        main(["import", "--home", str(home), str(FIXTURES / fixture)])
    assert exit_.value.code == 2
    assert where in capsys.readouterr().err
    assert not (home / "log").exists()


def test_formats_are_detected() -> None:
    assert detect_format(text("memory.jsonl")) == "memory-jsonl"
    assert detect_format(text("keymem-graph.json")) == "keymem"
    assert detect_format(text("keymem-truncated.json")) == "keymem"
    assert detect_format('{"type":"store.created","seq":1}\n') == "keytrail"
    with pytest.raises(InvalidInput, match="--format"):
        detect_format("hello\n")
    with pytest.raises(InvalidInput, match="keytrail"):
        check_import("{}", "x", Settings(), "keytrail")


# -- keymem graph.json ------------------------------------------------------------------------


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s).astimezone(UTC)


def test_keymem_keeps_times_depths_weights_versions_and_links(store: Store) -> None:
    report = import_text(store, text("keymem-graph.json"), "graph.json")
    assert (report.keys, report.memories) == (3, 4)
    state = store.state
    v1, v2 = state.memories["m_school_v1"], state.memories["m_school_v2"]
    # the version chain, both ways; only the new version is current
    assert (v1.superseded_by, v2.supersedes) == ("m_school_v2", "m_school_v1")
    assert not v1.current() and v2.current()
    # original times, depth and reading
    assert v1.created_at == _t("2025-01-10T09:00:00+00:00")
    assert (v1.depth, v1.access_count) == (0.8, 16)
    assert v1.last_read_at == _t("2025-02-01T18:30:00+00:00")
    lyon = state.memories["m_lyon"]
    assert lyon.created_at == _t("2024-11-20T07:00:00+00:00")  # +01:00 in the file
    assert lyon.related_to == ["m_school_v2"] and lyon.related_from == ["m_school_v2"]
    trip = state.memories["m_trip"]
    assert trip.namespace == "work" and trip.expires_at == _t("2025-03-08T12:00:00+00:00")
    # weights and key types; aliases find the key
    dana = state.keys["k_dana"]
    assert dana.type == "name" and dana.links["m_lyon"] == 2.4 and dana.links["m_school_v1"] == 1.6
    assert state.key_for_label("d.") is dana
    assert state.key_for_label("education") is state.keys["k_school"]
    assert state.keys["k_lyon"].type == "proper_noun"
    # the associative reads see them: present tense hides the old version and the expired trip
    page = store.read_key("k_dana")
    assert {m.memory_id for m in page.memories} == {"m_school_v2", "m_lyon"}


def test_keymem_merges_into_existing_keys_and_mints_ids_that_are_taken(store: Store) -> None:
    first = store.remember("Dana likes tea", ["Dana"], {"Dana": "name"})
    import_text(store, text("keymem-graph.json"), "graph.json")
    # Other texts under the same ids: other memories, which take new ids.
    other = text("keymem-graph.json").replace("Mia", "Noa").replace("lives in", "lived in")
    again = import_text(store, other.replace("in Rome", "in Milan"), "graph.json")
    assert again.memories == 4
    dana = store.state.key_for_label("Dana")
    assert dana is not None and first.memory_id in dana.links
    assert len(dana.links) == 1 + 4 + 4  # one key, every memory of both imports
    assert len(store.state.memories) == 9  # the second import got new memory ids


@pytest.mark.parametrize(
    ("fixture", "empty"),
    [("memory.jsonl", ""), ("keymem-graph.json", '{"keys": {}, "memories": {}}')],
)
def test_the_same_file_again_writes_nothing(
    tmp_path: Path, cli_env: None, capsys: pytest.CaptureFixture[str], fixture: str, empty: str
) -> None:
    """A second import of the same memory.jsonl wrote an empty graph.imported event ("0 keys,
    3 entities, 0 memories"), where create_entities of what exists writes nothing; of the same
    keymem graph.json, it doubled every memory under new ids. An empty file wrote an empty
    event too."""
    home = tmp_path / "store"
    assert main(["import", "--home", str(home), str(FIXTURES / fixture)]) == 0
    before = log_bytes(home)
    capsys.readouterr()
    assert main(["import", "--home", str(home), str(FIXTURES / fixture)]) == 0
    assert log_bytes(home) == before
    assert capsys.readouterr().err.startswith("nothing new in ")
    nothing = tmp_path / f"empty-{fixture}"
    nothing.write_text(empty)
    assert main(["import", "--home", str(home), str(nothing)]) == 0
    assert log_bytes(home) == before


def test_a_keymem_graph_grown_since_imports_only_what_is_new(store: Store) -> None:
    """Memories already in the store (same namespace, text and time told) are not imported
    again; a new one's link to one of them reaches the memory already there."""
    import_text(store, text("keymem-graph.json"), "graph.json")
    doc = json.loads(text("keymem-graph.json"))
    doc["memories"]["m_cafe"] = {
        "content": "Dana opened a cafe in Lyon",
        "created_at": "2025-04-01T08:00:00Z",
        "namespace": "family",
        "links": ["m_lyon"],
    }
    doc["links"].append({"key_id": "k_dana", "memory_id": "m_cafe", "weight": 1.0})
    grown = import_text(store, json.dumps(doc), "graph.json")
    assert (grown.memories, grown.keys) == (1, 0)  # k_dana is there already
    assert len(store.state.memories) == 5
    assert store.state.memories["m_cafe"].related_to == ["m_lyon"]
    assert "m_cafe" in store.state.memories["m_lyon"].related_from


def test_a_keymem_version_of_a_memory_the_store_has_corrected_since_is_refused(
    store: Store,
) -> None:
    """A grown graph.json whose new version supersedes a memory the store has corrected since
    forked the version chain: the file's version took the memory's `superseded_by`, both
    versions were current, the correction was missing from its own history, and `correct`
    named the file's version as the one that replaced it. Within a file, a second version of
    one memory is refused the same way."""
    import_text(store, text("keymem-graph.json"), "graph.json")
    corrected = store.correct("m_lyon", "Dana lives in Paris now")
    doc = json.loads(text("keymem-graph.json"))
    doc["memories"]["m_grenoble"] = {
        "content": "Dana lives in Grenoble",
        "created_at": "2025-04-01T08:00:00Z",
        "namespace": "family",
        "supersedes": "m_lyon",
    }
    doc["links"].append({"key_id": "k_dana", "memory_id": "m_grenoble", "weight": 1.0})
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, json.dumps(doc), "graph.json")
    assert err.value.message == (
        "graph.json $.memories.m_grenoble.supersedes: 'm_lyon' is already superseded by "
        f"{corrected.memory_id!r} in the store (a new version goes after its current one)"
    )
    assert log_bytes(store.home) == before
    assert store.state.memories["m_lyon"].superseded_by == corrected.memory_id
    assert [v.memory_id for v in history(store, corrected.memory_id).versions] == [
        "m_lyon",
        corrected.memory_id,
    ]


@pytest.mark.parametrize(
    ("gone", "field", "target", "why"),
    [
        ("forgotten", "supersedes", "m_lyon", "it was forgotten"),
        ("forgotten", "links[0]", "m_lyon", "it was forgotten"),
        ("expired", "supersedes", "m_trip", "it has expired"),
        ("expired", "links[0]", "m_trip", "it has expired"),
    ],
)
def test_a_keymem_version_of_or_link_to_a_memory_gone_from_the_store_is_refused(
    store: Store, gone: str, field: str, target: str, why: str
) -> None:
    """A grown graph.json's new memory superseding (or linking to) a memory the store holds
    forgotten or expired was imported, where correct and remember's related_to refuse it: a
    forgotten memory got a current version, an expired one an edge no read shows."""
    import_text(store, text("keymem-graph.json"), "graph.json")
    if gone == "forgotten":
        store.forget(target)
    assert store.state.memories[target].status == ("forgotten" if gone == "forgotten" else "active")
    doc = json.loads(text("keymem-graph.json"))
    new: dict[str, Any] = {
        "content": "Dana moved again",
        "created_at": "2025-04-01T08:00:00Z",
        "namespace": store.state.memories[target].namespace,
    }
    if field == "supersedes":
        new["supersedes"] = target
    else:
        new["links"] = [target]
    doc["memories"]["m_moved"] = new
    doc["links"].append({"key_id": "k_dana", "memory_id": "m_moved", "weight": 1.0})
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, json.dumps(doc), "graph.json")
    assert err.value.message == (
        f"graph.json $.memories.m_moved.{field}: no memory {target!r}: {why}"
    )
    assert log_bytes(store.home) == before
    # The same words as the commands' (correct with content; remember's related_to).
    with pytest.raises(InvalidInput) as by_command:
        if field == "supersedes":
            store.correct(target, "Dana moved again")
        else:
            store.remember(
                "Dana moved again", ["Dana"], namespace=new["namespace"], related_to=[target]
            )
    assert by_command.value.message.endswith(f": no memory {target!r}: {why}")


def test_keymem_link_to_another_namespace_is_refused_like_remember_refuses_it(
    store: Store,
) -> None:
    """A keymem `links` entry became a related_to edge across namespaces, which remember and
    correct refuse: read_memory then listed the link and `related` never followed it."""
    doc = (
        '{"keys": {"k": {"concept": "Dana", "key_type": "name"}},'
        ' "memories": {"m_cat": {"content": "Dana got a cat", "namespace": "family"},'
        ' "m_dog": {"content": "Dana got a dog", "namespace": "work", "links": ["m_cat"]}},'
        ' "links": [{"key_id": "k", "memory_id": "m_cat"}, {"key_id": "k", "memory_id": "m_dog"}]}'
    )
    store.remember("Dana likes tea", ["Dana"], {"Dana": "name"})
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, doc, "graph.json")
    assert err.value.message == (
        "graph.json $.memories.m_dog.links[0]: memory 'm_cat' is in namespace 'family', "
        "not 'work' (related_to links memories of one namespace)"
    )
    assert log_bytes(store.home) == before
    # One namespace: the link is kept and `related` follows it.
    import_text(store, doc.replace('"work"', '"family"'), "graph.json")
    assert store.state.memories["m_dog"].related_to == ["m_cat"]
    assert "m_cat" in [r.memory_id for r in store.related("m_dog").related]


def test_keymem_version_chain_across_namespaces_is_refused(store: Store) -> None:
    """A version in namespace work superseding one in family: family's reads lost the fact
    (superseded) while work's showed it; a correction always keeps its memory's namespace."""
    doc = (
        '{"keys": {"k": {"concept": "Dana", "key_type": "name"}},'
        ' "memories": {"m_v1": {"content": "Dana lives in Lyon", "namespace": "family"},'
        ' "m_v2": {"content": "Dana lives in Paris", "namespace": "work", "supersedes": "m_v1"}},'
        ' "links": [{"key_id": "k", "memory_id": "m_v1"}, {"key_id": "k", "memory_id": "m_v2"}]}'
    )
    store.remember("Dana likes tea", ["Dana"], {"Dana": "name"})
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as err:
        import_text(store, doc, "graph.json")
    assert err.value.message == (
        "graph.json $.memories.m_v2.supersedes: memory 'm_v1' is in namespace 'family', "
        "not 'work' (the versions of a memory share its namespace)"
    )
    assert log_bytes(store.home) == before


# -- export, then import ----------------------------------------------------------------------


def populated(make_store: Callable[..., Store], home: Path) -> Store:
    store = make_store(home=home)
    import_text(store, text("keymem-graph.json"), "graph.json")
    kg = KnowledgeGraph(store)
    import_text(store, text("memory.jsonl"), "memory.jsonl")
    kg.add_observations([ObservationInput("Lyon", ["Sits where the Rhône meets the Saône"])])
    kg.delete_observations(
        [ObservationInput("QuintoAndar", ["Rental platform based in São Paulo"])]
    )
    kg.delete_entities(["QuintoAndar"])
    m = store.remember("The team meets on Mondays", ["team", "meeting"], namespace="work")
    store.read_memory(m.memory_id)
    store.correct(m.memory_id, "The team meets on Tuesdays")
    store.record_turn("s1", "user", "hello")
    return store


def encoded(state: GraphState) -> bytes:
    # A state opened from a snapshot holds undecoded nodes until looked at: decode them all.
    return msgspec.msgpack.encode(materialize(state))


def unsequenced(node: Any) -> dict[str, Any]:
    # Nodes encode as arrays (array_like), so compare them field by field.
    data = {f: getattr(node, f) for f in node.__struct_fields__}
    return {k: v for k, v in data.items() if k not in ("created_seq", "updated_seq")}


def test_keytrail_export_then_import_gives_the_same_state(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    store = populated(make_store, tmp_path / "a")
    out = tmp_path / "export.jsonl"
    assert main(["export", "--home", str(store.home), "-o", str(out)]) == 0
    assert main(["import", "--home", str(tmp_path / "b"), str(out)]) == 0
    # Everything, store id and record times included: the events are replayed as they were.
    assert encoded(fold(EventLog(tmp_path / "b").iter_new())) == encoded(store.refresh())


def test_an_import_syncs_its_staged_log_once_before_it_goes_live(
    make_store: Callable[..., Store],
    tmp_path: Path,
    cli_env: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The staged log was fsynced line by line, as if each line were acknowledged: an
    import of 20,000 events took 4.7 s, most of it waiting on the disk. Nobody reads the
    staging, so it is synced whole, and before the rename that makes it the store's log."""
    store = make_store(home=tmp_path / "a")
    for i in range(40):
        store.remember(f"fact number {i} about tea", ["tea"])
    out = tmp_path / "export.jsonl"
    assert main(["export", "--home", str(store.home), "-o", str(out)]) == 0
    done: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd: int) -> None:
        done.append("sync " + os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(src: object, dst: object) -> None:
        done.append("rename")
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    assert main(["import", "--home", str(tmp_path / "b"), str(out)]) == 0
    monkeypatch.undo()
    segment = segment_name(1)
    assert done.count(f"sync {segment}") == 1  # not once per line
    assert done.index(f"sync {segment}") < done.index("sync log") < done.index("rename")
    assert verify(tmp_path / "b").ok
    assert encoded(fold(EventLog(tmp_path / "b").iter_new())) == encoded(store.refresh())


def test_namespace_export_holds_that_namespace_and_imports_alone(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    store = populated(make_store, tmp_path / "a")
    out = tmp_path / "work.jsonl"
    assert main(["export", "--home", str(store.home), "--namespace", "work", "-o", str(out)]) == 0
    assert main(["import", "--home", str(tmp_path / "b"), str(out)]) == 0
    full, part = store.refresh(), fold(EventLog(tmp_path / "b").iter_new())
    mine = {mid for mid, m in full.memories.items() if m.namespace == "work"}
    assert mine and set(part.memories) == mine
    for mid in mine:  # each memory as in the whole store, but for the renumbered seqs
        assert unsequenced(part.memories[mid]) == unsequenced(full.memories[mid])
        for key_id in full.memories[mid].keys:
            assert part.keys[key_id].links[mid] == full.keys[key_id].links[mid]
    # entities and relations are store-wide: they come along
    assert set(part.relations) == set(full.relations)


def test_a_namespace_export_of_a_namespace_never_used_is_refused_and_writes_nothing(
    make_store: Callable[..., Store],
    tmp_path: Path,
    cli_env: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A mistyped --namespace used to export only the store-wide events and exit 0."""
    store = populated(make_store, tmp_path / "a")
    used = sorted({m.namespace for m in store.refresh().memories.values()})
    out = tmp_path / "wrok.jsonl"
    with pytest.raises(SystemExit) as stopped:
        main(["export", "--home", str(store.home), "--namespace", "wrok", "-o", str(out)])
    assert stopped.value.code == 2 and not out.exists()
    err = capsys.readouterr().err
    assert err == (
        "keytrail: error: --namespace: no memory in this store was ever in namespace 'wrok' "
        f"(its namespaces: {', '.join(used)})\n"
    )
    with pytest.raises(SystemExit) as stopped:
        kg_export = ["export", "--format", "memory-jsonl", "--namespace", "wrok"]
        main([*kg_export, "--home", str(store.home), "-o", str(out)])
    assert stopped.value.code == 2 and not out.exists()
    assert "namespace 'wrok'" in capsys.readouterr().err
    # A namespace whose every memory was forgotten was used: its export still runs.
    work = [mid for mid, m in store.refresh().memories.items() if m.namespace == "work"]
    for mid in work:
        if store.refresh().memories[mid].status != "forgotten":
            store.forget(mid)
    assert all(store.refresh().memories[mid].status == "forgotten" for mid in work)
    assert main(["export", "--home", str(store.home), "--namespace", "work", "-o", str(out)]) == 0
    assert work[0] in out.read_text()


def test_memory_jsonl_export_then_import_gives_the_same_graph(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    store = populated(make_store, tmp_path / "a")
    first = tmp_path / "memory.jsonl"
    assert (
        main(["export", "--home", str(store.home), "--format", "memory-jsonl", "-o", str(first)])
        == 0
    )
    lines = first.read_text().splitlines()
    assert lines == [
        '{"type":"entity","name":"Lyon","entityType":"city",'
        '"observations":["Sits where the Rhône meets the Saône"]}',
        '{"type":"entity","name":"David Barnett","entityType":"person",'
        '"observations":["Speaks fluent Spanish","Prefers morning meetings"]}',
        '{"type":"relation","from":"David Barnett","to":"Lyon","relationType":"lives_in"}',
    ]
    assert main(["import", "--home", str(tmp_path / "b"), str(first)]) == 0
    copy = make_store(home=tmp_path / "b")
    assert whole_graph(copy) == whole_graph(store)
    again = tmp_path / "again.jsonl"
    assert (
        main(["export", "--home", str(copy.home), "--format", "memory-jsonl", "-o", str(again)])
        == 0
    )
    assert again.read_bytes() == first.read_bytes()


def test_a_file_with_a_byte_order_mark_imports(tmp_path: Path, cli_env: None) -> None:
    """Windows editors save one; with it the file was "of no format keytrail can tell"."""
    marked = tmp_path / "memory.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "memory.jsonl").read_bytes())
    home = tmp_path / "store"
    assert main(["import", "--home", str(home), str(marked)]) == 0
    with Store(Settings(home=home, embedder="hash")) as store:
        plain = tmp_path / "plain"
        assert main(["import", "--home", str(plain), str(FIXTURES / "memory.jsonl")]) == 0
        with Store(Settings(home=plain, embedder="hash")) as other:
            assert whole_graph(store) == whole_graph(other)


def test_memory_jsonl_adds_again_an_observation_that_has_expired(tmp_path: Path) -> None:
    """An observation whose ttl has passed is hidden from every read; the same text in an
    imported memory.jsonl is then new, as add_observations takes it, not a duplicate skipped
    without a word (the graph would never show it again)."""
    from datetime import timedelta

    from keytrail.core import HashEmbedder

    now = [datetime(2026, 3, 1, 9, 0, tzinfo=UTC)]
    store = Store(
        Settings(home=tmp_path / "store", embedder="hash"),
        embedder=HashEmbedder(),
        clock=lambda: now[0],
    )
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Dana", "person")])
    store.remember("Dana is in a meeting", ["Dana"], {"Dana": "name"}, ttl_seconds=3600)
    line = (
        '{"type":"entity","name":"Dana","entityType":"person",'
        '"observations":["Dana is in a meeting"]}\n'
    )
    assert import_text(store, line, "graph.jsonl").memories == 0  # shown: a duplicate

    now[0] += timedelta(hours=2)
    assert kg.open_nodes(["Dana"]).entities[0].observations == []
    report = import_text(store, line, "graph.jsonl")
    assert report.memories == 1
    assert kg.open_nodes(["Dana"]).entities[0].observations == ["Dana is in a meeting"]
    store.close()


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_memory_jsonl_with_a_unicode_line_separator_in_an_observation_round_trips(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None, separator: str
) -> None:
    """The export writes U+2028, U+2029 and U+0085 unescaped (JSON allows them raw in a string)
    and ends lines with "\\n" only; the import split lines on every Unicode line boundary, so
    an observation holding one broke its line in two: the file was "not JSON", or, on its
    first line, taken for a keymem graph.json and imported as nothing."""
    store = make_store(home=tmp_path / "a")
    kg = KnowledgeGraph(store)
    kg.create_entities(
        [
            EntityInput("Ann", "person", [f"first line{separator}second line"]),
            EntityInput("Bob", "person", [f"left{separator}right", "plain"]),
        ]
    )
    first = tmp_path / "memory.jsonl"
    assert (
        main(["export", "--home", str(store.home), "--format", "memory-jsonl", "-o", str(first)])
        == 0
    )
    assert separator in first.read_text(encoding="utf-8")
    assert main(["import", "--home", str(tmp_path / "b"), str(first)]) == 0
    copy = make_store(home=tmp_path / "b")
    assert whole_graph(copy) == whole_graph(store)
    # Alone on its first line too, where the format is detected.
    single = first.read_text(encoding="utf-8").split("\n")[0] + "\n"
    assert detect_format(single) == "memory-jsonl"
    alone = make_store(home=tmp_path / "c")
    assert import_text(alone, single, "single.jsonl").memories == 1
    assert whole_graph(alone)["entities"] == whole_graph(store)["entities"][:1]


def test_memory_jsonl_import_writes_into_the_namespace_given_like_the_export_reads_it(
    tmp_path: Path, cli_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With KEYTRAIL_KG_NAMESPACE set, `import --namespace work` wrote the observations into
    the knowledge-graph namespace, not `work`, though `import` writes into `--namespace` and
    `export --format memory-jsonl --namespace work` reads `work`: exporting a namespace and
    importing it back under the same flag landed elsewhere (and that export then found no
    memory in `work`)."""
    monkeypatch.setenv("KEYTRAIL_KG_NAMESPACE", "kg")
    home = tmp_path / "store"
    fixture = str(FIXTURES / "memory.jsonl")
    assert main(["--namespace", "work", "import", "--home", str(home), fixture]) == 0
    with Store(Settings(home=home, embedder="hash")) as store:
        assert {m.namespace for m in store.refresh().memories.values()} == {"work"}
    out = tmp_path / "work.jsonl"
    export = ["export", "--home", str(home), "--format", "memory-jsonl", "-o", str(out)]
    assert main(["--namespace", "work", *export]) == 0
    assert "Speaks fluent Spanish" in out.read_text(encoding="utf-8")
    # Without --namespace, the knowledge-graph namespace, as before.
    other = tmp_path / "other"
    assert main(["import", "--home", str(other), fixture]) == 0
    with Store(Settings(home=other, embedder="hash")) as store:
        assert {m.namespace for m in store.refresh().memories.values()} == {"kg"}


def test_the_memory_jsonl_of_an_empty_graph_imports(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    """A graph with no entity exports as an empty file (the reference server writes one for an
    empty graph too); importing it failed, "cannot tell the file's format", so the round trip
    broke on an empty graph. No other format can be empty: it is an empty memory.jsonl."""
    store = make_store(home=tmp_path / "a")
    store.remember("a plain fact, no entity", ["fact"])
    empty = tmp_path / "memory.jsonl"
    assert (
        main(["export", "--home", str(store.home), "--format", "memory-jsonl", "-o", str(empty)])
        == 0
    )
    assert empty.read_bytes() == b""
    assert detect_format("") == detect_format("\n \n") == "memory-jsonl"
    assert main(["import", "--home", str(tmp_path / "b"), str(empty)]) == 0
    assert whole_graph(make_store(home=tmp_path / "b")) == {"entities": [], "relations": []}


@pytest.mark.parametrize("content", ["", "\n \n"])
def test_an_empty_file_says_it_is_empty(
    tmp_path: Path, cli_env: None, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    """An empty file said "nothing new ...: its 0 entities, their observations and relations
    are in HOME already" (even of a home it had just made), as if it held a graph; as a
    keytrail export it said "input: the export holds no events", naming no file, and as a
    keymem graph.json "$: not JSON: Expecting value". Each now names the file and says it is
    empty; only as a memory.jsonl (an empty graph's) is that no error."""
    home = tmp_path / "store"
    assert main(["import", "--home", str(home), str(FIXTURES / "memory.jsonl")]) == 0
    before = log_bytes(home)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    capsys.readouterr()
    assert main(["import", "--home", str(home), str(empty)]) == 0
    said = capsys.readouterr().err
    assert f"{empty} is empty" in said and "0 entities" not in said
    for fmt in ("keytrail", "keymem"):
        with pytest.raises(SystemExit) as exit_:
            main(["import", "--home", str(home), "--format", fmt, str(empty)])
        assert exit_.value.code == 2
        assert f"error: {empty}: the file is empty" in capsys.readouterr().err
    assert log_bytes(home) == before


def test_an_observation_held_twice_exports_once_so_the_round_trip_gives_the_same_bytes(
    make_store: Callable[..., Store], tmp_path: Path, cli_env: None
) -> None:
    """Two current memories of one entity can hold the same text (a correction onto a text it
    has, a keymem import); the export listed it twice, the import (like add_observations)
    keeps an observation once, so exporting the copy gave other bytes than the first export.
    memory.jsonl observations are an entity's texts: each once, in the order first added."""
    store = make_store(home=tmp_path / "a")
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Ann", "person", ["likes tea", "likes coffee", "tall"])])
    coffee = next(m.id for m in store.state.memories.values() if m.content == "likes coffee")
    store.correct(coffee, "likes tea")
    first = tmp_path / "memory.jsonl"
    assert (
        main(["export", "--home", str(store.home), "--format", "memory-jsonl", "-o", str(first)])
        == 0
    )
    assert first.read_text(encoding="utf-8").splitlines() == [
        '{"type":"entity","name":"Ann","entityType":"person","observations":["likes tea","tall"]}'
    ]
    assert main(["import", "--home", str(tmp_path / "b"), str(first)]) == 0
    again = tmp_path / "again.jsonl"
    assert (
        main(
            ["export", "--home", str(tmp_path / "b"), "--format", "memory-jsonl", "-o", str(again)]
        )
        == 0
    )
    assert again.read_bytes() == first.read_bytes()


def test_an_observation_held_in_two_encodings_exports_once(store: Store) -> None:
    """Observations compare composed (NFC), but the export kept each exact text once: a memory
    told under the entity's name in the other encoding (or two stored before observations
    compared composed) was written twice, and the import keeps one of them."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Ann", "person", ["likes café", "tall"])])
    store.remember("likes cafe\u0301", ["Ann"])
    lines = memory_jsonl_lines(store.state, "default", datetime.now(UTC))
    assert [json.loads(line)["observations"] for line in lines] == [["likes café", "tall"]]


LONG = "x" * 3000


def _memory(doc: dict[str, Any], **fields: Any) -> None:
    doc["memories"]["m_lyon"].update(fields)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda doc: doc["keys"]["k_dana"].update(key_type=LONG), "$.keys.k_dana.key_type"),
        (lambda doc: _memory(doc, depth=LONG), "$.memories.m_lyon.depth"),
        (lambda doc: _memory(doc, depth=[LONG]), "$.memories.m_lyon.depth"),
        (lambda doc: _memory(doc, created_at=10**1000), "$.memories.m_lyon.created_at"),
        (lambda doc: _memory(doc, links=[LONG]), "$.memories.m_lyon.links[0]"),
        (lambda doc: _memory(doc, supersedes=LONG), "$.memories.m_lyon.supersedes"),
        (lambda doc: doc["links"][0].update(key_id=LONG), "$.links[0].key_id"),
        (lambda doc: doc["links"][0].update(memory_id=LONG), "$.links[0].memory_id"),
        (
            lambda doc: doc.update(
                keys=[{"id": LONG, "concept": "a"}, {"id": LONG, "concept": "b"}]
            ),
            "$.keys[1]",
        ),
    ],
)
def test_a_value_refused_in_a_keymem_file_is_quoted_short(
    store: Store, change: Callable[[dict[str, Any]], None], field: str
) -> None:
    """A value of the file came back whole in the error (an id, a key type, a depth of 3,000
    characters, a Unix time of 1,001 digits): quoted short, as refused arguments are."""
    doc = msgspec.json.decode(text("keymem-graph.json"))
    change(doc)
    with pytest.raises(InvalidInput) as err:
        import_text(store, msgspec.json.encode(doc).decode(), "graph.json")
    assert err.value.field == f"graph.json {field}", str(err.value)
    assert len(str(err.value)) < 300, str(err.value)[:300]


def test_a_long_type_in_a_memory_jsonl_file_is_quoted_short(store: Store) -> None:
    with pytest.raises(InvalidInput) as err:
        import_text(store, json.dumps({"type": "entity" + LONG}), "memory.jsonl", "memory-jsonl")
    assert str(err.value).startswith("memory.jsonl line 1: unknown type 'entityxxx")
    assert len(str(err.value)) < 300, str(err.value)[:300]
