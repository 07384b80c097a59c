"""Periods a query names ("on 1 February, 2023", "in July", "in 2023"), for time-aware recall.

"What did we decide on 12 March?" asks about memories of that day, whatever their words. Only
explicit calendar mentions count: a day (with month and year, or month alone), a month (with
or without a year), a year, or an ISO date. Month names must be capitalised ("May", not the
verb "may"), and "May" alone only after "in", "during", "since" or "of" (the lead word in any
case: "In May, ..."). A period without a year is the latest one that started by `now`.
Relative phrases ("last week") are left alone. Periods are calendar periods of a time zone
(`KEYTRAIL_TIME_ZONE`, default UTC): "1 March" in Europe/Berlin starts at 23:00 UTC on 28
February.
"""

from __future__ import annotations

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
_MONTH = r"(?P<month>" + "|".join([*MONTHS, *(f"{a}\\.?" for a in _ABBREVIATIONS)]) + r")"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_PATTERNS = [
    re.compile(r"\b(?P<iso>(?:19|20)\d\d-[01]\d-[0-3]\d)\b"),
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b"),
    re.compile(rf"\b{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b"),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b"),
    # The lead word in any case: a question may open with it ("In May, ...").
    re.compile(rf"(?:\b(?i:in|during|since|of|early|late|mid)\s+){_MONTH}\b"),
    re.compile(rf"\b(?P<bare>{'|'.join(m for m in MONTHS if m != 'May')})\b"),
    re.compile(rf"\b(?i:in|during|since|of)\s+{_YEAR}\b"),
]


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
    for pattern in _PATTERNS:
        for match in pattern.finditer(query):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue  # part of a longer mention already read ("1 February, 2023")
            taken.append(span)  # an impossible date ("31 June") is not read as its month
            found = _period(match.groupdict(), now)
            if found is not None:
                # Wall-clock arithmetic in the zone (a day of a DST change is 23 or 25 hours),
                # then the instants.
                periods.append((found[0].astimezone(UTC), found[1].astimezone(UTC)))
    return periods


def _period(groups: dict[str, str | None], now: datetime) -> tuple[datetime, datetime] | None:
    iso, year_text, day_text = groups.get("iso"), groups.get("year"), groups.get("day")
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
        else:
            start = _latest_start(month, day, now)
    except ValueError:  # 31 June, 00 March
        return None
    if day is not None:
        return start, start + timedelta(days=1)
    return start, _next_month(start)
