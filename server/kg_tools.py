"""The knowledge-graph tool set: the reference memory server's tools over a keytrail store.

Same names, parameters and shapes as `@modelcontextprotocol/server-memory` (entities with
name/entityType/observations, relations with from/to/relationType), so an agent configured for
it works unchanged. Every change is an event in the log: several processes can share the store
without losing writes, and history and as_of reach back over the graph. read_graph and
search_nodes return a bounded page and `next_offset`, never the whole graph at once, and
every read lists at most ENTITY_ITEMS observations and relations per entity (the newest) with
their totals; read_entity, keytrail's one added tool, pages through the rest of one entity's.

Enabled with KEYTRAIL_TOOLSETS=keygraph,knowledge_graph (or `serve --toolsets ...`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from keytrail.core import Store
from keytrail.core.kg_reads import ENTITY_ITEMS
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)

from .mcp_server import LIMITS, PAGE, Limit, Offset, _hints, _reply
from .time_tools import AsOf

KG_TOOLS = (
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "read_graph",
    "search_nodes",
    "open_nodes",
    "read_entity",
)

Name = Annotated[str, Field(min_length=1, max_length=LIMITS.kg_name_chars)]
#: An entity's name is its key's label, held to the shorter of the two limits
NameOfEntity = Annotated[str, Field(min_length=1, max_length=LIMITS.entity_name_chars)]
EntityName = Annotated[NameOfEntity, Field(description="The name of an entity (any case).")]
Observation = Annotated[
    str,
    Field(min_length=1, max_length=LIMITS.content_chars, description="One atomic fact."),
]
Observations = Annotated[
    list[Observation],
    Field(max_length=LIMITS.batch_items, description="Observations, one fact each."),
]
Many = Field(min_length=1, max_length=LIMITS.batch_items)


class EntityArg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Annotated[NameOfEntity, Field(description="The name of the entity")]
    entityType: Annotated[
        Name, Field(description="The type of the entity, e.g. person, organization, event")
    ]
    observations: Observations = []


class RelationArg(BaseModel):
    # Only the wire name "from": populate_by_name would also take the field name from_, which
    # the published schema (additionalProperties: false) does not allow.
    model_config = ConfigDict(extra="forbid")
    from_: Annotated[
        NameOfEntity,
        Field(alias="from", description="The name of the entity where the relation starts"),
    ]
    to: Annotated[NameOfEntity, Field(description="The name of the entity where the relation ends")]
    relationType: Annotated[
        Name, Field(description="The type of the relation, in active voice, e.g. works_at")
    ]


class ObservationArg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: Annotated[
        NameOfEntity, Field(description="The name of the entity to add the observations to")
    ]
    contents: Annotated[
        list[Observation],
        Field(max_length=LIMITS.batch_items, description="Observation contents to add"),
    ]


class DeletionArg(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: Annotated[
        NameOfEntity, Field(description="The name of the entity holding the observations")
    ]
    observations: Annotated[
        list[Observation],
        Field(max_length=LIMITS.batch_items, description="Observations to delete (exact text)"),
    ]


# What the tools return (output schemas), in the reference server's shapes.
class EntityOut(TypedDict):
    name: str
    entityType: str
    observations: list[str]


class NodeOut(EntityOut):
    observations_total: int
    relations_total: int


RelationOut = TypedDict("RelationOut", {"from": str, "to": str, "relationType": str})


class AddedOut(TypedDict):
    entityName: str
    addedObservations: list[str]


class EntitiesOut(TypedDict):
    entities: list[EntityOut]
    seq: int | None


class RelationsOut(TypedDict):
    relations: list[RelationOut]
    seq: int | None


class ObservationsOut(TypedDict):
    results: list[AddedOut]
    seq: int | None


class DeletionOut(TypedDict):
    success: bool
    message: str
    deleted: list[str]
    notFound: list[str]
    deletedCount: int
    missingEntities: list[str]
    seq: int | None


class GraphOut(TypedDict):
    entities: list[NodeOut]
    relations: list[RelationOut]
    relations_total: int
    total: int
    offset: int
    next_offset: int | None


class EntityPageOut(TypedDict):
    entity: NodeOut
    relations: list[RelationOut]
    offset: int
    next_offset: int | None


# The most observations and relations the read tools list per entity (the cut), as the
# schema's default of read_entity's limit: the store checks its own page limit again.
CUT = min(ENTITY_ITEMS, LIMITS.page)
CUT_NOTE = (
    f"Each entity lists at most its {CUT} newest observations (in the order added) beside "
    f"observations_total, and at most {CUT} of its relations (the newest) beside its "
    "relations_total; read_entity pages through the rest. An entity's relations_total counts "
    "the relations {held}."
)
Tool = TypeVar("Tool", bound=Callable[..., Any])


def _cut_noted(held: str) -> Callable[[Tool], Tool]:
    """Fill CUT_NOTE into a read tool's docstring, its description for the model, with the
    relations the tool holds for an entity (`held`): open_nodes gave Anna relations_total 0
    and read_entity 2, each right by its own count, and neither said which it counted."""

    def noted(tool: Tool) -> Tool:
        note = CUT_NOTE.format(held=held)
        tool.__doc__ = (tool.__doc__ or "").format(cut=note, held=held)
        return tool

    return noted


def _relations(items: list[RelationArg]) -> list[RelationInput]:
    return [RelationInput(r.from_, r.to, r.relationType) for r in items]


#: Where a deleted observation's text goes, said in terms of the tools the server has: the
#: keygraph tools `history` and `forget` when it serves them, else the command line's forget.
KEPT_WITH_KEYGRAPH = "it stays in the log's history (`history` shows it, `forget` erases it)"
KEPT_WITHOUT = "it stays in the log's history until erased with the command `keytrail forget`"


def register_kg_tools(server: MCPServer[Any], store: Store, keygraph: bool = True) -> None:
    """Add the knowledge-graph tools to `server`, working on `store`; `keygraph` says whether
    the server serves the keygraph tools too (descriptions name only tools it serves)."""
    kg = KnowledgeGraph(store)
    kept = KEPT_WITH_KEYGRAPH if keygraph else KEPT_WITHOUT

    def kept_noted(tool: Tool) -> Tool:
        tool.__doc__ = (tool.__doc__ or "").format(kept=kept)
        return tool

    read_only = dict(read_only=True, idempotent=True)

    @server.tool(annotations=_hints(title="Create entities"))
    def create_entities(
        entities: Annotated[list[EntityArg], Many, Field(description="The entities to create.")],
    ) -> Annotated[CallToolResult, EntitiesOut]:
        """Create new entities (people, organizations, places, events...) with observations.

        Names of entities that exist are ignored (any case); the result lists only the
        entities created, each with the observations given. A name that is already a key (a
        topic of remembered memories) becomes the entity: its memories become observations of
        the entity too (open_nodes lists them). Example: create_entities(entities=[{"name":
        "David Barnett",
        "entityType": "person", "observations": ["Speaks fluent Spanish"]}])
        -> {"entities": [{"name": "David Barnett", "entityType": "person", ...}]}
        """
        return _reply(
            lambda: kg.create_entities(
                [EntityInput(e.name, e.entityType, e.observations) for e in entities]
            )
        )

    @server.tool(annotations=_hints(title="Create relations"))
    def create_relations(
        relations: Annotated[
            list[RelationArg], Many, Field(description="The relations to create.")
        ],
    ) -> Annotated[CallToolResult, RelationsOut]:
        """Create directed relations between existing entities, in active voice.

        Both entities must exist (create them first); a relation that exists is skipped.
        Example: create_relations(relations=[{"from": "David Barnett", "to": "QuintoAndar",
        "relationType": "works_at"}]) -> {"relations": [...the new ones...]}
        """
        return _reply(lambda: kg.create_relations(_relations(relations)))

    @server.tool(annotations=_hints(title="Add observations"))
    def add_observations(
        observations: Annotated[
            list[ObservationArg],
            Many,
            Field(description="The observations to add, grouped by entity."),
        ],
    ) -> Annotated[CallToolResult, ObservationsOut]:
        """Add observations (atomic facts) to existing entities.

        Fails, adding nothing, if an entity does not exist. Observations an entity already
        has are skipped; each result lists what was added. Example:
        add_observations(observations=[{"entityName": "David Barnett",
        "contents": ["Prefers morning meetings"]}])
        -> {"results": [{"entityName": "David Barnett", "addedObservations": [...]}]}
        """
        return _reply(
            lambda: kg.add_observations(
                [ObservationInput(o.entityName, o.contents) for o in observations]
            )
        )

    @server.tool(annotations=_hints(title="Delete entities", destructive=True, idempotent=True))
    def delete_entities(
        entityNames: Annotated[
            list[EntityName],
            Field(
                min_length=1,
                max_length=LIMITS.batch_items,
                description="The names of the entities to delete.",
            ),
        ],
    ) -> Annotated[CallToolResult, DeletionOut]:
        """Delete entities with their observations and every relation to or from them.

        An observation linked to any other key (another entity, a concept) is only unlinked.
        Names that do not exist are reported in `notFound`, not an error. Example:
        delete_entities(entityNames=["David Barnett"]) -> {"success": true, "message": ...}
        """
        return _reply(lambda: kg.delete_entities(entityNames))

    @server.tool(annotations=_hints(title="Delete observations", destructive=True, idempotent=True))
    @kept_noted
    def delete_observations(
        deletions: Annotated[
            list[DeletionArg],
            Many,
            Field(description="The observations to delete, grouped by entity."),
        ],
    ) -> Annotated[CallToolResult, DeletionOut]:
        """Delete specific observations (exact text) from entities.

        An observation another entity also has is only unlinked from this one; it is deleted
        when no other entity has it. Either way {kept}. Texts an entity does not have, and
        those of an entity that does not exist (`missingEntities`), are named in `notFound`,
        not an error.

        Example: delete_observations(deletions=[{{"entityName": "David Barnett",
        "observations": ["Prefers morning meetings"]}}]) -> {{"deletedCount": 1, ...}}
        """
        return _reply(
            lambda: kg.delete_observations(
                [ObservationInput(d.entityName, d.observations) for d in deletions]
            )
        )

    @server.tool(annotations=_hints(title="Delete relations", destructive=True, idempotent=True))
    def delete_relations(
        relations: Annotated[
            list[RelationArg], Many, Field(description="The relations to delete.")
        ],
    ) -> Annotated[CallToolResult, DeletionOut]:
        """Delete relations matching from, to and relationType exactly.

        Relations that match none are reported in `notFound`, not an error.

        Example: delete_relations(relations=[{"from": "David Barnett", "to": "QuintoAndar",
        "relationType": "works_at"}]) -> {"deletedCount": 1, ...}
        """
        return _reply(lambda: kg.delete_relations(_relations(relations)))

    @server.tool(annotations=_hints(title="Read the graph", **read_only))
    @_cut_noted("going out of it")
    def read_graph(
        limit: Limit = PAGE, offset: Offset = 0, as_of: AsOf = None
    ) -> Annotated[CallToolResult, GraphOut]:
        """Read the knowledge graph a page of entities at a time, oldest first.

        Each page holds the relations going out of its entities. `total` counts entities;
        call again with offset=next_offset until next_offset is null. Prefer search_nodes or
        open_nodes when you know what you are looking for.
        {cut}

        Example: read_graph(limit=50) -> {{"entities": [...], "relations": [...],
        "relations_total": 80, "total": 120, "next_offset": 50}}
        """
        return _reply(lambda: kg.read_graph(limit, offset, as_of))

    @server.tool(annotations=_hints(title="Search nodes", **read_only))
    @_cut_noted("going out of it or coming into it")
    def search_nodes(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=LIMITS.query_chars,
                description="Words to find in entity names, types and observations (any case; "
                "an entity matches if any word does).",
            ),
        ],
        limit: Limit = PAGE,
        offset: Offset = 0,
        as_of: AsOf = None,
    ) -> Annotated[CallToolResult, GraphOut]:
        """Find entities whose name, type or observations contain any word of the query.

        Returns the matching entities and the relations touching them, paged like
        read_graph (call again with offset=next_offset until next_offset is null). Every
        observation is searched, listed or not.
        {cut}

        Example: search_nodes(query="spanish") -> {{"entities": [{{"name": "David Barnett",
        ...}}], "relations": [...], "total": 1, "next_offset": null}}
        """
        return _reply(lambda: kg.search_nodes(query, limit, offset, as_of))

    @server.tool(annotations=_hints(title="Open nodes", **read_only))
    @_cut_noted("between it and another entity opened (read_entity counts all of them)")
    def open_nodes(
        names: Annotated[
            list[EntityName],
            Field(min_length=1, max_length=LIMITS.page, description="The names of the entities."),
        ],
        as_of: AsOf = None,
    ) -> Annotated[CallToolResult, GraphOut]:
        """Get entities by name (any case) and the relations between them.

        Unknown names are left out.
        {cut}

        Example: open_nodes(names=["David Barnett", "QuintoAndar"]) -> {{"entities": [...2...],
        "relations": [{{"from": "David Barnett", "to": "QuintoAndar", "relationType":
        "works_at"}}]}}
        """
        return _reply(lambda: kg.open_nodes(names, as_of))

    @server.tool(annotations=_hints(title="Read one entity", **read_only))
    @_cut_noted("going out of it or coming into it")
    def read_entity(
        name: EntityName,
        limit: Annotated[
            int,
            Field(ge=1, le=LIMITS.page, description="Observations, and relations, per page."),
        ] = CUT,
        offset: Annotated[
            int,
            Field(ge=0, le=10**9, description="How many of the newest of each to skip."),
        ] = 0,
        as_of: AsOf = None,
    ) -> Annotated[CallToolResult, EntityPageOut]:
        """Page through one entity's observations and its relations (going out of or into
        it), newest first: use it when observations_total or relations_total is more than
        an answer lists.

        offset=0 holds the newest `limit` of each (what the other tools show); call again with
        offset=next_offset for the ones before them, until next_offset is null. Each page lists
        its items in the order they were added. Its relations_total counts the relations {held}
        (open_nodes and read_graph count fewer). An unknown name is an error. Example:
        read_entity(name="default_user", offset=50) -> {{"entity": {{"name": "default_user",
        "observations": [...50 older...], "observations_total": 5000, "relations_total": 120}},
        "relations": [...], "offset": 50, "next_offset": 100}}
        """
        return _reply(lambda: kg.read_entity(name, limit, offset, as_of))


def apply_toolsets(server: MCPServer[Any], store: Store, toolsets: tuple[str, ...]) -> None:
    """Keep the tool sets asked for: add knowledge_graph, drop keygraph when it is not listed."""
    if "keygraph" not in toolsets:
        # Every tool registered so far belongs to the keygraph set.
        for tool in list(server._tool_manager.list_tools()):
            server.remove_tool(tool.name)
    if "knowledge_graph" in toolsets:
        register_kg_tools(server, store, keygraph="keygraph" in toolsets)
