"""``amb eval --mode rag``: retrieve, then answer in one call -- the first baseline a memory system meets.

The passages a question may draw on are indexed flat, with no graph and no LM: HotpotQA's paragraphs
sentence by sentence (the question's own, or with ``--corpus`` every question's), LoCoMo's turns one by
one. For each question the best units by the spec's hybrid score (``alpha * BM25/max + (1 - alpha) *
cosine``, a :class:`~amb_dspy.retrieval.hybrid.HybridIndex` over the real embedder) fill the same token
budget as the bank's ``<memory>`` (``AmbConfig.memory_tokens``), shown in their source order under one
header per passage, and the answer agent's own signature (:class:`~amb_dspy.agents.answer.AnswerFromMemory`,
compiled when ``--compiled`` holds it) answers in one LM call. So rag and bank differ only in what
fills ``<memory>``: flat retrieval here, the Query Graph there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amb_dspy.agents import AGENT_CLASSES, AnswerAgent
from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.agents.compiled import apply_compiled
from amb_dspy.config import AmbConfig
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.text import split_sentences


@dataclass(frozen=True)
class Unit:
    """One retrievable line: its passage (a title or a session) and its text."""

    passage: str
    text: str


class FlatRetriever:
    """Units indexed once; :meth:`block` writes the best of them for a query within a token budget."""

    def __init__(self, units: Sequence[Unit], embedder: Any, *, alpha: float = 0.5):
        self.units, self.embedder, self.alpha = list(units), embedder, alpha
        self.index = HybridIndex(embedder.dim)
        if self.units:
            self.index.add_many([str(i) for i in range(len(self.units))], [u.text for u in self.units],
                                embedder.embed([u.text for u in self.units]))

    def block(self, query: str, budget: int, *, within: set[str] | None = None) -> str:
        """The best units for ``query`` (only from the passages ``within`` when given) that fit in ``budget``
        tokens, in source order under ``Memory N (passage):`` headers."""
        ranked = self.index.rank(self.embedder.embed([query])[0], query, k=len(self.units), alpha=self.alpha)
        chosen, used, headed = [], 0, set()
        for key, _ in ranked:
            unit = self.units[int(key)]
            if within is not None and unit.passage not in within:
                continue
            cost = estimate_tokens(unit.text) + 1 + (0 if unit.passage in headed else estimate_tokens(unit.passage) + 6)
            if used + cost <= budget:
                chosen.append(int(key))
                headed.add(unit.passage)
                used += cost
        groups: dict[str, list[str]] = {}
        for i in sorted(chosen):
            groups.setdefault(self.units[i].passage, []).append(self.units[i].text)
        return "\n\n".join(f"Memory {n} ({passage}):\n" + "\n".join(lines) for n, (passage, lines) in enumerate(groups.items(), 1))


def paragraph_units(paragraphs: Sequence[Any]) -> list[Unit]:
    """HotpotQA paragraphs (``title``, ``sentences``) as one unit per sentence, each paragraph once."""
    seen, units = set(), []
    for paragraph in paragraphs:
        if paragraph.title in seen:
            continue
        seen.add(paragraph.title)
        units += [Unit(paragraph.title, s.strip()) for s in paragraph.sentences if s.strip()]
    return units


def turn_units(turns: Sequence[Any]) -> list[Unit]:
    """LoCoMo turns as one unit each (its date, speaker and text), grouped by session."""
    return [Unit(f"session {turn.session}", turn.line()) for turn in turns]


def text_units(text: str, name: str) -> list[Unit]:
    """Any text as one unit per sentence."""
    return [Unit(name, s.strip()) for s in split_sentences(text) if s.strip()]


class RagAnswerer:
    """One question: the flat block for it, then the answer agent's one call (in the caller's LM context)."""

    def __init__(self, retriever: FlatRetriever, config: AmbConfig, compiled: str | Path | None = None):
        self.retriever, self.budget = retriever, config.memory_tokens
        self.agent = AnswerAgent(config)
        if compiled is not None:  # the manifest may hold other agents too: they are loaded and left unused
            agents = {name: cls(config) for name, cls in AGENT_CLASSES.items()}
            self.agent = apply_compiled({**agents, "answer": self.agent}, compiled)["answer"]

    def __call__(self, question: str, within: set[str] | None = None) -> str:
        memory = self.retriever.block(question, self.budget, within=within)
        return self.agent(task_goal=question, memory=memory).answer
