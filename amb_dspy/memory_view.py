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

The arithmetic is :class:`~amb_dspy.retrieval.line_ranking.LineTable`'s, laid out once per bank revision. Lines are shown with
their relative dates resolved (:mod:`amb_dspy.dates`; ``metadata["dates"]`` of the entry when ingest
recorded them), and a run of lines with one date (``[8 May, 2023] ...``, the stamp without its time of day)
shows it once.

The summary view shows a node's summary when it fits; when it does not, the node's topic and its
``summary_lines`` best lines for the question, so that no view comes back empty at a small budget.

Both fill the budget in rank order (a piece that does not fit is skipped, smaller ones after it may
still fit) and say which nodes and spans they showed, for provenance-based recall
(``bench/memory_recall.py``).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.dates import resolve_dates, stamp_of
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.retrieval.keyword import once_per_term, terms, words
from amb_dspy.retrieval.line_ranking import LineTable, best_first, interleave
from amb_dspy.retrieval.spreading import SpreadingGraph
from amb_dspy.storage import QueryGraphNode
from amb_dspy.text import paragraph_starts, split_sentences

VIEWS = ("summary", "evidence")
_TIME_OF_DAY = re.compile(r"^\d{1,2}[:.]\d{2}\s*(?:[ap]\.?m\.?)?\s*(?:on\s+)?", re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:\[[^\]\n]{1,60}\]\s*)?(?:[A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}:(?=\s))?")
# Chosen on LoCoMo 26 and HotpotQA dev 0-149 (bench/memory_recall.py; the README lists the settings tried).
LINE_TOKENS = 60  # a longer line (a long turn, a paragraph) is shown sentence by sentence
NODE_WEIGHT, HOP_WEIGHT, CONTEXT_WEIGHT = 0.3, 0.5, 0.5
SPREAD_WEIGHT = 0.3
SPREAD_SEEDS = 3  # the best lines whose terms seed the spreading, beside the question's terms
SUMMARY_LINES = 3
FLAT_SHARE = 0.3  # of the ranking, interleaved: the lines' own scores, before the graph's additions
ASK_WEIGHT = 0.5  # a question's own score counts half: the turn after it (context_weight) holds the answer
HEADING_TOKENS = 15  # a line this short with no closing punctuation, over a text line, is a heading
_CLOSED = re.compile(r"[.!?,:;\"'\]\u201d\u2019]\s*$")  # not ")": "Ed Wood (film)" is a title
BRIDGE_WEIGHT = 1.0  # x the best score of a top line that names the heading over a line's paragraph
OTHER_WEIGHT = 0.7  # a line said by someone other than the one speaker a question names (dialogues)
SHORT_ID = 6  # the shortest id prefix shown: the executor resolves prefixes of six or more characters


@dataclass(frozen=True)
class Evidence:
    """One raw line of an interaction entry that a node was built from."""

    entry_id: str
    start: int
    end: int
    text: str
    node_id: str
    score: float = 0.0


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


def day_stamp(line: str) -> str:
    """The line's date stamp as shown, without a time of day ("1:56 pm on 8 May, 2023" -> "8 May, 2023"): a
    date is what questions ask, and a stamp costs 19 tokens with its time and 11 without."""
    stamp = stamp_of(line)
    return _TIME_OF_DAY.sub("", stamp) or stamp


def short_ids(ids: list[str], least: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other id starts with."""
    ordered = sorted(ids)
    short = {}
    for i, node_id in enumerate(ordered):
        shared = max((len(os.path.commonprefix([node_id, other])) for other in ordered[max(i - 1, 0):i + 2]
                      if other != node_id), default=0)
        short[node_id] = node_id[:max(least, shared + 1)]
    return short


def label_of(line: str) -> str:
    """What a line says of itself before its content: its date stamp and speaker ("[8 May, 2023] Caroline:")."""
    match = _LABEL.match(line)
    return match.group(0).strip() if match else ""


def speaker_of(line: str) -> str:
    """Who says the line, lower-case ("[8 May, 2023] Caroline: Hi" -> "caroline"; "" when no one is named)."""
    label = label_of(line)
    return label[label.find("]") + 1:].strip().rstrip(":").lower()


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


def _heading_at(text: str, first: int, count: Callable[[str], int]) -> str:
    """The heading that opens the paragraph beginning at ``first`` ("" when its first line is none)."""
    line = _line_at(text, first)
    return line.strip() if is_heading(line, _line_at(text, first + len(line) + 1), count) else ""


def heading_of(text: str, line_start: int, count: Callable[[str], int] = estimate_tokens) -> str:
    """The heading of the paragraph (blank-line separated) whose line begins at ``line_start``; "" when its first
    line is no heading, or is that line."""
    starts = _paragraph_starts(text)
    first = starts[bisect.bisect_right(starts, line_start) - 1]
    return _heading_at(text, first, count) if first < line_start else ""


def _pieces(text: str, start: int, end: int, count: Callable[[str], int], line_tokens: int = LINE_TOKENS):
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
        if count(line) <= line_tokens:
            yield line_start, line_start + len(line), line_start
            continue
        offset = 0
        for sentence in split_sentences(line):  # pieces in order, each with its trailing whitespace
            if sentence.strip():
                yield line_start + offset, line_start + offset + len(sentence.rstrip()), line_start
            offset += len(sentence)


def _scored(line: Evidence, score: float) -> Evidence:
    """``line`` with its score (``dataclasses.replace`` costs ten times as much, on every line of every block)."""
    return Evidence(line.entry_id, line.start, line.end, line.text, line.node_id, round(score, 6))


class MemoryView:
    """Writes the ``<memory>`` block for a query from ``store`` in one of :data:`VIEWS`."""

    def __init__(self, store: MemoryStore, *, view: str = "summary", k: int = 5, alpha: float = 0.5,
                 node_weight: float = NODE_WEIGHT, hop_weight: float = HOP_WEIGHT, context_weight: float = CONTEXT_WEIGHT,
                 spread_weight: float = SPREAD_WEIGHT, spread_seeds: int = SPREAD_SEEDS, summary_lines: int = SUMMARY_LINES,
                 line_tokens: int = LINE_TOKENS, flat_share: float = FLAT_SHARE, ask_weight: float = ASK_WEIGHT,
                 other_weight: float = OTHER_WEIGHT, bridge_weight: float = BRIDGE_WEIGHT, count: Callable[[str], int] = estimate_tokens):
        if view not in VIEWS:
            raise ValueError(f"unknown memory view {view!r}: choose one of {', '.join(VIEWS)}")
        self.store, self.view, self.k, self.alpha = store, view, k, alpha
        # A line's cost is counted once: a block weighs every line of the bank until its budget is full.
        self.node_weight, self.hop_weight, self.line_tokens = node_weight, hop_weight, line_tokens
        self.count = functools.lru_cache(maxsize=100_000)(count)
        self.context_weight, self.spread_weight, self.summary_lines = context_weight, spread_weight, summary_lines
        self.spread_seeds, self.flat_share, self.ask_weight = spread_seeds, flat_share, ask_weight
        self.other_weight, self.bridge_weight = other_weight, bridge_weight
        self._vectors: dict[str, np.ndarray] = {}  # line text -> embedding, kept while the graph grows
        # (graph signature, lines, their index, the spreading graph, the lines' table), rebuilt when the graph changes
        self._lines: tuple = (None, [], None, None, None)
        self._dates: dict[str, list[tuple[int, int, str]]] = {}  # entry id -> its resolved relative dates
        # (entry id, start, end) -> the line as shown, and (its stamp, its cost without, the stamp's cost)
        self._dated: dict[tuple[str, int, int], str] = {}
        self._costs: dict[tuple[str, int, int], tuple[str, int, int]] = {}

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

    def _line_index(self) -> tuple[list[Evidence], HybridIndex | None, SpreadingGraph | None, LineTable | None]:
        """The source lines of every node (each line once, with the first node that holds it), their index,
        the graph the ranking spreads over, and the lines' table (both know every node that holds a line)."""
        signature = tuple((node.id, tuple(node.sources), tuple(sorted(node.links)), tuple(node.keywords))
                          for node in self.store.graph.nodes_dict.values())
        if self._lines[0] == signature:
            return self._lines[1:]
        entries, position, lines, holders, indexed, speakers, headings = self.store.tree.entries, {}, [], [], [], [], []
        for node in self.store.graph.nodes_dict.values():
            for source in node.sources:
                text = entries[source.entry_id].text
                for span in source.spans:
                    for start, end, line_start in _pieces(text, *span, self.count, self.line_tokens):
                        key = (source.entry_id, start, end)
                        if key not in position:
                            position[key] = len(lines)
                            lines.append(Evidence(source.entry_id, start, end, text[start:end], node.id))
                            # a long line's later sentences are found by its stamp and speaker too, a paragraph's
                            # lines by its heading
                            heading = heading_of(text, line_start, self.count)
                            headings.append(heading)
                            label = " ".join(filter(None, (heading, label_of(text[line_start:start]) if start > line_start else "")))
                            indexed.append(f"{label} {text[start:end]}" if label else text[start:end])
                            speakers.append(speaker_of(text[line_start:end]))
                            holders.append([])
                        holders[position[key]].append(node.id)
        new = list(dict.fromkeys(line.text for line in lines if line.text not in self._vectors))
        if new:
            self._vectors.update(zip(new, self.store.embedder.embed(new)))
        index = spreading = table = None
        if lines:
            index = HybridIndex(self.store.embedder.dim)
            index.add_many([str(i) for i in range(len(lines))], indexed, np.stack([self._vectors[line.text] for line in lines]))
            nodes = list(self.store.graph.nodes_dict.values())
            number = {node.id: i for i, node in enumerate(nodes)}
            links = sorted({tuple(sorted((number[n.id], number[o]))) for n in nodes for o in n.links if o in number})
            numbered = [[number[n] for n in held] for held in holders]
            spreading = SpreadingGraph([terms(line.text) for line in lines], numbered,
                                       [terms(" ".join(node.keywords)) for node in nodes], links)
            table = LineTable.build([(line.entry_id, line.start) for line in lines], numbered, [line.text for line in lines],
                                    speakers, headings)
        self._lines = (signature, lines, index, spreading, table)
        return lines, index, spreading, table

    def ranked_nodes(self, query: str, vector: np.ndarray | None = None) -> list[QueryGraphNode]:
        """All nodes, best first by :meth:`node_scores` (a top node's neighbours follow it in the ranking)."""
        if len(self.store.graph) == 0:
            return []
        vector = self.store.embedder.embed([query])[0] if vector is None else vector
        scores = self.node_scores(query, vector)
        order = {node_id: i for i, node_id in enumerate(self.store.graph.nodes_dict)}  # ids are random: ties by age
        return [self.store.graph.node(n) for n in sorted(scores, key=lambda n: (-scores[n], order[n]))]

    def ranked_evidence(self, query: str) -> list[Evidence]:
        """Every source line, best first by ``line score (x ask_weight for a question) + node_weight x node score
        + context_weight x best neighbour's score + spread_weight x its share of the spreading``; with
        ``flat_share``, that ranking interleaved with the lines' own scores' (a share of the block for them)."""
        lines, index, spreading, table = self._line_index()
        if index is None:
            return []
        vector = self.store.embedder.embed([query])[0]
        node_scores = self.node_scores(query, vector)
        nodes = np.array([node_scores.get(node_id, 0.0) for node_id in self.store.graph.nodes_dict])
        own = np.zeros(len(lines))
        asked = once_per_term(query)
        for key, score in index.rank(vector, asked, k=len(lines), alpha=self.alpha):
            own[int(key)] = score
        # a question about one speaker is answered by that speaker's own lines: the others' count other_weight
        speaker = np.where(table.said_by_others(set(words(query))), self.other_weight, 1.0)
        # the lines' own order (the block's flat share, the spreading's seeds) weighs a question's line as the sum does
        plain = best_first(table.asked(own * speaker, self.ask_weight))
        seeds = {int(i): float(own[i]) for i in plain[:self.spread_seeds]}
        spread = spreading.spread(terms(" ".join(asked)), seeds) if self.spread_weight else np.zeros(len(lines))
        scores = table.scores(own, nodes, spread, node_weight=self.node_weight, context_weight=self.context_weight,
                              spread_weight=self.spread_weight, ask_weight=self.ask_weight)
        scores = speaker * (scores + self.bridge_weight * table.bridged(seeds))
        order = best_first(scores).tolist()
        if self.flat_share:
            order = interleave(plain.tolist(), order, self.flat_share)
        return [_scored(lines[i], float(scores[i])) for i in order]

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
        for line in self.ranked_evidence(query) if ranked else []:
            lines_by_node.setdefault(line.node_id, []).append(line)
        parts, whole, shown_lines, used = [], [], [], 0
        short = short_ids(list(self.store.graph.nodes_dict))
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

    def evidence_block(self, query: str, budget: int) -> tuple[str, list[Evidence]]:
        """Raw source lines in rank order, as many as fit in ``budget`` tokens, grouped under a header per node
        (its id, for ``deep_retrieval`` and citations) and shown in the text's order."""
        short = short_ids(list(self.store.graph.nodes_dict))
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
