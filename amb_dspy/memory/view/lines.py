"""The source text as the evidence view reads it: lines, their stamps and speakers, the headings over paragraphs.

A node's provenance (:class:`~amb_dspy.storage.query_graph.Source` spans) points into an interaction entry's text;
:func:`pieces` cuts what a span touches into whole lines (a long line sentence by sentence; the layout is
:mod:`amb_dspy.storage.source_lines`', which the store's save embeds too), and the functions here say what a line is
beside its words: who says it (:func:`speaker_of`), when (:func:`day_stamp`), and which heading titles its paragraph
(:func:`heading_of`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amb_dspy.memory.dates import stamp_of
from amb_dspy.storage.source_lines import LINE_TOKENS, heading_of, is_heading, label_of, pieces

__all__ = ["LINE_TOKENS", "Evidence", "day_stamp", "heading_of", "is_heading", "label_of", "pieces", "speaker_of"]

_TIME_OF_DAY = re.compile(r"^\d{1,2}[:.]\d{2}\s*(?:[ap]\.?m\.?)?\s*(?:on\s+)?", re.IGNORECASE)


@dataclass(frozen=True)
class Evidence:
    """One raw line of an interaction entry that a node was built from."""

    entry_id: str
    start: int
    end: int
    text: str
    node_id: str
    score: float = 0.0


def day_stamp(line: str) -> str:
    """The line's date stamp as shown, without a time of day ("1:56 pm on 8 May, 2023" -> "8 May, 2023"): a
    date is what questions ask, and a stamp costs 19 tokens with its time and 11 without."""
    stamp = stamp_of(line)
    return _TIME_OF_DAY.sub("", stamp) or stamp


def speaker_of(line: str) -> str:
    """Who says the line, lower-case ("[8 May, 2023] Caroline: Hi" -> "caroline"; "" when no one is named)."""
    label = label_of(line)
    return label[label.find("]") + 1:].strip().rstrip(":").lower()
