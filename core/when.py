"""Periods a query names ("on 1 February, 2023", "in July", "in 2023"), for time-aware recall.

"What did we decide on 12 March?" asks about memories of that day, whatever their words. Only
explicit calendar mentions count: a day (with month and year, or month alone), a month (with
or without a year), a year, or an ISO date. Month names must be capitalised ("May", not the
verb "may"). A period without a year is the latest one that started by `now`; "last March" is
the latest before the current month, "next March" the first after `now`, "this March" the one of
`now`'s year. Relative phrases ("last week") are left alone. Periods are calendar periods of a
time zone (`KEYTRAIL_TIME_ZONE`, default UTC): "1 March" in Europe/Berlin starts at 23:00 UTC on
28 February.

Numbers and names look like dates, so a bare year or an ambiguous month is read only in date
context (the lead word in any case: "In May, ..."):

- A year alone ("2020") only after a preposition of time (in, during, throughout, since, until,
  till, before, after, from; "in summer 2021" too), early/late/mid, or "end/start/summer/...
  of", with the years joined to it ("from 2019 to 2021", "between 2019 and 2020", "in 2018,
  2019 or 2020"), and never when a word follows that makes it a count ("in 2000 ways", "before
  2000 people arrived", "2000 km").
  "of 2000" is a year only after a month ("March of 2020"); "a 2020 census" is not read (the
  census is not when the memory was told).
- January, February, July, September, October, November and December are read on their own.
  March (a word), April, May, June, August and the abbreviations ("Jan" is also a name) need a
  day number, a year, or a lead word: a preposition of time, early/late/mid, last/next/this, or
  "end/start/... of". "from", "by" and a plain "of" are not enough for the month names that are
  also first names ("a gift from June", "painted by April"), and a possessive is the person's
  ("June's wedding", "of Jan's dog").
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta, tzinfo

MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "January",
            "February",
            "March",
            "April",
            "May",
            "June",
            "July",
            "August",
            "September",
            "October",
            "November",
            "December",
        ),
        1,
    )
}
_ABBREVIATIONS = {name[:3]: number for name, number in MONTHS.items() if name != "May"}
#: month names that are also first names: a possessive, "from", "by" or "of" makes them people
_NAMES = frozenset(["Jan", "April", "May", "June", "August"])
#: read with no date context at all: no other meaning a capitalised query word would have
_UNAMBIGUOUS = ["January", "February", "July", "September", "October", "November", "December"]
_MONTH = (
    r"(?P<month>" + "|".join([*MONTHS, "Sept\\.?", *(f"{a}\\.?" for a in _ABBREVIATIONS)]) + r")"
)
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
#: "the end of June", "the summer of 2019": a part of the period, read as the whole period
_PART_OF = r"(?:end|start|beginning|middle|rest|half|weeks?|days?)\s+of"
_SEASON_OF = r"(?:end|start|beginning|middle|half|summer|winter|spring|autumn|fall)\s+of"
_SEASON = r"(?i:summer|winter|spring|autumn|fall)"
_TIME_PREPOSITION = r"in|during|throughout|since|until|till|before|after|from"
# The lead word in any case: a question may open with it ("In May, ...").
_MONTH_LEAD = rf"(?P<lead>(?i:{_TIME_PREPOSITION}|by|of|early|late|mid|last|next|this|{_PART_OF}))"
_YEAR_LEAD = rf"(?P<year_lead>(?i:{_TIME_PREPOSITION}|between|early|late|mid|{_SEASON_OF}))"
#: more years joined to a year read ("from 2019 to 2021", "in 2019, 2020 and 2021")
_MORE_YEARS = r"(?P<more>(?:\s*(?:,|-|–|&|(?i:to|and|or|through|until|till))\s*(?:19|20)\d\d\b)*)"


@functools.cache
def _patterns() -> list[re.Pattern[str]]:
    """The patterns of a period's mention, tried in this order; compiled on first use: at
    import they cost every command's start (even `keytrail --help`)."""
    return [
        re.compile(r"\b(?P<iso>(?:19|20)\d\d-[01]\d-[0-3]\d)\b"),
        re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b"),
        re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b"),
        re.compile(rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b"),
        re.compile(rf"\b{_MONTH_LEAD}[\s-]+{_MONTH}\b"),
        re.compile(rf"\b(?P<bare>{'|'.join(_UNAMBIGUOUS)})\b"),
        re.compile(rf"\b{_YEAR_LEAD}[\s-]+(?:{_SEASON}\s+)?(?P<lone>{_YEAR})\b{_MORE_YEARS}"),
    ]


_POSSESSIVE_AFTER = re.compile(r"['’]s\b")
_NEXT_WORD = re.compile(r"\s*([^\W\d_][\w'’-]*)?")
#: lowercase words that may follow a year ("in 2020 we moved"); any other lowercase word makes
#: the number a count or a measure ("in 2000 ways", "2000 km")
_AFTER_YEAR_WORDS = """
    a an the and or but nor so then when while where what who whom whose which why how that
    this these those there here as at by for from in into of on onto to until till since before
    after during through throughout with without about around against among between via vs
    i we you he she they it me us him her them my our your his their its
    was were is are be been being has have had did do does will would could should can may
    might must shall also already again alone only too yet still just ever even not no onwards
    onward"""
_AFTER_YEAR = frozenset(_AFTER_YEAR_WORDS.split())


def _month_number(text: str) -> int:
    name = text.rstrip(".")
    return MONTHS.get(name) or _ABBREVIATIONS[name[:3]]


def _latest_start(month: int, day: int | None, now: datetime) -> datetime:
    """The latest date with this month (and day) that is not after `now` (29 February: up to
    four years back), in `now`'s zone. Raises ValueError for a day no month has (31 June)."""
    for year in range(now.year, now.year - 5, -1):
        try:
            start = datetime(year, month, day or 1, tzinfo=now.tzinfo)
        except ValueError:  # 29 February of a common year
            continue
        if start <= now:
            return start
    raise ValueError(f"no day {day} in month {month}")


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + (start.month == 12), month=start.month % 12 + 1, day=1)


def named_periods(query: str, now: datetime, zone: tzinfo = UTC) -> list[tuple[datetime, datetime]]:
    """[start, end) in UTC of every period the query names, read as calendar periods of `zone`,
    in the order found; [] when none."""
    now = now.astimezone(zone)
    periods: list[tuple[datetime, datetime]] = []
    taken: list[tuple[int, int]] = []
    for pattern in _patterns():
        for match in pattern.finditer(query):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue  # part of a longer mention already read ("1 February, 2023")
            if not _in_date_context(match, query):
                continue  # a count or a name; its words may still be read by a later pattern
            taken.append(span)  # an impossible date ("31 June") is not read as its month
            groups = match.groupdict()
            found = [_period(groups, now)]
            for year in re.findall(r"\d{4}", groups.get("more") or ""):
                found.append(_period({"year": year}, now))
            # Wall-clock arithmetic in the zone (a day of a DST change is 23 or 25 hours),
            # then the instants.
            periods += [(a.astimezone(UTC), b.astimezone(UTC)) for a, b in filter(None, found)]
    return periods


def _in_date_context(match: re.Match[str], query: str) -> bool:
    """Whether what `match` found is a date, not a first name or a count (module docstring)."""
    groups = match.groupdict()
    month = groups.get("month")
    if month is not None and month.rstrip(".") in _NAMES:
        if _POSSESSIVE_AFTER.match(query, match.end("month")):
            return False  # "June's wedding", "of Jan's dog"
        lead = groups.get("lead")
        if lead is not None and lead.lower() in ("from", "by", "of"):
            return False  # "a gift from June", "painted by April", "a friend of August"
    if groups.get("lone") is not None:
        if (groups.get("year_lead") or "").lower() == "between" and not groups.get("more"):
            return False  # "between 2000 and 2500 people": a range of counts
        after = _NEXT_WORD.match(query, match.end())
        word = after.group(1) if after is not None else None
        if word is not None and word.islower() and word not in _AFTER_YEAR:
            return False  # "in 2000 ways", "before 2000 people arrived"
    return True


def _period(groups: dict[str, str | None], now: datetime) -> tuple[datetime, datetime] | None:
    iso, year_text, day_text = groups.get("iso"), groups.get("year"), groups.get("day")
    lead = (groups.get("lead") or "").lower()
    month_text = groups.get("month") or groups.get("bare")
    try:
        if iso is not None:
            date = datetime.strptime(iso, "%Y-%m-%d").replace(tzinfo=now.tzinfo)
            return date, date + timedelta(days=1)
        year = int(year_text) if year_text is not None else None
        if month_text is None:
            if year is None:
                return None
            return datetime(year, 1, 1, tzinfo=now.tzinfo), datetime(
                year + 1, 1, 1, tzinfo=now.tzinfo
            )
        month = _month_number(month_text)
        day = int(day_text) if day_text is not None else None
        if year is not None:
            start = datetime(year, month, day or 1, tzinfo=now.tzinfo)
        elif lead == "this":
            start = datetime(now.year, month, 1, tzinfo=now.tzinfo)
        elif lead == "next":
            start = datetime(now.year + (month <= now.month), month, 1, tzinfo=now.tzinfo)
        elif lead == "last":  # the latest one before the current month
            current = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            start = _latest_start(month, None, current - timedelta(microseconds=1))
        else:
            start = _latest_start(month, day, now)
    except ValueError:  # 31 June, 00 March
        return None
    if day is not None:
        return start, start + timedelta(days=1)
    return start, _next_month(start)
