"""The evidence view's line scores as array arithmetic, over what a bank revision fixes (:class:`LineTable`).

A ``<memory>`` block is written on every executor step and every ``memory_context`` call, and it scores every
source line of the bank: what depends only on the bank (which nodes hold a line, the lines around it, whether it
asks, who says it, the heading over it and the headings it names) is laid out once per revision, and a question's scores are a few vector operations
(``amb_dspy.memory.view`` says what the terms mean).
"""

from __future__ import annotations

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
        ``headings[i]``: the heading over its paragraph ("": none)."""
        order = sorted(range(len(places)), key=lambda i: places[i])
        before, after = np.full(len(places), -1), np.full(len(places), -1)
        for a, b in zip(order, order[1:]):
            if places[a][0] == places[b][0]:
                after[a], before[b] = b, a
        sizes = [len(held) for held in holders]
        speakers = list(speakers) if speakers is not None else [""] * len(places)
        names = tuple(sorted({name for name in speakers if name}))
        number = {name: i for i, name in enumerate(names)}
        return cls(holders=np.array([n for held in holders for n in held], dtype=np.int64),
                   starts=np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                   before=before, after=after, asks=np.array([t.rstrip().endswith("?") for t in texts], dtype=bool),
                   speakers=np.array([number.get(name, -1) for name in speakers], dtype=np.int64), speaker_names=names,
                   **_heading_links(texts, list(headings) if headings is not None else [""] * len(places)))

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


def _heading_links(texts: Sequence[str], headings: Sequence[str]) -> dict:
    """The headings as numbers per line, and which other paragraphs' headings each line names: all the words of
    a heading without its parenthesis ("Front Row (software)" is named by "the Front Row media program")."""
    titles = tuple(sorted({heading for heading in headings if heading}))
    number = {title: i for i, title in enumerate(titles)}
    words = [frozenset(terms(_PARENTHESIS.sub(" ", title))) for title in titles]
    by_word: dict[str, list[int]] = {}
    for i, title_words in enumerate(words):
        if title_words:
            by_word.setdefault(min(title_words), []).append(i)
    mentions = []
    for text, heading in zip(texts, headings):
        line_words = set(terms(text)) if by_word else set()
        own = number.get(heading, -1)
        mentions.append(tuple(sorted({i for word in line_words for i in by_word.get(word, ())
                                      if i != own and words[i] <= line_words})))
    return {"headings": np.array([number.get(h, len(titles)) for h in headings], dtype=np.int64),
            "mentions": tuple(mentions), "titles": titles}


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
