"""Relative dates resolved against the date a line was said: "three days ago" said on 29 April 2023 is 26 April.

A line of a dialogue or a log starts with its stamp (``[1:56 pm on 8 May, 2023] Caroline: ...``, as
``optimize.locomo`` renders a turn); an entry's metadata may also give one date for the whole text
(``metadata["date"]``). :func:`resolve_dates` finds the relative expressions of each line -- "yesterday",
"three days ago", "last week", "next month", "two years ago", "last Friday", "in two weeks" -- and resolves
each against its line's date with ``dateparser`` (its ``RELATIVE_BASE`` setting), which does the calendar
arithmetic and reads number words; a regular expression only finds where the expressions are, because
``dateparser.search`` also takes words like "may" or "march on" for dates. The result is written at the
precision the expression has: a day ("7 May 2023"), a week ("the week of 1 May 2023"), a month
("April 2023") or a year ("2021"). Nothing depends on the clock or the locale: the same text gives the same
dates on every run.

Why dateparser: maintained (1.5, 2026), reads "two years ago" and "next month" as written, and resolves
against a given base date; parsedatetime does the same arithmetic but has had no release since 2020.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from functools import lru_cache

_NUMBER = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of|couple of|\d+)"
_UNIT = r"(?:day|week|month|year)s?"
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_RELATIVE = re.compile(
    rf"\b(?:the day before yesterday|the day after tomorrow|yesterday|tomorrow|tonight|today|last night"
    rf"|(?:last|next|this|past) (?:week(?:end)?|month|year|{_WEEKDAY})"
    rf"|{_NUMBER} {_UNIT} (?:ago|from now|later)"
    rf"|in {_NUMBER} {_UNIT})\b",
    re.IGNORECASE,
)
_STAMP = re.compile(r"^\s*\[([^\]\n]{4,60})\]")
_FEW = re.compile(r"\b(?:a few|a couple of|couple of)\b", re.IGNORECASE)


def stamp_of(line: str) -> str:
    """The bracketed date stamp that starts ``line`` ("" when none)."""
    match = _STAMP.match(line)
    return match.group(1) if match else ""


@lru_cache(maxsize=4096)
def parse_date(text: str) -> date | None:
    """A stamp or date text as a date ("1:56 pm on 8 May, 2023" -> 2023-05-08), None when it is not one."""
    import dateparser

    cleaned = re.sub(r"^.*?\bon\b\s+", "", text) if re.search(r"\d\s*[ap]\.?m\.?\b.*\bon\b", text, re.I) else text
    found = dateparser.parse(cleaned, languages=["en"], settings={"STRICT_PARSING": False, "DATE_ORDER": "DMY",
                                                                 "RELATIVE_BASE": datetime(2000, 1, 1)})
    if found is None or not re.search(r"\d{4}", cleaned):
        return None
    return found.date()


@lru_cache(maxsize=4096)
def resolve(expression: str, base: date) -> str:
    """``expression`` resolved against ``base``, written at its precision; "" when dateparser cannot read it."""
    import dateparser

    phrase = expression.lower()
    if phrase in ("tonight", "last night", "today"):
        return _day(base - timedelta(days=1) if phrase == "last night" else base)
    phrase = _FEW.sub("3", phrase).replace("the day before yesterday", "2 days ago").replace(
        "the day after tomorrow", "in 2 days")
    phrase = re.sub(r"^past ", "last ", phrase)
    weekday = re.fullmatch(rf"(last|next|this) ({_WEEKDAY})", phrase)
    if weekday:
        return _day(_weekday(base, weekday.group(1), weekday.group(2)))
    settings = {"RELATIVE_BASE": datetime.combine(base, datetime.min.time()), "PREFER_DATES_FROM": "past"
                if re.search(r"ago|last|yesterday", phrase) else "future"}
    found = dateparser.parse(phrase.replace("weekend", "week"), languages=["en"], settings=settings)
    if found is None:
        return ""
    day = found.date()
    if "weekend" in phrase:
        return f"the weekend of {_day(day + timedelta(days=5 - day.weekday()))}"
    if "week" in phrase:
        return f"the week of {_day(day - timedelta(days=day.weekday()))}"
    if "month" in phrase:
        return f"{day:%B} {day.year}"
    if "year" in phrase:
        return str(day.year)
    return _day(day)


def _day(day: date) -> str:
    return f"{day.day} {day:%B} {day.year}"


_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _weekday(base: date, which: str, name: str) -> date:
    """"last Friday": the latest Friday before ``base``; "next"/"this": the first one after it."""
    target = _WEEKDAYS.index(name)
    if which == "last":
        return base - timedelta(days=(base.weekday() - target - 1) % 7 + 1)
    return base + timedelta(days=(target - base.weekday() - 1) % 7 + 1)


def resolve_dates(text: str, default: str = "") -> list[tuple[int, int, str]]:
    """``(start, end, absolute date)`` of each relative date expression in ``text``, resolved against the
    stamp of its line, or ``default`` (a date text) for lines without one."""
    out: list[tuple[int, int, str]] = []
    fallback = parse_date(default) if default else None
    position = 0
    for line in text.split("\n"):
        start, position = position, position + len(line) + 1
        matches = list(_RELATIVE.finditer(line))
        if not matches:
            continue
        stamp = stamp_of(line)
        base = (parse_date(stamp) if stamp else None) or fallback
        if base is None:
            continue
        for match in matches:
            if match.start() < len(stamp) + 2 and stamp:
                continue  # inside the stamp itself
            resolved = resolve(match.group(0), base)
            if resolved:
                out.append((start + match.start(), start + match.end(), resolved))
    return out
