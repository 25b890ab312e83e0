"""The two views of the ``<memory>`` block behind one protocol (:class:`MemoryView`): the raw evidence
(:class:`EvidenceView`) and the spec's summaries (:class:`SummaryView`), chosen once, where a view is built
(:func:`view_for`)."""

from __future__ import annotations

import functools
from typing import Protocol

from amb_dspy.config.sections import RankWeights, ViewName
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.lines import Evidence
from amb_dspy.memory.view.query import Block, Query
from amb_dspy.memory.view.ranking import Ranking
from amb_dspy.memory.view.showing import LineShow, format_node
from amb_dspy.storage import QueryGraphNode


class MemoryView(Protocol):
    """What writes the ``<memory>`` block for a question, at most ``budget`` tokens, from its ``ranking``'s store."""

    ranking: Ranking

    def block(self, query: str | Query, budget: int) -> Block: ...

    def warm(self) -> None: ...


class _RankedView:
    """What both views hold: the ranking they show, and how its lines are shown."""

    def __init__(self, ranking: Ranking):
        self.ranking = ranking
        self.show = LineShow(ranking.store, ranking.count)

    def warm(self) -> None:
        self.ranking.warm()


class EvidenceView(_RankedView):
    """Raw source lines in rank order (:meth:`Ranking.ranked_evidence`), as many as fit in the budget, grouped
    under a header per node (its id, for ``deep_retrieval`` and citations) and shown in the text's order."""

    def block(self, query: str | Query, budget: int) -> Block:
        count, show = self.ranking.count, self.show
        ranked = self.ranking.ranked_evidence(query)
        shown = show.fill(ranked, budget, functools.cache(show.header_cost))
        short = show.short_ids()
        while True:
            text = show.grouped(shown)
            dearest = sum(show.id_cost(short[n]) for n in {line.node_id for line in shown})
            if count(text) + dearest <= budget or not shown:
                return Block(text, tuple(shown))
            shown = shown[:-1]  # a stamp shown twice in one group: drop the last-ranked line


class SummaryView(_RankedView):
    """The spec's node blocks in rank order (:meth:`Ranking.ranked_nodes`), as many as fit in the budget; a node
    whose summary does not fit shows its topic and its ``summary_lines`` best lines for the question instead."""

    def block(self, query: str | Query, budget: int) -> Block:
        if len(self.ranking.store.graph) == 0:
            return Block("")
        query = self.ranking.query(query)
        ranked = self.ranking.ranked_nodes(query)
        lines_by_node: dict[str, list[Evidence]] = {}
        for line in self.ranking.ranked_evidence(query, every_line=True) if ranked else []:
            lines_by_node.setdefault(line.node_id, []).append(line)
        parts, whole, shown_lines, used = [], [], [], 0
        short, count = self.show.short_ids(), self.ranking.count
        for node in ranked:
            number, node_id = len(parts) + 1, short[node.id]
            text = format_node(node, number, node_id)
            id_cost = self.show.id_cost(node_id)  # ids are random: cost the dearest form
            cost = count(text) + 1 + id_cost
            if used + cost <= budget and cost < budget // 2:
                parts.append(text)
                whole.append(node)
                used += cost
                continue
            text, best = self._topic_and_lines(node, number, node_id, lines_by_node.get(node.id, []),
                                               budget - used - id_cost)
            if best:
                parts.append(text)
                shown_lines.extend(best)
                used += count(text) + 2 + id_cost
        return Block("\n\n".join(parts), tuple(shown_lines), tuple(whole))

    def _topic_and_lines(self, node: QueryGraphNode, number: int, node_id: str, ranked: list[Evidence],
                         room: int) -> tuple[str, list[Evidence]]:
        """The node's topic and its ``summary_lines`` best lines (``ranked``: its lines, best first) that fit in
        ``room`` tokens, in the text's order; no lines when none fits."""
        head = f"Memory {number} (node {node_id}):\nTopic: {node.context}\nLines:"
        best = self.show.fill(ranked[:self.ranking.weights.summary_lines], room - self.ranking.count(head) - 2,
                              lambda _node: 0)
        best.sort(key=lambda line: line.start)
        return "\n".join([head, *self.show.render(best)]), best


VIEWS: dict[str, type[EvidenceView] | type[SummaryView]] = {"summary": SummaryView, "evidence": EvidenceView}


def view_for(store: MemoryStore, view: ViewName = "summary", *, weights: RankWeights | None = None, k: int = 5,
             alpha: float = 0.5) -> MemoryView:
    """The view named ``view`` (a :class:`~amb_dspy.config.ViewSettings` ``memory_view``) of ``store``, ranking as
    ``weights`` say with the store's retrieval ``k`` and ``alpha``."""
    if view not in VIEWS:
        raise ValueError(f"unknown memory view {view!r}: choose one of {', '.join(VIEWS)}")
    return VIEWS[view](Ranking(store, weights=weights, k=k, alpha=alpha))
