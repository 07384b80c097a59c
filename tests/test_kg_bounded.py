"""Knowledge-graph answers stay bounded however big one entity grows.

read_graph, search_nodes and open_nodes list at most `ENTITY_ITEMS` observations and
`ENTITY_ITEMS` relations per entity, the newest, with exact totals beside them; read_entity
pages through all of one entity's. search_nodes still matches every observation, and the
memory.jsonl export still carries everything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from mcp import Client

from keytrail.core import InvalidInput, Limits, NotFound, Store
from keytrail.core.exporters import memory_jsonl_lines
from keytrail.core.kg_reads import ENTITY_ITEMS
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)
from keytrail.server.mcp_server import build_server

#: more than two cuts' worth and not a multiple of any page size used below
OBSERVATIONS = 2 * ENTITY_ITEMS + 7
FRIENDS = ENTITY_ITEMS + 13


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


def said(i: int) -> str:
    return f"the user said thing {i}"


def big_user(kg: KnowledgeGraph) -> None:
    """default_user with OBSERVATIONS observations (the first one naming Zanzibar), FRIENDS
    relations going out to friends and one coming in; a small pair of entities beside it."""
    kg.create_entities(
        [
            EntityInput("Alice", "person", ["likes tea"]),
            EntityInput("default_user", "person", ["went to Zanzibar once"]),
            EntityInput("Bob", "person", ["plays chess"]),
        ]
    )
    kg.create_relations([RelationInput("Alice", "Bob", "knows")])
    for start in range(1, OBSERVATIONS, 40):
        contents = [said(i) for i in range(start, min(OBSERVATIONS, start + 40))]
        kg.add_observations([ObservationInput("default_user", contents)])
    kg.create_entities([EntityInput(f"friend {i}", "person") for i in range(FRIENDS)])
    kg.create_relations(
        [RelationInput("default_user", f"friend {i}", "knows") for i in range(FRIENDS)]
    )
    kg.create_relations([RelationInput("friend 0", "default_user", "admires")])


def every_observation() -> list[str]:
    return ["went to Zanzibar once", *(said(i) for i in range(1, OBSERVATIONS))]


def out_of_user() -> list[dict[str, str]]:
    return [
        {"from": "default_user", "to": f"friend {i}", "relationType": "knows"}
        for i in range(FRIENDS)
    ]


ADMIRES = {"from": "friend 0", "to": "default_user", "relationType": "admires"}


def as_data(answer: object) -> Any:
    return msgspec.to_builtins(answer)


def entity(answer: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [e for e in answer["entities"] if e["name"] == name]
    return found


@pytest.fixture
def kg(store: Store) -> KnowledgeGraph:
    graph = KnowledgeGraph(store)
    big_user(graph)
    return graph


def test_every_answer_lists_the_newest_observations_beside_their_total(
    kg: KnowledgeGraph,
) -> None:
    answers = {
        "read_graph": as_data(kg.read_graph(limit=3)),
        "search_nodes": as_data(kg.search_nodes("person")),
        "open_nodes": as_data(kg.open_nodes(["default_user", "Alice"])),
    }
    for tool, answer in answers.items():
        user = entity(answer, "default_user")
        # the newest, listed in the order they were added (as the reference server lists them)
        assert user["observations"] == every_observation()[-ENTITY_ITEMS:], tool
        assert user["observations_total"] == OBSERVATIONS, tool
        small = entity(answer, "Alice")
        assert (small["observations"], small["observations_total"]) == (["likes tea"], 1), tool


def test_relations_are_cut_per_entity_to_the_newest_with_exact_totals(kg: KnowledgeGraph) -> None:
    page = as_data(kg.read_graph(limit=3))  # Alice, default_user, Bob: relations going out
    user = entity(page, "default_user")
    assert user["relations_total"] == FRIENDS
    assert entity(page, "Alice")["relations_total"] == 1
    assert entity(page, "Bob")["relations_total"] == 0
    assert page["relations_total"] == FRIENDS + 1
    assert page["relations"] == [
        {"from": "Alice", "to": "Bob", "relationType": "knows"},
        *out_of_user()[-ENTITY_ITEMS:],
    ]

    found = as_data(kg.search_nodes("default_user"))  # relations touching the match
    assert [e["name"] for e in found["entities"]] == ["default_user"]
    touching = [*out_of_user(), ADMIRES]
    assert (
        entity(found, "default_user")["relations_total"] == found["relations_total"] == FRIENDS + 1
    )
    assert found["relations"] == touching[-ENTITY_ITEMS:]

    # open_nodes: relations between the opened entities, counted at both ends
    opened = as_data(kg.open_nodes(["default_user", "friend 0", "friend 1", "Alice"]))
    assert opened["relations"] == [out_of_user()[0], out_of_user()[1], ADMIRES]
    assert opened["relations_total"] == 3
    assert entity(opened, "default_user")["relations_total"] == 3
    assert entity(opened, "friend 0")["relations_total"] == 2
    assert entity(opened, "Alice")["relations_total"] == 0


def test_many_big_entities_in_one_answer_each_list_at_most_the_cut(store: Store) -> None:
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput(f"hub {h}", "hub") for h in range(3)])
    kg.create_entities([EntityInput(f"leaf {i}", "leaf") for i in range(ENTITY_ITEMS + 5)])
    for h in range(3):
        kg.add_observations(
            [ObservationInput(f"hub {h}", [f"hub {h} fact {i}" for i in range(ENTITY_ITEMS + 5)])]
        )
        kg.create_relations(
            [RelationInput(f"hub {h}", f"leaf {i}", "holds") for i in range(ENTITY_ITEMS + 5)]
        )
    page = as_data(kg.read_graph(limit=3))
    assert [e["name"] for e in page["entities"]] == ["hub 0", "hub 1", "hub 2"]
    for e in page["entities"]:
        assert len(e["observations"]) == ENTITY_ITEMS
        assert e["observations_total"] == e["relations_total"] == ENTITY_ITEMS + 5
        listed = [r for r in page["relations"] if r["from"] == e["name"]]
        assert [r["to"] for r in listed] == [f"leaf {i}" for i in range(5, ENTITY_ITEMS + 5)]
    assert page["relations_total"] == 3 * (ENTITY_ITEMS + 5)


def walk(kg: KnowledgeGraph, name: str, limit: int) -> tuple[list[str], list[Any], int]:
    """Every page of read_entity from offset 0 to a null next_offset, put back in the order
    added: (observations, relations, pages)."""
    observations: list[list[str]] = []
    relations: list[list[Any]] = []
    offset: int | None = 0
    while offset is not None:
        page = as_data(kg.read_entity(name, offset=offset, limit=limit))
        assert page["offset"] == offset
        assert len(page["entity"]["observations"]) <= limit and len(page["relations"]) <= limit
        observations.append(page["entity"]["observations"])
        relations.append(page["relations"])
        offset = page["next_offset"]
    # pages go back in time (offset 0 is the newest); each lists its items oldest first
    return (
        [o for chunk in reversed(observations) for o in chunk],
        [r for chunk in reversed(relations) for r in chunk],
        len(observations),
    )


def test_read_entity_pages_concatenate_to_everything_once(kg: KnowledgeGraph) -> None:
    first = as_data(kg.read_entity("DEFAULT_USER"))
    opened = entity(as_data(kg.open_nodes(["default_user"])), "default_user")
    assert first["entity"] == {**opened, "relations_total": FRIENDS + 1}
    assert first["entity"]["observations_total"] == OBSERVATIONS
    assert first["relations"] == [*out_of_user(), ADMIRES][-ENTITY_ITEMS:]

    observations, relations, pages = walk(kg, "default_user", 7)
    assert pages == -(-OBSERVATIONS // 7)  # as many as the longer list needs
    assert observations == every_observation()
    assert relations == [*out_of_user(), ADMIRES]
    past_the_end = as_data(kg.read_entity("default_user", offset=OBSERVATIONS))
    assert past_the_end["entity"]["observations"] == past_the_end["relations"] == []
    assert past_the_end["next_offset"] is None

    # more relations than observations: the pages go on until the relations are done
    kg.create_relations([RelationInput(f"friend {i}", "Bob", "knows") for i in range(FRIENDS)])
    observations, relations, pages = walk(kg, "Bob", 7)
    assert pages == -(-(FRIENDS + 1) // 7)
    assert observations == ["plays chess"]
    assert relations == [
        {"from": "Alice", "to": "Bob", "relationType": "knows"},
        *({"from": f"friend {i}", "to": "Bob", "relationType": "knows"} for i in range(FRIENDS)),
    ]


def test_search_finds_an_entity_by_an_observation_beyond_the_cut(kg: KnowledgeGraph) -> None:
    found = as_data(kg.search_nodes("zanzibar"))
    user = entity(found, "default_user")
    assert "went to Zanzibar once" not in user["observations"]  # cut from the answer...
    assert user["observations_total"] == OBSERVATIONS  # ...and counted
    last = as_data(kg.read_entity("default_user", offset=OBSERVATIONS - 1, limit=1))
    assert last["entity"]["observations"] == ["went to Zanzibar once"]


def test_a_store_with_a_smaller_page_cuts_at_its_page(make_store: Callable[..., Store]) -> None:
    store = make_store(limits=Limits(page=10))
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("default_user", "person", [said(i) for i in range(25)])])
    (user,) = as_data(kg.open_nodes(["default_user"]))["entities"]
    assert user["observations"] == [said(i) for i in range(15, 25)]
    assert user["observations_total"] == 25
    assert as_data(kg.read_entity("default_user"))["entity"]["observations"] == user["observations"]


def test_read_entity_refuses_bad_paging_naming_the_field_and_writes_nothing(
    kg: KnowledgeGraph, store: Store
) -> None:
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as caught:
        kg.read_entity("default_user", limit=201)
    assert (caught.value.field, caught.value.limit) == ("limit", "1 to 200")
    with pytest.raises(InvalidInput) as caught:
        kg.read_entity("default_user", limit=0)
    assert caught.value.field == "limit"
    with pytest.raises(InvalidInput) as caught:
        kg.read_entity("default_user", offset=-1)
    assert caught.value.field == "offset"
    with pytest.raises(NotFound) as missing:
        kg.read_entity("nobody")
    assert (missing.value.field, missing.value.ident) == ("name", "nobody")
    assert log_bytes(store.home) == before


def test_read_entity_as_of_a_past_point(kg: KnowledgeGraph, store: Store) -> None:
    then = store.state.seq
    kg.add_observations([ObservationInput("default_user", ["moved to Oslo"])])
    now = as_data(kg.read_entity("default_user", limit=1))["entity"]
    past = as_data(kg.read_entity("default_user", limit=1, as_of=then))["entity"]
    assert (now["observations"], now["observations_total"]) == (["moved to Oslo"], OBSERVATIONS + 1)
    assert (past["observations"], past["observations_total"]) == (
        [said(OBSERVATIONS - 1)],
        OBSERVATIONS,
    )


def test_read_entity_as_of_before_the_entity_says_it_came_later(
    kg: KnowledgeGraph, store: Store
) -> None:
    then = store.state.seq
    kg.create_entities([EntityInput("Zoe", "person", ["joined in May"])])
    with pytest.raises(NotFound) as later:
        kg.read_entity("Zoe", as_of=then)
    assert (later.value.field, later.value.ident) == ("name", "Zoe")
    assert str(later.value).endswith("not at that point in time"), str(later.value)
    with pytest.raises(NotFound) as never:
        kg.read_entity("nobody", as_of=then)
    assert "point in time" not in str(never.value)


def test_the_memory_jsonl_export_carries_every_observation_and_relation(
    kg: KnowledgeGraph, store: Store
) -> None:
    lines = [
        json.loads(line) for line in memory_jsonl_lines(store.state, kg.namespace, store.clock())
    ]
    (user,) = [x for x in lines if x.get("name") == "default_user"]
    assert user["observations"] == every_observation()
    relations = [
        {k: x[k] for k in ("from", "to", "relationType")} for x in lines if x["type"] == "relation"
    ]
    assert [r for r in relations if "default_user" in (r["from"], r["to"])] == [
        *out_of_user(),
        ADMIRES,
    ]


# -- over MCP ------------------------------------------------------------------------------


def test_the_tools_answer_bounded_pages_and_refuse_a_limit_past_the_page(
    kg: KnowledgeGraph, store: Store
) -> None:
    async def test() -> None:
        async with Client(build_server(store, ("knowledge_graph",))) as client:
            for tool, args in (
                ("read_graph", {"limit": 3}),
                ("search_nodes", {"query": "default_user"}),
                ("open_nodes", {"names": ["default_user"]}),
            ):
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content
                user = entity(result.structured_content, "default_user")
                assert len(user["observations"]) == ENTITY_ITEMS, tool
                assert user["observations_total"] == OBSERVATIONS, tool
                assert len(result.structured_content["relations"]) <= ENTITY_ITEMS + 1, tool
            result = await client.call_tool("read_entity", {"name": "default_user", "offset": 100})
            assert not result.is_error, result.content
            page = result.structured_content
            assert page["entity"]["observations"] == every_observation()[: OBSERVATIONS - 100]
            assert page["next_offset"] is None
            before = log_bytes(store.home)
            for args, needles in (
                ({"name": "default_user", "limit": 201}, ("limit: ", "200")),
                ({"name": "default_user", "offset": -1}, ("offset: ",)),
                ({"name": "nobody"}, ("name: ", "nobody")),
            ):
                refused = await client.call_tool("read_entity", args)
                assert refused.is_error, args
                text = " ".join(getattr(c, "text", "") for c in refused.content)
                for needle in needles:
                    assert needle in text, text
            assert log_bytes(store.home) == before

    anyio.run(test)
