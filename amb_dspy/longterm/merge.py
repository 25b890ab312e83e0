"""Merging a new long-term item into a near-duplicate of the same namespace and kind.

* ``preference``: the newest statement wins (a user who changed their mind);
* ``trajectory`` and ``tool_effect``: the new run is appended to the old one, so that one item tells
  every attempt (the oldest attempts are dropped past ``MAX_TRAJECTORY_CHARS``; a tool effect already
  recorded word for word is not appended again);
* ``fact`` and ``conclusion``: one merged statement. A ``Merger`` (``(old, new) -> merged``), such as
  the bank's integration agent, writes it when given (and when it fails or returns nothing);
  otherwise :func:`heuristic_merge` keeps the longer statement and adds each sentence of the other
  that it does not already say word for word, so that a merge loses nothing either statement says.

Which items are near-duplicates at all is the store's decision (:meth:`LongTermStore._closest
<amb_dspy.longterm.base.LongTermStore._closest>`): a similarity over :data:`DEDUP_THRESHOLD`, and no
sign that the two are different facts (:func:`amb_dspy.longterm.statements.different_facts`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from amb_dspy.longterm.statements import contains, sentences

Merger = Callable[[str, str], str]
MergeRule = Literal["overwrite", "append", "merged statement"]
MERGE_RULES: dict[str, MergeRule] = {"preference": "overwrite", "trajectory": "append", "tool_effect": "append",
                                     "fact": "merged statement", "conclusion": "merged statement"}
logger = logging.getLogger(__name__)

# The similarity is 0.5 * Dice(words) + 0.5 * cosine (base.LongTermStore._closest), and only items that the
# write is not a different fact from count (statements.different_facts). Chosen on HotpotQA dev items 0-149
# (bench/longterm_reuse.py --calibrate: template paraphrases of supporting facts against the held-out
# sentences of the gold paragraphs, near-verbatim twins of a stored sentence excepted) as the threshold whose
# wrong merges are lowest at 95% confidence while duplicates stay under 5% at that confidence: 3.1% of
# paraphrases left as duplicates, 0.6% of different facts merged (the number check alone had 0.8% at its
# best threshold, 0.72, and merged 1.8% of different facts on the untouched dev 150-299).
DEDUP_THRESHOLD = 0.70

TRAJECTORY_SEPARATOR = "\n\n"
# An appended trajectory keeps its most recent attempts within this size; older ones are dropped.
MAX_TRAJECTORY_CHARS = 8_000
# A merged statement is at most this long: an LM's longer one gives way to the heuristic merge, and two
# statements that the heuristic cannot fit in it either stay two items.
MAX_STATEMENT_CHARS = 4_000
__all__ = ["DEDUP_THRESHOLD", "MERGE_RULES", "Merger", "heuristic_merge", "merge_items"]


def heuristic_merge(old: str, new: str) -> str:
    """One statement from two near-duplicates that loses neither: the longer (the newer on a tie), plus
    each sentence of the other that it does not contain (:func:`~amb_dspy.longterm.statements.contains`).
    Two sentences where neither contains the other are both kept, in one item."""
    kept, other = (new, old) if len(new) >= len(old) else (old, new)
    merged = kept.strip()
    for sentence in sentences(other):
        if not contains(merged, sentence):
            merged = f"{merged} {sentence}"
    return merged


def merge_items(kind: str, old: str, new: str, merger: Merger | None = None) -> str | None:
    """The content of an item of ``kind`` after merging ``new`` into ``old``; ``None`` when two statements
    cannot be one within ``MAX_STATEMENT_CHARS`` without losing either (the store then adds ``new`` as an
    item of its own)."""
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
    if len(merged) > MAX_STATEMENT_CHARS:  # an LM that rambled: the heuristic instead
        merged = ""
    merged = merged or heuristic_merge(old, new)
    return merged if len(merged) <= MAX_STATEMENT_CHARS else None
