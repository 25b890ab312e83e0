"""Whether an answer may pass as an answer: the one check every answer path of a task goes through.

An LM, a small one above all, can reply with nothing, with the template it was shown (``{answer}``), with
a run of letters that are no words, or with fluent text that rests on nothing the task found. None of
these is an answer. :func:`ungrounded` says why a reply is not one (or ``""`` when it is), judged against
the text it could rest on: the task's memory and the tools' responses (see
:func:`amb_dspy.task.answering.evidence_text`). An answer is grounded when it shares at least one content
word, name or number with that text; a bare yes or no is judged by the question, not here. A task that holds
no text at all (no context, no memory, no tool result) gives nothing to check against: its answer, the LM's
own knowledge, is judged by its form alone.

    ungrounded("{answer}", memory)              -> "a template placeholder"
    ungrounded("The Sennet.", "... the River Sennet flows through Marrowick ...")  -> ""

A tiny LM passes fluent text through a stricter test, :func:`uncopied`: it cannot compose, only copy, so
each of its sentences must be a copy of one line it was shown, and together they must hold what those
lines hold of the goal; a sentence that recombines words of several lines ("the last day of the month of
Sennet") is how a 135M model invents.
"""

from __future__ import annotations

import re

from amb_dspy.retrieval.keyword import STOPWORDS, stem
from amb_dspy.text import is_word, split_sentences, words

__all__ = ["content_terms", "ordered_terms", "uncopied", "ungrounded"]

_PLACEHOLDER = re.compile(r"\{\{?\s*[\w .-]*\s*\}?\}|\[\[\s*##.*?##\s*\]\]|<\s*/?\s*answer\s*>", re.IGNORECASE)
_YES_NO = frozenset({"yes", "no"})
_LONGEST_WORD = 20  # longer runs of letters are not words of prose ("ABBAECAMANEAUGUSTADINICA")
_MIN_WORD_SHARE = 0.5  # an answer at most half of whose tokens are words is mostly noise


def ordered_terms(text: str) -> list[str]:
    """The lower-cased words and numbers of ``text`` that carry content (no stop words, no one-letter words),
    in order, repeats kept."""
    return [token for token in words(text.lower()) if token not in STOPWORDS and (len(token) > 1 or token.isdigit())]


def content_terms(text: str) -> set[str]:
    """The stems of :func:`ordered_terms`, so that "recognised" rests on "recognise" and "takes" on "take"."""
    return {stem(token) for token in ordered_terms(text)}


def ungrounded(answer: str, evidence: str) -> str:
    """Why ``answer`` is not an answer resting on ``evidence`` (see the module docstring), or ``""`` when it is."""
    text = " ".join((answer or "").split())
    if not text:
        return "empty"
    if _PLACEHOLDER.search(text):
        return "a template placeholder"
    tokens = text.split()
    prose = [t for t in tokens if _is_prose(t)]
    if len(prose) < _MIN_WORD_SHARE * len(tokens) or not prose:
        return "mostly not words"
    if content_terms(text) <= _YES_NO and set(words(text.lower())) & _YES_NO:
        return ""
    evidence_terms = content_terms(evidence)
    if evidence_terms and not content_terms(text) & evidence_terms:
        return "it shares no word, name or number with the memory and tool results"
    return ""


def _is_prose(token: str) -> bool:
    """A token of prose: a word (punctuation around it allowed) of sane length, or a number, a date, an amount."""
    core = token.strip(".,;:!?\"'()[]")
    if any(ch.isdigit() for ch in core):
        return re.fullmatch(r"[$€£]?\d[\d,./:-]*(?:st|nd|rd|th|s|%|km|m)?", core, re.IGNORECASE) is not None
    return bool(core) and is_word(core) and len(core) <= _LONGEST_WORD


def uncopied(answer: str, lines: list[str], goal: str) -> str:
    """Why ``answer`` is not a faithful copy of ``lines`` for ``goal`` (``""`` when it is): every sentence's
    content words, but the goal's own, are in one line, and the sentences with those lines hold every term of
    the goal the lines hold.

        uncopied("The River Sennet flows through Marrowick.", ["The River Sennet flows through Marrowick."],
                 "Which river flows through Marrowick?")  -> ""
    """
    goal_terms, line_terms = content_terms(goal), [content_terms(line) for line in lines]
    held = goal_terms & set().union(*line_terms)
    for sentence in split_sentences(" ".join((answer or "").split())):
        said = content_terms(sentence)
        extra = said - goal_terms
        if not extra:
            continue  # a sentence that only repeats the goal rests on no line
        source = next((terms for terms in line_terms if extra <= terms), None)
        if source is None:
            return f"the sentence {sentence.strip()[:60]!r} is not in any one line shown"
        held -= said | source
    if held:
        left_out = dict.fromkeys(word for word in ordered_terms(goal) if stem(word) in held)
        return f"it leaves out what the lines hold of {', '.join(left_out)}"
    return ""
