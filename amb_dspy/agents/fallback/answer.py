"""Answering without an LM: the best evidence line of ``<memory>`` for the goal, cited, marked extractive.

``<memory>`` is read as the adapter writes it: groups headed ``Memory N (node ID):`` holding raw source
lines (the evidence view) or a node's topic, keywords and summary (the summary view). Only lines inside a
group are candidates, so every answer cites its node (what long-term memory recalled from earlier tasks,
and the "no memory yet" line, are not this task's evidence). Each candidate line (a long one sentence by
sentence, keyword lists left out) is scored with the spec's hybrid formula against the
goal, ``alpha * BM25/max + (1 - alpha) * cosine`` (a :class:`~amb_dspy.retrieval.hybrid.HybridIndex`
over the lines, the real embedder), and the best one is the answer, citing its group's node.

With ``cover=True`` the answer is instead the few lines that together cover the goal's terms
(:func:`covering_lines`), each group citing its node: what a goal of several parts ("which river ... and
when ...") needs, since no one line answers it.

The answer is never ``sufficient``: it is a quotation for a reader to check, not a judgement.
"""

from __future__ import annotations

import re

from amb_dspy.agents.answer import AnswerAgent, AnswerOutput
from amb_dspy.agents.fallback.similarity import embed, embedder_or_default
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.retrieval.keyword import terms
from amb_dspy.text import split_sentences, words

_HEADER = re.compile(r"^Memory \d+ \(node ([0-9a-fA-F]{6,32})\):\s*$")
_LABEL = re.compile(r"^(Topic|Summary):\s*")
# a search response's first line repeats the query (amb_dspy.tools.search.format_results): no evidence
_SEARCH_ECHO = re.compile(r"^(?:Search for '.*' found \d+ results?:|No results for '.*'\..*)$")
# a source line that starts with its document's title and then the text that repeats it ("Port Merrow Port
# Merrow is a harbour city ..."): quoted, the title goes
_TITLE_TWICE = re.compile(r"^(.{3,80}?) (?=(?:The |A |An )?\1\b)")
HYBRID_ALPHA = 0.5  # AmbConfig.retrieval_alpha's default, as the memory view ranks lines
MAX_LINE_CHARS = 400
MAX_COVERING_LINES = 4


def evidence_lines(memory: str) -> list[tuple[str, str]]:
    """``(line, node id)`` for each candidate line of a ``<memory>`` block, in its order."""
    lines: list[tuple[str, str]] = []
    node = ""
    for raw in memory.splitlines():
        line = raw.strip()
        header = _HEADER.match(line)
        if header:
            node = header.group(1)
            continue
        if not line:
            node = ""  # a group ends at a blank line (what follows the last one is no node's)
            continue
        if not node or line.startswith("Keywords:") or _SEARCH_ECHO.match(line):
            continue
        line = _LABEL.sub("", line).lstrip("-* ").strip()
        pieces = split_sentences(line) if len(line) > MAX_LINE_CHARS else [line]
        lines += [(piece.strip(), node) for piece in pieces if piece.strip()]
    return lines


def covering_lines(memory: str, goal: str) -> list[tuple[str, str]]:
    """The few ``(line, node id)`` of ``memory`` that together cover the goal's terms: at each turn the line
    holding the most terms not yet covered, then the most names right beside a term of the goal ("River
    Sennet" for "which river"), then the earliest; at most :data:`MAX_COVERING_LINES`, in the order chosen;
    none when no line holds a term of the goal."""
    goal_terms = set(terms(goal))
    candidates = [(line, node, set(terms(line)) & goal_terms, _named_terms(line, goal_terms))
                  for line, node in evidence_lines(memory)]
    uncovered, chosen = set(goal_terms), []
    while uncovered and len(chosen) < MAX_COVERING_LINES:
        best = max(range(len(candidates)), default=None,
                   key=lambda i: (len(candidates[i][2] & uncovered), candidates[i][3], -i))
        if best is None or not candidates[best][2] & uncovered:
            break
        line, node, covered, _ = candidates.pop(best)
        chosen.append((line, node))
        uncovered -= covered
    return chosen


def _named_terms(line: str, goal_terms: set[str]) -> int:
    """How many capitalised words of ``line`` that are not the goal's stand right beside one of its terms."""
    tokens = words(line)
    stems = [next(iter(terms(token)), "") for token in tokens]
    return sum(1 for i, token in enumerate(tokens)
               if token[:1].isupper() and stems[i] not in goal_terms
               and any(0 <= j < len(tokens) and stems[j] in goal_terms for j in (i - 1, i + 1)))


def extract_answer(agent: AnswerAgent, embedder: Embedder | None = None, *, task_goal: str, memory: str,
                   judge: bool = True, cover: bool = False) -> AnswerOutput:
    """The line of ``memory`` with the best hybrid score for ``task_goal``, or with ``cover`` the lines that
    together cover it (see module docstring)."""
    candidates = evidence_lines(memory)
    if not candidates:
        return AnswerOutput(answer="", extractive=True, reason="extractive: memory holds no line to quote")
    covering = covering_lines(memory, task_goal) if cover else []
    if covering:
        nodes = list(dict.fromkeys(node for _, node in covering))
        return AnswerOutput(answer=" ".join(_TITLE_TWICE.sub("", line)[:MAX_LINE_CHARS] for line, _ in covering), cited_node_ids=nodes,
                            extractive=True, reason=f"extractive: the {len(covering)} memory lines that cover the goal")
    embedder = embedder_or_default(embedder)
    vectors = embed(embedder, [task_goal, *(line for line, _ in candidates)])
    index = HybridIndex(vectors.shape[1])
    index.add_many([str(i) for i in range(len(candidates))], [line for line, _ in candidates], vectors[1:])
    best, score = index.rank(vectors[0], task_goal, k=1, alpha=HYBRID_ALPHA)[0]
    line, node = candidates[int(best)]
    return AnswerOutput(answer=line[:MAX_LINE_CHARS], cited_node_ids=[node], extractive=True,
                        reason=f"extractive: the memory line with the best hybrid score ({score:.2f}) for the goal")
