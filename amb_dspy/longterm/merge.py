"""Merging a new long-term item into a near-duplicate of the same namespace and kind.

* ``preference``: the newest statement wins (a user who changed their mind);
* ``trajectory`` and ``tool_effect``: the new run is appended to the old one, so that one item tells
  every attempt (the oldest attempts are dropped past ``MAX_TRAJECTORY_CHARS``; a tool effect already
  recorded word for word is not appended again);
* ``fact`` and ``conclusion``: one merged statement. A ``Merger`` (``(old, new) -> merged``), such as
  the bank's integration agent, writes it when given (and when it fails or returns nothing); otherwise :func:`heuristic_merge` keeps the
  longer statement (the newer on a tie) and adds the other's sentences that it does not already say.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Literal

from amb_dspy.longterm.scoring import overlap
from amb_dspy.retrieval.keyword import tokenize

Merger = Callable[[str, str], str]
MergeRule = Literal["overwrite", "append", "merged statement"]
MERGE_RULES: dict[str, MergeRule] = {"preference": "overwrite", "trajectory": "append", "tool_effect": "append",
                                     "fact": "merged statement", "conclusion": "merged statement"}
logger = logging.getLogger(__name__)

# The similarity is 0.5 * Dice(words) + 0.5 * cosine (base.LongTermStore._closest). Chosen on HotpotQA dev
# items 0-149 (bench/longterm_reuse.py --calibrate: template paraphrases of supporting facts against the
# held-out sentences of the gold paragraphs, near-verbatim twins of a stored sentence excepted), the
# threshold and lexical measure with the most paraphrases merged for the fewest different facts merged
# while both targets hold: 3.1% of paraphrases left as duplicates, 0.8% of different facts merged. The
# earlier measure (the larger of the two containments) merged 2.5% of different facts at 0.72.
DEDUP_THRESHOLD = 0.72

TRAJECTORY_SEPARATOR = "\n\n"
# An appended trajectory keeps its most recent attempts within this size; older ones are dropped.
MAX_TRAJECTORY_CHARS = 8_000
# A merged statement longer than this (an LM that rambled, many merges) gives way to the newer statement.
MAX_STATEMENT_CHARS = 4_000
# A sentence of the other statement counts as already said when half its words are in the kept one: the
# two items are near-duplicates already, so a sentence sharing that much is a restatement, not news.
_ALREADY_SAID = 0.5
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


def sentences(text: str) -> list[str]:
    """Split at sentence ends followed by a capital letter or a digit (keeps "U.S. law" whole often enough)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def numbers_disagree(a: str, b: str) -> bool:
    """Whether each statement has a number the other lacks ("the 44th season" / "the 45th season").

    Such statements are different facts, or a conflict, however similar their words: never merged.
    A statement whose numbers are all in the other (a retelling that drops a date) is not refused.
    """
    numbers_a, numbers_b = set(_NUMBER.findall(a)), set(_NUMBER.findall(b))
    return bool(numbers_a - numbers_b) and bool(numbers_b - numbers_a)


def heuristic_merge(old: str, new: str) -> str:
    """One statement from two near-duplicates: the longer (the newer on a tie), plus the other's
    sentences whose words it does not already contain."""
    kept, other = (new, old) if len(new) >= len(old) else (old, new)
    kept_tokens = set(tokenize(kept))
    extra = []
    for sentence in sentences(other):
        words = tokenize(sentence)
        if words and overlap(words, kept_tokens) < _ALREADY_SAID:
            extra.append(sentence)
            kept_tokens.update(words)
    return " ".join([kept.strip(), *extra])


def merge_items(kind: str, old: str, new: str, merger: Merger | None = None) -> str:
    """The content of an item of ``kind`` after merging ``new`` into ``old``."""
    rule = MERGE_RULES[kind]
    if rule == "overwrite":
        return new
    if rule == "append":
        attempts = old.strip().split(TRAJECTORY_SEPARATOR)
        if new.strip() not in attempts:
            attempts.append(new.strip())
        while len(attempts) > 1 and len(TRAJECTORY_SEPARATOR.join(attempts)) > MAX_TRAJECTORY_CHARS:
            attempts.pop(0)
        return TRAJECTORY_SEPARATOR.join(attempts)
    merged = ""
    if merger is not None:
        try:
            merged = (merger(old, new) or "").strip()
        except Exception as exc:  # noqa: BLE001 - an LM failure falls back to the heuristic, never loses the write
            logger.warning("long-term merge by %r failed (%s); merged by the heuristic instead", merger, exc)
            merged = ""
    merged = merged or heuristic_merge(old, new)
    return merged if len(merged) <= MAX_STATEMENT_CHARS else new
