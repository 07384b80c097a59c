"""The model-based test of test_model.py with several processes on one store.

Claude Desktop and Claude Code each start a server on the same home: two (or three) Store
objects on one directory, as two processes would open it. Each step picks the process that
performs it: the commands of the single-store machine (remember, a text told again, batches,
correct, read_memory through a key or none, forget, cleanup_expired) and reads, which are steps
of their own here (read_key, list_memories, memory_stats, browse_keys, recall, a memory read as
of now). Every answer, from whichever process, must agree with one shared model: a process sees
every other process's writes before it answers, and nothing is lost or applied twice. A process
is also restarted: closed cleanly (it writes a snapshot at the head, and opens from it) or
killed (no closing snapshot: it opens from the latest one any process wrote, every 5 events,
and folds the log after it). Log segments are small, so processes follow each other across
new segments too.

Bounded (60 examples of 40 steps per machine, derandomized): about 4-5 s for both.
"""

from __future__ import annotations

import dataclasses

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_model import (
    BOUNDED,
    HUB_MIN,
    LABELS,
    NAMESPACES,
    TTLS,
    StoreVersusModel,
    labels_st,
    pick,
)

from keytrail.core import Store

#: which process performs a step: 0 .. PROCESSES - 1 of the machine that draws it
process = st.runner().flatmap(lambda machine: st.integers(0, machine.PROCESSES - 1))
some_namespace = st.none() | st.sampled_from(NAMESPACES)
#: small log segments (a few hundred bytes a line): processes follow each other across new ones
SEGMENT_BYTES = 4096


class SharedHome(StoreVersusModel):
    """Two processes on one home against the single-store machine's model.

    The commands are the single-store machine's, performed by the process a step picks
    (`self.store` is that process's Store while the step runs). Its invariants read from one
    store after every step; here each read is a step by one process, so they are off.
    """

    PROCESSES = 2

    lists_agree = read_key_agrees = every_version_agrees = stats_agree = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()  # opens process 0 (it writes store.created)
        self.stores: list[Store] = [self.store]
        self.stores += [self._open() for _ in range(self.PROCESSES - 1)]

    def _open(self) -> Store:
        self.settings = dataclasses.replace(self.settings, segment_bytes=SEGMENT_BYTES)
        return super()._open()

    def teardown(self) -> None:
        for store in self.stores[1:]:
            store.close()
        self.store = self.stores[0]
        super().teardown()

    def _as(self, p: int) -> None:
        self.store = self.stores[p]

    def _refused(self, error: type[Exception], call: object, *args: object, **kw: object) -> None:
        """A refusal appends nothing. The store may have caught up with other processes'
        events on the way, so its seq is compared with the log's (the model's), not with its
        own before the call."""
        try:
            call(*args, **kw)  # type: ignore[operator]
        except error:
            pass
        else:
            raise AssertionError(f"{call} {args} {kw} was not refused with {error.__name__}")
        assert self.store.state.seq <= self.model.seq, "a refused command appended"

    # -- the commands, each by one process ------------------------------------------------

    @rule(p=process, labels=labels_st, ns=st.sampled_from(NAMESPACES), ttl=st.sampled_from(TTLS))
    def remember(self, p: int, labels: list[str], ns: str, ttl: int | None) -> None:
        self._as(p)
        super().remember(labels, ns, ttl)

    @rule(
        p=process,
        index=pick,
        labels=labels_st,
        same_namespace=st.booleans(),
        ttl=st.sampled_from(TTLS),
    )
    def remember_again(
        self, p: int, index: int, labels: list[str], same_namespace: bool, ttl: int | None
    ) -> None:
        self._as(p)
        super().remember_again(index, labels, same_namespace, ttl)

    @rule(
        p=process,
        items=st.lists(
            st.tuples(labels_st, st.sampled_from(NAMESPACES), st.sampled_from(TTLS)),
            min_size=1,
            max_size=3,
        ),
    )
    def remember_batch(self, p: int, items: list[tuple[list[str], str, int | None]]) -> None:
        self._as(p)
        super().remember_batch(items)

    @rule(
        p=process,
        items=st.lists(st.tuples(labels_st, st.sampled_from(NAMESPACES)), min_size=1, max_size=3),
        bad=pick,
        how=st.sampled_from(["ttl", "related_to"]),
    )
    def remember_batch_refused(
        self, p: int, items: list[tuple[list[str], str]], bad: int, how: str
    ) -> None:
        self._as(p)
        super().remember_batch_refused(items, bad, how)

    @rule(
        p=process,
        index=pick,
        labels=st.none() | labels_st,
        which=st.sampled_from(["any", "current", "deepest"]),
    )
    def correct(self, p: int, index: int, labels: list[str] | None, which: str) -> None:
        self._as(p)
        super().correct(index, labels, which)

    @rule(p=process, index=pick, via=st.none() | st.integers(0, 5), ns=some_namespace)
    def read_memory(self, p: int, index: int, via: int | None, ns: str | None) -> None:
        self._as(p)
        super().read_memory(index, via, ns)

    @rule(p=process, index=pick, which=pick, times=st.integers(1, 3))
    def read_through_its_key(self, p: int, index: int, which: int, times: int) -> None:
        self._as(p)
        super().read_through_its_key(index, which, times)

    @rule(p=process, index=pick, all_versions=st.booleans())
    def forget(self, p: int, index: int, all_versions: bool) -> None:
        self._as(p)
        super().forget(index, all_versions)

    @rule(p=process)
    def cleanup_expired(self, p: int) -> None:
        self._as(p)
        super().cleanup_expired()

    @rule(p=process, how=st.sampled_from(["close", "kill"]))
    def reopen(self, p: int, how: str) -> None:
        """Restart one process. `close` writes a snapshot at the head (if it is behind) and
        the new Store opens from it; `kill` writes nothing more, so the new Store opens from
        the latest snapshot any process wrote and folds the log after it."""
        event(f"reopen: {how}")
        old = self.stores[p]
        if how == "close":
            old.close()
        else:
            old.log.close()  # what dying leaves: no closing snapshot
        self.stores[p] = self._open()

    # -- reads, each by one process -------------------------------------------------------

    @rule(p=process, ns=some_namespace)
    def list_memories(self, p: int, ns: str | None) -> None:
        self._as(p)
        self._list_agrees(ns)

    @rule(p=process, key=pick, ns=some_namespace)
    def read_key(self, p: int, key: int, ns: str | None) -> None:
        names = list(self.model.key_ids)
        if names:
            self._as(p)
            self._read_key_agrees(names[key % len(names)], ns)

    @rule(p=process)
    def memory_stats(self, p: int) -> None:
        self._as(p)
        self._stats_agree()

    @rule(p=process, ns=some_namespace)
    def browse_keys(self, p: int, ns: str | None) -> None:
        """Keys with current memories, most-used first: each process keeps these counts."""
        self._as(p)
        self._browse_agrees(ns)

    def _browse_agrees(self, ns: str | None) -> None:
        page = self.store.browse_keys(namespace=ns, limit=200)
        counts = {name: self._count(name, ns) for name in self.model.key_ids}
        want = sorted(
            ((n, c) for n, c in counts.items() if c > 0),
            key=lambda nc: (-nc[1], nc[0], self.model.key_ids[nc[0]]),
        )
        assert page.total == len(want), (ns, page.total, want)
        got = [(k.key_id, k.memory_count, k.hub) for k in page.keys]
        assert got == [(self.model.key_ids[n], c, c >= HUB_MIN) for n, c in want], (got, want)

    @rule(p=process, label=st.sampled_from(LABELS), ns=some_namespace)
    def recall(self, p: int, label: str, ns: str | None) -> None:
        """A label as a query finds its key literally (if it leads to a current memory), and
        every key it finds, by name or by the vectors this process embedded, counts the
        memories the model does."""
        self._as(p)
        self._recall_agrees(label, ns)

    def _recall_agrees(self, label: str, ns: str | None) -> None:
        found = self.store.recall(label, namespace=ns)
        names = {key_id: name for name, key_id in self.model.key_ids.items()}
        for match in [*found.keys, *found.nearest]:
            assert match.key_id in names, (label, match)
            assert match.memory_count == self._count(names[match.key_id], ns), (label, ns, match)
        name = label.casefold()
        literal = [(m.key_id, m.score) for m in found.keys if m.match == "literal"]
        if name in self.model.key_ids and self._count(name, ns) > 0:
            assert literal == [(self.model.key_ids[name], 1.0)], (label, ns, found)
        else:
            assert literal == [], (label, ns, found)

    def _count(self, name: str, ns: str | None) -> int:
        """How many current memories `name` leads to (in `ns`)."""
        model = self.model
        return sum(
            1
            for m in model.memories.values()
            if model.visible(m) and name in m.keys and (ns is None or m.namespace == ns)
        )

    @rule(p=process, index=pick)
    def read_as_of_now(self, p: int, index: int) -> None:
        """One memory (any version, forgotten ones refused) as of now: records nothing."""
        m = self._pick_memory(index)
        if m is not None:
            self._as(p)
            self._version_agrees(m)


class ThreeProcesses(SharedHome):
    PROCESSES = 3


SHARED = settings(BOUNDED, max_examples=60)

TestSharedHome = SharedHome.TestCase
TestSharedHome.settings = SHARED
TestThreeProcesses = ThreeProcesses.TestCase
TestThreeProcesses.settings = SHARED
