"""The knowledge graph in core: reference behaviour, cascades, bad input, paging, the past."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from keytrail.core import InvalidInput, NotFound, Settings, Store
from keytrail.core.config import parse_toolsets
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
    read_graph,
)
from keytrail.events import EventLog, KeyAliased
from keytrail.projections import fold


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def names(page: object) -> list[str]:
    return [e["name"] for e in msgspec.to_builtins(page)["entities"]]


@pytest.fixture
def kg(store: Store) -> KnowledgeGraph:
    return KnowledgeGraph(store)


def test_existing_names_are_ignored_in_any_case_and_within_a_call(kg: KnowledgeGraph) -> None:
    out = kg.create_entities(
        [
            EntityInput("Alice", "person", ["likes tea"]),
            EntityInput("ALICE", "robot", ["beeps"]),
            EntityInput("Bob", "person"),
        ]
    )
    assert [e.name for e in out.entities] == ["Alice", "Bob"]
    seq = kg.store.state.seq
    assert kg.create_entities([EntityInput("alice", "x", ["y"])]).entities == []
    assert kg.store.state.seq == seq  # nothing to do, nothing written
    opened = kg.open_nodes(["aLiCe"])
    assert [(e.name, e.entity_type, e.observations) for e in opened.entities] == [
        ("Alice", "person", ["likes tea"])
    ]


def test_an_existing_key_becomes_an_entity_and_an_alias_is_refused(store: Store) -> None:
    kg = KnowledgeGraph(store)
    store.remember("Paris is the capital of France", ["Paris", "capital"])
    made = kg.create_entities([EntityInput("paris", "city", ["Has the Louvre"])])
    paris = store.state.key_for_label("Paris")
    assert paris is not None and paris.entity_type == "city"
    assert made.entities[0].name == "Paris"  # the key's own label
    # the remembered fact (same namespace) is an observation too: one memory, two faces
    assert kg.open_nodes(["Paris"]).entities[0].observations == [
        "Paris is the capital of France",
        "Has the Louvre",
    ]
    # a name that is another key's alias is refused (it would silently mean that key)
    capital = store.state.key_for_label("capital")
    assert capital is not None
    store._write(lambda app: store._append(app, KeyAliased(key_id=capital.id, alias="seat")))
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput, match=r"entities\[0\]\.name.*alias"):
        kg.create_entities([EntityInput("Seat", "thing")])
    assert log_bytes(store.home) == before


def test_an_entity_named_as_long_as_names_may_be_is_a_key_remember_takes(store: Store) -> None:
    """An entity name may be 200 characters (kg_name_chars), a key label was held to 100: the
    entity's own key was refused as `remember(keys=[name])`. The two limits agree now."""
    name = "The " + "Very " * 25 + "Long Steering Council"  # 150 characters
    assert len(name) == 150
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput(name, "organisation", ["meets on Mondays"])])
    told = store.remember("The committee moved its meeting to Tuesday", [name])
    entity = store.state.key_for_label(name)
    assert entity is not None and [k.key_id for k in told.keys] == [entity.id]
    assert kg.open_nodes([name]).entities[0].observations == [
        "meets on Mondays",
        "The committee moved its meeting to Tuesday",
    ]
    with pytest.raises(InvalidInput) as refused:
        store.remember("too long a key", ["k" * 201])
    assert refused.value.field == "keys[0]" and "200" in str(refused.value)
    assert store.settings.limits.key_chars == store.settings.limits.kg_name_chars


def test_an_entity_name_is_held_to_a_key_limit_set_lower(make_store: Callable[..., Store]) -> None:
    """KEYTRAIL_MAX_KEY_CHARS set below the entity name limit made entities whose key no
    `remember(keys=[name])` took; a name is held to the shorter limit, a type is not."""
    from keytrail.core.config import Limits
    from keytrail.core.importers import import_text

    store = make_store(limits=Limits(key_chars=50))
    kg = KnowledgeGraph(store)
    seq = store.state.seq
    with pytest.raises(InvalidInput) as refused:
        kg.create_entities([EntityInput("N" * 51, "person", [])])
    assert refused.value.field == "entities[0].name" and "50" in str(refused.value)
    with pytest.raises(InvalidInput) as refused:
        kg.create_relations([RelationInput("Ann", "B" * 51, "knows")])
    assert refused.value.field == "relations[0].to"
    assert store.state.seq == seq
    kg.create_entities([EntityInput("N" * 50, "t" * 120, [])])  # a type may be longer
    store.remember("a fact", ["N" * 50])
    line = '{"type": "entity", "name": "%s", "entityType": "person", "observations": []}'
    with pytest.raises(InvalidInput) as refused:
        import_text(store, line % ("M" * 51), "graph.jsonl")
    assert "50" in str(refused.value)


@pytest.mark.parametrize(
    ("told", "named"), [("O'Brien", "O’Brien"), ("İstanbul", "Istanbul"), ("Zoe\u0308", "Zoë")]
)
def test_a_key_spelled_another_way_becomes_the_entity_not_an_alias(
    store: Store, told: str, named: str
) -> None:
    # The same name typed with the other apostrophe, an İ as I, or decomposed is that key's
    # name, as another case of it is: the key becomes the entity, under its own label.
    key = store.remember(f"About {told}", [told], {told: "name"}).keys[0]
    made = KnowledgeGraph(store).create_entities([EntityInput(named, "thing", ["an observation"])])
    assert [e.name for e in made.entities] == [key.label]
    assert store.state.keys[key.key_id].entity_type == "thing"


def test_unknown_entities_fail_and_write_nothing(kg: KnowledgeGraph) -> None:
    kg.create_entities([EntityInput("Alice", "person"), EntityInput("Bob", "person")])
    before = log_bytes(kg.store.home)
    with pytest.raises(NotFound, match=r"relations\[1\]\.to.*Carol"):
        kg.create_relations(
            [RelationInput("Alice", "Bob", "knows"), RelationInput("Bob", "Carol", "knows")]
        )
    with pytest.raises(NotFound, match=r"observations\[1\]\.entityName.*Zed"):
        kg.add_observations(
            [ObservationInput("Alice", ["likes tea"]), ObservationInput("Zed", ["boo"])]
        )
    assert log_bytes(kg.store.home) == before
    assert kg.read_graph().relations == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda kg: kg.create_entities([EntityInput("  ", "person")]), "entities[0].name"),
        (lambda kg: kg.create_entities([EntityInput("A", "p" * 201)]), "entities[0].entityType"),
        (lambda kg: kg.create_entities([EntityInput("A", "p", [""])]), "observations[0]"),
        (lambda kg: kg.create_entities([EntityInput("A", "p")] * 501), "entities"),
        (lambda kg: kg.create_entities("Alice"), "entities"),
        (lambda kg: kg.search_nodes(""), "query"),
        (lambda kg: kg.read_graph(limit=201), "limit"),
        (lambda kg: kg.read_graph(offset=-1), "offset"),
        (lambda kg: kg.open_nodes(["x"] * 201), "names"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(
    kg: KnowledgeGraph, call: Callable[[KnowledgeGraph], object], field: str
) -> None:
    before = log_bytes(kg.store.home)
    with pytest.raises(InvalidInput) as err:
        call(kg)
    assert err.value.field.startswith(field) or field in err.value.field, err.value.message
    assert log_bytes(kg.store.home) == before


def test_an_item_of_another_type_is_refused_naming_it(kg: KnowledgeGraph) -> None:
    """A Python caller passing an entity, relation or observation entry as a dict (the shape
    the MCP tools take) or a tuple met AttributeError ('dict' object has no attribute 'name'),
    not an error of keytrail's."""
    kg.create_entities([EntityInput("Alice", "person")])
    before = log_bytes(kg.store.home)
    calls: dict[str, Callable[[], object]] = {
        "entities[0]: must be an EntityInput, got dict": lambda: kg.create_entities(
            [{"name": "Bob", "entityType": "person"}]  # type: ignore[list-item]
        ),
        "relations[1]: must be a RelationInput, got tuple": lambda: kg.create_relations(
            [RelationInput("Alice", "Alice", "knows"), ("Alice", "Alice", "likes")]  # type: ignore[list-item]
        ),
        "observations[0]: must be an ObservationInput, got NoneType": lambda: kg.add_observations(
            [None]
        ),  # type: ignore[list-item]
        "deletions[0]: must be an ObservationInput, got str": lambda: kg.delete_observations(
            ["Alice"]
        ),  # type: ignore[list-item]
        "relations[0]: must be a RelationInput, got str": lambda: kg.delete_relations(
            ["Alice knows Alice"]
        ),  # type: ignore[list-item]
    }
    for said, call in calls.items():
        with pytest.raises(InvalidInput) as info:
            call()
        assert str(info.value) == said
    assert log_bytes(kg.store.home) == before


def test_deleting_an_entity_cascades(store: Store) -> None:
    kg = KnowledgeGraph(store)
    kg.create_entities(
        [EntityInput("Alice", "person", ["likes tea"]), EntityInput("Bob", "person", ["chess"])]
    )
    kg.create_relations(
        [RelationInput("Alice", "Bob", "knows"), RelationInput("Bob", "Alice", "knows")]
    )
    shared = store.remember("Alice and Bob met in Lyon", ["Alice", "Bob"])
    other_ns = store.remember("Alice's work badge is 42", ["Alice"], namespace="work")
    tea = next(m for m in store.state.memories.values() if m.content == "likes tea")

    result = kg.delete_entities(["Alice", "Nobody"])
    assert (result.deleted, result.not_found, result.deleted_count) == (["Alice"], ["Nobody"], 1)
    assert kg.read_graph().relations == []  # both directions gone
    assert store.state.memories[tea.id].status == "deleted"  # her own observation
    # a fact about Alice and Bob stays Bob's; Alice's key no longer leads to it
    alice = store.state.key_for_label("Alice")
    assert alice is not None and shared.memory_id not in alice.links
    assert kg.open_nodes(["Bob"]).entities[0].observations == ["chess", "Alice and Bob met in Lyon"]
    # other namespaces are not the knowledge graph's: untouched
    assert store.state.memories[other_ns.memory_id].status == "active"
    # created again, the entity starts with nothing
    kg.create_entities([EntityInput("Alice", "person")])
    assert kg.open_nodes(["Alice"]).entities[0].observations == []


def test_observations_are_deduplicated_and_deleted_by_text(kg: KnowledgeGraph) -> None:
    kg.create_entities([EntityInput("Alice", "person", ["likes tea"])])
    added = kg.add_observations(
        [ObservationInput("alice", ["likes tea", "plays chess", "plays chess"])]
    )
    assert [(r.entity_name, r.added_observations) for r in added.results] == [
        ("Alice", ["plays chess"])
    ]
    gone = kg.delete_observations(
        [ObservationInput("Alice", ["likes tea", "never said"]), ObservationInput("Zed", ["x"])]
    )
    assert (gone.deleted_count, gone.missing_entities) == (1, ["Zed"])
    assert gone.deleted == ["likes tea"]  # what went, as deletedCount counts it
    assert "Deleted 1 of 3" in gone.message
    # What was asked and is not there is named (notFound was [] beside "Deleted 1 of 3"):
    # a text the entity does not have, and the texts of an entity that does not exist.
    assert gone.not_found == ["never said", "x"]
    assert "Not found: never said; x" in gone.message
    assert kg.open_nodes(["Alice"]).entities[0].observations == ["plays chess"]


def test_search_matches_any_word_in_names_types_and_observations(kg: KnowledgeGraph) -> None:
    kg.create_entities(
        [
            EntityInput("Alice", "person", ["Drinks green TEA"]),
            EntityInput("Acme", "organization"),
            EntityInput("Bob", "person", ["plays chess"]),
        ]
    )
    kg.create_relations([RelationInput("Alice", "Acme", "works_at")])
    assert names(kg.search_nodes("tea ORGANIZATION")) == ["Alice", "Acme"]
    found = kg.search_nodes("acme")
    assert [r.from_ for r in found.relations] == ["Alice"]  # relations touching a match
    assert names(kg.search_nodes("PERSON", limit=1, offset=1)) == ["Bob"]
    assert kg.search_nodes("zebra").entities == []


def test_search_matches_a_word_however_its_accents_are_encoded(kg: KnowledgeGraph) -> None:
    # Names are stored NFC; a query typed on macOS or pasted is often decomposed ("e" and a
    # combining accent), and an observation may be stored as it was typed, either way.
    kg.create_entities(
        [
            EntityInput("Zoe\u0308", "person", ["Bakes cre\u0300me bru\u0302le\u0301e"]),
            EntityInput("Chloé", "person", ["Lives in Montréal"]),
        ]
    )
    assert names(kg.search_nodes("zoe\u0308")) == ["Zoë"]
    assert names(kg.search_nodes("ZOË")) == ["Zoë"]
    assert names(kg.search_nodes("crème")) == ["Zoë"]  # composed query, decomposed text
    assert names(kg.search_nodes("montre\u0301al")) == ["Chloé"]  # and the other way
    assert names(kg.search_nodes("chloe\u0301")) == ["Chloé"]


def test_an_observation_is_the_same_however_its_accents_are_encoded(
    store: Store, kg: KnowledgeGraph
) -> None:
    """Observations were compared exactly: "likes cafe" + U+0301 was added next to "likes
    café" (two observations that look the same), and deleting one in the other encoding found
    nothing. They compare composed, as names do; the text stays as it was typed."""
    decomposed = "likes cafe\u0301"
    made = kg.create_entities([EntityInput("Ana", "person", ["likes café", "is 9", decomposed])])
    assert made.entities[0].observations == ["likes café", "is 9"]
    added = kg.add_observations([ObservationInput("Ana", [decomposed, "reads cafe\u0301"])])
    assert added.results[0].added_observations == ["reads cafe\u0301"]
    kg.create_entities([EntityInput("Bo", "person", [decomposed])])
    assert kg.add_observations([ObservationInput("Bo", ["likes café"])]).seq is None
    assert kg.open_nodes(["Bo"]).entities[0].observations == [decomposed]  # as typed
    gone = kg.delete_observations(
        [
            ObservationInput("Ana", [decomposed, "reads café"]),
            ObservationInput("Bo", ["likes café"]),
        ]
    )
    assert (gone.deleted_count, gone.message) == (3, "Observations deleted successfully")
    assert gone.deleted == ["likes café", "reads cafe\u0301", decomposed]
    assert [e.observations for e in kg.open_nodes(["Ana", "Bo"]).entities] == [["is 9"], []]


def test_an_observation_two_memories_hold_is_listed_and_counted_once(
    store: Store, kg: KnowledgeGraph
) -> None:
    """A correction onto a text the entity has, or the text told again in another encoding,
    makes two memories of one observation. The reads listed it twice and counted both, while
    add_observations skipped it as there and the export wrote it once: an entity's
    observations are a set, each text once where first remembered, as first typed."""
    kg.create_entities([EntityInput("Alice", "person", ["likes tea", "plays chess"])])
    coffee = store.remember("likes coffee", ["Alice"]).memory_id
    store.correct(coffee, "likes tea")  # a second memory of "likes tea"
    store.remember("reads cafe\u0301", ["Alice"])
    store.remember("reads café", ["Alice"])  # the same observation, composed
    memories = [m.id for m in store.state.memories.values() if m.current()]
    shown = ["likes tea", "plays chess", "reads cafe\u0301"]

    def alice(page: object) -> tuple[list[str], int]:
        entity = msgspec.to_builtins(page)["entities"][0]
        return entity["observations"], entity["observations_total"]

    assert alice(kg.open_nodes(["Alice"])) == (shown, 3)
    assert alice(kg.read_graph()) == (shown, 3)
    assert alice(kg.search_nodes("tea")) == (shown, 3)
    newer = kg.read_entity("Alice", limit=2)
    assert (newer.entity.observations, newer.entity.observations_total) == (shown[1:], 3)
    assert newer.next_offset == 2
    older = kg.read_entity("Alice", limit=2, offset=2)
    assert (older.entity.observations, older.next_offset) == (["likes tea"], None)

    # Writes agree: adding it again is skipped, deleting it deletes every memory behind it.
    added = kg.add_observations([ObservationInput("Alice", ["likes tea", "reads café"])])
    assert (added.results[0].added_observations, added.seq) == ([], None)
    gone = kg.delete_observations([ObservationInput("Alice", ["reads café", "likes tea"])])
    assert (gone.deleted, gone.deleted_count) == (["likes tea", "reads cafe\u0301"], 2)
    assert gone.message == "Observations deleted successfully"
    chess = [m for m in memories if store.state.memories[m].content == "plays chess"]
    assert [m for m in memories if store.state.memories[m].status != "deleted"] == chess
    assert alice(kg.open_nodes(["Alice"])) == (["plays chess"], 1)


def test_search_finds_a_turkish_capital_i_typed_as_an_i(kg: KnowledgeGraph) -> None:
    # casefold makes İ into i + U+0307: "istanbul" was no part of "İstanbul", nor the other way
    kg.create_entities(
        [
            EntityInput("Ayşe", "person", ["Lives in İstanbul"]),
            EntityInput("Emre", "person", ["Moved to Izmir"]),
        ]
    )
    assert names(kg.search_nodes("istanbul")) == ["Ayşe"]
    assert names(kg.search_nodes("ISTANBUL")) == ["Ayşe"]
    assert names(kg.search_nodes("İZMİR")) == ["Emre"]


def test_read_graph_on_ten_thousand_entities_is_a_bounded_page(store: Store) -> None:
    kg = KnowledgeGraph(store)
    for batch in range(20):
        kg.create_entities(
            [EntityInput(f"e{batch * 500 + i:05d}", "thing", ["x"]) for i in range(500)]
        )
    kg.create_relations(
        [RelationInput(f"e{i:05d}", f"e{i + 1:05d}", "next") for i in range(0, 9999, 50)]
    )
    page = kg.read_graph()
    assert (len(page.entities), page.total, page.next_offset) == (50, 10_000, 50)
    assert [r.from_ for r in page.relations] == ["e00000"]  # the page's outgoing relations
    seen: list[str] = []
    relations = 0
    offset: int | None = 0
    while offset is not None:
        page = kg.read_graph(limit=200, offset=offset)
        assert len(page.entities) <= 200
        seen += [e.name for e in page.entities]
        relations += len(page.relations)
        offset = page.next_offset
    assert len(seen) == len(set(seen)) == 10_000
    assert relations == 200  # every relation exactly once


def test_the_past_graph_is_a_fold_of_a_prefix(store: Store) -> None:
    """as_of for the graph: the state after event k answers as the store did then."""
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Alice", "person", ["likes tea"]), EntityInput("Bob", "p")])
    kg.create_relations([RelationInput("Alice", "Bob", "knows")])
    then = store.state.seq
    kg.delete_entities(["Bob"])
    kg.delete_observations([ObservationInput("Alice", ["likes tea"])])
    events = EventLog(store.home).read_new()
    past = read_graph(fold(events[:then]), kg.namespace, store.clock(), 50, 0)
    assert [(e.name, e.observations) for e in past.entities] == [
        ("Alice", ["likes tea"]),
        ("Bob", []),
    ]
    assert [(r.from_, r.relation_type, r.to) for r in past.relations] == [("Alice", "knows", "Bob")]
    now = kg.read_graph()
    assert [(e.name, e.observations) for e in now.entities] == [("Alice", [])]


def test_kg_namespace_and_toolsets_are_configurable(make_store: Callable[..., Store]) -> None:
    store = make_store(kg_namespace="graph")
    KnowledgeGraph(store).create_entities([EntityInput("Alice", "person", ["likes tea"])])
    (memory,) = store.state.memories.values()
    assert memory.namespace == "graph"
    env = {"KEYTRAIL_TOOLSETS": "keygraph, knowledge_graph", "KEYTRAIL_KG_NAMESPACE": "kg"}
    settings = Settings.from_env(env)
    assert (settings.toolsets, settings.kg_namespace) == (("keygraph", "knowledge_graph"), "kg")
    assert Settings.from_env({}).toolsets == ("keygraph",)
    with pytest.raises(InvalidInput, match=r"KEYTRAIL_TOOLSETS.*graphql"):
        Settings.from_env({"KEYTRAIL_TOOLSETS": "keygraph,graphql"})
    with pytest.raises(InvalidInput, match="toolsets"):
        parse_toolsets(" , ")


def test_reads_as_of_a_past_point_see_the_graph_then_and_write_nothing(
    kg: KnowledgeGraph, store: Store
) -> None:
    kg.create_entities(
        [EntityInput("Alice", "person", ["likes tea"]), EntityInput("Bob", "person")]
    )
    kg.create_relations([RelationInput("Alice", "Bob", "knows")])
    then = store.state.seq
    kg.delete_entities(["Bob"])
    kg.add_observations([ObservationInput("Alice", ["moved to Oslo"])])

    assert names(kg.read_graph()) == ["Alice"]
    written = log_bytes(store.home)
    past = msgspec.to_builtins(kg.read_graph(as_of=then))
    assert [e["name"] for e in past["entities"]] == ["Alice", "Bob"]
    assert past["relations"] == [{"from": "Alice", "to": "Bob", "relationType": "knows"}]
    assert names(kg.search_nodes("oslo", as_of=then)) == []
    assert names(kg.search_nodes("oslo")) == ["Alice"]
    opened = msgspec.to_builtins(kg.open_nodes(["Alice", "Bob"], as_of=then))
    assert len(opened["relations"]) == 1
    assert log_bytes(store.home) == written
    with pytest.raises(InvalidInput):
        kg.read_graph(as_of=10_000)


def kg_descriptions(store: Store) -> dict[str, str]:
    """The knowledge-graph tools' descriptions as a client lists them, whitespace folded."""
    import anyio

    from keytrail.server.mcp_server import build_server

    async def listed() -> dict[str, str]:
        tools = await build_server(store, ("knowledge_graph",)).list_tools()
        return {t.name: " ".join((t.description or "").split()) for t in tools}

    return anyio.run(listed)


def test_each_read_tool_says_which_relations_its_relations_total_counts(
    store: Store, kg: KnowledgeGraph
) -> None:
    """open_nodes(["Anna"]) gave Anna relations_total 0 and read_entity("Anna") 2, while both
    descriptions called it the entity's relations_total: each says which relations it counts."""
    kg.create_entities([EntityInput(n, "person") for n in ("Anna", "Bob", "Cara")])
    kg.create_relations(
        [RelationInput("Anna", "Bob", "knows"), RelationInput("Cara", "Anna", "knows")]
    )
    assert kg.open_nodes(["Anna"]).entities[0].relations_total == 0
    assert kg.read_graph().entities[0].relations_total == 1
    assert kg.search_nodes("Anna").entities[0].relations_total == 2
    assert kg.read_entity("Anna").entity.relations_total == 2
    said = kg_descriptions(store)
    counts = "relations_total counts the relations"
    assert f"{counts} between it and another entity opened" in said["open_nodes"]
    assert f"{counts} going out of it" in said["read_graph"]
    assert f"{counts} going out of it or coming into it" in said["search_nodes"]
    assert f"{counts} going out of it or coming into it" in said["read_entity"]


def test_create_entities_says_its_answer_lists_the_observations_given(
    store: Store, kg: KnowledgeGraph
) -> None:
    """An entity made of an existing key (a topic of remembered memories) was answered with
    `observations: []` while open_nodes then showed the key's memory as its observation: the
    answer lists the observations given, and the description says so and where the rest is."""
    store.remember("peanuts are legumes", ["legumes"])
    made = kg.create_entities([EntityInput("legumes", "food", ["grow in pods"])])
    assert made.entities[0].observations == ["grow in pods"]
    shown = kg.open_nodes(["legumes"]).entities[0]
    assert shown.observations == ["peanuts are legumes", "grow in pods"]
    said = kg_descriptions(store)["create_entities"]
    assert "each with the observations given" in said
    assert "its memories become observations of the entity too (open_nodes lists them)" in said
