"""amb_dspy.text owns every way text is cut; each rule keeps the cut its caller made with its own expression."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amb_dspy.agents.answer import lenient_answer
from amb_dspy.agents.base import fallback_context, fallback_keywords
from amb_dspy.text import ends_clause, paragraph_starts, split_paragraphs, split_sentences, words

SAMPLES = [
    "",
    "One. Two! three? 4 is a number. \"Quoted.\" (Bracketed.) [Square.]",
    "The U.S. Navy met Dr. Watson at 5 p.m. in St. Louis. It rained.\n\nNext day: sun.",
    "Don't stop O'Neill’s well-known dog_house plan... Really?! Yes.  Twice  spaced.",
    "第一句。第二句！第三句？ Mixed. end",
    "a\n \n\nb\n\u00a0\nc\r\n\r\nd\n\n\n",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_each_rule_cuts_as_the_expression_it_replaced(text):
    # the expressions as the callers wrote them before text.py owned them
    assert split_sentences(text.strip(), rule="capital") == [
        s for s in re.split(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])", text.strip()) if s]
    first_line = " ".join(text.split())
    assert (split_sentences(first_line, rule="stop") or [""])[0] == re.split(r"(?<=[.!?])\s", first_line, maxsplit=1)[0]
    assert words(text) == re.findall(r"[^\W_]+", text)
    assert words(text, "contraction") == re.findall(r"[^\W_]+(?:['’][^\W_]+)*", text)
    assert words(text, "term") == re.findall(r"[^\W\d_][\w'-]{3,}", text)
    assert paragraph_starts(text) == [0] + [m.end() for m in re.finditer(r"\n(?:[ \t]*\n)+", text)]
    assert split_paragraphs(text) == [p.strip() for p in re.split(r"\n[ \t\r\f\v]*\n", text) if p.strip()]
    assert split_paragraphs(text, any_whitespace=True) == [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    for line in text.splitlines():
        assert ends_clause(line) == bool(re.search(r"[.!?;,\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*$", line))


def test_the_rules_differ_where_their_callers_need_them_to():
    text = "Dr. Watson met K. A. Applegate. then left. Then came back."
    assert split_sentences(text) == ["Dr. Watson met K. A. Applegate. ", "then left. ", "Then came back."]
    assert split_sentences(text, rule="capital") == ["Dr.", "Watson met K.", "A.", "Applegate. then left.",
                                                     "Then came back."]
    assert split_sentences(text, rule="stop")[:2] == ["Dr.", "Watson met K."]
    assert words("O'Neill's well-known") == ["O", "Neill", "s", "well", "known"]
    assert words("O'Neill's well-known", "contraction") == ["O'Neill's", "well", "known"]
    assert words("O'Neill's well-known 2nd", "term") == ["O'Neill's", "well-known"]
    # a line of no-break spaces separates an LM's paragraphs, not a document's
    assert split_paragraphs("a\n\u00a0\nb") == ["a\n\u00a0\nb"]
    assert split_paragraphs("a\n\u00a0\nb", any_whitespace=True) == ["a", "b"]


def test_the_callers_keep_their_behaviour():
    assert lenient_answer("Answer: Paris\n\u00a0\nbecause it is the capital") == "Paris"
    assert fallback_context("It rained. Then the sun came out.") == "It rained."
    assert fallback_keywords("Paris is well-known; Paris's river, the Seine, is well-known too.", 3) == [
        "well-known", "Paris", "Paris's"]


_SPLITTING = re.compile(r"re\.(?:split|findall|finditer)\(r?\"|re\.compile\(r?\".*(?:\[\^\\W|\(\?<=\[\.!\?\]\)|\\n\[)")


def test_no_splitting_expression_outside_text_py():
    """Sentence ends, word tokens and blank lines are cut by amb_dspy/text.py alone."""
    package = Path(__file__).resolve().parent.parent / "amb_dspy"
    offenders = [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
                 for path in sorted(package.rglob("*.py")) if path != package / "text.py"
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _SPLITTING.search(line)]
    assert not offenders, "a splitting expression outside amb_dspy/text.py:\n" + "\n".join(offenders)
