"""Periods a query names, and recall_memories raising memories of that period."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from keytrail.core import HashEmbedder, InvalidInput, Settings, Store
from keytrail.core.config import zone_info
from keytrail.core.when import named_periods

NOW = datetime(2023, 10, 20, 12, tzinfo=UTC)


def days(query: str) -> list[tuple[str, str]]:
    return [(a.date().isoformat(), b.date().isoformat()) for a, b in named_periods(query, NOW)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What did Gina find on 1 February, 2023?", [("2023-02-01", "2023-02-02")]),
        ("What did she show on October 13, 2023?", [("2023-10-13", "2023-10-14")]),
        ("the meeting on 2023-03-04", [("2023-03-04", "2023-03-05")]),
        ("their project in July 2023", [("2023-07-01", "2023-08-01")]),
        ("trips in 2022", [("2022-01-01", "2023-01-01")]),
        # no year: the latest such period that began by now
        ("camping in June", [("2023-06-01", "2023-07-01")]),
        ("what happened in December?", [("2022-12-01", "2023-01-01")]),
        ("Jan 5 plans", [("2023-01-05", "2023-01-06")]),
        ("in May", [("2023-05-01", "2023-06-01")]),
        ("I may go; May I?", []),  # the verb, not the month
        ("nothing dated here, just 42 apples", []),
        ("on 31 June", []),  # no such day
    ],
)
def test_named_periods(query: str, expected: list[tuple[str, str]]) -> None:
    assert days(query) == expected


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_a_named_date_raises_memories_of_that_day(tmp_path: Path) -> None:
    clock = Clock(datetime(2023, 2, 1, 15, tzinfo=UTC))
    store = Store(Settings(home=tmp_path, embedder="hash"), embedder=HashEmbedder(), clock=clock)
    try:
        first = store.remember("Gina met a supplier for her clothing store", ["store"])
        clock.now = datetime(2023, 5, 9, 10, tzinfo=UTC)
        later = store.remember("Gina met a new supplier at the trade fair", ["fair"])
        clock.now = datetime(2023, 5, 10, tzinfo=UTC)
        plain = store.recall_memories("Gina supplier", hops=0, explain=True, learn=False)
        dated = store.recall_memories(
            "Gina supplier on 1 February, 2023", hops=0, explain=True, learn=False
        )
    finally:
        store.close()
    boost = store.settings.hybrid.date_boost
    before = {m.memory_id: m for m in plain.memories}
    after = {m.memory_id: m for m in dated.memories}
    assert all(m.explain and m.explain.date_factor == 1.0 for m in plain.memories)
    told_then = after[first.memory_id].explain
    assert told_then is not None and told_then.date_factor == pytest.approx(1 + boost)
    assert after[first.memory_id].score == pytest.approx(
        before[first.memory_id].score * (1 + boost), abs=1e-5
    )
    other = after[later.memory_id].explain
    assert other is not None and other.date_factor == 1.0


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # A question opening with its period: "In" capitalised was not read as "in".
        ("In May we moved; where to?", [("2023-05-01", "2023-06-01")]),
        ("In 2022, where did she live?", [("2022-01-01", "2023-01-01")]),
        ("During May, what happened?", [("2023-05-01", "2023-06-01")]),
        ("Since 2021 what changed?", [("2021-01-01", "2022-01-01")]),
        ("May I ask what happened In June?", [("2023-06-01", "2023-07-01")]),
    ],
)
def test_a_period_opening_a_sentence_is_read(query: str, expected: list[tuple[str, str]]) -> None:
    assert days(query) == expected


@pytest.mark.parametrize(("zone", "raised"), [("Europe/Berlin", True), ("UTC", False)])
def test_a_day_named_in_a_query_is_a_day_of_the_configured_zone(
    tmp_path: Path, zone: str, raised: bool
) -> None:
    # 00:30 on 1 March in Berlin is 23:30 UTC on 28 February: "on 1 March" means the
    # user's day, so with KEYTRAIL_TIME_ZONE=Europe/Berlin it raises the memory; read in
    # UTC (the default) it does not.
    clock = Clock(datetime(2023, 3, 10, tzinfo=UTC))
    settings = Settings(home=tmp_path, embedder="hash", time_zone=zone)
    store = Store(settings, embedder=HashEmbedder(), clock=clock)
    try:
        dated = store.remember(
            "Gina met a supplier for her clothing store",
            ["store"],
            valid_from="2023-03-01T00:30:00+01:00",
        )
        found = store.recall_memories(
            "Gina supplier on 1 March, 2023", hops=0, explain=True, learn=False
        )
    finally:
        store.close()
    explained = {m.memory_id: m.explain for m in found.memories}[dated.memory_id]
    assert explained is not None and (explained.date_factor > 1.0) is raised


def test_periods_are_calendar_periods_of_the_zone_across_a_dst_change() -> None:
    now = datetime(2023, 6, 1, tzinfo=UTC)
    berlin = zone_info("Europe/Berlin")
    # 26 March 2023: clocks went forward in Berlin, so that day is 23 hours long
    [(start, end)] = named_periods("on 26 March, 2023", now, berlin)
    assert (start, end) == (
        datetime(2023, 3, 25, 23, tzinfo=UTC),
        datetime(2023, 3, 26, 22, tzinfo=UTC),
    )
    # a month, a year and a date without a year are the zone's too
    [(start, end)] = named_periods("in March 2023", now, berlin)
    assert (start, end) == (
        datetime(2023, 2, 28, 23, tzinfo=UTC),
        datetime(2023, 3, 31, 22, tzinfo=UTC),
    )
    [(start, _)] = named_periods("in 2023", now, berlin)
    assert start == datetime(2022, 12, 31, 23, tzinfo=UTC)
    [(start, _)] = named_periods("on 2023-07-04", now, zone_info("America/New_York"))
    assert start == datetime(2023, 7, 4, 4, tzinfo=UTC)
    # "the latest one that started by now" is judged by the zone's calendar: at 23:30 UTC on
    # 31 May it is already 1 June in Berlin, so "1 June" is this year's
    late = datetime(2023, 5, 31, 23, 30, tzinfo=UTC)
    [(start, _)] = named_periods("on 1 June", late, berlin)
    assert start == datetime(2023, 5, 31, 22, tzinfo=UTC)
    [(start, _)] = named_periods("on 1 June", late)
    assert start == datetime(2022, 6, 1, tzinfo=UTC)


def test_an_unknown_time_zone_is_refused_naming_the_variable() -> None:
    with pytest.raises(InvalidInput, match="KEYTRAIL_TIME_ZONE"):
        Settings.from_env({"KEYTRAIL_TIME_ZONE": "Mars/Olympus_Mons"})
    assert Settings.from_env({"KEYTRAIL_TIME_ZONE": "Asia/Tokyo"}).time_zone == "Asia/Tokyo"


# A bare year or a month name that is also a word or a name is read only in date context: a
# preposition of time, last/next/this, a day number, or a month before "of <year>".
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # years in date context
        ("what happened in 2019?", [("2019-01-01", "2020-01-01")]),
        ("In 2020 Gina moved to Oslo", [("2020-01-01", "2021-01-01")]),
        ("in 2021 we moved", [("2021-01-01", "2022-01-01")]),
        ("before 2020, where did she work?", [("2020-01-01", "2021-01-01")]),
        ("after 2018 the team grew", [("2018-01-01", "2019-01-01")]),
        ("until 2017", [("2017-01-01", "2018-01-01")]),
        ("from 2019 to now", [("2019-01-01", "2020-01-01")]),
        ("from 2019 to 2021", [("2019-01-01", "2020-01-01"), ("2021-01-01", "2022-01-01")]),
        ("between 2019 and 2020?", [("2019-01-01", "2020-01-01"), ("2020-01-01", "2021-01-01")]),
        ("in 2018, 2019 or 2020", [(f"{y}-01-01", f"{y + 1}-01-01") for y in (2018, 2019, 2020)]),
        ("at the end of 2020", [("2020-01-01", "2021-01-01")]),
        ("the summer of 2019", [("2019-01-01", "2020-01-01")]),
        ("What state did Joanna visit in summer 2021?", [("2021-01-01", "2022-01-01")]),
        ("in mid-2022", [("2022-01-01", "2023-01-01")]),
        ("March of 2020", [("2020-03-01", "2020-04-01")]),
        # months in date context
        ("on 3 March", [("2023-03-03", "2023-03-04")]),
        ("March 3rd", [("2023-03-03", "2023-03-04")]),
        ("the 5th of June", [("2023-06-05", "2023-06-06")]),
        ("in March", [("2023-03-01", "2023-04-01")]),
        ("since April", [("2023-04-01", "2023-05-01")]),
        ("until August", [("2023-08-01", "2023-09-01")]),
        ("in Jan", [("2023-01-01", "2023-02-01")]),
        ("in Sept", [("2023-09-01", "2023-10-01")]),
        ("mid-June", [("2023-06-01", "2023-07-01")]),
        ("at the end of June", [("2023-06-01", "2023-07-01")]),
        ("from March to July", [("2023-03-01", "2023-04-01"), ("2023-07-01", "2023-08-01")]),
        ("what did she do in October?", [("2023-10-01", "2023-11-01")]),
        ("November plans", [("2022-11-01", "2022-12-01")]),  # unambiguous: read bare
        ("December's party", [("2022-12-01", "2023-01-01")]),
        # last / next / this, judged from now (20 October 2023)
        ("last March", [("2023-03-01", "2023-04-01")]),
        ("last October", [("2022-10-01", "2022-11-01")]),
        ("last December", [("2022-12-01", "2023-01-01")]),
        ("next March", [("2024-03-01", "2024-04-01")]),
        ("next November", [("2023-11-01", "2023-12-01")]),
        ("this May", [("2023-05-01", "2023-06-01")]),
        ("this December", [("2023-12-01", "2024-01-01")]),
        # a count, a measure or an adjective, not a year
        ("of 2000 people", []),
        ("in 2000 ways", []),
        ("in 2000 km", []),
        ("2000 km", []),
        ("1999 dollars", []),
        ("since 1999 dollars were spent", []),
        ("before 2000 people arrived", []),
        ("a 2020 census", []),
        ("the 2020 census", []),
        ("the 2000 people", []),
        ("between 2000 and 2500 people", []),
        ("in 2000 to 2020 ways", []),
        ("one of 2019", []),
        # a name or a word, not a month
        ("of Jan's dog", []),
        ("a friend of Jan's", []),
        ("2 of Jan's dogs", []),
        ("in June's garden", []),
        ("June's wedding", []),
        ("May I ask?", []),
        ("March on!", []),
        ("a gift from June", []),
        ("a letter from May", []),
        ("painted by April", []),
        ("a friend of August", []),
        ("April said hi", []),
        ("August is my cousin", []),
    ],
)
def test_only_dates_in_date_context_are_read(query: str, expected: list[tuple[str, str]]) -> None:
    assert days(query) == expected


def test_a_count_in_a_query_raises_no_memory_of_that_year(tmp_path: Path) -> None:
    # "a crowd of 2000 people" read "of 2000" as the year 2000 and raised what was told then.
    clock = Clock(datetime(2023, 5, 10, tzinfo=UTC))
    store = Store(Settings(home=tmp_path, embedder="hash"), embedder=HashEmbedder(), clock=clock)
    try:
        store.remember("The marathon drew a big crowd", ["marathon"], valid_from="2000-06-01")
        store.remember("The concert drew a big crowd", ["concert"])
        counted = store.recall_memories(
            "which event drew a crowd of 2000 people?", hops=0, explain=True, learn=False
        )
        dated = store.recall_memories(
            "which event drew a crowd in 2000?", hops=0, explain=True, learn=False
        )
    finally:
        store.close()
    assert counted.memories
    assert all(m.explain and m.explain.date_factor == 1.0 for m in counted.memories)
    assert any(m.explain and m.explain.date_factor > 1.0 for m in dated.memories)
