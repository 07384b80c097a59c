"""Read models folded from the event log: the key graph, its snapshots, embedding matrices."""

from .keygraph import GraphState, KeyNode, MemoryNode, Relation, Turn, apply, fold, relation_id
from .snapshot import Snapshot, write_atomic
from .vectors import VectorCache, VectorSet, text_hash

__all__ = [
    "GraphState",
    "KeyNode",
    "MemoryNode",
    "Relation",
    "Snapshot",
    "Turn",
    "VectorCache",
    "VectorSet",
    "apply",
    "fold",
    "relation_id",
    "text_hash",
    "write_atomic",
]
