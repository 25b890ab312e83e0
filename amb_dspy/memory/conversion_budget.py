"""A bounded cost per observation: how much of a tool response memory conversion hands to the LM.

Memory conversion costs LM calls in proportion to its text (classification reads every segment,
structure and analysis see every cluster), so one huge or garbled response could spend a whole run's
LM calls. Before an observation is converted, :func:`budget_observation` decides what the LM reads:

* lines that are not language (binary bytes, base64, minified code: see :func:`is_language`) are not
  converted at all;
* of the rest, at most ``max_chars`` characters: the passages that best match the task's goal
  (:func:`~amb_dspy.tools.text.select_for_goal`, the helper visit uses for long pages).

Whatever is left out is still kept whole, raw, in the Interaction Tree (the memory writer records it),
with a notice saying why.
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import NamedTuple

from amb_dspy.retrieval.keyword import tokenize
from amb_dspy.text import is_word
from amb_dspy.tools.text import select_for_goal

# A number as prose writes it: 1962, 3.5, 1,000, 12:30, 2024-05-01, 7th.
_NUMBER = re.compile(r"\d+(?:[.,:/\-]\d+)*(?:st|nd|rd|th|s|%)?")
_EDGES = string.punctuation + "\u2018\u2019\u201c\u201d\u00ab\u00bb\u2013\u2014\u2026"
# A token that is one plain ASCII word or number, with punctuation around it: a fast, partial count.
_PLAIN_WORD = re.compile(r"(?<!\S)[\"'(\[]*(?:[A-Za-z]{1,45}|\d{1,12})[\"'.,;:!?)\]]*(?!\S)")
# Longer runs of ASCII letters are not words of any language (base64 without digits, hashes); runs of
# CJK letters are, as those scripts put no spaces between words (see _written_run).
MAX_ASCII_WORD = 45
# A line is language when at least this share of its non-space characters are words or numbers.
MIN_WORD_SHARE = 0.5
# Source code: at least this share of spaces, and of its other characters letters and digits.
MIN_CODE_SPACING = 0.12
MIN_CODE_ALNUM = 0.6
# Lines shorter than this say too little on their own: they follow the verdict on the whole text.
MIN_JUDGED_CHARS = 80
# Over this many budgets of text, the stretches with the most of the goal's words are taken first.
COARSE_STRETCHES = 4
# Less junk than this is converted with the rest rather than set apart (a long URL on a line of its own).
MIN_JUNK_CHARS = 1_000


class Budgeted(NamedTuple):
    """What memory conversion reads of an observation (``text``), and why not all of it (``notice``, "" when
    ``text`` is the whole observation)."""

    text: str
    notice: str


def _is_word(token: str) -> bool:
    core = token.strip(_EDGES)
    if not core or (len(core) > MAX_ASCII_WORD and core.isascii()):
        return False
    if core.isalpha() or is_word(core) or _NUMBER.fullmatch(core):  # isalpha: most words, fast
        return True
    return not core.isascii() and _written_run(core)


def _written_run(token: str) -> bool:
    """A run of a script written without spaces (Chinese, Japanese, Thai): letters and digits with the
    script's own punctuation, almost nothing else (random bytes read as Latin-1 are half symbols)."""
    written = sum(ch.isalnum() or (ord(ch) > 0x2000 and unicodedata.category(ch).startswith("P")) for ch in token)
    return written >= 0.9 * len(token)


def word_share(text: str) -> float:
    """The share of ``text``'s non-space characters that are in words or numbers (1.0 for empty text)."""
    tokens = text.split()
    total = sum(map(len, tokens))
    if not total:
        return 1.0
    plain = sum(map(len, _PLAIN_WORD.findall(text)))  # plain words and numbers, counted in C: prose stops here
    if plain >= MIN_WORD_SHARE * total:
        return plain / total
    return sum(len(t) for t in tokens if _is_word(t)) / total


def is_language(text: str) -> bool:
    """Whether ``text`` reads as language: at least half its non-space characters are words or numbers,
    or it is spaced like code (a space or more in every ``1 / MIN_CODE_SPACING`` characters, mostly letters
    and digits between them: ``self.store.add(node)``).

    Binary bytes decoded as text, base64 and minified code are runs of letters, digits and symbols with
    few spaces, so they fail both; prose, dialogue, tables, search results and source code pass (see
    ``bench/observe_cost.py`` for the measured rates on HotpotQA, LoCoMo and the demo corpus).
    """
    if word_share(text) >= MIN_WORD_SHARE:
        return True
    spaces = sum(ch.isspace() for ch in text)
    solid = len(text) - spaces
    return spaces >= MIN_CODE_SPACING * len(text) and sum(ch.isalnum() for ch in text) >= MIN_CODE_ALNUM * solid


def language_lines(text: str) -> tuple[str, int]:
    """``text`` without its lines that are not language, and how many characters were left out.

    A line shorter than ``MIN_JUDGED_CHARS`` follows the verdict on the whole text; less than
    ``MIN_JUNK_CHARS`` of junk in all is kept with the rest.
    """
    lines = text.splitlines(keepends=True)
    whole = is_language(text)
    kept = [line for line in lines
            if (whole if len(lines) == 1 or len(line.strip()) < MIN_JUDGED_CHARS else is_language(line))]
    left_out = len(text) - sum(map(len, kept))
    if left_out < MIN_JUNK_CHARS and whole:
        return text, 0
    return "".join(kept), left_out


def _best_stretches(text: str, goal: str, max_chars: int) -> str:
    """The stretches of ``text`` (about ``max_chars`` each, cut at spaces) with the most of ``goal``'s words,
    ``COARSE_STRETCHES`` of them in document order: a cheap first cut of a huge text, so that the finer
    passage ranking of :func:`select_for_goal` reads megabytes no more."""
    if len(text) <= COARSE_STRETCHES * max_chars:
        return text
    stretches, start = [], 0
    while start < len(text):
        end = text.find(" ", start + max_chars, start + 2 * max_chars)
        end = min(len(text), start + max_chars) if end < 0 else end  # no space: a script written without them
        stretches.append(text[start:end])
        start = end
    goal_words = sorted(set(tokenize(goal)))
    if not goal_words:
        return text[: COARSE_STRETCHES * max_chars]
    pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, goal_words)) + r")\b", re.IGNORECASE)

    def score(i: int) -> tuple[int, int, int]:  # more distinct goal words, then more of them, then earlier
        found = [m.lower() for m in pattern.findall(stretches[i])]
        return -len(set(found)), -len(found), i

    best = sorted(sorted(range(len(stretches)), key=score)[:COARSE_STRETCHES])
    return "\n\n".join(stretches[i].strip() for i in best)


def budget_observation(text: str, goal: str, max_chars: int) -> Budgeted:
    """The part of ``text`` memory conversion should read: its language, at most ``max_chars`` characters
    of it, the passages best matching ``goal`` first (see the module docstring)."""
    language, junk = language_lines(text)
    notices = []
    if junk:
        notices.append(f"{junk:,} characters that are not language (binary, encoded or minified) kept raw, "
                       "not converted")
    if len(language) > max_chars:
        notices.append(f"{len(language):,} characters over the conversion budget of {max_chars:,} "
                       "(AMB_MAX_CONVERT_CHARS): the passages most relevant to the goal converted, all kept raw")
        language = select_for_goal(_best_stretches(language, goal, max_chars), goal, max_chars)
    if not language.strip():
        language = ""
    return Budgeted(language, "; ".join(notices))
