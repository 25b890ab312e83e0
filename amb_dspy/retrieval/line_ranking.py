"""The evidence view's line scores as array arithmetic, over what a bank revision fixes (:class:`LineTable`).

A ``<memory>`` block is written on every executor step and every ``memory_context`` call: what depends only on the
bank (which nodes hold a line, the lines around it, whether it asks, who says it, the heading over it and the headings
it names) is laid out as lines arrive (:class:`LineLayout`) and fixed per revision in a :class:`LineTable`, and a
question's scores are a few vector operations (``amb_dspy.memory.view`` says what the terms mean).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from amb_dspy.retrieval.keyword import terms

_PARENTHESIS = re.compile(r"\([^()]*\)")


@dataclass(frozen=True)
class LineTable:
    """Per line: the nodes that hold it (``holders[starts[i]:starts[i + 1]]``), the lines just before and after
    it in its entry (-1: none), whether it is a question (ends with "?"), who says it (an index into
    ``speaker_names``; -1: no speaker), the heading over its paragraph (an index into ``titles``;
    ``len(titles)``: none) and the other paragraphs' headings it names."""

    holders: np.ndarray
    starts: np.ndarray
    before: np.ndarray
    after: np.ndarray
    asks: np.ndarray
    speakers: np.ndarray
    speaker_names: tuple[str, ...] = ()
    headings: np.ndarray | None = None
    mentions: tuple[tuple[int, ...], ...] = ()
    titles: tuple[str, ...] = ()

    @classmethod
    def build(cls, places: Sequence[tuple[str, int]], holders: Sequence[Sequence[int]], texts: Sequence[str],
              speakers: Sequence[str] | None = None, headings: Sequence[str] | None = None) -> LineTable:
        """``places[i]``: line i's (entry id, start offset); ``holders[i]``: the numbers of the nodes that hold
        it (at least one); ``texts[i]``: its text; ``speakers[i]``: who says it, lower-case ("": nobody named);
        ``headings[i]``: the heading over its paragraph ("": none). Speakers and headings are numbered as they
        first appear (:class:`LineLayout`)."""
        layout = LineLayout()
        for i, (place, text) in enumerate(zip(places, texts)):
            layout.add(place, text, speakers[i] if speakers is not None else "", headings[i] if headings is not None else "")
        return layout.table(holders)

    def bridged(self, seeds: dict[int, float]) -> np.ndarray:
        """Per line, the best score of a seed line (line -> score) that names the heading over the line's paragraph
        from another paragraph: the article a matching line points to ("... played at the Androscoggin Bank
        Colisée" -> the article under "Androscoggin Bank Colisée") holds the question's second hop."""
        best = np.zeros(len(self.titles) + 1)  # the last place: lines under no heading
        for line, score in seeds.items():
            for title in self.mentions[line]:
                best[title] = max(best[title], score)
        return best[self.headings]

    def said_by_others(self, words: set[str]) -> np.ndarray:
        """Lines said by someone other than the one speaker whose name ``words`` (a question's lower-case words)
        hold; all False when they name no speaker, or more than one."""
        named = [i for i, name in enumerate(self.speaker_names) if set(name.split()) <= words]
        if len(named) != 1:
            return np.zeros(len(self.speakers), dtype=bool)
        return (self.speakers >= 0) & (self.speakers != named[0])

    def asked(self, own: np.ndarray, ask_weight: float) -> np.ndarray:
        """``own`` with each question's line counted ``ask_weight``."""
        return np.where(self.asks, ask_weight, 1.0) * own

    def scores(self, own: np.ndarray, nodes: np.ndarray, spread: np.ndarray, *, node_weight: float,
               context_weight: float, spread_weight: float, ask_weight: float) -> np.ndarray:
        """``ask_weight`` x own score (questions) or own score, + ``node_weight`` x the best score of the nodes
        that hold the line + ``context_weight`` x the best own score beside it + ``spread_weight`` x ``spread``."""
        padded = np.append(own, 0.0)  # index -1: no line there
        context = np.maximum(padded[self.before], padded[self.after])
        held = np.maximum.reduceat(nodes[self.holders], self.starts)
        return (self.asked(own, ask_weight) + node_weight * held + context_weight * context
                + spread_weight * spread)


class LineLayout:
    """What a :class:`LineTable` reads of each line, kept as lines are added (:meth:`add`), so that a bank's
    table is laid out once and brought up to date line by line, never again from every line's text: the
    lines beside each line (lines may arrive out of their text's order), whether it asks, its speaker and
    heading (numbered as they first appear) and the other paragraphs' headings it names (a new heading is
    looked for among the old lines by its words)."""

    def __init__(self):
        self.before: list[int] = []
        self.after: list[int] = []
        self.asks: list[bool] = []
        self.speakers: list[int] = []
        self.speaker_names: dict[str, int] = {}
        self.headings: list[int] = []  # -1: no heading
        self.titles: dict[str, int] = {}
        self.mentions: list[list[int]] = []  # per line, sorted
        self._entries: dict[str, list[tuple[int, int]]] = {}  # entry id -> its lines' (start, line), sorted
        self._title_words: list[frozenset[str]] = []
        self._titles_by_word: dict[str, list[int]] = {}  # a title's least word -> the titles
        self._line_words: list[set[str]] = []
        self._lines_with: dict[str, list[int]] = {}  # word -> the lines that hold it, up to line ``_listed``
        self._listed = 0  # filled in when a new heading looks for its lines: a text without headings never needs it

    def __len__(self) -> int:
        return len(self.asks)

    @classmethod
    def restored(cls, places: Sequence[tuple[str, int]], before: Sequence[int], after: Sequence[int],
                 asks: Sequence[bool], speakers: Sequence[int], speaker_names: Sequence[str], headings: Sequence[int],
                 titles: Sequence[str], title_words: Sequence[Sequence[str]], mentions: Sequence[Sequence[int]],
                 line_words: Sequence[Sequence[str]]) -> LineLayout:
        """The layout :meth:`add` left after these lines, from what it found (a layout a bank database kept,
        :mod:`amb_dspy.memory.view.stored_layout`), without reading a line or a heading again: per line its place
        (entry id, start offset), the lines beside it, whether it asks, its speaker and heading (numbers into
        ``speaker_names`` and ``titles``; -1: none), the headings it names and its words; per title its words."""
        layout = cls()
        layout.before, layout.after, layout.asks = list(before), list(after), list(asks)
        layout.speakers, layout.headings = list(speakers), list(headings)
        layout.mentions = [list(named) for named in mentions]
        layout.speaker_names = {name: number for number, name in enumerate(speaker_names)}
        layout.titles = {title: number for number, title in enumerate(titles)}
        layout._title_words = [frozenset(words) for words in title_words]
        for number, words in enumerate(layout._title_words):
            if words:
                layout._titles_by_word.setdefault(min(words), []).append(number)
        layout._line_words = [set(words) for words in line_words]
        for line, (entry, start) in enumerate(places):
            layout._entries.setdefault(entry, []).append((start, line))
        for lines in layout._entries.values():
            lines.sort()
        return layout  # _lines_with is filled when a new heading first looks for its lines, as after add

    def copy(self) -> LineLayout:
        """A layout of the same lines that later lines change apart from this one (a task's lines added to the
        layout of the bank it started on, :mod:`amb_dspy.memory.bank_cache`); what no line changes once
        made (a line's words, a title's) is shared."""
        other = LineLayout.__new__(LineLayout)
        other.before, other.after, other.asks = list(self.before), list(self.after), list(self.asks)
        other.speakers, other.speaker_names = list(self.speakers), dict(self.speaker_names)
        other.headings, other.titles = list(self.headings), dict(self.titles)
        other.mentions = [list(named) for named in self.mentions]
        other._entries = {entry: list(lines) for entry, lines in self._entries.items()}
        other._title_words, other._line_words = list(self._title_words), list(self._line_words)
        other._titles_by_word = {word: list(titles) for word, titles in self._titles_by_word.items()}
        other._lines_with = {word: list(lines) for word, lines in self._lines_with.items()}
        other._listed = self._listed
        return other

    def add(self, place: tuple[str, int], text: str, speaker: str = "", heading: str = "",
            words: Sequence[str] | None = None) -> None:
        """Line ``len(self)``: at ``place`` (entry id, start offset), reading ``text``, said by ``speaker`` (lower
        case; "" nobody named) under ``heading`` ("": none); ``words``: ``terms(text)``, when the caller has them."""
        line = len(self.asks)
        self._place(line, place)
        self.asks.append(text.rstrip().endswith("?"))
        self.speakers.append(self.speaker_names.setdefault(speaker, len(self.speaker_names)) if speaker else -1)
        own = self._title(heading) if heading else -1
        self.headings.append(own)
        line_words = set(terms(text) if words is None else words)
        self._line_words.append(line_words)
        named = {i for word in line_words & self._titles_by_word.keys() for i in self._titles_by_word[word]
                 if i != own and self._title_words[i] <= line_words}
        self.mentions.append(sorted(named))

    def _place(self, line: int, place: tuple[str, int]) -> None:
        entry = self._entries.setdefault(place[0], [])
        at = bisect.bisect_right(entry, (place[1], line))
        previous, following = entry[at - 1][1] if at else -1, entry[at][1] if at < len(entry) else -1
        entry.insert(at, (place[1], line))
        self.before.append(previous)
        self.after.append(following)
        if previous >= 0:
            self.after[previous] = line
        if following >= 0:
            self.before[following] = line

    def _title(self, heading: str) -> int:
        """The heading's number; a new heading is named by the old lines that hold all its words (without its
        parenthesis: "Front Row (software)" is named by "the Front Row media program")."""
        if heading in self.titles:
            return self.titles[heading]
        number = self.titles[heading] = len(self.titles)
        title_words = frozenset(terms(_PARENTHESIS.sub(" ", heading)))
        self._title_words.append(title_words)
        if title_words:
            self._titles_by_word.setdefault(min(title_words), []).append(number)
            self._list_words()
            for line in self._lines_with.get(min(title_words), ()):
                if self.headings[line] != number and title_words <= self._line_words[line]:
                    bisect.insort(self.mentions[line], number)
        return number

    def _list_words(self) -> None:
        """Bring ``_lines_with`` up to the lines added so far (the line being added is not among them yet)."""
        for line in range(self._listed, len(self._line_words)):
            for word in self._line_words[line]:
                self._lines_with.setdefault(word, []).append(line)
        self._listed = len(self._line_words)

    def table(self, holders: Sequence[Sequence[int]]) -> LineTable:
        """The table of the lines so far; ``holders[i]``: the numbers of the nodes that hold line i."""
        sizes = [len(held) for held in holders]
        headings = np.array(self.headings, dtype=np.int64)
        return LineTable(holders=np.fromiter((n for held in holders for n in held), dtype=np.int64, count=sum(sizes)),
                         starts=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                         before=np.array(self.before, dtype=np.int64), after=np.array(self.after, dtype=np.int64),
                         asks=np.array(self.asks, dtype=bool), speakers=np.array(self.speakers, dtype=np.int64),
                         speaker_names=tuple(self.speaker_names), headings=np.where(headings < 0, len(self.titles), headings),
                         mentions=tuple(map(tuple, self.mentions)), titles=tuple(self.titles))


def best_first(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score, ties by index (node ids are random; positions are not)."""
    return np.lexsort((np.arange(len(scores)), -scores))


def interleave(first: Sequence[int], second: Sequence[int], share: float) -> list[int]:
    """Both rankings merged, each item once: ``first`` gives the next item while it has given under ``share`` of
    those taken so far, ``second`` otherwise."""
    out, seen, a, b, taken_first = [], set(), 0, 0, 0
    while a < len(first) or b < len(second):
        if a < len(first) and (taken_first < share * (len(out) + 1) or b >= len(second)):
            item, a = first[a], a + 1
            taken_first += item not in seen
        else:
            item, b = second[b], b + 1
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
