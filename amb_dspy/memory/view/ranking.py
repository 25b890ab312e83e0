"""A question's ranking of the bank's nodes and source lines, as both views read it (the terms of the sum:
:mod:`amb_dspy.memory.view`; their weights: :class:`~amb_dspy.config.RankWeights`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.config.sections import RankWeights
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.line_index import LineIndex
from amb_dspy.memory.view.lines import LINE_TOKENS, Evidence
from amb_dspy.memory.view.query import Query
from amb_dspy.retrieval.line_ranking import LineTable, best_first, interleave
from amb_dspy.storage import QueryGraphNode

CANDIDATES = 200  # the lines a question ranks, besides: the best by their own score (BM25 and FAISS over lines)


def _scored(line: Evidence, score: float) -> Evidence:
    """``line`` with its score (``dataclasses.replace`` costs ten times as much, on every line of every block)."""
    return Evidence(line.entry_id, line.start, line.end, line.text, line.node_id, round(score, 6))


class Ranking:
    """The nodes and source lines of ``store`` ranked for a question: ``k`` and ``alpha`` as the store's
    retrieval (spec §6.1), ``weights`` the terms of a line's score, ``line_tokens`` where a long line is cut into
    sentences, ``candidates`` how many lines by their own score a question ranks (with what they reach), ``count``
    the token counter (cached here: a block weighs every line of the bank until its budget is full)."""

    def __init__(self, store: MemoryStore, *, weights: RankWeights | None = None, k: int = 5, alpha: float = 0.5,
                 line_tokens: int = LINE_TOKENS, candidates: int = CANDIDATES,
                 count: Callable[[str], int] = estimate_tokens):
        self.store, self.k, self.alpha, self.candidates = store, k, alpha, candidates
        self.weights = weights or RankWeights()
        self.count = functools.lru_cache(maxsize=100_000)(count)
        self.line_index = LineIndex(store, self.count, line_tokens)

    def query(self, question: str | Query) -> Query:
        """``question`` as the ranking reads it, embedded by the store's embedder."""
        return Query.of(question, self.store.embedder)

    def warm(self) -> None:
        """Lay out, index and tabulate the bank's lines now, as the first block would (seconds at a million tokens;
        :meth:`~amb_dspy.task.session.TaskSession.start` has a task do it on its thread before its first request)."""
        if self.line_index.refresh():
            self.line_index.tables()

    # --- nodes -------------------------------------------------------------------------------
    def node_scores(self, query: Query) -> dict[str, float]:
        """Every node's hybrid score for the query, raised to ``hop_weight`` x a linked node's score."""
        graph = self.store.graph
        own = dict(self.store.index.rank(query.vector, query.asked, k=len(graph), alpha=self.alpha))
        scores = dict(own)
        for node_id, score in own.items():
            for neighbour in graph.node(node_id).links:
                scores[neighbour] = max(scores.get(neighbour, 0.0), self.weights.hop_weight * score)
        return scores

    def ranked_nodes(self, question: str | Query) -> list[QueryGraphNode]:
        """All nodes, best first by :meth:`node_scores` (a top node's neighbours follow it in the ranking)."""
        if len(self.store.graph) == 0:
            return []
        scores = self.node_scores(self.query(question))
        order = {node_id: i for i, node_id in enumerate(self.store.graph.nodes_dict)}  # ids are random: ties by age
        ranked = [self.store.graph.node(n) for n in sorted(scores, key=lambda n: (-scores[n], order[n]))]
        return self.store.current(ranked, lambda node: node.id)  # a superseded version only when nothing else

    # --- lines -------------------------------------------------------------------------------
    def ranked_evidence(self, question: str | Query, every_line: bool = False) -> list[Evidence]:
        """The candidate lines (:meth:`_candidates`; ``every_line``: all of them), best first by ``line score
        (x ask_weight for a question) + node_weight x node score + context_weight x best neighbour's score +
        spread_weight x its share of the spreading``; with ``flat_share``, that ranking interleaved with the
        lines' own scores' (a share of the block for them)."""
        lines = self.line_index.refresh()
        if not lines:
            return []
        query, weights = self.query(question), self.weights
        spreading, table, number = self.line_index.tables()
        top = self.line_index.index.rank(query.vector, query.asked, k=len(lines) if every_line else self.candidates,
                                         alpha=self.alpha)
        best = np.array(sorted(int(key) for key, _ in top), dtype=np.int64)
        own = np.zeros(len(lines))
        own[[int(key) for key, _ in top]] = [score for _, score in top]
        # a question about one speaker is answered by that speaker's own lines: the others' count other_weight
        speaker = np.where(table.said_by_others(query.words), weights.other_weight, 1.0)
        # the lines' own order (the block's flat share, the spreading's seeds) weighs a question's line as the sum does
        flat = best[best_first(table.asked(own * speaker, weights.ask_weight)[best])]
        seeds = {int(i): float(own[i]) for i in flat[:weights.spread_seeds]}
        spread = spreading.spread(query.terms, seeds) if weights.spread_weight else np.zeros(len(lines))
        bridged = table.bridged(seeds)
        chosen = best if every_line else self._candidates(query, best, spread, bridged, table)
        self._own_beside(query, chosen, own, best, table)
        scores = table.scores(own, self._held_scores(query, chosen, number), spread, node_weight=weights.node_weight,
                              context_weight=weights.context_weight, spread_weight=weights.spread_weight,
                              ask_weight=weights.ask_weight)
        scores = speaker * (scores + weights.bridge_weight * bridged)
        order = chosen[best_first(scores[chosen])].tolist()
        if weights.flat_share:
            plain = chosen[best_first(table.asked(own * speaker, weights.ask_weight)[chosen])]
            order = interleave(plain.tolist(), order, weights.flat_share)
        # a superseded version's lines only when no current one is a candidate (MemoryStore.current)
        return self.store.current([_scored(lines[i], float(scores[i])) for i in order], lambda line: line.node_id)

    def _candidates(self, query: Query, best: np.ndarray, spread: np.ndarray, bridged: np.ndarray,
                    table: LineTable) -> np.ndarray:
        """The lines worth ranking, in line order: ``best`` (the best by their own score), the lines just before
        and after them (their context share), the ``candidates`` lines the spreading reaches most, the lines of
        the best nodes and of their one hop (their node share), and the lines under a heading that a seed line
        names."""
        reach = np.argpartition(-spread, self.candidates)[:self.candidates] if len(spread) > self.candidates else np.arange(len(spread))
        nodes = [node for node, _ in self.store.index.rank(query.vector, query.asked, k=self.k, alpha=self.alpha)]
        nodes += [other for node in nodes for other in self.store.graph.node(node).links]
        held = [i for node in dict.fromkeys(nodes) for i in self.line_index.lines_of.get(node, ())]
        chosen = np.unique(np.concatenate([best, reach, table.before[best], table.after[best], np.flatnonzero(bridged),
                                           np.array(held, dtype=np.int64)]))
        return chosen[chosen >= 0]

    def _own_beside(self, query: Query, chosen: np.ndarray, own: np.ndarray, best: np.ndarray, table: LineTable) -> None:
        """Fill in ``own`` the exact own scores of the chosen lines and of the lines beside them, where the
        index's top (``best``) did not give them."""
        beside = np.concatenate([chosen, table.before[chosen], table.after[chosen]])
        missing = np.setdiff1d(beside[beside >= 0], best)
        if len(missing):
            own[missing] = self.line_index.index.scores_of(query.vector, query.asked, [str(i) for i in missing],
                                                           self.alpha)

    def _held_scores(self, query: Query, chosen: np.ndarray, number: dict[str, int]) -> np.ndarray:
        """Per node (by number), its score as :meth:`node_scores` gives it, for the nodes that hold a chosen
        line (0 for the others: no chosen line reads them)."""
        graph, held = self.store.graph, {n for i in chosen.tolist() for n in self.line_index.holders[i]}
        wanted = list(held | {other for n in held for other in graph.node(n).links})
        own = dict(zip(wanted, self.store.index.scores_of(query.vector, query.asked, wanted, self.alpha).tolist()))
        nodes = np.zeros(len(number))
        for node_id in held:
            hop = max((own[other] for other in graph.node(node_id).links), default=0.0)
            nodes[number[node_id]] = max(own[node_id], self.weights.hop_weight * hop)
        return nodes
