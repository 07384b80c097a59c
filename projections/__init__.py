"""Read models folded from the event log: the key graph, its snapshots, embedding matrices."""

from .keygraph import GraphState, KeyNode, MemoryNode, Turn, apply, fold
from .snapshot import Snapshot, write_atomic
from .vectors import VectorCache, VectorSet, text_hash

__all__ = [
    "GraphState",
    "KeyNode",
    "MemoryNode",
    "Snapshot",
    "Turn",
    "VectorCache",
    "VectorSet",
    "apply",
    "fold",
    "text_hash",
    "write_atomic",
]
