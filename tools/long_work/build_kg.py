import sys
import time
from pathlib import Path

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.core.knowledge_graph import (
    EntityInput,
    KnowledgeGraph,
    ObservationInput,
    RelationInput,
)

home, n = Path(sys.argv[1]), int(sys.argv[2])
store = Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())
kg = KnowledgeGraph(store)
t = time.perf_counter()
for s in range(0, n, 500):
    kg.create_entities(
        [
            EntityInput(f"entity {i}", "thing", [f"observation {i} a", f"note {i} b"])
            for i in range(s, min(n, s + 500))
        ]
    )
for s in range(0, n - 1, 500):
    kg.create_relations(
        [
            RelationInput(f"entity {i}", f"entity {i + 1}", "precedes")
            for i in range(s, min(n - 1, s + 500))
        ]
    )
# one entity an agent writes to all the time: the user, with many observations and relations
kg.create_entities([EntityInput("default_user", "person", [])])
for s in range(0, 5000, 500):
    kg.add_observations(
        [
            ObservationInput(
                "default_user",
                [
                    f"the user said thing number {i} which is a long enough sentence"
                    for i in range(s, s + 500)
                ],
            )
        ]
    )
for s in range(0, 5000, 500):
    kg.create_relations(
        [RelationInput("default_user", f"entity {i}", "knows") for i in range(s, s + 500)]
    )
print("kg done", store.state.seq, round(time.perf_counter() - t, 1), file=sys.stderr)
store.close()
