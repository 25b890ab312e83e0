"""How a node's source text is cut into lines: the lines the evidence view shows and the store's line vectors hold.

A node's provenance (:class:`~amb_dspy.storage.query_graph.Source` spans) points into an interaction entry's text;
:func:`pieces` cuts what a span touches into whole lines (a long line sentence by sentence), a heading over a
paragraph being no line of its own (:func:`heading_of`); :func:`node_lines` gives a node's lines so. The view
(:mod:`amb_dspy.memory.view`) lays its lines out by these rules, and the store's save embeds the same lines
(:meth:`~amb_dspy.memory.bank_io.StoreFiles.embed_lines`), so both read one layout.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Iterator, Mapping

from amb_dspy.storage.interaction_tree import InteractionEntry
from amb_dspy.storage.query_graph import QueryGraphNode
from amb_dspy.text import estimate_tokens, paragraph_starts, split_sentences

_LABEL = re.compile(r"^\s*(?:\[[^\]\n]{1,60}\]\s*)?(?:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}:(?=\s))?")
LINE_TOKENS = 60  # a longer line (a long turn, a paragraph) is shown sentence by sentence
HEADING_TOKENS = 15  # a line this short with no closing punctuation, over a text line, is a heading
_CLOSED = re.compile(r"[.!?,:;\"'\]\u201d\u2019]\s*$")  # not ")": "Ed Wood (film)" is a title


def label_of(line: str) -> str:
    """What a line says of itself before its content: its date stamp and speaker ("[8 May, 2023] Caroline:")."""
    match = _LABEL.match(line)
    return match.group(0).strip() if match else ""


def _line_at(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _short_unclosed(line: str, count: Callable[[str], int]) -> bool:
    return count(line) <= HEADING_TOKENS and not _CLOSED.search(line)


def is_heading(line: str, following: str, count: Callable[[str], int] = estimate_tokens) -> bool:
    """Whether ``line`` titles the text right under it ("Ed Wood (film)" over its article): short, with no closing
    punctuation, no date stamp or speaker, over a ``following`` line of text (not another short one: the lines
    of a list, "flour" over "sugar", are no headings)."""
    return (_short_unclosed(line, count) and not label_of(line) and bool(following.strip())
            and not _short_unclosed(following, count))


@functools.lru_cache(maxsize=16)
def _paragraph_starts(text: str) -> list[int]:
    """Where each paragraph (blank-line separated) of ``text`` begins, in order: found once per text, not once per
    line (a long entry has thousands of lines)."""
    return paragraph_starts(text)


def _opens_paragraph(text: str, line_start: int) -> bool:
    starts = _paragraph_starts(text)
    at = bisect.bisect_left(starts, line_start)
    return at < len(starts) and starts[at] == line_start


@functools.lru_cache(maxsize=64)  # a few texts held: a paragraph's lines are laid out one after another
def _heading_at(text: str, first: int, count: Callable[[str], int]) -> str:
    """The heading that opens the paragraph beginning at ``first`` ("" when its first line is none): found once
    per paragraph, not once for each of its lines."""
    line = _line_at(text, first)
    return line.strip() if is_heading(line, _line_at(text, first + len(line) + 1), count) else ""


def heading_of(text: str, line_start: int, count: Callable[[str], int] = estimate_tokens) -> str:
    """The heading of the paragraph (blank-line separated) whose line begins at ``line_start``; "" when its first
    line is no heading, or is that line."""
    starts = _paragraph_starts(text)
    first = starts[bisect.bisect_right(starts, line_start) - 1]
    return _heading_at(text, first, count) if first < line_start else ""


def pieces(text: str, start: int, end: int, count: Callable[[str], int], line_tokens: int = LINE_TOKENS):
    """``(start, end, line_start)`` of the non-empty lines of ``text`` that the span ``[start, end)`` touches (whole lines:
    a span may begin or end inside one), long lines cut at sentence ends; a heading is no line of its own (its
    words index the lines under it: :func:`heading_of`)."""
    start = text.rfind("\n", 0, start) + 1
    end = len(text) if (cut := text.find("\n", max(end - 1, start))) < 0 else cut
    position = start
    for line in text[start:end].split("\n"):
        line_start, position = position, position + len(line) + 1
        if not line.strip() or (_opens_paragraph(text, line_start) and _heading_at(text, line_start, count)):
            continue
        for piece_start, piece_end in _line_cuts(line, count, line_tokens):
            yield line_start + piece_start, line_start + piece_end, line_start


_CUT_LINES_KEPT = 4096  # lines whose cuts are remembered: the nodes of a document cut the same lines, the save again
_CUT_LINE_CHARS = 4096  # a longer line is cut anew each time: the remembered lines stay a few megabytes


def _line_cuts(line: str, count: Callable[[str], int], line_tokens: int) -> tuple[tuple[int, int], ...]:
    """``(start, end)`` in ``line`` of its pieces: the line whole, or a long one sentence by sentence."""
    return (_remembered_cuts if len(line) <= _CUT_LINE_CHARS else _cuts)(line, count, line_tokens)


def _cuts(line: str, count: Callable[[str], int], line_tokens: int) -> tuple[tuple[int, int], ...]:
    if count(line) <= line_tokens:
        return ((0, len(line)),)
    cuts, offset = [], 0
    for sentence in split_sentences(line):  # pieces in order, each with its trailing whitespace
        if sentence.strip():
            cuts.append((offset, offset + len(sentence.rstrip())))
        offset += len(sentence)
    return tuple(cuts)


_remembered_cuts = functools.lru_cache(maxsize=_CUT_LINES_KEPT)(_cuts)


def node_lines(entries: Mapping[str, InteractionEntry], node: QueryGraphNode, count: Callable[[str], int] = estimate_tokens,
               line_tokens: int = LINE_TOKENS) -> Iterator[tuple[str, str, int, int, int]]:
    """``(entry id, entry text, start, end, line start)`` of each line of the node's sources, as the view lays
    them out (:func:`pieces`)."""
    for source in node.sources:
        text = entries[source.entry_id].text
        for span in source.spans:
            for start, end, line_start in pieces(text, *span, count, line_tokens):
                yield source.entry_id, text, start, end, line_start
