"""Reads as of an earlier point of the log, by any process, against the shared model's past.

The machines of test_model_processes.py check every present-tense read of two (three) processes
on one home against one model. Here the model also remembers what it was right after every
event, and a read step by a random process asks as of a random earlier point: a seq (an int or
a string of digits), the exact time of an event, or any time from the store's first event up to
now (with a zone, with `Z`, without one: UTC). Every answer must equal the model's state at that
point, read at that moment (README "Time travel"): versions current then, depths, reads and link
weights as they were, only the keys that existed, expiry judged at the point's time, and a
memory forgotten since hidden there too (counted as forgotten). The reads: list_memories,
browse_keys, read_key (a key made later: "not at that point in time"), memory_stats,
read_memory (refusals included), related and recall. A point outside the log is refused and
writes nothing.

Processes are restarted as in test_model_processes.py (closed: a snapshot at the head; killed:
opened from the latest one any process wrote, every 5 events), and past reads build their states
from the snapshots every process keeps: points before, at and after a snapshot's seq. Snapshots
are also deleted (they are caches), so past reads fold long tails and keep what they built.

Bounded (40 examples of 40 steps, 30 with three processes; derandomized): about 2-2.5 s.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from test_model import BOUNDED, LABELS, T0, Memory, Model, close, pick
from test_model_processes import SharedHome, process, some_namespace

from keytrail.core import InvalidInput, NotFound, Store
from keytrail.core.queries import Queries
from keytrail.core.timetravel import read_memory_at, view
from keytrail.projections import snapshot as snapshots

#: How a read names its point: a seq (int, or digits in a string), the time of an event, any
#: time from the first event up to now (with an offset, `Z`, or none: UTC), or now (None).
HOWS = ["seq", "digits", "event time", "any time", "Z time", "naive time", "+02:00 time", "now"]
point = st.tuples(st.sampled_from(HOWS), pick)
#: Points no read accepts (InvalidInput naming as_of, nothing written).
BAD_POINTS = ["seq 0", "seq past the head", "before the store", "in the future", "words", "bool"]
#: The reads that take as_of (over MCP: the tools of the same names).
READS = ["list_memories", "read_key", "memory_stats", "read_memory", "related", "recall"]


class PastReads(SharedHome):
    """Two processes; besides every present-tense step of SharedHome, reads as of the past."""

    def __init__(self) -> None:
        super().__init__()
        #: the model right after each event: then[seq - 1], its `now` that event's time
        self.then: list[Model] = []
        self._note_the_past()

    # -- the model's past -----------------------------------------------------------------

    def _note_the_past(self) -> None:
        """Keep the model as it stands after every event appended since the last note.

        A step that appends several events (forget with all_versions) leaves its intermediate
        seqs the final model: they differ only in forgets, which hold in the past too. Reads
        through a key several times in one step are noted one by one (see `_read`).
        """
        while len(self.then) < self.model.seq:
            self.then.append(copy.deepcopy(self.model))

    @invariant()
    def note_the_past(self) -> None:
        self._note_the_past()

    def _read(self, m: Memory, name: str | None, ns: str | None) -> None:
        super()._read(m, name, ns)
        self._note_the_past()

    def _model_at(self, seq: int, now: datetime) -> Model:
        """The model right after event `seq`, read at `now`, with today's forgets."""
        past = copy.deepcopy(self.then[seq - 1])
        past.seq, past.now = seq, now
        for m in past.memories.values():
            m.forgotten = m.forgotten or self.model.memories[m.id].forgotten
        # ... and so does the erasure of labels: erased keys have no label then either.
        erased = {k for n, k in self.model.key_ids.items() if n.startswith("\x00")}
        for name in [n for n, k in past.key_ids.items() if k in erased and n[:1] != "\x00"]:
            past.erase(name)
        return past

    def _point(self, how: str, where: int) -> tuple[object, Model]:
        """The as_of value a read step passes, and the model as of that point."""
        head = self.model.seq
        if how == "now":
            return None, self.model
        if how in ("seq", "digits"):
            seq = 1 + where % head
            at = self.then[seq - 1].now
            return (seq if how == "seq" else f" {seq} "), self._model_at(seq, at)
        if how == "event time":
            moment = self.then[where % head].now
        else:  # a moment anywhere from the first event (T0) up to now
            moment = T0 + (self.clock.now - T0) * (where / 10_000)
        seq = max(i for i, then in enumerate(self.then, 1) if then.now <= moment)
        value: object = moment.isoformat()
        if how == "Z time":
            value = moment.isoformat().replace("+00:00", "Z")
        elif how == "naive time":
            value = moment.replace(tzinfo=None).isoformat()
        elif how == "+02:00 time":
            value = moment.astimezone(timezone(timedelta(hours=2))).isoformat()
        return value, self._model_at(seq, moment)

    def _note_snapshots(self, seq: int) -> None:
        """Label where `seq` falls against the snapshots on disk (coverage, see --hypothesis-
        show-statistics)."""
        kept = {
            header.seq
            for path in self.stores[0].snapshot_files()
            if (header := snapshots.read_header(path)) is not None
        }
        if seq == self.model.seq:
            event("as of: the head")
        elif seq in kept:
            event("as of: a snapshot's seq")
        elif any(s < seq for s in kept):
            event("as of: after a snapshot")
        else:
            event("as of: before every snapshot")

    @contextmanager
    def _then(self, p: int, as_of: object, past: Model) -> Iterator[None]:
        """The checks of the present-tense steps, asked of process `p` as of `as_of` against
        the model `past` (they read `self.store` and `self.model`)."""
        self._note_snapshots(past.seq)
        before = set(self.stores[p].snapshot_files())
        saved = self.store, self.model
        queries: Queries = view(self.stores[p], as_of)
        self.store, self.model = queries, past  # type: ignore[assignment]
        try:
            yield
        finally:
            self.store, self.model = saved
        if set(self.stores[p].snapshot_files()) - before:
            event("as of: the read kept its past state as a snapshot")

    @rule(which=st.sampled_from(["archived", "all"]))
    def drop_snapshots(self, which: str) -> None:
        """Snapshots are caches, deletable at any time: past reads then fold longer tails of
        the log (and keep the state they built as a snapshot), and an open replays it."""
        latest = self.stores[0].snapshot_path
        for path in self.stores[0].snapshot_files():
            if which == "all" or path != latest:
                path.unlink(missing_ok=True)

    # -- reads as of the past, each by one process ----------------------------------------

    @rule(p=process, at=point, ns=some_namespace)
    def list_memories_then(self, p: int, at: tuple[str, int], ns: str | None) -> None:
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            self._list_agrees(ns)

    @rule(p=process, at=point, key=pick, ns=some_namespace)
    def read_key_then(self, p: int, at: tuple[str, int], key: int, ns: str | None) -> None:
        names = list(self.model.key_ids)
        if not names:
            return
        name = names[key % len(names)]
        key_id = self.model.key_ids[name]
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            if name in past.key_ids:
                self._read_key_agrees(name, ns)
                return
            try:
                self.store.read_key(key_id)
            except NotFound as exc:
                assert exc.field == "key_id" and "not at that point in time" in str(exc), exc
            else:
                raise AssertionError(f"key {name!r} is read as of {as_of!r}, before it was made")

    @rule(p=process, at=point)
    def memory_stats_then(self, p: int, at: tuple[str, int]) -> None:
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            self._stats_agree()

    @rule(p=process, at=point, ns=some_namespace)
    def browse_keys_then(self, p: int, at: tuple[str, int], ns: str | None) -> None:
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            self._browse_agrees(ns)

    @rule(p=process, at=point, label=st.sampled_from(LABELS), ns=some_namespace)
    def recall_then(self, p: int, at: tuple[str, int], label: str, ns: str | None) -> None:
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            self._recall_agrees(label, ns)

    @rule(
        p=process,
        at=point,
        index=pick,
        via=st.none() | st.integers(0, len(LABELS) - 1),
        ns=some_namespace,
    )
    def read_memory_then(
        self, p: int, at: tuple[str, int], index: int, via: int | None, ns: str | None
    ) -> None:
        """One memory as of a point, through any key or none: what read_memory answers or
        refuses then, recording nothing."""
        m = self._pick_memory(index)
        if m is None:
            return
        how, where = at
        if how == "now":  # read_memory without as_of records a read: ask as of this moment
            how, where = "any time", 10_000
        as_of, past = self._point(how, where)
        self._note_snapshots(past.seq)
        name = None if via is None else LABELS[via].casefold()
        key_id = self.model.key_ids.get(name) if name is not None else None
        store = self.stores[p]

        def read() -> object:
            return read_memory_at(store, m.id, via_key_id=key_id, namespace=ns, as_of=as_of)

        then = past.memories.get(m.id)
        if then is None:
            self._refused_then(store, NotFound, read, "memory_id", "not at that point in time")
            return
        if not past.readable(then):
            self._refused_then(store, NotFound, read, "memory_id")
            return
        if ns is not None and ns != then.namespace:
            self._refused_then(store, NotFound, read, "memory_id")
            return
        if key_id is not None and name not in past.key_ids:
            self._refused_then(store, NotFound, read, "via_key_id", "not at that point in time")
            return
        if key_id is not None and name not in then.keys:
            self._refused_then(store, InvalidInput, read, "via_key_id")
            return
        seen = read_memory_at(store, m.id, via_key_id=key_id, namespace=ns, as_of=as_of)
        assert seen.seq is None, "a past read is not a read"
        assert store.state.seq == self.model.seq, "a past read appended"
        assert seen.memory_id == then.id and seen.content == then.content
        assert seen.namespace == then.namespace
        assert close(seen.depth, then.depth), (as_of, then.id, seen.depth, then.depth)
        assert seen.access_count == then.access_count, (as_of, then.id)
        assert seen.last_read_at == then.last_read_at
        # A read names the nearest version not forgotten (by now) on each side.
        assert seen.supersedes == past.named(then.supersedes, newer=False)
        assert seen.superseded_by == past.named(then.superseded_by, newer=True)
        assert seen.expires_at == then.expires_at
        saved = self.model
        self.model = past
        try:
            self._check_keys(then, seen.keys)
        finally:
            self.model = saved

    @rule(p=process, at=point, index=pick)
    def related_then(self, p: int, at: tuple[str, int], index: int) -> None:
        """Memories sharing keys with one memory, as of a point (or now): each scored by the
        IDF of the keys they share (1 if only these two share it, else 1/df over the current
        memories of the namespace), with those keys' weights."""
        m = self._pick_memory(index)
        if m is None:
            return
        as_of, past = self._point(*at)
        with self._then(p, as_of, past):
            then = past.memories.get(m.id)
            # Refused as read_memory refuses it then: forgotten (by now), or expired then.
            if then is None or not past.readable(then):
                try:
                    self.store.related(m.id, limit=200)
                except NotFound as exc:
                    assert exc.field == "memory_id", exc
                    later = "not at that point in time" in str(exc)
                    assert later == (then is None), (as_of, m.id, exc)
                else:
                    raise AssertionError(f"related of {m.id} as of {as_of!r} was not refused")
                return
            self._related_agrees(then)

    def _related_agrees(self, m: Memory) -> None:
        model = self.model
        sharers: dict[str, list[str]] = {}  # other memory -> the keys of m it shares
        idf: dict[str, float] = {}
        mine = {m.id}  # its versions are the same fact, never related to it
        for newer in (False, True):
            v = m
            while (step := v.superseded_by if newer else v.supersedes) is not None:
                v = model.memories[step]
                mine.add(v.id)
        for name in m.keys:
            found = [
                o.id
                for o in model.memories.values()
                if o.id not in mine
                and o.namespace == m.namespace
                and model.visible(o)
                and name in o.keys
            ]
            df = len(found) + (1 if model.visible(m) else 0)
            idf[name] = 1.0 if df <= 1 else 1.0 / df
            for oid in found:
                sharers.setdefault(oid, []).append(name)
        want = {oid: sum(idf[n] for n in names) for oid, names in sharers.items()}
        got = self.store.related(m.id, limit=200)
        assert got.memory_id == m.id
        scores = {r.memory_id: r for r in got.related}
        assert scores.keys() == want.keys(), (m.id, sorted(scores), sorted(want))
        for oid, r in scores.items():
            assert close(r.score, want[oid]), (m.id, oid, r.score, want[oid])
            assert not r.related_edge
            assert close(r.depth, model.memories[oid].depth)
            shared = {k.key_id: k.weight for k in r.shared_keys}
            assert shared.keys() == {model.key_ids[n] for n in sharers[oid]}, (m.id, oid)
            for n in sharers[oid]:
                assert close(shared[model.key_ids[n]], model.weights[(n, oid)]), (m.id, oid, n)
        ranked = [r.score for r in got.related]
        assert ranked == sorted(ranked, reverse=True), "related is not best first"

    @rule(p=process, bad=st.sampled_from(BAD_POINTS), read=st.sampled_from(READS))
    def read_then_refused(self, p: int, bad: str, read: str) -> None:
        """A point outside the log: InvalidInput naming as_of, from every read; nothing
        appended."""
        event(f"as_of refused: {bad}")
        store = self.stores[p]
        as_of: object = {
            "seq 0": 0,
            "seq past the head": self.model.seq + 1,
            "before the store": (T0 - timedelta(microseconds=1)).isoformat(),
            "in the future": (self.clock.now + timedelta(microseconds=1)).isoformat(),
            "words": "last tuesday",
            "bool": True,
        }[bad]
        some = next(iter(self.model.memories), "m_000000000000")
        try:
            if read == "read_memory":
                read_memory_at(store, some, as_of=as_of)
            else:
                queries = view(store, as_of)
                {
                    "list_memories": lambda: queries.list_memories(),
                    "read_key": lambda: queries.read_key("k_0000000000"),
                    "memory_stats": lambda: queries.memory_stats(),
                    "related": lambda: queries.related(some),
                    "recall": lambda: queries.recall("apple"),
                }[read]()
        except InvalidInput as exc:
            assert type(exc) is InvalidInput and exc.field == "as_of", exc
        else:
            raise AssertionError(f"{read} as of {as_of!r} ({bad}) was not refused")
        assert store.state.seq <= self.model.seq, "a refused past read appended"

    def _refused_then(
        self, store: Store, error: type[Exception], call: object, field: str, why: str = ""
    ) -> None:
        try:
            call()  # type: ignore[operator]
        except InvalidInput as exc:
            assert type(exc) is error and exc.field == field, (error, field, exc)
            assert why in str(exc), (why, exc)
        else:
            raise AssertionError(f"not refused: {error.__name__} on {field}")
        assert store.state.seq <= self.model.seq, "a refused past read appended"


class ThreePastReads(PastReads):
    PROCESSES = 3


PAST = settings(BOUNDED, max_examples=40)

TestPastReads = PastReads.TestCase
TestPastReads.settings = PAST
TestThreePastReads = ThreePastReads.TestCase
TestThreePastReads.settings = settings(PAST, max_examples=30)
