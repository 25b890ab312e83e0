"""Splitting text into paragraphs and sentences: the one splitter the agents' chunking and the tools share."""

from __future__ import annotations

import re


def split_paragraphs(text: str) -> list[str]:
    """The non-empty paragraphs of ``text`` (blank-line separated), stripped."""
    return [p.strip() for p in re.split(r"\n[ \t\r\f\v]*\n", text) if p.strip()]


# A sentence ends after . ! ? (plus closing quotes/brackets) followed by whitespace, or after CJK full stops.
_SENTENCE_END = re.compile(r"[.!?]+[\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]+[\"'\u201d\u2019)\]]*\s*")
_LAST_WORD = re.compile(r"[\w.]+$")
# Words whose period belongs to a name that goes on ("Ken St. Andre", "Dr. Watson").
_BEFORE_NAME = frozenset({"mr", "mrs", "ms", "dr", "st", "prof", "mt", "ft", "gen", "gov", "sen", "rep", "rev", "capt",
                          "col", "lt", "sgt", "messrs"})
# Words whose period ends a sentence only when a capitalised word follows ("Apple Inc. for" goes on, "No. 5" too).
_SHORTENED = frozenset({"inc", "ltd", "co", "corp", "bros", "jr", "sr", "vs", "etc", "no", "vol", "approx", "est", "fig"})


def _abbreviation(before: str, stop: str, after: str) -> bool:
    """Whether the single period ``stop`` after ``before`` shortens a word rather than ending a sentence: an initial
    ("K. A. Applegate"), a dotted abbreviation ("U.S. Navy", "e.g. this"), a title before a name, or a shortened word
    followed by a lower-case word or a number (``after``: the character after ``stop``)."""
    if stop.strip() != ".":
        return False
    word = (_LAST_WORD.search(before) or [""])[0]
    if not word:
        return False
    if (len(word) == 1 and word.isupper()) or "." in word or word.lower() in _BEFORE_NAME:
        return True
    return word.lower() in _SHORTENED and (after.islower() or after.isdigit())


def split_sentences(text: str) -> list[str]:
    """``text`` cut after each sentence end (not after an initial or an abbreviation: see :func:`_abbreviation`);
    every piece keeps its trailing whitespace, so they join back losslessly."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        # the next character alone: slicing the rest of the text at every sentence end was quadratic
        if match.end() < len(text) and not _abbreviation(text[start:match.start()], match.group(0),
                                                         text[match.end():match.end() + 1]):
            pieces.append(text[start : match.end()])
            start = match.end()
    pieces.append(text[start:])
    return [p for p in pieces if p]


def locate(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """The ``[start, end)`` span in ``text`` of each of ``pieces``, which are slices of it in order
    (what the splitters here return). ValueError if a piece is not found after the previous one."""
    spans, cursor = [], 0
    for piece in pieces:
        start = text.find(piece, cursor)
        if start < 0:
            raise ValueError(f"a piece of {len(piece)} characters is not in the text after position {cursor}")
        spans.append((start, start + len(piece)))
        cursor = start + len(piece)
    return spans


# Bytes no text holds: C0 controls other than whitespace and ESC (ANSI colours in logs), and DEL.
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\r\f\x0b\x1b") + b"\x7f"


def is_binary(data: bytes) -> bool:
    """Binary data, not text, judged on the first 8 KB: a NUL byte (what git and grep go by; UTF-16 text
    included), or more than 10% control bytes, which no text encoding produces."""
    head = data[:8192]
    if b"\x00" in head:
        return True
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return controls > len(head) // 10
