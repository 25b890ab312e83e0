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
each of its sentences must be a copy of one line it was shown (a sentence that recombines words of several
lines, "the last day of the month of Sennet", is how a 135M model invents), and every question of the goal
must be answered by one of them (a copy of the line that names the festival's city does not say which
river flows there).
"""

from __future__ import annotations

import re
from collections.abc import Callable

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
    """Why ``answer`` is not a faithful copy of ``lines`` for ``goal`` (``""`` when it is): each sentence's
    content words, but the goal's own, are all in one line, and every part of the goal is answered by a
    sentence (:func:`goal_parts`). An answer made only of the goal's words (a choice the goal offers, a yes
    or a no) copies nothing and invents nothing.

        uncopied("The River Sennet flows through Marrowick.", ["The River Sennet flows through Marrowick."],
                 "Which river flows through Marrowick?")  -> ""
    """
    goal_terms = content_terms(goal) | _YES_NO  # a yes or a no answers the goal, it copies nothing
    line_terms = [content_terms(line) for line in lines]
    copied: list[tuple[str, set[str]]] = []  # (sentence, the terms of the sentence and its line)
    for sentence in split_sentences(" ".join((answer or "").split())):
        said = content_terms(sentence)
        if not said - goal_terms:
            continue  # it only repeats the goal: it rests on no line
        source = next((terms for terms in line_terms if said - goal_terms <= terms), None)
        if source is None:
            return f"the sentence {sentence.strip()[:60]!r} is not in any one line shown"
        copied.append((sentence, said | source))
    if not copied:
        return ""
    for part, wants in goal_parts(goal):
        if not any(wants(sentence, terms) for sentence, terms in copied):
            return f"no sentence answers {part.strip()!r}"
    return ""


_WH = r"which|what|when|where|who|whom|whose|why|how"
_PART_BREAK = re.compile(rf"\?|[,;]?\s+and\s+(?=(?:{_WH})\b)", re.IGNORECASE)
_ASKS = re.compile(rf"\b({_WH})\b(?:\s+(?:(?:type|kind|sort|name)s?\s+of\s+)?(\w+))?", re.IGNORECASE)
_AUXILIARY = frozenset("is are was were be been do does did has have had can could will would should may might "
                       "shall must".split())
_MEASURE = frozenset("many much long old far big tall large high often".split())
_NUMBER_WORDS = frozenset("one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
                          "hundred thousand million billion dozen half".split())
_TIME_WORDS = frozenset("january february march april may june july august september october november december "
                        "monday tuesday wednesday thursday friday saturday sunday spring summer autumn fall winter "
                        "year century decade dawn dusk morning afternoon evening night noon midnight today "
                        "yesterday tomorrow week month".split())


def goal_parts(goal: str) -> list[tuple[str, Callable[[str, set[str]], bool]]]:
    """The questions in ``goal`` ("which river ..., and when ...": two), each with what a sentence that answers
    it holds, judged on the sentence and the terms of it and its line: *when* a date or time; *how many* (much,
    long...) a number; *which* / *what* followed by a noun that noun ("which river": the river's line names
    a river); any other question some word the goal does not use. A goal that asks nothing (an instruction)
    has no parts."""
    parts = []
    for part in _PART_BREAK.split(goal):
        asked = _ASKS.search(part or "")
        if asked:
            parts.append((part, _wanted(asked.group(1).lower(), (asked.group(2) or "").lower())))
    return parts


def _wanted(wh: str, word: str) -> Callable[[str, set[str]], bool]:
    """What a sentence answering a question that opens ``wh word`` holds (see :func:`goal_parts`)."""
    if wh == "when" or (wh in {"what", "which"} and word in {"year", "date", "day", "month", "time", "century"}):
        return lambda sentence, _terms: _says(sentence, _TIME_WORDS | _NUMBER_WORDS)
    if wh == "how" and word in _MEASURE:
        return lambda sentence, _terms: _says(sentence, _NUMBER_WORDS)
    if wh in {"which", "what"} and word and word not in _AUXILIARY and word not in STOPWORDS:
        return lambda _sentence, terms: stem(word) in terms
    return lambda _sentence, _terms: True  # the sentence rests on a line and adds a word: it answers


def _says(sentence: str, vocabulary: frozenset[str]) -> bool:
    """Whether ``sentence`` holds a number, or a word of ``vocabulary``."""
    return any(ch.isdigit() for ch in sentence) or bool(set(words(sentence.lower())) & vocabulary)
