"""Condensing what was recalled before it goes into ``<memory>``: :func:`summarize`.

Recalled items are whole statements, trajectories and tool logs written for other goals; shown as
they are they spend the budget on sentences the new goal does not need and on restatements. The
condensed block keeps, item by item (best first), the item's tag (task, date, kind) and its
sentences or lines ranked by the share of the goal's words they contain, drops a sentence whose
words are mostly said already, and stops at ``max_tokens`` (``AMB_LONGTERM_MAX_TOKENS``). A
trajectory keeps its task and outcome lines first; a conclusion keeps its answer first. The kept
sentences of an item stay in their original order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from amb_dspy.longterm.remember import RECALL_HEADER, RecalledItem
from amb_dspy.longterm.scoring import overlap
from amb_dspy.longterm.statements import sentences as split_sentences
from amb_dspy.retrieval.keyword import tokenize

# A sentence most of whose words the block already holds is a restatement.
_ALREADY_SAID = 0.8
_ALWAYS_KEPT = ("Answer:", "Task:", "Outcome:")


def _parts(item: RecalledItem) -> list[str]:
    """An item's sentences (statements) or lines (trajectories, tool logs, question/answer pairs)."""
    lines = [line.strip() for line in item.item.content.splitlines() if line.strip()]
    if len(lines) > 1 or item.item.kind in ("trajectory", "tool_effect"):
        return lines
    return split_sentences(item.item.content)


def summarize(items: Sequence[RecalledItem], goal: str, *, max_tokens: int,
              count_tokens: Callable[[str], int] | None = None) -> str:
    """The "From earlier tasks:" block for ``goal`` from ``items`` (best first), within ``max_tokens``;
    empty when nothing fits."""
    if count_tokens is None:
        from amb_dspy.agents.chunking import estimate_tokens as count_tokens
    goal_tokens = set(tokenize(goal))
    said: set[str] = set()
    budget = max_tokens - count_tokens(RECALL_HEADER)
    blocks = []
    for item in items:
        tag = item.tag
        parts = _parts(item)
        ranked = sorted(range(len(parts)), key=lambda i: (not parts[i].startswith(_ALWAYS_KEPT),
                                                          -overlap(goal_tokens, tokenize(parts[i])), i))
        cost = count_tokens(f"- {tag} ")
        kept: list[int] = []
        for index in ranked:
            words = tokenize(parts[index])
            if words and overlap(words, said) >= _ALREADY_SAID:
                continue
            part_cost = count_tokens(parts[index]) + 1
            if cost + part_cost > budget:
                continue
            kept.append(index)
            cost += part_cost
            said.update(words)
        if kept:
            blocks.append(f"- {tag} " + "\n  ".join(parts[i] for i in sorted(kept)))
            budget -= cost
    return "\n".join([RECALL_HEADER, *blocks]) if blocks else ""
