"""What the ``<memory>`` block shows, at a token budget: the spec's summaries, or the raw evidence behind them.

Two views of the same Query Graph (``AMB_MEMORY_VIEW``), each a :class:`MemoryView` whose ``block(query, budget)``
writes the block (:func:`view_for` builds the one a setting names):

* ``summary`` (:class:`SummaryView`) -- the spec's block (§6.3): each retrieved node's topic, keywords and summary. A summary is
  written when the node is made, before any question is known, so it may have dropped what a later
  question needs.
* ``evidence`` (:class:`EvidenceView`) -- the raw text the nodes were built from, reached through their provenance
  (:class:`~amb_dspy.storage.query_graph.Source` spans), cut into lines and ranked for the question by
  ``line score + node_weight x node score + context_weight x the best score of the lines beside it``: a
  line's own hybrid score (spec §6.1's formula over the lines), a share of the best score of a node it
  belongs to, where a node's score is its own hybrid score or ``hop_weight`` x the score of a linked
  node, whichever is higher (the graph's one hop), and a share of its neighbours' in the source text
  (an answer is often the turn after the one that matches the question's words). Every weight named here is a
field of :class:`~amb_dspy.config.RankWeights` (``AMB_RANK_WEIGHTS``), documented there once.

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
(``Ranking._candidates``): the ``candidates`` best lines by their own score (the lines' BM25 and FAISS
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

from amb_dspy.config.sections import RankWeights
from amb_dspy.memory.view.line_index import LineIndex
from amb_dspy.memory.view.lines import LINE_TOKENS, Evidence, day_stamp, heading_of, is_heading, label_of, speaker_of
from amb_dspy.memory.view.query import Block, Query
from amb_dspy.memory.view.ranking import CANDIDATES, Ranking
from amb_dspy.memory.view.showing import SHORT_ID, LineShow, format_node, short_ids
from amb_dspy.memory.view.views import VIEWS, EvidenceView, MemoryView, SummaryView, ViewName, view_for

__all__ = ["CANDIDATES", "LINE_TOKENS", "SHORT_ID", "VIEWS", "Block", "Evidence", "EvidenceView", "LineIndex", "LineShow",
           "MemoryView", "Query", "RankWeights", "Ranking", "SummaryView", "ViewName", "day_stamp",
           "format_node", "heading_of", "is_heading", "label_of", "short_ids", "speaker_of", "view_for"]
