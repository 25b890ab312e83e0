"""Long-term memory's pure parts: redaction, the score, and merging near-duplicates."""

from __future__ import annotations

import math

import pytest

from amb_dspy.longterm import redact
from amb_dspy.longterm.merge import (
    MAX_TRAJECTORY_CHARS,
    heuristic_merge,
    merge_items,
)
from amb_dspy.longterm.scoring import (
    ScoreWeights,
    containment,
    decay,
    dice,
    hybrid_similarity,
    overlap,
    score,
    source_boost,
)
from amb_dspy.longterm.statements import numbers_disagree, sentences


@pytest.mark.parametrize("text, kind, left", [
    ("mail jane.doe+news@example.co.uk today", "email", "jane.doe"),
    ("contact: ops@lantern-festival.org.", "email", "ops@"),
    ("call +1 (415) 555-2671 now", "phone", "555-2671"),
    ("office 212.736.5000, ask for Ann", "phone", "736"),
    ("UK desk +44 20 7946 0958", "phone", "7946"),
    ("Paris +33 1 42 68 53 00", "phone", "42 68"),
    ("key sk-proj-AbCdEfGhIjKlMnOpQrStUvWx123", "secret", "sk-proj"),
    ("anthropic sk-ant-api03-abcdefghijklmnopqrstuv", "secret", "sk-ant"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "secret", "ghp_"),
    ("aws AKIAIOSFODNN7EXAMPLE here", "secret", "AKIAIOSFODNN7EXAMPLE"),
    ("google AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUvW", "secret", "AIzaSy"),
    ("slack xoxb-123456789012-abcdefABCDEF", "secret", "xoxb-"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "secret", "sk_live_"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "secret",
     "eyJhbGci"),
    ("Authorization: Bearer abcDEF123456ghiJKL789", "secret", "abcDEF123456"),
    ("api_key = 'hunter2hunter2'", "secret", "hunter2"),
    ('password: "correct-horse-battery"', "secret", "correct-horse"),
    ("blob Zk9xQ2Lm7PwRt4Vb8Nc1Hy6Js3Kd5Fg0Ae2Uo in a log", "secret", "Zk9xQ2Lm7P"),
])
def test_redacts_each_kind(text, kind, left):
    result = redact(text)
    assert left not in result.text and result.found.get(kind) == 1, (text, result)


@pytest.mark.parametrize("text", [
    "Scott Derrickson (born July 16, 1966) is an American director.",
    "Its population was 403 at the 2010 census; the years 1994-2010 and 2001–2005.",
    "ISBN 978-3-16-148410-0, coordinates 40.7128, -74.0060, 3,677 seated.",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 and uuid 123e4567-e89b-12d3-a456-426614174000",
    "The token ring network and the password policy were discussed.",
    "Write to the office at the festival; the e-mail is on the website.",
])
def test_leaves_ordinary_text_alone(text):
    assert redact(text).text == text and redact(text).found == {}


def test_redaction_never_redacts_a_placeholder_twice():
    result = redact("api_key=sk-abcdefghijklmnopqrstuvwx12 and mail a@b.io")
    assert result.text == "api_key=[SECRET] and mail [EMAIL]" and result.found == {"secret": 1, "email": 1}


def test_national_numbers_follow_the_region():
    assert redact("ring 020 7946 0958", region="GB").found == {"phone": 1}
    assert redact("ring 020 7946 0958", region="US").found == {}


def test_score_formula_and_decay():
    weights = ScoreWeights(similarity=0.6, recency=0.3, source=0.1, decay_per_day=0.05)
    assert decay(0, 0.05) == 1.0 and decay(-3, 0.05) == 1.0
    assert decay(10, 0.05) == pytest.approx(math.exp(-0.5))
    assert score(0.8, decay(10, 0.05), 1.0, weights) == pytest.approx(0.6 * 0.8 + 0.3 * math.exp(-0.5) + 0.1)
    assert hybrid_similarity(cosine=1.2, lexical=0.5, alpha=0.5) == pytest.approx(0.75)  # cosine clipped
    assert hybrid_similarity(cosine=-0.3, lexical=0.0, alpha=0.5) == 0.0
    with pytest.raises(ValueError, match="must not be negative"):
        ScoreWeights(recency=-1)


def test_overlap_and_source_boost():
    assert overlap(["seine", "paris"], ["seine", "flows", "paris", "channel"]) == 1.0
    assert overlap(["seine", "lyon"], ["seine", "paris"]) == 0.5 and overlap([], ["x"]) == 0.0
    assert containment(["seine", "paris", "channel", "flows"], ["seine", "paris"]) == 1.0
    # a short statement inside a longer one is no near-duplicate of it by words: Dice weighs both sides
    assert dice(["seine", "paris", "channel", "flows"], ["seine", "paris"]) == pytest.approx(2 * 2 / 6)
    assert dice(["a", "b"], ["b", "a", "a"]) == 1.0 and dice([], []) == 0.0
    assert source_boost(spans=1, node_ids=0, citations=0) == 1.0
    assert source_boost(spans=0, node_ids=2, citations=0) == source_boost(spans=0, node_ids=0, citations=1) == 0.5
    assert source_boost(spans=0, node_ids=0, citations=0) == 0.0


def test_heuristic_merge_keeps_the_longer_and_adds_only_news():
    old = "Scott Derrickson is an American director. He lives in Los Angeles."
    new = "Scott Derrickson, born in 1966, is an American film director, screenwriter and producer."
    merged = heuristic_merge(old, new)
    assert merged == f"{new} He lives in Los Angeles."
    assert heuristic_merge(new, "Scott Derrickson is an American director.") == new  # nothing new in it
    assert sentences("He was born in the U.S. in 1966. He directs films.") == ["He was born in the U.S. in 1966.",
                                                                               "He directs films."]


def test_merge_by_kind():
    assert merge_items("preference", "short answers", "long answers") == "long answers"
    assert merge_items("trajectory", "run 1", "run 2") == "run 1\n\nrun 2"
    many = "x" * 3000
    merged = merge_items("trajectory", f"{many}1\n\n{many}2\n\n{many}3", f"{many}4")
    assert len(merged) <= MAX_TRAJECTORY_CHARS and merged.endswith("4") and f"{many}1" not in merged
    assert merge_items("fact", "A is B.", "A is B indeed.", merger=lambda old, new: "A is B (merged).") == "A is B (merged)."
    assert merge_items("fact", "A is B.", "A is B indeed.", merger=lambda old, new: "  ") == "A is B indeed."
    # an LM that rambles gives way to the heuristic, which keeps both; two statements too long to be one stay two
    assert merge_items("fact", "A is B.", "A is C.", merger=lambda old, new: "y" * 10_000) == "A is C. A is B."
    assert merge_items("fact", "A is B. " + "x" * 3_000, "A is C. " + "z" * 3_000) is None


def test_statements_that_disagree_on_a_number_are_not_duplicates():
    assert numbers_disagree("It was the 44th season of the program.", "It was the 45th season of the program.")
    assert numbers_disagree("Population 403 in 2010.", "Population 410 in 2010.")
    assert not numbers_disagree("Scott Derrickson (born July 16, 1966) is a director.", "Scott Derrickson is a director.")
    assert not numbers_disagree("The Seine is 777 km long.", "The Seine, 777 km long, flows through Paris.")
    assert not numbers_disagree("No numbers here.", "None here either.")
