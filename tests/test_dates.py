"""Relative dates resolved against the line's date (issue 20.3), with the real dateparser."""

from __future__ import annotations

import pytest

from amb_dspy.memory.dates import parse_date, resolve, resolve_dates, stamp_of

SAID = "[1:56 pm on 8 May, 2023] Caroline: "  # a Monday


@pytest.mark.parametrize(("expression", "absolute"), [
    ("yesterday", "7 May 2023"),
    ("three days ago", "5 May 2023"),
    ("3 days ago", "5 May 2023"),
    ("last week", "the week of 1 May 2023"),
    ("next month", "June 2023"),
    ("two years ago", "2021"),
    ("last Friday", "5 May 2023"),
    ("in two weeks", "the week of 22 May 2023"),
    ("last weekend", "the weekend of 6 May 2023"),
    ("the day before yesterday", "6 May 2023"),
    ("tomorrow", "9 May 2023"),
    ("last year", "2022"),
])
def test_each_expression_of_the_issue_resolves_against_the_line_date(expression, absolute):
    line = f"{SAID}I saw it {expression}, honestly."
    ((start, end, found),) = resolve_dates(line)
    assert line[start:end].lower() == expression.lower() and found == absolute


def test_every_line_uses_its_own_stamp_and_plain_lines_use_the_default():
    text = f"{SAID}We met yesterday.\n\n[10:00 am on 1 June, 2023] Mel: A month ago? No, three days ago.\nNo stamp, yesterday."
    found = [(text[a:b], date) for a, b, date in resolve_dates(text)]
    assert found == [("yesterday", "7 May 2023"), ("A month ago", "May 2023"), ("three days ago", "29 May 2023")]
    with_default = resolve_dates("No stamp, yesterday.", default="29 April 2023")
    assert [d for *_, d in with_default] == ["28 April 2023"]


def test_the_stamp_itself_and_words_that_only_look_like_dates_are_left_alone():
    assert stamp_of(SAID) == "1:56 pm on 8 May, 2023" and stamp_of("no stamp") == ""
    assert parse_date("1:56 pm on 8 May, 2023").isoformat() == "2023-05-08"
    assert parse_date("hello there") is None
    line = f"{SAID}I may march on today's plans."
    assert resolve_dates(line) == [(line.index("today"), line.index("today") + 5, "8 May 2023")]  # not "may", "march"
    assert resolve_dates("[today] Bob: nothing dated here") == []  # a stamp that is not a date gives no base


def test_resolution_is_deterministic_and_independent_of_the_clock():
    text = f"{SAID}Two years ago I moved; next month I move again."
    assert resolve_dates(text) == resolve_dates(text) == [(len(SAID), len(SAID) + 13, "2021"),
                                                          (len(SAID) + 23, len(SAID) + 33, "June 2023")]
    resolve.cache_clear()
    assert resolve_dates(text)[1][2] == "June 2023"
