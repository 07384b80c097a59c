"""The knowledge-graph tool set end to end: the SDK's real client against `keytrail serve`.

Calls use the reference server's input shapes and check the answers it documents: ignored
duplicates, cascading deletes, failure for unknown entities. Two servers writing to one store at
once lose nothing (the reference server loses writes in exactly this case).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from test_server import REPO, call, refused, run, server_env, surface

from keytrail.server.kg_tools import KG_TOOLS

GOLDEN_KG = REPO / "tests" / "golden" / "mcp_kg_tools.json"


@asynccontextmanager
async def kg_session(
    home: Path, errlog: Path, toolsets: str = "keygraph,knowledge_graph", flag: bool = False
) -> AsyncIterator[ClientSession]:
    env = server_env(home)
    args = ["-m", "keytrail.server.cli", "serve"]
    if flag:
        args += ["--toolsets", toolsets]
    else:
        env["KEYTRAIL_TOOLSETS"] = toolsets
    params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))
    with open(errlog, "a") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def test_tool_sets_and_pinned_kg_schemas(tmp_path: Path) -> None:
    home, errlog = tmp_path / "store", tmp_path / "err.txt"

    async def test() -> None:
        async with kg_session(home, errlog, "knowledge_graph", flag=True) as s:
            listed = (await s.list_tools()).tools
            assert sorted(t.name for t in listed) == sorted(KG_TOOLS)
            for tool in listed:
                assert tool.description and "Example" in tool.description, tool.name
                assert tool.output_schema is not None, tool.name
                assert tool.annotations is not None and tool.annotations.title
            got = surface(listed)
            if os.environ.get("KEYTRAIL_UPDATE_GOLDEN"):
                GOLDEN_KG.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
            assert got == json.loads(GOLDEN_KG.read_text()), (
                "knowledge-graph tool schemas changed; if on purpose, rerun with "
                "KEYTRAIL_UPDATE_GOLDEN=1 and review tests/golden/mcp_kg_tools.json"
            )
            # the reference parameter names, as the reference server's clients send them
            schema = {t.name: t.input_schema for t in listed}
            relation = schema["create_relations"]["$defs"]["RelationArg"]["properties"]
            assert set(relation) == {"from", "to", "relationType"}
            entity = schema["create_entities"]["$defs"]["EntityArg"]["properties"]
            assert set(entity) == {"name", "entityType", "observations"}
            assert set(schema["delete_entities"]["properties"]) == {"entityNames"}
        async with kg_session(home, errlog, "keygraph,knowledge_graph") as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert set(KG_TOOLS) <= names and {"recall", "remember"} <= names

    run(test)


def test_reference_sequence_gives_the_documented_answers(tmp_path: Path) -> None:
    home, errlog = tmp_path / "store", tmp_path / "err.txt"

    async def test() -> None:
        async with kg_session(home, errlog) as s:
            made = await call(
                s,
                "create_entities",
                entities=[
                    {
                        "name": "David Barnett",
                        "entityType": "person",
                        "observations": ["Speaks fluent Spanish"],
                    },
                    {"name": "QuintoAndar", "entityType": "organization", "observations": []},
                ],
            )
            assert [e["name"] for e in made["entities"]] == ["David Barnett", "QuintoAndar"]
            # existing names are ignored
            again = await call(
                s,
                "create_entities",
                entities=[
                    {"name": "David Barnett", "entityType": "robot", "observations": ["x"]},
                    {"name": "Lyon", "entityType": "city", "observations": ["In France"]},
                ],
            )
            assert again["entities"] == [
                {"name": "Lyon", "entityType": "city", "observations": ["In France"]}
            ]

            rel = {"from": "David Barnett", "to": "QuintoAndar", "relationType": "works_at"}
            lives = {"from": "David Barnett", "to": "Lyon", "relationType": "lives_in"}
            first = await call(s, "create_relations", relations=[rel, lives, rel])
            assert first["relations"] == [rel, lives]
            dup = await call(s, "create_relations", relations=[rel])
            assert dup["relations"] == []  # duplicates skipped
            await refused(
                s,
                home,
                "create_relations",
                {"relations": [{"from": "David Barnett", "to": "Nobody", "relationType": "x"}]},
                "relations[0].to",
                "Nobody",
            )

            added = await call(
                s,
                "add_observations",
                observations=[
                    {
                        "entityName": "David Barnett",
                        "contents": ["Speaks fluent Spanish", "Prefers morning meetings"],
                    }
                ],
            )
            assert added["results"] == [
                {"entityName": "David Barnett", "addedObservations": ["Prefers morning meetings"]}
            ]
            # an unknown entity fails the whole call and writes nothing
            await refused(
                s,
                home,
                "add_observations",
                {
                    "observations": [
                        {"entityName": "Lyon", "contents": ["Has a river"]},
                        {"entityName": "Ghost", "contents": ["boo"]},
                    ]
                },
                "observations[1].entityName",
                "Ghost",
            )
            await refused(
                s,
                home,
                "create_entities",
                {"entities": [{"name": "", "entityType": "person", "observations": []}]},
                "name",
            )

            found = await call(s, "search_nodes", query="SPANISH")
            assert [e["name"] for e in found["entities"]] == ["David Barnett"]
            assert rel in found["relations"] and lives in found["relations"]
            by_type = await call(s, "search_nodes", query="organization")
            assert [e["name"] for e in by_type["entities"]] == ["QuintoAndar"]

            opened = await call(s, "open_nodes", names=["david barnett", "QuintoAndar", "Nope"])
            assert [e["name"] for e in opened["entities"]] == ["David Barnett", "QuintoAndar"]
            assert opened["entities"][0]["observations"] == [
                "Speaks fluent Spanish",
                "Prefers morning meetings",
            ]
            assert opened["relations"] == [rel]  # only relations between the opened entities

            gone = await call(
                s,
                "delete_observations",
                deletions=[
                    {"entityName": "David Barnett", "observations": ["Speaks fluent Spanish"]}
                ],
            )
            assert gone["success"] and gone["deletedCount"] == 1
            assert (await call(s, "search_nodes", query="spanish"))["entities"] == []

            removed = await call(s, "delete_relations", relations=[lives])
            assert removed["deletedCount"] == 1

            # delete cascades to the entity's relations
            deleted = await call(s, "delete_entities", entityNames=["QuintoAndar", "Missing"])
            assert deleted["success"] and deleted["deleted"] == ["QuintoAndar"]
            assert deleted["notFound"] == ["Missing"]
            graph = await call(s, "read_graph")
            assert [e["name"] for e in graph["entities"]] == ["David Barnett", "Lyon"]
            assert graph["relations"] == [] and graph["next_offset"] is None

            # the same facts are memories behind name keys: the associative tools see them
            keys = await call(s, "recall", query="What does David Barnett prefer?")
            david = next(k for k in keys["keys"] if k["label"] == "David Barnett")
            page = await call(s, "read_key", key_id=david["key_id"])
            assert page["total"] == 1

            await refused(s, home, "read_graph", {"limit": 0}, "limit")
            await refused(s, home, "open_nodes", {"names": []}, "names")

    run(test)


@pytest.mark.slow
def test_two_servers_creating_entities_at_once_lose_nothing(tmp_path: Path) -> None:
    home, errlog = tmp_path / "store", tmp_path / "err.txt"
    per_server, rounds = 10, 3

    async def writer(tag: str, done: list[str]) -> None:
        async with kg_session(home, errlog) as s:
            for r in range(rounds):
                batch = [
                    {"name": f"{tag}-{r}-{i}", "entityType": "thing", "observations": [f"{tag}"]}
                    for i in range(per_server)
                ]
                out = await call(s, "create_entities", entities=batch)
                done += [e["name"] for e in out["entities"]]
                await call(
                    s,
                    "add_observations",
                    observations=[{"entityName": "shared", "contents": [f"{tag} round {r}"]}],
                )

    async def test() -> None:
        async with kg_session(home, errlog) as s:
            await call(s, "create_entities", entities=[{"name": "shared", "entityType": "hub"}])
        done: list[str] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer, "a", done)
            tg.start_soon(writer, "b", done)
        async with kg_session(home, errlog) as s:
            names: list[str] = []
            offset: int | None = 0
            while offset is not None:
                page = await call(s, "read_graph", limit=200, offset=offset)
                names += [e["name"] for e in page["entities"]]
                offset = page["next_offset"]
            assert len(done) == 2 * per_server * rounds
            assert sorted(names) == sorted([*done, "shared"])
            shared = await call(s, "open_nodes", names=["shared"])
            assert sorted(shared["entities"][0]["observations"]) == sorted(
                f"{t} round {r}" for t in "ab" for r in range(rounds)
            )

    run(test, timeout=180)
