"""A model-based test: random commands on a Store against a small reference model of the docs.

The property tests in test_properties.py check that replay equals the live state and that
snapshots equal replay; a fold that is wrong the same way every time passes them. Here a plain
model, written from the documented rules (README "Behaviour worth knowing" and the session
walk-through, DESIGN.md §5, core/store.py docstrings) and sharing no code with keytrail, predicts
what every read answers: which memories are visible where, their depth, access count, versions,
link weights, `read_key` scores and `memory_stats` totals. Key merges are switched off (a
threshold above any cosine), so every label is its own key, and only a text told again is a
duplicate (every other content differs in a number, which never deduplicates).

Bounded (20 examples of 40 steps per machine, derandomized): about 10-30 s in all.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from keytrail.core import (
    HashEmbedder,
    InvalidInput,
    NotFound,
    RememberItem,
    Settings,
    Store,
    keyrank,
)
from keytrail.core.timetravel import read_memory_at
from keytrail.events import FoldRules

T0 = datetime(2025, 3, 1, 9, 0, 0, 250000, tzinfo=UTC)
#: "Apple" and "apple" are one key: labels match in any case
LABELS = ["apple", "Apple", "fruit", "Newton", "gravity", "tea"]
NAMESPACES = ["default", "work"]
TTLS = [None, None, None, 60, 3600]
STEPS = [1, 30, 60, 600, 3 * 86400]  # 60: a ttl of 60 s ends exactly now
#: Cosines never reach 2: no key becomes an alias. Only the same text deduplicates: every
#: content differs from the others in a number ("fact number 7"), which is never a duplicate.
NO_MERGES = {"merge": 2.0, "dedup": 0.999}
HUB_MIN = 3
DECAY_DAYS = 30.0
TOLERANCE = 1e-6  # the store rounds depths, weights and scores to 6 places


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Memory:
    """One memory as the docs describe it."""

    id: str
    content: str
    namespace: str
    keys: list[str]  # key names (casefolded labels), in the order given
    created_at: datetime
    expires_at: datetime | None
    depth: float = 0.0
    access_count: int = 0
    last_read_at: datetime | None = None
    supersedes: str | None = None
    superseded_by: str | None = None
    forgotten: bool = False
    expired: bool = False  # cleanup_expired recorded it


@dataclass
class Model:
    rules: FoldRules
    now: datetime = T0
    seq: int = 1  # store.created
    memories: dict[str, Memory] = field(default_factory=dict)  # in creation order
    key_ids: dict[str, str] = field(default_factory=dict)  # key name -> the store's key id
    weights: dict[tuple[str, str], float] = field(default_factory=dict)  # (key, memory)

    def hidden_by_time(self, m: Memory) -> bool:
        return m.expires_at is not None and m.expires_at <= self.now

    def visible(self, m: Memory) -> bool:
        """Shown by present-tense reads: not superseded, forgotten or expired."""
        return not (m.forgotten or m.expired or self.hidden_by_time(m) or m.superseded_by)

    def readable(self, m: Memory) -> bool:
        """What read_memory / correct find by id (a superseded version is still found)."""
        return not (m.forgotten or m.expired or self.hidden_by_time(m))

    def named(self, memory_id: str | None, newer: bool) -> str | None:
        """The neighbour version a read names: past forgotten ones, the nearest one not
        forgotten on that side of the chain, or None."""
        while memory_id is not None and self.memories[memory_id].forgotten:
            m = self.memories[memory_id]
            memory_id = m.superseded_by if newer else m.supersedes
        return memory_id

    def erase(self, name: str) -> None:
        """A forget erased the key's label: the key stays (counted, its links kept) under a
        name no label spells, and `name` is free to make a new key."""
        key_id = self.key_ids.pop(name)
        blank = f"\x00{key_id}"
        self.key_ids[blank] = key_id
        for m in self.memories.values():
            m.keys = [blank if n == name else n for n in m.keys]
        self.weights = {(blank if n == name else n, mid): w for (n, mid), w in self.weights.items()}

    def link(self, name: str, memory_id: str, weight: float) -> None:
        self.weights[(name, memory_id)] = weight

    def score(self, m: Memory, name: str) -> float:
        """link weight × (0.9 + 0.1·depth) × (0.5 + 0.5·exp(−age·(1−0.7·depth)/30 days))."""
        last = m.last_read_at or m.created_at
        age_days = max(0.0, (self.now - last).total_seconds() / 86400.0)
        time_factor = 0.5 + 0.5 * math.exp(-age_days * (1 - 0.7 * m.depth) / DECAY_DAYS)
        return self.weights[(name, m.id)] * (0.9 + 0.1 * m.depth) * time_factor

    def version_chain(self, memory_id: str) -> list[str]:
        first = self.memories[memory_id]
        while first.supersedes is not None:
            first = self.memories[first.supersedes]
        chain = [first.id]
        while first.superseded_by is not None:
            first = self.memories[first.superseded_by]
            chain.append(first.id)
        return chain


def key_names(labels: list[str]) -> list[str]:
    """Labels as keys: casefolded, each key once."""
    return list(dict.fromkeys(label.casefold() for label in labels))


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE


labels_st = st.lists(st.sampled_from(LABELS), min_size=1, max_size=3)
pick = st.integers(min_value=0, max_value=10_000)


class StoreVersusModel(RuleBasedStateMachine):
    RULES = FoldRules()

    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="keytrail-model-"))
        self.clock = Clock()
        self.settings = Settings(
            home=self.home,
            embedder="hash",
            rules=self.RULES,
            threshold_overrides=NO_MERGES,
            hub_min=HUB_MIN,
            time_decay_days=DECAY_DAYS,
            snapshot_every=5,  # reopening then starts from a snapshot and a tail
        )
        self.store = self._open()
        self.model = Model(rules=self.RULES)
        self.counter = 0

    def _open(self) -> Store:
        return Store(self.settings, embedder=HashEmbedder(), clock=self.clock)

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.home, ignore_errors=True)

    # -- helpers -------------------------------------------------------------------------

    def _content(self) -> str:
        self.counter += 1
        return f"fact number {self.counter} about things"

    def _pick_memory(self, index: int) -> Memory | None:
        ids = list(self.model.memories)
        return self.model.memories[ids[index % len(ids)]] if ids else None

    def _note_keys(self, names: list[str], outcomes: list[object]) -> None:
        got = [o.label.casefold() for o in outcomes]  # type: ignore[attr-defined]
        assert got == names, (got, names)
        for name, outcome in zip(names, outcomes, strict=True):
            key_id = outcome.key_id  # type: ignore[attr-defined]
            known = self.model.key_ids.setdefault(name, key_id)
            assert known == key_id, f"{name!r} became a second key {key_id} (was {known})"
            resolution = "existing" if name in self._seen_keys else "new"
            assert outcome.resolution == resolution, (name, outcome)  # type: ignore[attr-defined]
            self._seen_keys.add(name)

    def _add(
        self, memory_id: str, content: str, ns: str, names: list[str], ttl: int | None
    ) -> None:
        model = self.model
        model.memories[memory_id] = Memory(
            id=memory_id,
            content=content,
            namespace=ns,
            keys=names,
            created_at=model.now,
            expires_at=None if ttl is None else model.now + timedelta(seconds=ttl),
        )
        for name in names:
            model.link(name, memory_id, self.RULES.link_initial)

    # -- commands ------------------------------------------------------------------------

    @rule(labels=labels_st, ns=st.sampled_from(NAMESPACES), ttl=st.sampled_from(TTLS))
    def remember(self, labels: list[str], ns: str, ttl: int | None) -> None:
        content = self._content()
        names = key_names(labels)
        self._seen_keys = set(self.model.key_ids)
        done = self.store.remember(content, keys=labels, namespace=ns, ttl_seconds=ttl)
        self.model.seq += 1
        assert done.seq == self.model.seq
        assert done.namespace == ns
        assert done.deduplicated is None
        self._note_keys(names, done.keys)
        self._add(done.memory_id, content, ns, names, ttl)

    @rule(
        index=pick,
        labels=labels_st,
        same_namespace=st.booleans(),
        ttl=st.sampled_from(TTLS),
    )
    def remember_again(
        self, index: int, labels: list[str], same_namespace: bool, ttl: int | None
    ) -> None:
        """The text of an earlier memory told again. It replaces a current memory of the same
        namespace with that text, with a key in common or not (reason `duplicate`), which passes
        on what reading built up: depth, reads and the weights of its links."""
        earlier = self._pick_memory(index)
        if earlier is None:
            return
        model = self.model
        ns = (
            earlier.namespace
            if same_namespace
            else NAMESPACES[1 - NAMESPACES.index(earlier.namespace)]
        )
        names = key_names(labels)
        twins = [
            m
            for m in model.memories.values()
            if model.visible(m) and m.namespace == ns and m.content == earlier.content
        ]
        self._seen_keys = set(model.key_ids)
        done = self.store.remember(earlier.content, keys=labels, namespace=ns, ttl_seconds=ttl)
        model.seq += 1
        assert done.seq == model.seq
        self._note_keys(names, done.keys)
        self._add(done.memory_id, earlier.content, ns, names, ttl)
        event(f"remember again: {'duplicate' if twins else 'not a duplicate'}")
        if not twins:
            assert done.deduplicated is None
            return
        assert done.deduplicated is not None
        old = model.memories[done.deduplicated.memory_id]
        assert old in twins
        new = model.memories[done.memory_id]
        new.keys += [name for name in old.keys if name not in names]
        for name in old.keys:
            model.link(name, new.id, model.weights[(name, old.id)])
        new.depth, new.access_count = old.depth, old.access_count
        new.supersedes, old.superseded_by = old.id, new.id

    @rule(
        items=st.lists(
            st.tuples(labels_st, st.sampled_from(NAMESPACES), st.sampled_from(TTLS)),
            min_size=1,
            max_size=3,
        )
    )
    def remember_batch(self, items: list[tuple[list[str], str, int | None]]) -> None:
        contents = [self._content() for _ in items]
        self._seen_keys = set(self.model.key_ids)
        done = self.store.remember_batch(
            [
                RememberItem(content, keys=labels, namespace=ns, ttl_seconds=ttl)
                for content, (labels, ns, ttl) in zip(contents, items, strict=True)
            ]
        )
        self.model.seq += 1  # one event for the whole batch
        assert len(done) == len(items)
        for content, (labels, ns, ttl), one in zip(contents, items, done, strict=True):
            assert one.seq == self.model.seq
            names = key_names(labels)
            self._note_keys(names, one.keys)
            self._add(one.memory_id, content, ns, names, ttl)

    @rule(
        items=st.lists(st.tuples(labels_st, st.sampled_from(NAMESPACES)), min_size=1, max_size=3),
        bad=pick,
        how=st.sampled_from(["ttl", "related_to"]),
    )
    def remember_batch_refused(
        self, items: list[tuple[list[str], str]], bad: int, how: str
    ) -> None:
        """One bad item refuses the whole batch: nothing of it is written, no key is made.

        A ttl of 0 is refused before the lock; a related_to naming no memory while deciding,
        after the earlier items' keys were resolved."""
        event(f"batch refused: {how}")
        wrong = bad % len(items)
        batch = [
            RememberItem(
                self._content(),
                keys=labels,
                namespace=ns,
                ttl_seconds=0 if i == wrong and how == "ttl" else None,
                related_to=["m_000000000000"] if i == wrong and how == "related_to" else None,
            )
            for i, (labels, ns) in enumerate(items)
        ]
        self._refused(InvalidInput, self.store.remember_batch, batch)

    @rule(
        index=pick,
        labels=st.none() | labels_st,
        which=st.sampled_from(["any", "current", "deepest"]),
    )
    def correct(self, index: int, labels: list[str] | None, which: str) -> None:
        """Any memory (refusals included), a current one, or the deepest current one (so the
        ×0.8 weakening of a memory at depth ≥ 0.7 comes up too)."""
        shown = [m for m in self.model.memories.values() if self.model.visible(m)]
        if which == "any" or not shown:
            old = self._pick_memory(index)
        elif which == "current":
            old = shown[index % len(shown)]
        else:
            old = max(shown, key=lambda m: m.depth)
        if old is None:
            return
        model = self.model
        content = self._content()
        self._seen_keys = set(model.key_ids)
        if not model.readable(old):
            self._refused(NotFound, self.store.correct, old.id, content, keys=labels)
            return
        if old.superseded_by is not None:  # only the current version is corrected
            self._refused(InvalidInput, self.store.correct, old.id, content, keys=labels)
            return
        done = self.store.correct(old.id, content, keys=labels)
        model.seq += 1
        assert done.seq == model.seq and done.old_id == old.id
        rules = self.RULES
        factor = rules.weaken_deep if old.depth >= rules.weaken_threshold else rules.weaken_shallow
        event(f"correct: weakened x{factor}, keys {'kept' if labels is None else 'given'}")
        assert done.weaken_factor == factor, (done.weaken_factor, factor, old.depth)
        assert close(done.old_depth, old.depth)
        names = old.keys if labels is None else key_names(labels)  # no keys: the old ones
        self._note_keys(names, done.keys)
        old.depth *= factor
        old.superseded_by = done.memory_id
        model.memories[done.memory_id] = Memory(
            id=done.memory_id,
            content=content,
            namespace=old.namespace,
            keys=list(names),
            created_at=model.now,
            expires_at=old.expires_at,
            supersedes=old.id,
        )
        for name in names:  # the new version starts afresh: depth 0, links at 1.0
            model.link(name, done.memory_id, rules.link_initial)

    @rule(index=pick, by=pick)
    def replace(self, index: int, by: int) -> None:
        """correct with by_memory_id: another memory, told once, becomes the next version."""
        old, new = self._pick_memory(index), self._pick_memory(by)
        if old is None or new is None:
            return
        model, call = self.model, self.store.correct
        if old.id == new.id:
            self._refused(InvalidInput, call, old.id, by_memory_id=new.id)
            return
        if not model.readable(old):
            self._refused(NotFound, call, old.id, by_memory_id=new.id)
            return
        if old.superseded_by is not None:
            self._refused(InvalidInput, call, old.id, by_memory_id=new.id)
            return
        if not model.readable(new):
            self._refused(NotFound, call, old.id, by_memory_id=new.id)
            return
        if new.superseded_by or new.supersedes or new.namespace != old.namespace:
            self._refused(InvalidInput, call, old.id, by_memory_id=new.id)
            return
        done = call(old.id, by_memory_id=new.id)
        model.seq += 1
        assert (done.seq, done.old_id, done.memory_id) == (model.seq, old.id, new.id)
        rules = self.RULES
        factor = rules.weaken_deep if old.depth >= rules.weaken_threshold else rules.weaken_shallow
        event(f"replace: weakened x{factor}")
        assert done.weaken_factor == factor and close(done.old_depth, old.depth)
        old.depth *= factor
        old.superseded_by, new.supersedes = new.id, old.id

    @rule(
        index=pick,
        via=st.none() | st.integers(0, len(LABELS) - 1),
        ns=st.none() | st.sampled_from(NAMESPACES),
    )
    def read_memory(self, index: int, via: int | None, ns: str | None) -> None:
        """Any memory, through any key or none: refusals included."""
        m = self._pick_memory(index)
        if m is None:
            return
        name = None if via is None else LABELS[via].casefold()
        self._read(m, name if name in self.model.key_ids else None, ns)

    @rule(index=pick, which=pick, times=st.integers(1, 4))
    def read_through_its_key(self, index: int, which: int, times: int) -> None:
        """A current memory through one of its own keys, a few times (depth and weight grow)."""
        shown = [m for m in self.model.memories.values() if self.model.visible(m)]
        if not shown:
            return
        m = shown[index % len(shown)]
        for _ in range(times):
            self._read(m, m.keys[which % len(m.keys)], m.namespace)

    def _read(self, m: Memory, name: str | None, ns: str | None) -> None:
        model = self.model
        via_id = None if name is None else model.key_ids[name]
        read = self.store.read_memory
        if not model.readable(m) or (ns is not None and ns != m.namespace):
            self._refused(NotFound, read, m.id, via_key_id=via_id, namespace=ns)
            return
        if name is not None and name not in m.keys:  # no such link: an error, nothing recorded
            self._refused(InvalidInput, read, m.id, via_key_id=via_id, namespace=ns)
            return
        view = read(m.id, via_key_id=via_id, namespace=ns)
        model.seq += 1
        rules = self.RULES
        m.depth = min(rules.depth_max, m.depth + rules.depth_step)
        m.access_count += 1
        m.last_read_at = model.now
        if name is not None:  # Hebbian: the traversed edge only
            w = model.weights[(name, m.id)] + rules.hebbian_step
            event("read: weight at its ceiling" if w >= rules.weight_max else "read: via a key")
            model.link(name, m.id, min(rules.weight_max, max(rules.weight_min, w)))
        assert view.seq == model.seq
        assert view.memory_id == m.id and view.content == m.content
        assert view.namespace == m.namespace
        assert close(view.depth, m.depth), (view.depth, m.depth)
        assert view.access_count == m.access_count
        assert view.last_read_at == m.last_read_at
        assert view.supersedes == model.named(m.supersedes, newer=False)
        assert view.superseded_by == model.named(m.superseded_by, newer=True)
        assert view.expires_at == m.expires_at
        assert view.status == ("superseded" if m.superseded_by else "active")
        self._check_keys(m, view.keys)

    @rule(index=pick, all_versions=st.booleans())
    def forget(self, index: int, all_versions: bool) -> None:
        m = self._pick_memory(index)
        if m is None:
            return
        model = self.model
        chain = model.version_chain(m.id) if all_versions else [m.id]
        gone = [mid for mid in chain if not model.memories[mid].forgotten]
        if not gone:
            # A forgotten version with all_versions still forgets the others of its chain.
            self._refused(NotFound, self.store.forget, m.id, all_versions=all_versions)
            return
        done = self.store.forget(m.id, all_versions=all_versions)
        model.seq += len(gone)  # one memory.forgotten each
        assert done.seq == model.seq
        assert sorted(done.other_versions) == sorted(mid for mid in gone if mid != m.id)
        for mid in gone:
            model.memories[mid].forgotten = True
        # A key every memory of which is forgotten loses its label (nothing else names it
        # here: no alias, retype or entity in this model).
        erased = [
            name
            for name in model.key_ids
            if not name.startswith("\x00")
            and all(m.forgotten for m in model.memories.values() if name in m.keys)
        ]
        assert sorted(done.labels_erased) == sorted(model.key_ids[n] for n in erased)
        for name in erased:
            model.erase(name)

    @rule()
    def cleanup_expired(self) -> None:
        model = self.model
        due = [
            m.id
            for m in model.memories.values()
            if not (m.forgotten or m.expired) and model.hidden_by_time(m)
        ]
        done = self.store.cleanup_expired(limit=200)
        assert done.count == len(due)
        assert sorted(done.memory_ids) == sorted(due)
        if due:
            model.seq += 1
            assert done.seq == model.seq
        else:
            assert done.seq is None
        for mid in due:
            model.memories[mid].expired = True
        event(f"cleanup_expired: {'some' if due else 'none'} due")

    @rule(seconds=st.sampled_from(STEPS))
    def advance_clock(self, seconds: int) -> None:
        self.clock.now += timedelta(seconds=seconds)
        self.model.now = self.clock.now

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = self._open()

    # -- checking ------------------------------------------------------------------------

    def _refused(self, error: type[Exception], call: object, *args: object, **kw: object) -> None:
        before = self.store.state.seq
        try:
            call(*args, **kw)  # type: ignore[operator]
        except error:
            pass
        else:
            raise AssertionError(f"{call} {args} {kw} was not refused with {error.__name__}")
        assert self.store.state.seq == before, "a refused command appended"

    def _check_keys(self, m: Memory, refs: list[object]) -> None:
        model = self.model
        got = {r.key_id: r.weight for r in refs}  # type: ignore[attr-defined]
        want = {model.key_ids[n]: model.weights[(n, m.id)] for n in m.keys}
        assert got.keys() == want.keys(), (m.id, got, want)
        for key_id, weight in want.items():
            assert close(got[key_id], weight), (m.id, key_id, got[key_id], weight)

    @invariant()
    def lists_agree(self) -> None:
        for ns in (None, *NAMESPACES):
            self._list_agrees(ns)

    def _list_agrees(self, ns: str | None) -> None:
        model = self.model
        page = self.store.list_memories(namespace=ns, limit=200)
        want = [
            m
            for m in reversed(model.memories.values())
            if model.visible(m) and (ns is None or m.namespace == ns)
        ]
        assert page.total == len(want), (ns, page.total, len(want))
        assert [s.memory_id for s in page.memories] == [m.id for m in want]  # newest first
        for summary, m in zip(page.memories, want, strict=True):
            assert summary.namespace == m.namespace
            assert close(summary.depth, m.depth), (m.id, summary.depth, m.depth)
            assert summary.access_count == m.access_count
            assert summary.expires_at == m.expires_at
            self._check_keys(m, summary.keys)

    @invariant()
    def read_key_agrees(self) -> None:
        for name in self.model.key_ids:
            for ns in (None, *NAMESPACES):
                self._read_key_agrees(name, ns)

    def _read_key_agrees(self, name: str, ns: str | None) -> None:
        model = self.model
        key_id = model.key_ids[name]
        page = self.store.read_key(key_id, namespace=ns, limit=200)
        want = {
            m.id: model.score(m, name)
            for m in model.memories.values()
            if model.visible(m) and name in m.keys and (ns is None or m.namespace == ns)
        }
        assert page.total == len(want), (name, ns, page.total, len(want))
        got = {ref.memory_id: ref for ref in page.memories}
        assert got.keys() == want.keys(), (name, ns, sorted(got), sorted(want))
        for mid, ref in got.items():
            assert close(ref.depth, model.memories[mid].depth)
            assert close(ref.score, want[mid]), (name, mid, ref.score, want[mid])
        scores = [ref.score for ref in page.memories]
        assert scores == sorted(scores, reverse=True), "read_key is not best first"
        if len(want) >= 3:  # a middle page is that slice of the whole ranking
            middle = self.store.read_key(key_id, namespace=ns, limit=2, offset=1)
            assert middle.total == page.total
            assert [r.memory_id for r in middle.memories] == [
                r.memory_id for r in page.memories[1:3]
            ]

    @invariant()
    def every_version_agrees(self) -> None:
        """Each memory read as of now (records nothing): old versions' depths and weights too."""
        for m in self.model.memories.values():
            self._version_agrees(m)

    def _version_agrees(self, m: Memory) -> None:
        model = self.model
        now = self.clock.now.isoformat()
        if not model.readable(m):
            try:
                read_memory_at(self.store, m.id, as_of=now)
            except NotFound:
                return
            raise AssertionError(f"{m.id} is readable as of now")
        view = read_memory_at(self.store, m.id, as_of=now)
        assert view.content == m.content and view.namespace == m.namespace
        assert close(view.depth, m.depth), (m.id, view.depth, m.depth)
        assert view.access_count == m.access_count
        assert view.last_read_at == m.last_read_at
        assert view.supersedes == model.named(m.supersedes, newer=False)
        assert view.superseded_by == model.named(m.superseded_by, newer=True)
        assert view.expires_at == m.expires_at
        self._check_keys(m, view.keys)

    @invariant()
    def stats_agree(self) -> None:
        self._stats_agree()

    def _stats_agree(self) -> None:
        model = self.model
        stats = self.store.memory_stats()
        current: dict[str, int] = {}
        superseded = expired = forgotten = 0
        for m in model.memories.values():
            if m.forgotten:
                forgotten += 1
            elif m.expired or model.hidden_by_time(m):
                expired += 1
            elif m.superseded_by is not None:
                superseded += 1
            else:
                current[m.namespace] = current.get(m.namespace, 0) + 1
        assert stats.seq == model.seq, (stats.seq, model.seq)
        assert stats.memories == sum(current.values())
        assert stats.namespaces == dict(sorted(current.items()))
        assert (stats.superseded, stats.expired, stats.forgotten) == (
            superseded,
            expired,
            forgotten,
        )
        assert stats.keys == len(model.key_ids)
        assert stats.links == len(model.weights)
        hubs = sum(
            1
            for name in model.key_ids
            if sum(1 for m in model.memories.values() if model.visible(m) and name in m.keys)
            >= HUB_MIN
        )
        assert stats.hubs == hubs


class FastRules(StoreVersusModel):
    """Fold rules that reach the caps within a short run: depth 1.0 after 4 reads, the ×0.8
    weakening after 3, and the link weight's ceiling after 2."""

    RULES = FoldRules(depth_step=0.3, hebbian_step=0.9, weight_max=2.5, weight_min=0.2)


class KeyColumns(StoreVersusModel):
    """read_key of every key through its kept numpy columns (keyrank.py), which a store uses
    only for keys of 512 links and more: they must answer as the plain ranking does. Two keys
    kept at most, so columns are let go and rebuilt too."""

    def __init__(self) -> None:
        self._saved = (keyrank.COLUMNS_MIN_LINKS, keyrank.KEPT_KEYS)
        keyrank.COLUMNS_MIN_LINKS, keyrank.KEPT_KEYS = 1, 2
        super().__init__()

    def teardown(self) -> None:
        keyrank.COLUMNS_MIN_LINKS, keyrank.KEPT_KEYS = self._saved
        super().teardown()


BOUNDED = settings(
    max_examples=20,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestStoreVersusModel = StoreVersusModel.TestCase
TestStoreVersusModel.settings = BOUNDED
TestFastRules = FastRules.TestCase
TestFastRules.settings = BOUNDED
TestKeyColumns = KeyColumns.TestCase
TestKeyColumns.settings = BOUNDED


# -- what the model found, each as a plain test ---------------------------------------------


def _store(home: Path, clock: Clock | None = None) -> Store:
    return Store(
        Settings(home=home, embedder="hash", threshold_overrides=NO_MERGES),
        embedder=HashEmbedder(),
        clock=clock or Clock(),
    )


def test_correct_without_keys_starts_the_new_links_afresh(tmp_path: Path) -> None:
    """A correction starts the new version afresh (depth 0, links at 1.0) whether its keys are
    given or kept from the old version: what reading built up stays with the old version."""
    with _store(tmp_path / "s") as store:
        old = store.remember("The meeting is on Monday", keys=["meeting"])
        key_id = old.keys[0].key_id
        store.read_memory(old.memory_id, via_key_id=key_id)  # old link 1.0 -> 1.1
        new = store.correct(old.memory_id, "The meeting is on Tuesday")  # keys kept
        [summary] = store.list_memories().memories
        assert summary.memory_id == new.memory_id and summary.depth == 0.0
        assert [(k.key_id, k.weight) for k in summary.keys] == [(key_id, 1.0)]
        # the old version keeps the weight its read earned
        assert [k.weight for k in store.read_memory(old.memory_id).keys] == [1.1]


def test_a_duplicate_keeps_the_weights_reading_earned(tmp_path: Path) -> None:
    """The same fact told again keeps what reading built up: depth, reads and the weight of
    every link of the old version, the keys it names again included (not reset to 1.0)."""
    with _store(tmp_path / "s") as store:
        old = store.remember("The user drinks green tea", keys=["tea", "morning"])
        tea, morning = (k.key_id for k in old.keys)
        store.read_memory(old.memory_id, via_key_id=tea)  # tea 1.0 -> 1.1
        store.read_memory(old.memory_id, via_key_id=morning)  # morning 1.0 -> 1.1
        again = store.remember("The user drinks green tea", keys=["tea"])
        assert again.deduplicated is not None and again.deduplicated.memory_id == old.memory_id
        [summary] = store.list_memories().memories
        assert summary.memory_id == again.memory_id
        assert (summary.depth, summary.access_count) == (0.1, 2)
        assert {k.key_id: k.weight for k in summary.keys} == {tea: 1.1, morning: 1.1}
