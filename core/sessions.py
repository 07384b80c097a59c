"""Where each memory sits in its session: the turns remembered before and after it.

A conversation remembered turn by turn (`session_id` set) is read best in context: the answer
to a question often sits in the turn next to the one that matches it. `SessionOrder` keeps, per
(namespace, session), the memory ids in the order they were remembered (a correction takes
the place of the turn it corrects), derived from the key graph (nothing new is written to the
log). Memories are only ever added to the state's `memories` mapping, in fold order, so
catching up walks just the ones added since last time; the first catch-up walks them all (and
so decodes a lazily opened state's memories once). A turn indexed before `correct` made it
another's new version (by_memory_id) starts the index over, to stand where a fresh one puts it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from keytrail.projections import GraphState

#: how many ineligible turns (superseded, forgotten, not yet remembered at a past point) a
#: neighbour lookup steps over before giving up
MAX_SKIP = 4


class SessionOrder:
    """Per (namespace, session): memory ids in remembered order. Caught up from a state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: GraphState | None = None
        self._seen = 0
        self._members: dict[tuple[str, str], list[str]] = {}
        self._position: dict[str, tuple[tuple[str, str], int]] = {}
        #: the turn each member stands for: its own id, or for a correction the turn it corrects
        #: (the versions of one turn sit together, and a lookup steps over them as one)
        self._turn: dict[str, str] = {}
        #: the end of the state's retirements journal when last caught up
        self._retired = 0

    def catch_up(self, state: GraphState) -> SessionOrder:
        """Index the memories added to `state` since the last call (all, for a new state)."""
        with self._lock:
            memories = state.memories
            if (
                state is not self._state
                or len(memories) < self._seen
                or self._replaced_in_place(state)
            ):
                self._state, self._seen = state, 0
                self._members, self._position, self._turn = {}, {}, {}
            self._retired = state.retirements().end
            added = len(memories) - self._seen
            if added <= 0:
                return self
            fresh: list[str] = []
            for memory_id in reversed(memories):  # newest first; stop at what is indexed
                if len(fresh) == added:
                    break
                fresh.append(memory_id)
            for memory_id in reversed(fresh):
                node = memories[memory_id]
                if node.session_id is None:
                    continue
                session = (node.namespace, node.session_id)
                members = self._members.setdefault(session, [])
                old = self._position.get(node.supersedes or "")
                if node.supersede_reason == "correction" and old is not None and old[0] == session:
                    # A correction replaces the turn where it was said: right after the old
                    # version (never eligible together, so each read sees one in that place).
                    at = old[1] + 1
                    members.insert(at, memory_id)
                    self._turn[memory_id] = self._turn[node.supersedes or ""]
                    for index in range(at, len(members)):
                        self._position[members[index]] = (session, index)
                    continue
                self._position[memory_id] = (session, len(members))
                self._turn[memory_id] = memory_id
                members.append(memory_id)
            self._seen = len(memories)
            return self

    def _replaced_in_place(self, state: GraphState) -> bool:
        """Whether a turn already indexed became the correction of one of its session since
        (`correct` with by_memory_id): an index built now puts it in that turn's place, so
        this one starts over to agree (or when the journal no longer reaches back)."""
        if state is not self._state:
            return False
        retired = state.retirements().since(self._retired)
        if retired is None:
            return True
        memories = state.memories
        for memory_id in retired:
            newer = memories[memory_id].superseded_by
            node = memories.get(newer) if newer is not None else None
            if (
                node is not None
                and node.supersede_reason == "correction"
                and newer in self._position
                and self._position[newer][0] == (self._position.get(memory_id) or (None,))[0]
            ):
                return True
        return False

    def __len__(self) -> int:
        """How many memories belong to a session."""
        return len(self._position)

    def session_of(self, memory_id: str) -> tuple[str, str] | None:
        found = self._position.get(memory_id)
        return found[0] if found is not None else None

    def neighbours(self, memory_id: str, eligible: Callable[[str], Any]) -> list[str]:
        """The nearest eligible turn before and after `memory_id` in its session (0-2 ids).

        Up to MAX_SKIP ineligible turns are stepped over on each side; the versions of one turn
        (a correction chain) count once, and other versions of `memory_id`'s own turn not at all.
        """
        found = self._position.get(memory_id)
        if found is None:
            return []
        session, at = found
        members, turn = self._members[session], self._turn
        own = turn[memory_id]
        out: list[str] = []
        for step in (-1, 1):
            index = at + step
            skipped: set[str] = set()
            while 0 <= index < len(members):
                candidate = members[index]
                if eligible(candidate) is not None:
                    out.append(candidate)
                    break
                if turn[candidate] != own:
                    skipped.add(turn[candidate])
                    if len(skipped) > MAX_SKIP:
                        break
                index += step
        return out
