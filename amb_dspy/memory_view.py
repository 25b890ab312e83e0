"""What the ``<memory>`` block shows, at a token budget: the spec's summaries, or the raw evidence behind them.

Two views of the same Query Graph (``AMB_MEMORY_VIEW``):

* ``summary`` -- the spec's block (§6.3): each retrieved node's topic, keywords and summary. A summary is
  written when the node is made, before any question is known, so it may have dropped what a later
  question needs.
* ``evidence`` -- the raw text the nodes were built from, reached through their provenance
  (:class:`~amb_dspy.storage.query_graph.Source` spans), cut into lines and ranked for the question by
  ``line score + node_weight x node score + context_weight x the best score of the lines beside it``: a
  line's own hybrid score (spec §6.1's formula over the lines), a share of the best score of a node it
  belongs to, where a node's score is its own hybrid score or ``hop_weight`` x the score of a linked
  node, whichever is higher (the graph's one hop), and a share of its neighbours' in the source text
  (an answer is often the turn after the one that matches the question's words).

Both fill the budget in rank order (a piece that does not fit is skipped, smaller ones after it may
still fit) and say which nodes and spans they showed, for provenance-based recall
(``bench/memory_recall.py``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.storage import QueryGraphNode

VIEWS = ("summary", "evidence")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
LINE_TOKENS = 400  # a longer line (a long paragraph) is shown sentence by sentence


@dataclass(frozen=True)
class Evidence:
    """One raw line of an interaction entry that a node was built from."""

    entry_id: str
    start: int
    end: int
    text: str
    node_id: str
    score: float = 0.0


def format_node(node: QueryGraphNode, number: int) -> str:
    return f"Memory {number} (node {node.id}):\nTopic: {node.context}\nKeywords: {', '.join(node.keywords)}\nSummary: {node.summary}"


def _header(node_id: str, number: int = 10) -> str:
    """A group's header, as the summary view's (the executor cites ``[node ID]``, and citations and
    ``deep_retrieval`` take a unique id prefix); for costing, number 10 is the dearest form up to 99 groups."""
    return f"Memory {number} (node {node_id}):"


def short_ids(ids: list[str], least: int = 8) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other id starts with."""
    ordered = sorted(ids)
    short = {}
    for i, node_id in enumerate(ordered):
        shared = max((len(os.path.commonprefix([node_id, other])) for other in ordered[max(i - 1, 0):i + 2]
                      if other != node_id), default=0)
        short[node_id] = node_id[:max(least, shared + 1)]
    return short


def _pieces(text: str, start: int, end: int, count: Callable[[str], int], line_tokens: int = LINE_TOKENS):
    """``(start, end)`` of the non-empty lines of ``text`` that the span ``[start, end)`` touches (whole lines:
    a span may begin or end inside one), long lines cut at sentence ends."""
    start = text.rfind("\n", 0, start) + 1
    end = len(text) if (cut := text.find("\n", max(end - 1, start))) < 0 else cut
    position = start
    for line in text[start:end].split("\n"):
        line_start, position = position, position + len(line) + 1
        if not line.strip():
            continue
        if count(line) <= line_tokens:
            yield line_start, line_start + len(line)
            continue
        cursor = 0
        for sentence in _SENTENCE_END.split(line):
            offset = line.index(sentence, cursor)
            cursor = offset + len(sentence)
            if sentence.strip():
                yield line_start + offset, line_start + cursor


class MemoryView:
    """Writes the ``<memory>`` block for a query from ``store`` in one of :data:`VIEWS`."""

    def __init__(self, store: MemoryStore, *, view: str = "summary", k: int = 5, alpha: float = 0.5,
                 node_weight: float = 0.3, hop_weight: float = 0.5, context_weight: float = 0.3,
                 line_tokens: int = LINE_TOKENS, count: Callable[[str], int] = estimate_tokens):
        if view not in VIEWS:
            raise ValueError(f"unknown memory view {view!r}: choose one of {', '.join(VIEWS)}")
        self.store, self.view, self.k, self.alpha = store, view, k, alpha
        # A line's cost is counted once: a block weighs every line of the bank until its budget is full.
        self.node_weight, self.hop_weight, self.line_tokens = node_weight, hop_weight, line_tokens
        self.count = functools.lru_cache(maxsize=100_000)(count)
        self.context_weight = context_weight
        self._vectors: dict[str, np.ndarray] = {}  # line text -> embedding, kept while the graph grows
        # (graph signature, lines, their index, each line's nodes), rebuilt when the graph's nodes change
        self._lines: tuple = (None, [], None, [])

    # --- ranking -----------------------------------------------------------------------------
    def node_scores(self, query: str, vector: np.ndarray) -> dict[str, float]:
        """Every node's hybrid score for the query, raised to ``hop_weight`` x a linked node's score."""
        graph = self.store.graph
        own = dict(self.store.index.rank(vector, query, k=len(graph), alpha=self.alpha))
        scores = dict(own)
        for node_id, score in own.items():
            for neighbour in graph.node(node_id).links:
                scores[neighbour] = max(scores.get(neighbour, 0.0), self.hop_weight * score)
        return scores

    def _line_index(self) -> tuple[list[Evidence], HybridIndex | None, list[list[str]]]:
        """The source lines of every node (each line once, with the first node that holds it), their index,
        and the ids of all the nodes that hold each line."""
        signature = tuple((node.id, tuple(node.sources)) for node in self.store.graph.nodes_dict.values())
        if self._lines[0] == signature:
            return self._lines[1:]
        entries, position, lines, holders = self.store.tree.entries, {}, [], []
        for node in self.store.graph.nodes_dict.values():
            for source in node.sources:
                text = entries[source.entry_id].text
                for span in source.spans:
                    for start, end in _pieces(text, *span, self.count, self.line_tokens):
                        key = (source.entry_id, start, end)
                        if key not in position:
                            position[key] = len(lines)
                            lines.append(Evidence(source.entry_id, start, end, text[start:end], node.id))
                            holders.append([])
                        holders[position[key]].append(node.id)
        new = [line.text for line in lines if line.text not in self._vectors]
        if new:
            self._vectors.update(zip(new, self.store.embedder.embed(new)))
        index = None
        if lines:
            index = HybridIndex(self.store.embedder.dim)
            index.add_many([str(i) for i in range(len(lines))], [line.text for line in lines],
                           np.stack([self._vectors[line.text] for line in lines]))
        self._lines = (signature, lines, index, holders)
        return lines, index, holders

    def ranked_nodes(self, query: str, vector: np.ndarray | None = None) -> list[QueryGraphNode]:
        """All nodes, best first by :meth:`node_scores` (a top node's neighbours follow it in the ranking)."""
        if len(self.store.graph) == 0:
            return []
        vector = self.store.embedder.embed([query])[0] if vector is None else vector
        scores = self.node_scores(query, vector)
        return [self.store.graph.node(n) for n in sorted(scores, key=lambda n: (-scores[n], n))]

    def ranked_evidence(self, query: str) -> list[Evidence]:
        """Every source line, best first by ``line score + node_weight x node score``."""
        lines, index, holders = self._line_index()
        if index is None:
            return []
        vector = self.store.embedder.embed([query])[0]
        nodes = self.node_scores(query, vector)
        own = {int(key): score for key, score in index.rank(vector, query, k=len(lines), alpha=self.alpha)}
        beside = self._adjacent(lines)
        scored = []
        for i, score in own.items():  # a line shared by several nodes takes the best one's score
            context = max((own.get(j, 0.0) for j in beside[i]), default=0.0)
            scored.append((score + self.node_weight * max(nodes.get(n, 0.0) for n in holders[i])
                           + self.context_weight * context, i))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [replace(lines[i], score=round(score, 6)) for score, i in scored]

    @staticmethod
    def _adjacent(lines: list[Evidence]) -> list[list[int]]:
        """For each line, the lines just before and after it in its entry's text (the turns around a turn)."""
        order = sorted(range(len(lines)), key=lambda i: (lines[i].entry_id, lines[i].start))
        beside: list[list[int]] = [[] for _ in lines]
        for a, b in zip(order, order[1:]):
            if lines[a].entry_id == lines[b].entry_id:
                beside[a].append(b)
                beside[b].append(a)
        return beside

    # --- the block ---------------------------------------------------------------------------
    def summary_block(self, query: str, budget: int) -> tuple[str, list[QueryGraphNode]]:
        """The spec's node blocks in rank order, as many as fit in ``budget`` tokens."""
        shown, used = [], 0
        for node in self.ranked_nodes(query):
            cost = self.count(format_node(node, len(shown) + 1)) + 1
            if used + cost <= budget:
                shown.append(node)
                used += cost
        return "\n\n".join(format_node(node, i) for i, node in enumerate(shown, 1)), shown

    def evidence_block(self, query: str, budget: int) -> tuple[str, list[Evidence]]:
        """Raw source lines in rank order, as many as fit in ``budget`` tokens, grouped under a header per node
        (its id, for ``deep_retrieval`` and citations) and shown in the text's order."""
        shown, used, headed = [], 0, set()
        short = short_ids(list(self.store.graph.nodes_dict))
        for line in self.ranked_evidence(query):
            cost = self.count(line.text) + 1 + (0 if line.node_id in headed else self.count(_header(short[line.node_id])) + 2)
            if used + cost <= budget:
                shown.append(line)
                headed.add(line.node_id)
                used += cost
        order = {entry_id: i for i, entry_id in enumerate(self.store.tree.entries)}
        shown.sort(key=lambda line: (order.get(line.entry_id, 0), line.start))
        groups: dict[str, list[str]] = {}
        for line in shown:
            groups.setdefault(line.node_id, []).append(line.text)
        blocks = [f"{_header(short[node_id], i)}\n" + "\n".join(texts) for i, (node_id, texts) in enumerate(groups.items(), 1)]
        return "\n\n".join(blocks), shown

    def block(self, query: str, budget: int) -> str:
        """The block in this view's form for ``query``, at most ``budget`` tokens."""
        return (self.evidence_block if self.view == "evidence" else self.summary_block)(query, budget)[0]
