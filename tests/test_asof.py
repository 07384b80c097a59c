"""as_of: every read as of a past point equals the same read on a fresh store replayed from the
log up to that point (memories forgotten by now hidden there too); past reads write nothing;
bad points are refused; snapshots are caches."""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keytrail.core import (
    HashEmbedder,
    InvalidInput,
    KeytrailError,
    NotFound,
    Settings,
    Store,
    timetravel,
)
from keytrail.core.config import Limits
from keytrail.core.timetravel import TimeView, read_memory_at, view
from keytrail.events import EventLog, encode_line
from keytrail.events.log import segment_name
from keytrail.projections import snapshot as snapshots

T0 = datetime(2025, 6, 1, 12, 0, 0, 250000, tzinfo=UTC)
KEYS = ["apple", "fruit", "Newton", "gravity", "tea", "Seoul", "city"]
CONTENTS = [
    "Newton saw an apple fall from a tree",
    "The user likes strawberries and apples",
    "The user drinks green tea every morning",
    "The user lives in Seoul, a big city",
]
QUERIES = ["apple", "Newton and gravity", "what does the user drink", "Seoul"]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def open_at(home: Path, clock: Callable[[], datetime], snapshot_every: int = 10_000) -> Store:
    return Store(
        Settings(home=home, embedder="hash", snapshot_every=snapshot_every, limits=Limits()),
        embedder=HashEmbedder(),
        clock=clock,
    )


op = st.one_of(
    st.tuples(
        st.just("remember"),
        st.integers(0, len(CONTENTS) - 1),
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
        st.sampled_from([None, "work"]),
        st.sampled_from([None, None, 3600]),
    ),
    st.tuples(st.just("correct"), st.integers(0, 50), st.integers(0, len(CONTENTS) - 1)),
    st.tuples(st.just("replace"), st.integers(0, 50), st.integers(0, len(CONTENTS) - 1)),
    st.tuples(st.just("read"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("forget"), st.integers(0, 50)),
    st.tuples(st.just("tick"), st.integers(1, 7200)),
    st.tuples(st.just("cleanup")),
    st.tuples(st.just("reopen")),
)


def play(store: Store, clock: Clock, ops: list[tuple[Any, ...]], every: int) -> Store:
    ids: list[str] = []
    for n, item in enumerate(ops):
        clock.now += timedelta(seconds=1, microseconds=n)
        try:
            if item[0] == "remember":
                _, c, keys, ns, ttl = item
                r = store.remember(
                    f"{CONTENTS[c]} ({n})",
                    keys,
                    {k: "name" for k in keys if k in ("Newton", "Seoul")} or None,
                    namespace=ns,
                    ttl_seconds=ttl,
                    related_to=ids[-1:] or None,
                )
                ids.append(r.memory_id)
            elif item[0] == "correct" and ids:
                r2 = store.correct(ids[item[1] % len(ids)], f"{CONTENTS[item[2]]} v{n}")
                ids.append(r2.memory_id)
            elif item[0] == "replace" and ids:  # told anew, then made the stale one's version
                stale = store.state.memories[ids[item[1] % len(ids)]]
                r3 = store.remember(f"{CONTENTS[item[2]]} r{n}", ["tea"], namespace=stale.namespace)
                ids.append(r3.memory_id)
                store.correct(stale.id, by_memory_id=r3.memory_id)
            elif item[0] == "read" and ids:
                node = store.state.memories[ids[item[1] % len(ids)]]
                store.read_memory(node.id, node.keys[0] if item[2] else None, "why?")
            elif item[0] == "forget" and ids:
                store.forget(ids[item[1] % len(ids)])
            elif item[0] == "tick":
                clock.now += timedelta(seconds=item[1])
            elif item[0] == "cleanup":
                store.cleanup_expired()
            elif item[0] == "reopen":
                store.close()
                store = open_at(store.home, clock, every)
        except InvalidInput as exc:
            # Refused: reading a forgotten memory, correcting an old version. Nothing else.
            refusable = ("read", "correct", "replace", "forget")
            assert item[0] in refusable or exc.field == "related_to[0]", exc
    return store


def replayed_prefix(home: Path, seq: int, now: datetime, where: Path) -> Store:
    """A fresh store whose log is the first `seq` events of `home`'s log, read at `now`."""
    (where / "log").mkdir(parents=True)
    events = [e for e in EventLog(home).iter_new() if e.seq <= seq]
    (where / "log" / segment_name(1)).write_bytes(b"".join(encode_line(e) for e in events))
    return open_at(where, lambda: now)


def outcome(call: Callable[[], Any]) -> Any:
    try:
        result = call()
    except KeytrailError as exc:
        return ("error", type(exc).__name__, exc.message)
    if dataclasses.is_dataclass(result) and hasattr(result, "log_bytes"):
        result = dataclasses.replace(result, log_bytes=0)  # the log's size now, not then
    return result


def reads(
    queries: Any, memory_ids: list[str], key_ids: list[str], read_memory: Callable[[str], Any]
) -> list[Any]:
    out: list[Any] = [outcome(queries.memory_stats)]
    out += [outcome(lambda q=q: queries.recall(q, 5)) for q in QUERIES]
    out += [outcome(lambda ns=ns: queries.list_memories(ns)) for ns in (None, "work")]
    out += [outcome(lambda ns=ns: queries.browse_keys(ns)) for ns in (None, "work")]
    for key_id in key_ids:
        out.append(outcome(lambda k=key_id: queries.read_key(k)))
        out.append(outcome(lambda k=key_id: queries.read_key(k, "apple", "default")))
    for memory_id in memory_ids:
        out.append(outcome(lambda m=memory_id: queries.related(m)))
        out.append(outcome(lambda m=memory_id: read_memory(m)))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, min_size=3, max_size=18),
    every=st.integers(2, 12),
    picks=st.lists(st.floats(0, 1), min_size=1, max_size=3),
    by_time=st.booleans(),
)
def test_as_of_equals_a_fresh_replay_of_the_log_prefix(
    ops: list[tuple[Any, ...]], every: int, picks: list[float], by_time: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clock = Clock()
        first = ("remember", 0, ["apple", "Newton"], None, None)
        store = play(open_at(root / "store", clock, every), clock, [first, *ops], every)
        clock.now += timedelta(seconds=1)
        head = store.refresh()
        assert head.memories, "the sequence remembered nothing"
        memory_ids = list(head.memories)
        key_ids = list(head.keys)
        events = EventLog(store.home).read_new()
        log_before = b"".join(p.read_bytes() for p in sorted(store.log.dir.glob("*.jsonl")))
        for i, pick in enumerate(picks):
            seq = 1 + round(pick * (head.seq - 1))
            if by_time:
                # A moment between this event and the next: the prefix is every event up to it.
                point: int | str = (events[seq - 1].at + timedelta(microseconds=1)).isoformat()
                now = events[seq - 1].at + timedelta(microseconds=1)
                seq = max(e.seq for e in events if e.at < now)
            else:
                point, now = seq, events[seq - 1].at
            if i % 2:
                store.past._cache.clear()
            past = view(store, point)
            fresh = replayed_prefix(store.home, seq, now, root / f"fresh{i}")
            got = reads(
                past,
                memory_ids,
                key_ids,
                lambda m, p=point: read_memory_at(store, m, as_of=p),  # type: ignore[misc]
            )
            # The prefix alone, except that what is forgotten by now stays hidden then too.
            then = TimeView(fresh, fresh.refresh(), fresh.clock(), forgotten_by=head)
            want = reads(then, memory_ids, key_ids, then.read_memory)
            assert got == want, f"as_of {point!r} (seq {seq} of {head.seq})"
            shutil.rmtree(root / f"fresh{i}")
        # Reading the past appended nothing and reinforced nothing.
        assert b"".join(p.read_bytes() for p in sorted(store.log.dir.glob("*.jsonl"))) == (
            log_before
        )
        assert store.refresh().seq == head.seq
        store.close()


# -- reading the past writes nothing -----------------------------------------------------------


def test_read_memory_as_of_records_no_read_and_reinforces_nothing(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    r = store.remember("The user likes green tea", ["tea", "drinks"])
    key_id = store.state.memories[r.memory_id].keys[0]
    store.read_memory(r.memory_id, key_id)
    seq = store.state.seq
    weight = store.state.keys[key_id].links[r.memory_id]
    past = read_memory_at(store, r.memory_id, key_id, "tea?", as_of=seq - 1)
    assert past.depth == 0.0 and past.access_count == 0  # as it was before the read
    now = read_memory_at(store, r.memory_id, key_id, as_of=seq)
    assert now.depth == pytest.approx(0.05) and now.seq is None
    assert store.refresh().seq == seq  # nothing appended
    assert store.state.memories[r.memory_id].access_count == 1
    assert store.state.keys[key_id].links[r.memory_id] == weight
    # without as_of the read is an ordinary one: recorded
    assert read_memory_at(store, r.memory_id).seq == seq + 1


def test_as_of_before_a_replacement_shows_both_versions_as_they_were(
    make_store: Callable[..., Store],
) -> None:
    """correct(by_memory_id=...) as of before it: both memories current, as told; after it
    (and now): only the new version, the stale one superseded by it."""
    store = make_store()
    stale = store.remember("Dana's daughter Mia is 6 years old.", ["Mia"], {"Mia": "name"})
    fresh = store.remember("Dana's daughter Mia is 7 years old.", ["Mia"], {"Mia": "name"})
    store.read_memory(stale.memory_id)
    before = store.state.seq
    store.correct(stale.memory_id, by_memory_id=fresh.memory_id)
    mia = store.state.memories[stale.memory_id].keys[0]

    def shown(as_of: int | None) -> list[str]:
        return [m.memory_id for m in view(store, as_of).read_key(mia).memories]

    assert sorted(shown(before)) == sorted([stale.memory_id, fresh.memory_id])
    then = read_memory_at(store, stale.memory_id, as_of=before)
    assert (then.status, then.superseded_by, then.depth) == ("active", None, 0.05)
    assert read_memory_at(store, fresh.memory_id, as_of=before).supersedes is None
    assert shown(before + 1) == shown(None) == [fresh.memory_id]
    old = read_memory_at(store, stale.memory_id, as_of=before + 1)
    assert (old.status, old.superseded_by) == ("superseded", fresh.memory_id)
    assert old.depth == pytest.approx(0.05 * 0.3)
    assert read_memory_at(store, fresh.memory_id, as_of=before + 1).supersedes == stale.memory_id


def test_read_memory_as_of_refuses_what_a_live_read_refuses(
    make_store: Callable[..., Store],
) -> None:
    """A past read checks namespace and via key exactly as a live one: a key that is not linked
    to the memory (then), an unknown key and another namespace are refused, the same way."""
    store = make_store()
    tea = store.remember("The user likes green tea", ["tea", "drinks"])
    city = store.remember("The user lives in Seoul", ["Seoul", "city"], namespace="work")
    seq = store.state.seq
    tea_key = store.state.memories[tea.memory_id].keys[0]
    seoul_key = store.state.memories[city.memory_id].keys[0]
    refusals = [
        (tea.memory_id, seoul_key, None, InvalidInput, "no link to memory"),
        (tea.memory_id, "k_0000000000", None, NotFound, "via_key_id"),
        (city.memory_id, None, "default", NotFound, "not in namespace 'default'"),
    ]
    for memory_id, via, namespace, error, says in refusals:
        for as_of in (None, seq):  # live, then the same store as of its head
            with pytest.raises(error, match=says):
                read_memory_at(store, memory_id, via, namespace=namespace, as_of=as_of)
    assert store.refresh().seq == seq  # refused live reads recorded nothing either
    assert read_memory_at(store, tea.memory_id, tea_key, as_of=seq).memory_id == tea.memory_id


def test_a_past_read_of_what_came_later_says_so(make_store: Callable[..., Store]) -> None:
    # read_memory, read_key and related as of a point before an id existed say why there is
    # nothing; an id that never existed gets the plain answer.
    store = make_store()
    store.remember("Newton saw an apple fall", ["Newton", "apple"])
    seq = store.state.seq
    later = store.remember("Tea is brewed with hot water", ["tea"])
    past = view(store, seq)
    calls: list[Callable[[], object]] = [
        lambda: read_memory_at(store, later.memory_id, as_of=seq),
        lambda: past.read_key(later.keys[0].key_id),
        lambda: past.related(later.memory_id),
    ]
    for call in calls:
        with pytest.raises(NotFound, match="not at that point in time"):
            call()
    for call in (
        lambda: read_memory_at(store, "m_000000000000", as_of=seq),
        lambda: past.read_key("k_0000000000"),
        lambda: past.related("m_000000000000"),
    ):
        with pytest.raises(NotFound) as caught:
            call()
        assert "point in time" not in str(caught.value)


def test_a_past_read_through_a_key_made_later_says_so(make_store: Callable[..., Store]) -> None:
    # read_memory as of a point before its via key existed: the key came later, as read_key of
    # that key says; a key that never existed gets the plain answer.
    store = make_store()
    apple = store.remember("Newton saw an apple fall", ["apple"])
    seq = store.state.seq
    fruit = store.remember("An apple is a fruit", ["apple", "fruit"]).keys[1].key_id
    with pytest.raises(NotFound, match="not at that point in time") as caught:
        read_memory_at(store, apple.memory_id, fruit, as_of=seq)
    assert (caught.value.field, caught.value.ident) == ("via_key_id", fruit)
    with pytest.raises(NotFound) as never:
        read_memory_at(store, apple.memory_id, "k_0000000000", as_of=seq)
    assert never.value.field == "via_key_id" and "point in time" not in str(never.value)
    assert store.refresh().seq == seq + 1  # refused past reads recorded nothing


def test_conversations_as_of_a_past_point(make_store: Callable[..., Store]) -> None:
    """Sessions and turns as they stood then; a session whose first turn came later says so,
    as an id made later does on the other reads."""
    store = make_store()
    store.record_turn("chat-1", "user", "Hi")
    seq = store.state.seq
    store.record_turn("chat-1", "assistant", "Hello")
    store.record_turn("chat-2", "user", "Later")
    past = view(store, seq)
    assert [(s.session_id, s.turns) for s in past.list_sessions().sessions] == [("chat-1", 1)]
    assert [t.content for t in past.get_conversation("chat-1").turns] == ["Hi"]
    with pytest.raises(NotFound, match="not at that point in time"):
        past.get_conversation("chat-2")
    with pytest.raises(NotFound) as never:
        past.get_conversation("chat-9")
    assert "point in time" not in str(never.value)
    assert store.list_sessions().total == 2  # the present is unchanged by reading the past


def test_keys_that_did_not_exist_yet_are_not_matched(make_store: Callable[..., Store]) -> None:
    store = make_store()
    store.remember("Newton saw an apple fall", ["Newton", "apple"], {"Newton": "name"})
    seq = store.state.seq
    store.remember("Tea is brewed with hot water", ["tea", "Darjeeling"], {"Darjeeling": "name"})
    assert [k.label for k in store.recall("Darjeeling tea").keys][:1] == ["Darjeeling"]
    past = view(store, seq).recall("Darjeeling tea")
    assert all(k.label in ("Newton", "apple") for k in past.keys + past.nearest)


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("as_of", "problem"),
    [
        (0, "outside the log"),
        (10**9, "outside the log"),
        ("yesterday", "not an ISO-8601 time"),
        ("2024-13-45T00:00:00Z", "not an ISO-8601 time"),
        (True, "not a boolean"),
        (2.5, "not float"),
        ("1990-01-01T00:00:00Z", "before the store existed"),
        ("2999-01-01T00:00:00Z", "in the future"),
    ],
)
def test_bad_as_of_is_refused_and_changes_nothing(
    make_store: Callable[..., Store], as_of: Any, problem: str
) -> None:
    store = make_store()
    store.remember("The user likes green tea", ["tea"])
    seq = store.state.seq
    with pytest.raises(InvalidInput) as err:
        view(store, as_of).recall("tea")
    assert err.value.field == "as_of" and problem in err.value.message
    assert store.refresh().seq == seq


def test_valid_time_inputs_are_checked(make_store: Callable[..., Store]) -> None:
    store = make_store()
    seq = store.state.seq
    with pytest.raises(InvalidInput) as err:
        store.remember("The user moved", ["home"], valid_from="last spring")
    assert err.value.field == "valid_from"
    with pytest.raises(InvalidInput) as err:
        view(store, None, "soon").list_memories()
    assert err.value.field == "valid_at"
    assert store.refresh().seq == seq


def test_as_of_a_time_reads_at_that_time(tmp_path: Path) -> None:
    """Expiry is judged at the as_of time: a memory with a TTL is there before, gone after."""
    clock = Clock()
    store = open_at(tmp_path / "store", clock, 2)
    clock.now += timedelta(minutes=1)
    r = store.remember("Parking spot 42 until noon", ["parking"], ttl_seconds=600)
    clock.now += timedelta(hours=2)
    store.remember("The user drinks tea", ["tea"])
    inside = (T0 + timedelta(minutes=5)).isoformat()
    after = (T0 + timedelta(minutes=30)).isoformat()
    assert [m.memory_id for m in view(store, inside).list_memories().memories] == [r.memory_id]
    assert view(store, after).list_memories().total == 0
    store.close()


def tea_then_coffee(tmp_path: Path) -> tuple[Store, Clock, str]:
    """A store told of tea, then an hour later of coffee; and a moment between the two."""
    clock = Clock()
    store = open_at(tmp_path / "store", clock, 1000)
    store.remember("The user drinks tea", ["tea"])
    clock.now += timedelta(hours=1)
    store.remember("The user drinks coffee", ["coffee"])
    return store, clock, (T0 + timedelta(minutes=5)).isoformat()


def test_a_time_that_falls_on_a_point_read_before_reads_its_kept_state(tmp_path: Path) -> None:
    """An as_of time answers from the state of the last event at or before it: a state read
    before is answered from again (with the counts kept with it), not folded anew each call."""
    store, _, moment = tea_then_coffee(tmp_path)
    past = view(store, moment)
    stats = past.memory_stats()
    assert stats.memories == 1
    again = view(store, moment)
    assert again.state is past.state is store.past.state(past.state.seq)
    assert again.memory_stats() == stats
    store.close()


def test_a_time_asked_again_is_not_folded_to_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record time read before answers from the seq it fell on, however many events come
    after it: only the first read of a time folds the log to find where it falls."""
    store, clock, moment = tea_then_coffee(tmp_path)
    first = view(store, moment).memory_stats()
    builds: list[object] = []
    real_build = store.past._build
    monkeypatch.setattr(
        store.past, "_build", lambda limit: builds.append(limit) or real_build(limit)
    )
    clock.now += timedelta(hours=1)
    store.remember("The user drinks water", ["water"])
    store.past._cache.clear()  # as if evicted: rebuilt by seq, which needs no search by time
    for _ in range(2):
        again = view(store, moment).memory_stats()
        assert (again.seq, again.memories, again.keys) == (first.seq, 1, 1)
    assert builds == [first.seq]
    # A time not read before is still folded to, and lands where it should.
    later = (T0 + timedelta(minutes=90)).isoformat()
    assert view(store, later).memory_stats().memories == 2
    assert len(builds) == 2 and isinstance(builds[1], datetime)
    store.close()


# -- snapshots are caches ------------------------------------------------------------------------


def test_snapshots_are_kept_spaced_and_listed(make_store: Callable[..., Store]) -> None:
    store = make_store(snapshot_every=3)
    for i in range(20):
        store.remember(f"fact number {i}", ["facts"])
    store.close()
    files = store.snapshot_files()
    assert files[-1] == store.snapshot_path
    seqs = [snapshots.read_header(p).seq for p in files]  # type: ignore[union-attr]
    assert seqs == sorted(seqs) and len(seqs) >= 5
    assert all(b - a >= 3 for a, b in itertools.pairwise(seqs[:-1]))


def test_kept_snapshots_stay_under_their_cap_spread_over_the_whole_log(tmp_path: Path) -> None:
    """Past `snapshot_keep` they thin out evenly instead of piling up one per interval (each
    holds the whole graph, so disk grew with the graph times the number of intervals); past
    reads still answer as a replay of that prefix does."""
    clock = Clock()
    home = tmp_path / "a"
    settings = Settings(home=home, embedder="hash", snapshot_every=3, snapshot_keep=4)
    store = Store(settings, embedder=HashEmbedder(), clock=clock)
    kept_counts = []
    for i in range(90):
        clock.now += timedelta(seconds=1)
        store.remember(f"fact number {i}", ["facts", f"topic {i % 5}"])
        kept_counts.append(store.archived_snapshots())
        if i % 10 == 9:
            store.past._snapshot_headers()  # as each past read that builds a state does
    # What is known of snapshots is of those there now, not of every one thinned out since.
    store.past._snapshot_headers()
    assert set(store.past._headers) == set(store.snapshot_files())
    store.close()
    assert max(kept_counts) <= 4 and store.archived_snapshots() == 4
    head = store.state.seq
    spacing = store.snapshot_spacing(head)
    assert spacing == -(-head // 4) > 3  # the log outgrew 4 x snapshot_every
    files = store.snapshot_files()
    seqs = [snapshots.read_header(p).seq for p in files]  # type: ignore[union-attr]
    # Spread over the whole log, not bunched at its end: no gap wider than two spacings.
    gaps = [b - a for a, b in itertools.pairwise([0, *seqs])]
    assert max(gaps) <= 2 * spacing, (seqs, spacing)

    # Past reads answer as a replay of the prefix does; one that folds a spacing or more of
    # the log would keep its state as a snapshot, but not at the cap.
    plain = tmp_path / "plain"
    shutil.copytree(home, plain)
    shutil.rmtree(plain / "cache")
    replayed = open_at(plain, clock)
    reopened = Store(settings, embedder=HashEmbedder(), clock=clock)
    key_id = reopened.state.key_for_label("facts").id  # type: ignore[union-attr]
    far = next(b - 1 for a, b in itertools.pairwise(seqs) if b - a > spacing)
    for point in (2, seqs[0] + 1, (seqs[0] + seqs[1]) // 2, far, head - 1):
        assert view(reopened, point).read_key(key_id, limit=50) == view(replayed, point).read_key(
            key_id, limit=50
        )
    assert [p.name for p in reopened.snapshot_files()] == [p.name for p in files]
    reopened.close()
    replayed.close()
    roomy = Store(
        dataclasses.replace(settings, snapshot_keep=100), embedder=HashEmbedder(), clock=clock
    )
    view(roomy, far).read_key(key_id)
    assert snapshots.archived_name(far) in [p.name for p in roomy.snapshot_files()]
    roomy.close()


def test_damaged_or_missing_snapshots_cost_time_not_answers(tmp_path: Path) -> None:
    clock = Clock()
    store = open_at(tmp_path / "a", clock, 4)
    ids = []
    for i in range(25):
        clock.now += timedelta(seconds=1)
        ids.append(store.remember(f"fact number {i}", ["facts", f"topic {i % 3}"]).memory_id)
        if i % 4 == 0:
            store.read_memory(ids[0])
    store.close()
    points = [3, 11, 17, store.state.seq - 1]
    want = [view(store, p).read_key(store.state.key_for_label("facts").id) for p in points]  # type: ignore[union-attr]
    for path in store.snapshot_files()[::2]:
        path.write_bytes(b"\x00\x00\x00\x05garbage")
    store.snapshot_files()[1].unlink()
    again = open_at(tmp_path / "a", clock, 4)
    key_id = again.state.key_for_label("facts").id  # type: ignore[union-attr]
    assert [view(again, p).read_key(key_id) for p in points] == want
    again.close()


def test_past_vectors_are_the_rows_of_what_existed_then(make_store: Callable[..., Store]) -> None:
    """Labels and contents embedded since are cut off; earlier rows are shared, not re-embedded."""
    store = make_store()
    store.remember("Newton saw an apple fall", ["Newton", "apple"], {"Newton": "name"})
    seq = store.state.seq
    store.remember("Tea is brewed with hot water", ["tea", "water"])
    past = view(store, seq)
    assert isinstance(past, TimeView)
    assert past.memory_vectors().ids == list(past.state.memories)
    assert len(past.memory_vectors()) == 1 and len(store.memory_vectors()) == 2
    assert sorted(set(past.key_vectors().ids)) == sorted(past.state.keys)
    assert past.key_vectors().matrix.base is store.key_vectors().matrix.base


def test_remember_batch_takes_valid_from_per_item(make_store: Callable[..., Store]) -> None:
    from keytrail.core import RememberItem

    store = make_store()
    seq = store.state.seq
    with pytest.raises(InvalidInput) as err:
        store.remember_batch(
            [
                RememberItem("a", ["x"], valid_from="2020-01-01"),
                RememberItem("b", ["y"], valid_from="?"),
            ]
        )
    assert err.value.field == "items[1].valid_from" and store.refresh().seq == seq
    out = store.remember_batch(
        [RememberItem("The user was born in Lyon", ["birth"], valid_from="1990-05-04T00:00:00Z")]
    )
    node = store.state.memories[out[0].memory_id]
    assert node.valid_from == datetime(1990, 5, 4, tzinfo=UTC)
    assert view(store, None, "1991-01-01").list_memories().total == 1
    assert view(store, None, "1989-01-01").list_memories().total == 0


def test_a_long_tail_leaves_a_snapshot_for_the_next_past_read(tmp_path: Path) -> None:
    clock = Clock()
    store = open_at(tmp_path / "s", clock, 10**6)  # the writer never snapshots on the way
    for i in range(20):
        clock.now += timedelta(seconds=1)
        store.remember(f"fact number {i}", ["facts"])
    store.close()
    assert [p.name for p in store.snapshot_files()] == ["keygraph.msgpack"]
    reader = open_at(tmp_path / "s", clock, 5)
    key_id = reader.state.key_for_label("facts").id  # type: ignore[union-attr]
    first = view(reader, 12).read_key(key_id)
    assert snapshots.archived_name(12) in [p.name for p in reader.snapshot_files()]
    reader.past._cache.clear()
    assert view(reader, 12).read_key(key_id) == first  # now loaded from the kept snapshot
    assert view(reader, 14).read_key(key_id).total == first.total + 2
    reader.close()


def test_as_of_before_the_store_points_to_valid_at(make_store: Callable[..., Store]) -> None:
    """An agent asked "where did Dana live in 2023?" follows the instructions' as_of and got
    only "before the store existed": the error now names valid_at, which answers that."""
    store = make_store()
    store.remember("Dana lives in Lyon", ["Dana"], valid_from="2020-01-01T00:00:00Z")
    with pytest.raises(InvalidInput) as err:
        view(store, "2023-01-01T00:00:00Z").recall("Dana")
    assert "before the store existed" in err.value.message
    assert "valid_at" in err.value.message
    dana = store.state.key_for_label("Dana")
    assert dana is not None
    then = view(store, valid_at="2023-01-01T00:00:00Z").read_key(dana.id)
    assert [m.memory_id for m in then.memories] == list(store.state.memories)


def test_a_past_read_answers_where_its_state_cannot_be_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A past read that folds a long tail keeps its state as a snapshot: only a shortcut. On a
    store that cannot be written (a read-only backup) or a full disk, `list --as-of` failed
    with "cannot write", though it said such a store answers it."""
    import errno

    clock = Clock()
    home = tmp_path / "s"
    store = open_at(home, clock, 4)
    for i in range(30):
        clock.now += timedelta(seconds=1)
        store.remember(f"fact number {i}", ["facts"])
    store.close()
    shutil.rmtree(home / "cache")  # no snapshot to start from: a past read folds it all
    plain = open_at(home, clock, 10**9)  # folds without keeping
    want = view(plain, 25).list_memories(limit=50)
    plain.close()
    shutil.rmtree(home / "cache")

    def refused(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    reader = open_at(home, clock, 4)
    monkeypatch.setattr(snapshots, "save", refused)
    assert view(reader, 25).list_memories(limit=50) == want
    assert snapshots.archived_name(25) not in [p.name for p in reader.snapshot_files()]
    monkeypatch.undo()
    reader.past._cache.clear()
    assert view(reader, 25).list_memories(limit=50) == want  # and kept, once it can be
    assert snapshots.archived_name(25) in [p.name for p in reader.snapshot_files()]


def test_past_states_kept_in_memory_are_bounded_by_their_size(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Bounded by count alone (4), as_of reads on a 10,500-memory store took a process from
    # 86 to 204 MB: four whole key graphs. By size, a large store keeps few, a small one many.
    store = make_store()
    for i in range(12):
        store.remember(f"fact number {i}", [f"key {i}"])  # seq 2..13, each a memory and a key
    past = store.past

    def kept() -> list[int]:
        return list(past._cache)

    # A small store: every point read is kept (up to the count).
    for seq in (3, 5, 7, 9, 11, 13):
        past.state(seq)
    assert kept() == [3, 5, 7, 9, 11, 13]
    size = {seq: timetravel.state_size(past.state(seq)) for seq in kept()}
    assert size[13] == 24 and size[7] == 12  # keys and memories

    past._cache.clear()
    monkeypatch.setattr(timetravel, "PAST_STATES_BUDGET", size[13] + size[7])
    for seq in (3, 7, 13):
        past.state(seq)
    assert kept() == [7, 13]  # 3 went first: all three did not fit
    past.state(7)  # read again: now the most recently read
    past.state(9)
    assert kept() == [7, 9]

    # One state over the budget on its own is still kept, alone: a read of that point again
    # is answered from it.
    monkeypatch.setattr(timetravel, "PAST_STATES_BUDGET", size[13] - 1)
    state = past.state(13)
    assert kept() == [13] and past.state(13) is state

    # And the count holds however small the states.
    past._cache.clear()
    monkeypatch.setattr(timetravel, "PAST_STATES_BUDGET", 10**9)
    monkeypatch.setattr(timetravel, "PAST_STATES_CACHED", 2)
    for seq in (3, 5, 7):
        past.state(seq)
    assert kept() == [5, 7]


def test_memory_stats_says_what_each_count_counts(store: Store) -> None:
    """An agent read keys 38 beside browse_keys' total 27, links that held those of superseded
    and forgotten memories, and, as of seq 7, forgotten 2 though nothing was forgotten by
    then. Each number is right by the code's meaning; the description says that meaning."""
    import anyio

    from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph
    from keytrail.server.mcp_server import build_server

    old = store.remember("The user drinks coffee", ["drinks"])
    store.correct(old.memory_id, "The user drinks tea")
    secret = store.remember("The locker code is 4412", ["locker", "code"])
    before_forget = store.state.seq
    store.forget(secret.memory_id)
    KnowledgeGraph(store).create_entities([EntityInput("Dana", "person")])
    now = store.memory_stats()
    assert (now.memories, now.superseded, now.forgotten) == (1, 1, 1)
    assert now.keys == 4 and store.browse_keys().total == 1  # drinks; not locker, code, Dana
    assert now.links == 4  # coffee's, tea's and both of the forgotten memory's
    assert view(store, before_forget).memory_stats().forgotten == 1  # forgotten since

    async def described() -> str:
        tools = await build_server(store).list_tools()
        return " ".join(
            next(t.description or "" for t in tools if t.name == "memory_stats").split()
        )

    said = anyio.run(described)
    assert "`keys` counts every key made" in said
    assert "browse_keys lists only those leading to current memories" in said
    assert "`links` every link of a key to a memory, superseded, expired, forgotten" in said
    assert "a memory forgotten since counts as forgotten" in said
