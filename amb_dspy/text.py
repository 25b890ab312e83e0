"""Splitting text into paragraphs, sentences and words: every splitter of the package lives here.

Callers that need a different cut say so by a parameter (``rule``, ``form``...), so that each regular
expression is written once and a reader finds all the ways text is cut in one file.
"""

from __future__ import annotations

import re
from typing import Literal

# A blank line: two line breaks with only spaces or tabs between them.
BLANK_LINE = re.compile(r"\n[ \t\r\f\v]*\n")
# The same where a line of any Unicode whitespace (no-break space, line separator...) counts as blank.
_ANY_BLANK_LINE = re.compile(r"\n\s*\n")
# A run of blank lines holding spaces and tabs only (the memory view's paragraphs: a CR does not blank a line).
_BLANK_RUN = re.compile(r"\n(?:[ \t]*\n)+")


def split_paragraphs(text: str, *, any_whitespace: bool = False) -> list[str]:
    """The non-empty paragraphs of ``text`` (blank-line separated), stripped. ``any_whitespace``: a line of
    any Unicode whitespace separates too, not only one of spaces and tabs (how an LM's reply is read)."""
    blank = _ANY_BLANK_LINE if any_whitespace else BLANK_LINE
    return [p.strip() for p in blank.split(text) if p.strip()]



def paragraph_starts(text: str) -> list[int]:
    """Where each paragraph of ``text`` begins, 0 first: after every run of blank lines of spaces and tabs."""
    return [0] + [match.end() for match in _BLANK_RUN.finditer(text)]


# What may close a sentence after its stop: quotes and brackets.
_CLOSERS = r"[\"'\u201d\u2019)\]]*"
# A sentence ends after . ! ? (plus closers) followed by whitespace, or after CJK full stops.
_SENTENCE_END = re.compile(rf"[.!?]+{_CLOSERS}\s+|[\u3002\uff01\uff1f]+{_CLOSERS}\s*")
# The simpler cuts of split_sentences' other rules (see there).
_STOP_BEFORE_CAPITAL = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_STOP = re.compile(r"(?<=[.!?])\s+")
# A sentence or a clause ends the text: . ! ? ; , or a CJK stop, plus closers.
_CLAUSE_END = re.compile(rf"[.!?;,\u3002\uff01\uff1f]{_CLOSERS}$")
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


SentenceRule = Literal["prose", "capital", "stop"]


def split_sentences(text: str, *, rule: SentenceRule = "prose") -> list[str]:
    """The non-empty sentences of ``text``, by one of three rules:

    * ``prose`` (the default): after each sentence end, Latin or CJK, but not after an initial or an
      abbreviation (see :func:`_abbreviation`); every piece keeps its trailing whitespace, so the pieces
      join back losslessly (what chunking needs);
    * ``capital``: at the whitespace after . ! ? when a capital letter or a digit follows (perhaps after an
      opening quote or bracket), the whitespace dropped: "U.S. law" stays whole often enough (statements);
    * ``stop``: at the whitespace after every . ! ?, the whitespace dropped (a first sentence, quickly).
    """
    if rule != "prose":
        cut = _STOP_BEFORE_CAPITAL if rule == "capital" else _STOP
        return [piece for piece in cut.split(text) if piece]
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        # the next character alone: slicing the rest of the text at every sentence end was quadratic
        if match.end() < len(text) and not _abbreviation(text[start:match.start()], match.group(0),
                                                         text[match.end():match.end() + 1]):
            pieces.append(text[start : match.end()])
            start = match.end()
    pieces.append(text[start:])
    return [p for p in pieces if p]


def ends_clause(text: str) -> bool:
    """Whether ``text`` ends a sentence or a clause: its last character, closers aside, is . ! ? ; , or a
    CJK stop (a short line without one is a heading or a speaker's name, not prose)."""
    return bool(_CLAUSE_END.search(text))


WordForm = Literal["token", "contraction", "term", "written"]
_WORDS: dict[str, re.Pattern[str]] = {
    # runs of letters and digits: the keyword index's tokens ("U.S." -> "U", "S")
    "token": re.compile(r"[^\W_]+"),
    # tokens joined by apostrophes, so that "don't" and "O'Neill" stay one word
    "contraction": re.compile(r"[^\W_]+(?:['’][^\W_]+)*"),
    # a letter, then three or more word characters, apostrophes or hyphens ("well-known"): a keyword candidate
    "term": re.compile(r"[^\W\d_][\w'-]{3,}"),
    # letters joined by apostrophes, dots or hyphens, no digits ("U.S.", "well-known"): a word of prose
    "written": re.compile(r"[^\W\d_]+(?:['\u2019.\-][^\W\d_]+)*"),
}


def words(text: str, form: WordForm = "token") -> list[str]:
    """The words of ``text`` in order, as written, cut as ``form`` says (see :data:`_WORDS`)."""
    return _WORDS[form].findall(text)


def is_word(text: str, form: WordForm = "written") -> bool:
    """Whether the whole of ``text`` is one word as ``form`` cuts them."""
    return _WORDS[form].fullmatch(text) is not None


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


# Characters a terminal acts on rather than shows: C0 controls, DEL, C1 controls (0x9b is a CSI of its own), and the
# bidirectional embeddings, overrides and isolates that reorder what follows them.
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSHOWN_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` as a terminal may show it: each control character written as its escape (``\\x1b``, ``\\x00``,
    ``\\u202e``), so that a document or a file name cannot clear the screen, move the cursor or reorder the line.
    ``lines``: newlines (``\\r\\n`` as ``\\n``) and tabs stay (a document's text); else they are escaped too (a
    name, one line).
    Only what is shown goes through here: the bank keeps every text as it was given."""
    pattern = _UNSHOWN_BUT_LINES if lines else _UNSHOWN
    if lines:
        text = text.replace("\r\n", "\n")  # a line end written the Windows way is a line end
    return pattern.sub(_escape, valid_text(text))


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate (what Python makes of bytes that are not UTF-8 in a file name, with
    ``surrogateescape``, or of a JSON ``\\udcff``) written as the escape of the byte it stands for (``\\xff``) or of
    itself (``\\ud800``): a text that can be stored, sent and printed as UTF-8, and the same for the same name."""
    return _SURROGATE.sub(_escape_surrogate, text) if _SURROGATE.search(text) else text


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escape_surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if 0xdc80 <= code <= 0xdcff else f"\\u{code:04x}"


# One match per thing a BPE tokenizer gives at least one token: a word (split at case changes), a run of
# digits, a run of newlines, a non-ASCII character, a punctuation mark. Plain spaces ride along with words.
_PIECES = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|\n+|[^\x00-\x7f]|[^\sA-Za-z0-9]")
_NON_ASCII_COST = 2  # a CJK character or accented letter is 1-3 byte-level BPE tokens


def estimate_tokens(text: str) -> int:
    """A fast, deliberately high estimate of a text's token count (the fallback ``TokenCounter`` of :mod:`amb_dspy.agents.chunking`).

    Words of up to four letters count 1; longer ones one per 3.5 letters, or per 3 when capitalised
    (names are rarer in a vocabulary than common words); digits count 1 each plus 1 per run (the space
    before a number is its own token); punctuation and newline runs count 1; non-ASCII characters 2.
    """
    total = 0
    for piece in _PIECES.findall(text):
        first = piece[0]
        if first.isdigit() and first.isascii():
            total += len(piece) + 1
        elif first.isascii() and first.isalpha():
            size = len(piece)
            if size <= 4:
                total += 1
            elif first.isupper() and not piece.isupper():
                total += (size + 2) // 3
            else:
                total += (2 * size + 6) // 7
        elif first.isascii():
            total += 1
        else:
            total += _NON_ASCII_COST
    return total
