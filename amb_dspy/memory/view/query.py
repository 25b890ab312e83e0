"""What goes into a view and what comes out: a question, embedded and cut into its terms once (:class:`Query`),
and the ``<memory>`` block written for it (:class:`Block`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amb_dspy.memory.view.lines import Evidence
from amb_dspy.retrieval.embedding_base import Embedder
from amb_dspy.retrieval.keyword import once_per_term, terms, words
from amb_dspy.storage import QueryGraphNode


@dataclass(frozen=True, eq=False)
class Query:
    """A question as the ranking reads it: its text, its vector, and ``asked``, its words one per term
    (:func:`~amb_dspy.retrieval.keyword.once_per_term`: a word the question repeats counts once), for the lines,
    the nodes and the spreading's seeds alike."""

    text: str
    vector: np.ndarray
    asked: tuple[str, ...]

    @classmethod
    def of(cls, question: str | Query, embedder: Embedder) -> Query:
        """``question`` embedded (alone, so that its vector is the same whatever else is embedded), or itself
        when it is a Query already."""
        if isinstance(question, Query):
            return question
        return cls(question, embedder.embed([question])[0], tuple(once_per_term(question)))

    @property
    def words(self) -> set[str]:
        """The question's lower-case words (a speaker it names, :meth:`~amb_dspy.retrieval.line_ranking.LineTable.said_by_others`)."""
        return set(words(self.text))

    @property
    def terms(self) -> list[str]:
        """The stems the spreading starts from, one per term the question asks."""
        return terms(" ".join(self.asked))


@dataclass(frozen=True)
class Block:
    """A ``<memory>`` block: its text, and what it shows, for provenance-based recall (``bench/memory_recall.py``):
    ``lines``, the source lines shown, and ``nodes``, the nodes shown whole by their summary (the summary view)."""

    text: str
    lines: tuple[Evidence, ...] = ()
    nodes: tuple[QueryGraphNode, ...] = ()
