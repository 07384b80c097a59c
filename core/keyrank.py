"""read_key of a big key: its links kept by column beside the state, pages picked with numpy.

The plain read_key scores every memory under the key in Python (about 2 µs each), so a hub
such as "user" on 100,000 memories cost a fifth of a second per page. Here each link's score
inputs are kept as one row per link, in link order, and brought up to date from the state
rather than rebuilt: links are only ever appended while `GraphState.links_cut` holds, and
every change to a memory's depth, last read, link weights or status is noted in the state's
change journal (`GraphState.changes`), so only those rows are rewritten.

numpy's exp differs from math.exp in the last bit for a few percent of inputs, so numpy only
chooses: a page's members, and everything whose numpy score is within float noise of the
page's edges, are scored again exactly as the plain path scores them, and ordered by that
score and link order, as the plain path's stable sort does. The answer is therefore the plain
path's, to the last digit.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from datetime import datetime

import numpy as np

from keytrail.events.types import micros
from keytrail.projections import GraphState, KeyNode, MemoryNode, text_hash

#: Keys with fewer links than this are ranked by the plain loop, which is as fast there.
COLUMNS_MIN_LINKS = 512
#: Big keys whose columns a store keeps (the least recently read are let go).
KEPT_KEYS = 16
#: Rows whose numpy score is within this much (relative) of a page edge are rescored exactly.
#: numpy and math differ by a few ulps (~1e-15 relative); this is a million times that.
SLACK = 1e-9
#: Rescoring more candidates than this one by one would cost what the plain loop does: they
#: are mostly exact ties (a batch remembered at one instant), so they are scored per distinct
#: (weight, depth, last read) instead.
_ONE_BY_ONE = 256

_NO_EXPIRY = np.iinfo(np.int64).max
_MICROS_PER_DAY = 86_400_000_000.0

#: A row's values, one array each (see `KeyColumns.__init__`)
_COLUMNS = (
    "weight",
    "depth",
    "last_us",
    "expires_us",
    "current",
    "namespace",
    "half_base",
    "slope_per_us",
)

#: The exact score of a row: (memory node, link weight) -> the plain path's float
ExactScore = Callable[[MemoryNode, float], float]
#: read_key with a query: the shown rows (row indices, in link order) -> each one's factor
#: (`queries.query_factor`, as float64), computed as the plain path computes it
Similarity = Callable[[np.ndarray], np.ndarray]


class KeyColumns:
    """One key's links as columns (row i is the key's i-th link), for `state` as it was when
    last brought up to date (`catch_up`)."""

    def __init__(self, state: GraphState, key: KeyNode, decay_days: float) -> None:
        self.state = state
        self.key = key
        self.decay_days = decay_days
        self.links_cut = state.links_cut
        self.position = state.changes().end
        self.ids: list[str] = []
        #: the content hash of rows [0, len) (a memory's content never changes while it is
        #: shown): the vector cache's key, so read_key with a query hashes nothing per call.
        #: Filled by `digests()`, on the first query, not for keys only read without one.
        self._digests: list[str] = []
        self.rows: dict[str, int] = {}
        self.namespaces: dict[str, int] = {}
        self.size = 0
        capacity = max(16, len(key.links) + len(key.links) // 8)
        self.weight = np.empty(capacity, np.float64)
        self.depth = np.empty(capacity, np.float64)
        self.last_us = np.empty(capacity, np.int64)
        self.expires_us = np.empty(capacity, np.int64)
        self.current = np.empty(capacity, np.bool_)
        self.namespace = np.empty(capacity, np.int32)
        #: 0.5·weight·(0.9 + 0.1·depth) and −(1 − 0.7·depth)/decay per microsecond of age:
        #: the parts of the score that do not move with the clock
        self.half_base = np.empty(capacity, np.float64)
        self.slope_per_us = np.empty(capacity, np.float64)
        self._append(list(key.links.items()))

    # -- keeping up ------------------------------------------------------------------------

    def fits(self, state: GraphState, key: KeyNode, decay_days: float) -> bool:
        """Whether `catch_up` can bring these columns to `state` (else build anew)."""
        return (
            self.state is state
            and self.key is key
            and self.links_cut == state.links_cut
            and self.decay_days == decay_days
            and len(key.links) >= self.size
            and state.changes().since(self.position) is not None
        )

    def catch_up(self) -> None:
        """Rewrite the rows of memories changed since the last look; append new links."""
        state, key = self.state, self.key
        journal = state.changes()
        changed = journal.since(self.position)
        assert changed is not None  # `fits` said so
        self.position = journal.end
        if changed:
            rows, memories, links = self.rows, state.memories, key.links
            for memory_id in dict.fromkeys(changed):
                row = rows.get(memory_id)
                if row is not None:
                    self._write(row, memories[memory_id], links[memory_id])
        added = len(key.links) - self.size
        if added:
            # No link was cut (links_cut held), so the new ones are the dict's last entries.
            links = key.links
            tail = [(mid, links[mid]) for mid in itertools.islice(reversed(links), added)]
            tail.reverse()
            self._append(tail)

    def _append(self, links: list[tuple[str, float]]) -> None:
        start = self.size
        end = start + len(links)
        if end > len(self.weight):
            self._grow(end + end // 2)
        memories, rows, ids = self.state.memories, self.rows, self.ids
        values = []
        for row, (memory_id, weight) in enumerate(links, start):
            rows[memory_id] = row
            ids.append(memory_id)
            values.append(self._values(memories[memory_id], weight))
        if values:
            # By column, a slice at a time: far cheaper than one numpy store per value.
            for name, column in zip(_COLUMNS, zip(*values, strict=True), strict=True):
                getattr(self, name)[start:end] = column
        self.size = end

    def digests(self) -> list[str]:
        """Every row's content hash, hashing only rows added since the last call."""
        digests, memories, ids = self._digests, self.state.memories, self.ids
        digests.extend(text_hash(memories[ids[r]].content) for r in range(len(digests), self.size))
        return digests

    def _grow(self, capacity: int) -> None:
        for name in _COLUMNS:
            old = getattr(self, name)
            new = np.empty(capacity, old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def _write(self, row: int, node: MemoryNode, weight: float) -> None:
        if row < len(self._digests):  # the same id remembered anew (an import)
            self._digests[row] = text_hash(node.content)
        for name, value in zip(_COLUMNS, self._values(node, weight), strict=True):
            getattr(self, name)[row] = value

    def _values(self, node: MemoryNode, weight: float) -> tuple[float | int | bool, ...]:
        """A row's values, in `_COLUMNS` order."""
        depth = node.depth
        expires = node.expires_at
        return (
            weight,
            depth,
            micros(node.last_read_at or node.created_at),
            _NO_EXPIRY if expires is None else micros(expires),
            node.current(),
            self.namespaces.setdefault(node.namespace, len(self.namespaces)),
            0.5 * weight * (0.9 + 0.1 * depth),
            -(1 - 0.7 * depth) / self.decay_days / _MICROS_PER_DAY,
        )

    # -- reading ---------------------------------------------------------------------------

    def page(
        self,
        namespace: str | None,
        now: datetime,
        offset: int,
        limit: int,
        exact: ExactScore,
        similarity: Similarity | None = None,
    ) -> tuple[int, list[tuple[str, float]]] | None:
        """(how many rows are shown, the page as (memory id, exact score) best first), as the
        plain path ranks them; None if numpy cannot choose (a non-finite score). With
        `similarity` (read_key's query), each shown row's score is multiplied by its factor."""
        n = self.size
        now_us = micros(now)
        shown = self.expires_us[:n] > now_us
        shown &= self.current[:n]
        if namespace is not None:
            code = self.namespaces.get(namespace)
            if code is None:
                return 0, []
            shown &= self.namespace[:n] == code
        total = int(np.count_nonzero(shown))
        if offset >= total:
            return total, []
        # Every row shown (the usual case): slices, not gathers.
        rows: np.ndarray | slice = slice(0, n) if total == n else np.flatnonzero(shown)
        age = np.subtract(now_us, self.last_us[rows])
        np.maximum(age, 0, out=age)
        approx = np.multiply(age, self.slope_per_us[rows])
        np.exp(approx, out=approx)
        half = self.half_base[rows]
        approx *= half
        approx += half
        factor = None
        if similarity is not None:
            factor = similarity(np.arange(n) if isinstance(rows, slice) else rows)
            approx *= factor
        high, low = float(approx.max()), float(approx.min())
        if not (math.isfinite(high) and math.isfinite(low)):
            return None
        # The k-th best (0-based) is at total - 1 - k in ascending order.
        last = min(offset + limit, total) - 1
        kth = np.partition(approx, sorted({total - 1 - offset, total - 1 - last}))
        top, bottom = float(kth[total - 1 - offset]), float(kth[total - 1 - last])
        # |numpy − exact| <= slack for every row. Rows above top + 2·slack are exactly above
        # every page member (all of them come before the page); rows below bottom − 2·slack
        # are exactly below every one (after it); the rest are the candidates.
        slack = SLACK * max(1.0, abs(high), abs(low))
        near = np.flatnonzero(approx >= bottom - 2 * slack)
        above = approx[near] > top + 2 * slack
        before = int(np.count_nonzero(above))
        near = near[~above]
        candidates = near if isinstance(rows, slice) else rows[near]
        scores = self._exact(candidates, exact)
        if factor is not None:
            scores *= factor[near]  # the plain path: its base scores times the same factors
        order = np.lexsort((candidates, np.negative(scores)))
        chosen = order[offset - before : offset - before + limit]
        ids = self.ids
        return total, [(ids[candidates[i]], float(scores[i])) for i in chosen]

    def _exact(self, rows: np.ndarray, exact: ExactScore) -> np.ndarray:
        """The plain path's score of each row, computed once per distinct input."""
        memories, links, ids = self.state.memories, self.key.links, self.ids
        if len(rows) <= _ONE_BY_ONE:
            return np.array(
                [exact(memories[ids[r]], links[ids[r]]) for r in rows.tolist()], np.float64
            )
        inputs = np.stack(
            (self.weight[rows].view(np.int64), self.depth[rows].view(np.int64), self.last_us[rows])
        )
        _, first, which = np.unique(inputs, axis=1, return_index=True, return_inverse=True)
        distinct = np.array(
            [exact(memories[ids[r]], links[ids[r]]) for r in rows[first].tolist()], np.float64
        )
        return distinct[which.reshape(-1)]
