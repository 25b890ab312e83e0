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

The evidence view's ranking also spreads over the graph (:mod:`amb_dspy.retrieval.spreading`): lines,
the nodes that hold them and the rare terms they share form one graph, and a personalized PageRank seeded
by the question's terms and best lines adds ``spread_weight`` x a line's visit share, so a second evidence
line that shares only a bridge name with the first still ranks. Besides:

* a word the question repeats counts once (:func:`~amb_dspy.retrieval.keyword.once_per_term`), for the lines, the
  nodes and the spreading's seeds alike;
* a question line's own score counts ``ask_weight``, in the sum and in the lines' own order that ``flat_share`` and
  the spreading's seeds take (in a dialogue the answer is the turn after it);
* a long turn's later sentences are indexed with its stamp and speaker (:func:`label_of`);
* a heading ("Ed Wood (film)" over its article) is no line of its own but indexes the lines of its paragraph
  (:func:`heading_of`): shown alone it spends the budget on a title, and its words are what tie a paragraph's
  later sentences to the question;
* a question that names one speaker of a dialogue counts the other speakers' lines ``other_weight``: what a
  person did is told in that person's own turns (96% of the evidence turns of LoCoMo 26's questions that name
  one speaker), while the other's turns name them too ("Wow, Caroline!");
* a line under a heading that one of the ``spread_seeds`` best lines names, from another paragraph, adds
  ``bridge_weight`` x that line's score (:meth:`~amb_dspy.retrieval.line_ranking.LineTable.bridged`): "... played
  their home games at the Androscoggin Bank Colisée" points to the article under "Androscoggin Bank Colisée",
  which holds the second hop of the question ("... can seat how many people?"), as a link would;
* ``flat_share`` of the ranking is the lines' own scores' order, interleaved
  (:func:`~amb_dspy.retrieval.line_ranking.interleave`), so that the graph's additions never push out every
  line that plain retrieval would have shown.

A question's cost follows the question, not the bank: only *candidate* lines are scored and ranked
(``MemoryView._candidates``): the ``candidates`` best lines by their own score (the lines' BM25 and FAISS
indexes, :meth:`~amb_dspy.retrieval.hybrid.HybridIndex.rank`), the lines just before and after them, the
``candidates`` lines the spreading reaches most, the lines of the ``k`` best nodes and of their one hop, and the
lines under a heading that a seed line names -- every line that any term of the sum can lift near the top.
Their scores are exact (:meth:`~amb_dspy.retrieval.hybrid.HybridIndex.scores_of`), so the block is the one a
ranking of every line would give wherever the budget is spent within the candidates (``tests/test_bank_grows.py``
checks it on a real bank). The lines are laid out and indexed as nodes arrive
(:class:`~amb_dspy.memory.view.line_index.LineIndex`); the summary view still ranks every line.

The arithmetic is :class:`~amb_dspy.retrieval.line_ranking.LineTable`'s, kept line by line as nodes arrive and fixed per
bank revision; the spreading is pushed from the question's seeds, so its work follows the question too. Lines are shown with
their relative dates resolved (:mod:`amb_dspy.memory.dates`; ``metadata["dates"]`` of the entry when ingest
recorded them), and a run of lines with one date (``[8 May, 2023] ...``, the stamp without its time of day)
shows it once.

Both views leave out the nodes of a document's superseded versions (:meth:`MemoryStore.current`): an old
version is shown only when nothing current is among the candidates.

The summary view shows a node's summary when it fits; when it does not, the node's topic and its
``summary_lines`` best lines for the question, so that no view comes back empty at a small budget.

Both fill the budget in rank order (a piece that does not fit is skipped, smaller ones after it may
still fit) and say which nodes and spans they showed, for provenance-based recall
(``bench/memory_recall.py``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.memory.dates import resolve_dates
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.line_index import LineIndex, embed_lines, export_bank
from amb_dspy.memory.view.lines import (
    LINE_TOKENS,
    Evidence,
    day_stamp,
    heading_of,
    is_heading,
    label_of,
    speaker_of,
)
from amb_dspy.retrieval.keyword import once_per_term, terms, words
from amb_dspy.retrieval.line_ranking import best_first, interleave
from amb_dspy.storage import QueryGraphNode

__all__ = ["VIEWS", "Evidence", "MemoryView", "day_stamp", "embed_lines", "export_bank", "format_node", "heading_of", "is_heading",
           "label_of", "short_ids", "speaker_of"]

VIEWS = ("summary", "evidence")
# Chosen on LoCoMo 26 and HotpotQA dev 0-149 (bench/memory_recall.py; the README lists the settings tried).
NODE_WEIGHT, HOP_WEIGHT, CONTEXT_WEIGHT = 0.3, 0.5, 0.5
SPREAD_WEIGHT = 0.3
SPREAD_SEEDS = 3  # the best lines whose terms seed the spreading, beside the question's terms
SUMMARY_LINES = 3
FLAT_SHARE = 0.3  # of the ranking, interleaved: the lines' own scores, before the graph's additions
ASK_WEIGHT = 0.5  # a question's own score counts half: the turn after it (context_weight) holds the answer
BRIDGE_WEIGHT = 1.0  # x the best score of a top line that names the heading over a line's paragraph
OTHER_WEIGHT = 0.7  # a line said by someone other than the one speaker a question names (dialogues)
CANDIDATES = 200  # the lines a question ranks, besides: the best by their own score (BM25 and FAISS over lines)
SHORT_ID = 6  # the shortest id prefix shown: the executor resolves prefixes of six or more characters


def format_node(node: QueryGraphNode, number: int, node_id: str = "") -> str:
    """The spec's node block; ``node_id``: the id as shown (a unique prefix; the whole id by default)."""
    return (f"Memory {number} (node {node_id or node.id}):\nTopic: {node.context}\nKeywords: {', '.join(node.keywords)}"
            f"\nSummary: {node.summary}")


def _header(node_id: str, number: int = 10) -> str:
    """A group's header, as the summary view's (the executor cites ``[node ID]``, and citations and
    ``deep_retrieval`` take a unique id prefix); for costing, number 10 is the dearest form up to 99 groups."""
    return f"Memory {number} (node {node_id}):"


def _dearest_id(node_id: str) -> str:
    """A hex id of the same length that costs the most tokens: digits and letters alternating ("0a0a..."),
    as a lone digit costs 2 under :func:`estimate_tokens` and a lone letter 1."""
    return ("0a" * len(node_id))[:len(node_id)]


def _header_cost(node_id: str, count: Callable[[str], int]) -> int:
    """What a header may cost, whatever the characters of the (random) id: its dearest form's count, so that
    the same lines are chosen whatever ids the nodes drew."""
    return count(_header(_dearest_id(node_id))) + 2


def short_ids(ids: list[str], least: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other id starts with."""
    ordered = sorted(ids)
    short = {}
    for i, node_id in enumerate(ordered):
        shared = max((len(os.path.commonprefix([node_id, other])) for other in ordered[max(i - 1, 0):i + 2]
                      if other != node_id), default=0)
        short[node_id] = node_id[:max(least, shared + 1)]
    return short


def _scored(line: Evidence, score: float) -> Evidence:
    """``line`` with its score (``dataclasses.replace`` costs ten times as much, on every line of every block)."""
    return Evidence(line.entry_id, line.start, line.end, line.text, line.node_id, round(score, 6))


class MemoryView:
    """Writes the ``<memory>`` block for a query from ``store`` in one of :data:`VIEWS`."""

    def __init__(self, store: MemoryStore, *, view: str = "summary", k: int = 5, alpha: float = 0.5,
                 node_weight: float = NODE_WEIGHT, hop_weight: float = HOP_WEIGHT, context_weight: float = CONTEXT_WEIGHT,
                 spread_weight: float = SPREAD_WEIGHT, spread_seeds: int = SPREAD_SEEDS, summary_lines: int = SUMMARY_LINES,
                 line_tokens: int = LINE_TOKENS, flat_share: float = FLAT_SHARE, ask_weight: float = ASK_WEIGHT,
                 other_weight: float = OTHER_WEIGHT, bridge_weight: float = BRIDGE_WEIGHT, candidates: int = CANDIDATES,
                 count: Callable[[str], int] = estimate_tokens):
        if view not in VIEWS:
            raise ValueError(f"unknown memory view {view!r}: choose one of {', '.join(VIEWS)}")
        self.store, self.view, self.k, self.alpha = store, view, k, alpha
        # A line's cost is counted once: a block weighs every line of the bank until its budget is full.
        self.node_weight, self.hop_weight, self.line_tokens = node_weight, hop_weight, line_tokens
        self.count = functools.lru_cache(maxsize=100_000)(count)
        self.context_weight, self.spread_weight, self.summary_lines = context_weight, spread_weight, summary_lines
        self.spread_seeds, self.flat_share, self.ask_weight = spread_seeds, flat_share, ask_weight
        self.other_weight, self.bridge_weight = other_weight, bridge_weight
        self.candidates = candidates
        self.line_index = LineIndex(store, self.count, line_tokens)
        self._short: tuple = (None, {})  # (the store's revision, the nodes' short ids)
        self._dates: dict[str, list[tuple[int, int, str]]] = {}  # entry id -> its resolved relative dates
        # (entry id, start, end) -> the line as shown, and (its stamp, its cost without, the stamp's cost)
        self._dated: dict[tuple[str, int, int], str] = {}
        self._costs: dict[tuple[str, int, int], tuple[str, int, int]] = {}

    def warm(self) -> None:
        """Lay out, index and tabulate the bank's lines now, as the first block would (seconds at a million tokens;
        :meth:`~amb_dspy.task.session.TaskSession.start` has a task do it on its thread before its first request)."""
        if self.line_index.refresh():
            self.line_index.tables()

    # --- ranking -----------------------------------------------------------------------------
    def node_scores(self, query: str, vector: np.ndarray) -> dict[str, float]:
        """Every node's hybrid score for the query, raised to ``hop_weight`` x a linked node's score."""
        graph = self.store.graph
        own = dict(self.store.index.rank(vector, once_per_term(query), k=len(graph), alpha=self.alpha))
        scores = dict(own)
        for node_id, score in own.items():
            for neighbour in graph.node(node_id).links:
                scores[neighbour] = max(scores.get(neighbour, 0.0), self.hop_weight * score)
        return scores

    def ranked_nodes(self, query: str, vector: np.ndarray | None = None) -> list[QueryGraphNode]:
        """All nodes, best first by :meth:`node_scores` (a top node's neighbours follow it in the ranking)."""
        if len(self.store.graph) == 0:
            return []
        vector = self.store.embedder.embed([query])[0] if vector is None else vector
        scores = self.node_scores(query, vector)
        order = {node_id: i for i, node_id in enumerate(self.store.graph.nodes_dict)}  # ids are random: ties by age
        ranked = [self.store.graph.node(n) for n in sorted(scores, key=lambda n: (-scores[n], order[n]))]
        return self.store.current(ranked, lambda node: node.id)  # a superseded version only when nothing else

    def ranked_evidence(self, query: str, every_line: bool = False) -> list[Evidence]:
        """The candidate lines (:meth:`_candidates`; ``every_line``: all of them), best first by ``line score
        (x ask_weight for a question) + node_weight x node score + context_weight x best neighbour's score +
        spread_weight x its share of the spreading``; with ``flat_share``, that ranking interleaved with the
        lines' own scores' (a share of the block for them)."""
        lines = self.line_index.refresh()
        if not lines:
            return []
        vector, asked = self.store.embedder.embed([query])[0], once_per_term(query)
        spreading, table, number = self.line_index.tables()
        top = self.line_index.index.rank(vector, asked, k=len(lines) if every_line else self.candidates, alpha=self.alpha)
        best = np.array(sorted(int(key) for key, _ in top), dtype=np.int64)
        own = np.zeros(len(lines))
        own[[int(key) for key, _ in top]] = [score for _, score in top]
        # a question about one speaker is answered by that speaker's own lines: the others' count other_weight
        speaker = np.where(table.said_by_others(set(words(query))), self.other_weight, 1.0)
        # the lines' own order (the block's flat share, the spreading's seeds) weighs a question's line as the sum does
        seeds = {int(i): float(own[i]) for i in best[best_first(table.asked(own * speaker, self.ask_weight)[best])][:self.spread_seeds]}
        spread = spreading.spread(terms(" ".join(asked)), seeds) if self.spread_weight else np.zeros(len(lines))
        bridged = table.bridged(seeds)
        chosen = best if every_line else self._candidates(best, spread, bridged, table, vector, asked)
        self._own_beside(chosen, own, best, table, vector, asked)
        nodes = self._held_scores(chosen, number, vector, asked)
        scores = table.scores(own, nodes, spread, node_weight=self.node_weight, context_weight=self.context_weight,
                              spread_weight=self.spread_weight, ask_weight=self.ask_weight)
        scores = speaker * (scores + self.bridge_weight * bridged)
        order = chosen[best_first(scores[chosen])].tolist()
        if self.flat_share:
            plain = chosen[best_first(table.asked(own * speaker, self.ask_weight)[chosen])]
            order = interleave(plain.tolist(), order, self.flat_share)
        # a superseded version's lines only when no current one is a candidate (MemoryStore.current)
        return self.store.current([_scored(lines[i], float(scores[i])) for i in order], lambda line: line.node_id)

    def _candidates(self, best: np.ndarray, spread: np.ndarray, bridged: np.ndarray, table, vector, asked) -> np.ndarray:
        """The lines worth ranking, in line order: ``best`` (the best by their own score), the lines just before
        and after them (their context share), the ``candidates`` lines the spreading reaches most, the lines of
        the best nodes and of their one hop (their node share), and the lines under a heading that a seed line
        names."""
        reach = np.argpartition(-spread, self.candidates)[:self.candidates] if len(spread) > self.candidates else np.arange(len(spread))
        nodes = [node for node, _ in self.store.index.rank(vector, asked, k=self.k, alpha=self.alpha)]
        nodes += [other for node in nodes for other in self.store.graph.node(node).links]
        held = [i for node in dict.fromkeys(nodes) for i in self.line_index.lines_of.get(node, ())]
        chosen = np.unique(np.concatenate([best, reach, table.before[best], table.after[best], np.flatnonzero(bridged),
                                           np.array(held, dtype=np.int64)]))
        return chosen[chosen >= 0]

    def _own_beside(self, chosen: np.ndarray, own: np.ndarray, best: np.ndarray, table, vector, asked) -> None:
        """Fill in ``own`` the exact own scores of the chosen lines and of the lines beside them, where the
        index's top (``best``) did not give them."""
        beside = np.concatenate([chosen, table.before[chosen], table.after[chosen]])
        missing = np.setdiff1d(beside[beside >= 0], best)
        if len(missing):
            own[missing] = self.line_index.index.scores_of(vector, asked, [str(i) for i in missing], self.alpha)

    def _held_scores(self, chosen: np.ndarray, number: dict[str, int], vector, asked) -> np.ndarray:
        """Per node (by number), its score as :meth:`node_scores` gives it, for the nodes that hold a chosen
        line (0 for the others: no chosen line reads them)."""
        graph, held = self.store.graph, {n for i in chosen.tolist() for n in self.line_index.holders[i]}
        wanted = list(held | {other for n in held for other in graph.node(n).links})
        own = dict(zip(wanted, self.store.index.scores_of(vector, asked, wanted, self.alpha).tolist()))
        nodes = np.zeros(len(number))
        for node_id in held:
            hop = max((own[other] for other in graph.node(node_id).links), default=0.0)
            nodes[number[node_id]] = max(own[node_id], self.hop_weight * hop)
        return nodes

    # --- showing lines ----------------------------------------------------------------------
    def _dates_of(self, entry_id: str) -> list[tuple[int, int, str]]:
        """The entry's relative dates resolved: as ingest recorded them, else worked out now (older banks)."""
        if entry_id not in self._dates:
            entry = self.store.tree.entries[entry_id]
            recorded = entry.metadata.get("dates")
            self._dates[entry_id] = ([tuple(d) for d in recorded] if recorded is not None
                                     else resolve_dates(entry.text, str(entry.metadata.get("date", ""))))
        return self._dates[entry_id]

    def dated(self, line: Evidence) -> str:
        """The line's text with each relative date followed by its absolute date: "yesterday (7 May 2023)"."""
        key = (line.entry_id, line.start, line.end)  # entries are append-only: a line's dated text never changes
        if key not in self._dated:
            self._dated[key] = self._with_dates(line)
        return self._dated[key]

    def _with_dates(self, line: Evidence) -> str:
        text = line.text
        for start, end, absolute in reversed(self._dates_of(line.entry_id)):
            if line.start <= start and end <= line.end:
                cut = end - line.start
                text = f"{text[:cut]} ({absolute}){text[cut:]}"
        return text

    def _render(self, lines: list[Evidence]) -> list[str]:
        """Lines as shown (text order is the caller's): dated, a run of lines with one stamp under it once."""
        out, stamp = [], None
        for line in lines:
            text = self.dated(line)
            own = day_stamp(text)
            if own:
                if own != stamp:
                    out.append(f"[{own}]")
                text = text[text.index("]") + 1:].lstrip()
            stamp = own or stamp  # a long turn's later sentences carry no stamp: still under the same one
            out.append(text)
        return out

    def _cost(self, line: Evidence, stamps: set) -> int:
        """Tokens a line adds to a group whose shown stamps are ``stamps`` (updated)."""
        key = (line.entry_id, line.start, line.end)
        if key not in self._costs:
            text = self.dated(line)
            own = day_stamp(text)
            self._costs[key] = ((own, self.count(text[text.index("]") + 1:].lstrip()) + 1, self.count(f"[{own}]") + 1)
                                if own else ("", self.count(text) + 1, 0))
        own, cost, stamp_cost = self._costs[key]
        if own and own not in stamps:
            stamps.add(own)
            cost += stamp_cost
        return cost

    def _fill(self, ranked: list[Evidence], budget: int, header: Callable[[str], int]) -> list[Evidence]:
        """Lines in rank order while they fit, each group's header (``header(node_id)`` tokens) and stamps
        costed once."""
        shown, used, stamps = [], 0, {}
        for line in ranked:
            fresh = line.node_id not in stamps
            seen = set(stamps.get(line.node_id, ()))
            cost = self._cost(line, seen) + (header(line.node_id) if fresh else 0)
            if used + cost <= budget:
                shown.append(line)
                stamps[line.node_id] = seen
                used += cost
        return shown

    # --- the block ---------------------------------------------------------------------------
    def summary_block(self, query: str, budget: int) -> tuple[str, list[QueryGraphNode], list[Evidence]]:
        """The spec's node blocks in rank order, as many as fit in ``budget`` tokens; a node whose summary does
        not fit shows its topic and its ``summary_lines`` best lines for the query instead. Returns the text,
        the nodes shown with their summary, and the lines shown for the others."""
        ranked = self.ranked_nodes(query)
        lines_by_node: dict[str, list[Evidence]] = {}
        for line in self.ranked_evidence(query, every_line=True) if ranked else []:
            lines_by_node.setdefault(line.node_id, []).append(line)
        parts, whole, shown_lines, used = [], [], [], 0
        short = self._short_ids()
        for node in ranked:
            number, node_id = len(parts) + 1, short[node.id]
            text = format_node(node, number, node_id)
            id_cost = self.count(_dearest_id(node_id)) - self.count(node_id)  # ids are random: cost the dearest form
            cost = self.count(text) + 1 + id_cost
            if used + cost <= budget and cost < budget // 2:
                parts.append(text)
                whole.append(node)
                used += cost
                continue
            head = f"Memory {number} (node {node_id}):\nTopic: {node.context}\nLines:"
            room = budget - used - self.count(head) - 2 - id_cost
            best = self._fill(lines_by_node.get(node.id, [])[:self.summary_lines], room, lambda _node: 0)
            if not best:
                continue
            best.sort(key=lambda line: line.start)
            text = "\n".join([head, *self._render(best)])
            parts.append(text)
            shown_lines.extend(best)
            used += self.count(text) + 2 + id_cost
        return "\n\n".join(parts), whole, shown_lines

    def _short_ids(self) -> dict[str, str]:
        """:func:`short_ids` of the store's nodes, worked out once per change of the store."""
        revision = (self.store.revision, len(self.store.graph))
        if self._short[0] != revision:
            self._short = (revision, short_ids(list(self.store.graph.nodes_dict)))
        return self._short[1]

    def evidence_block(self, query: str, budget: int) -> tuple[str, list[Evidence]]:
        """Raw source lines in rank order, as many as fit in ``budget`` tokens, grouped under a header per node
        (its id, for ``deep_retrieval`` and citations) and shown in the text's order."""
        short = self._short_ids()
        ranked = self.ranked_evidence(query)
        shown = self._fill(ranked, budget, functools.cache(lambda node_id: _header_cost(short[node_id], self.count)))
        while True:
            text = self._group(shown, short)
            dearest = sum(self.count(_dearest_id(short[n])) - self.count(short[n]) for n in {line.node_id for line in shown})
            if self.count(text) + dearest <= budget or not shown:
                return text, shown
            shown = shown[:-1]  # a stamp shown twice in one group: drop the last-ranked line

    def _group(self, shown: list[Evidence], short: dict[str, str]) -> str:
        order = {entry_id: i for i, entry_id in enumerate(self.store.tree.entries)}
        groups: dict[str, list[Evidence]] = {}
        for line in sorted(shown, key=lambda line: (order.get(line.entry_id, 0), line.start)):
            groups.setdefault(line.node_id, []).append(line)
        blocks = [f"{_header(short[node_id], i)}\n" + "\n".join(self._render(group))
                  for i, (node_id, group) in enumerate(groups.items(), 1)]
        return "\n\n".join(blocks)

    def block(self, query: str, budget: int) -> str:
        """The block in this view's form for ``query``, at most ``budget`` tokens."""
        return (self.evidence_block if self.view == "evidence" else self.summary_block)(query, budget)[0]
