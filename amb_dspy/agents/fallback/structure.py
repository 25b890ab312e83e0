"""Structure without an LM: extractive compression to 30-50% of the tokens, sentences kept verbatim.

A summary written by a model can drop or garble a number; one made of the input's own sentences
cannot. Each sentence is scored by

    centrality (mean cosine to the chunk's other sentences)
    + QUERY_WEIGHT * share of the query terms it contains (query: the task goal and the cluster keywords)
    + LEAD_WEIGHT for a paragraph's first sentence (encyclopaedic and news text put the gist there)

and sentences are taken best first, skipping any that would push the summary over the top of the
agent's target (50%), until it reaches :data:`TARGET_RATIO` (40%) of the tokens; if that ends under the
bottom of the target (30%), one pick is swapped for a longer sentence where that lands inside it. The
picked sentences are then put back in their original order and paragraphs. A sentence longer than the whole allowance
(a table row, a page without full stops) is offered in slices of at most a fifth of the tokens instead,
so that a summary of 30% or more stays possible.

As on the LM path: content under the agent's ``verbatim_below`` tokens comes back whole with ratio 1.0,
content longer than the window is compressed chunk by chunk (paragraph boundaries), and the ratio is
measured with the agent's token counter over the whole.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from amb_dspy.agents.chunking import chunk_text, hard_split, split_paragraphs, split_sentences
from amb_dspy.agents.fallback.similarity import centrality, embed, embedder_or_default
from amb_dspy.agents.structure import ClusterText, StructureAgent, StructureOutput
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.keyword import tokenize

TARGET_RATIO = 0.4
# Chosen on train_100.jsonl (two gold paragraphs per question, their titles as keywords): share of
# the supporting sentences kept / of the answers kept, with the question as goal | without a goal, for
# (QUERY_WEIGHT, LEAD_WEIGHT) = (0, 0): 0.48 / 0.52 | 0.48 / 0.52; (0, 0.2): 0.58 / 0.69 | same;
# (0.5, 0): 0.66 / 0.71 | 0.61 / 0.64; (0.5, 0.2): 0.64 / 0.69 | 0.62 / 0.68; (1, 0.2): 0.64 / 0.70 | 0.60 / 0.64.
# (0.5, 0.2) holds up best without a goal, which is how the bank calls structure today; differences
# of 0.05 or less are noise at 91 answers.
QUERY_WEIGHT = 0.5
LEAD_WEIGHT = 0.2


def compress_extractively(
    agent: StructureAgent,
    embedder: Embedder | None = None,
    *,
    content: str = "",
    context: str = "",
    keywords: Sequence[str] = (),
    task_goal: str = "",
    batch: Sequence[ClusterText] | None = None,
) -> StructureOutput | list[StructureOutput]:
    """The sentences of ``content`` that best cover it and the query, in order (see module docstring).

    ``context`` is accepted for the agent's signature; ``task_goal`` is the one input the agent does not
    take: the bank may pass it to favour the sentences the task asks about. ``batch``: each cluster's
    summary, in order (the agent's batch form).
    """
    if batch is not None:
        return [compress_extractively(agent, embedder, content=c.content, context=c.context, keywords=c.keywords,
                                      task_goal=task_goal) for c in batch]
    text = content.strip()
    if not text:
        raise ValueError("structure agent: content is empty")
    input_tokens = agent.count_tokens(text)
    if input_tokens < agent.verbatim_below:
        return StructureOutput(summary=text, ratio=1.0, retried=False)
    embedder = embedder_or_default(embedder)
    query = set(tokenize(" ".join([task_goal, *keywords])))
    parts = []
    for chunk in chunk_text(text, agent.window, agent.count_tokens):
        if agent.count_tokens(chunk) < agent.verbatim_below:
            parts.append(chunk)
        else:
            parts.append(_extract(agent, embedder, chunk, query))
    summary = "\n\n".join(parts)
    return StructureOutput(summary=summary, ratio=agent.count_tokens(summary) / input_tokens, retried=False)


def _extract(agent: StructureAgent, embedder: Embedder, chunk: str, query: set[str]) -> str:
    count = agent.count_tokens
    total = count(chunk)
    ceiling, aim = agent.target[1] * total, TARGET_RATIO * total
    units: list[tuple[int, str, bool]] = []  # (paragraph number, text, opens its paragraph)
    for p, paragraph in enumerate(split_paragraphs(chunk)):
        sentences = [s.strip() for s in split_sentences(paragraph) if s.strip()]
        for n, sentence in enumerate(sentences):
            pieces = hard_split(sentence, max(1, int(total / 5)), count) if count(sentence) > ceiling else [sentence]
            units.extend((p, piece.strip(), n == 0 and k == 0) for k, piece in enumerate(pieces) if piece.strip())

    texts = [u[1] for u in units]
    overlap = np.array([len(query & set(tokenize(t))) / len(query) if query else 0.0 for t in texts])
    lead = np.array([1.0 if u[2] else 0.0 for u in units])
    score = centrality(embed(embedder, texts)) + QUERY_WEIGHT * overlap + LEAD_WEIGHT * lead
    ranked = sorted(range(len(units)), key=lambda i: (-score[i], i))

    join_cost = count("\n\n")  # what a unit may add besides itself: the space or blank line before it
    tokens = [count(t) + join_cost for t in texts]
    chosen: list[int] = []
    used = 0
    for i in ranked:
        if used >= aim:
            break
        if used + tokens[i] <= ceiling:
            chosen.append(i)
            used += tokens[i]
    chosen = _reach_floor(chosen or ranked[:1], ranked, tokens, agent.target[0] * total, ceiling)
    summary = _join(units, chosen)
    while count(summary) > ceiling and len(chosen) > 1:  # counted whole, a summary can differ from its parts
        chosen.pop()  # the lowest-scored pick
        summary = _join(units, chosen)
    return summary


def _reach_floor(chosen: list[int], ranked: list[int], tokens: list[int], floor: float, ceiling: float) -> list[int]:
    """``chosen`` (best first), or, when it is under ``floor`` tokens, the same with one pick swapped for a
    longer unit that brings it inside ``[floor, ceiling]``: the best such unit, replacing the worst pick
    that allows it. Whole sentences of awkward lengths ([96, 67, 65] tokens, the 67 picked first) need it."""
    used = sum(tokens[i] for i in chosen)
    if used >= floor:
        return chosen
    for candidate in (i for i in ranked if i not in chosen):
        for out in reversed(chosen):
            if floor <= used - tokens[out] + tokens[candidate] <= ceiling:
                return sorted([i for i in chosen if i != out] + [candidate], key=ranked.index)
    return chosen


def _join(units: list[tuple[int, str, bool]], chosen: list[int]) -> str:
    """The chosen units in input order: a space between sentences of a paragraph, a blank line between paragraphs."""
    paragraphs: dict[int, list[str]] = {}
    for i in sorted(chosen):
        paragraphs.setdefault(units[i][0], []).append(units[i][1])
    return "\n\n".join(" ".join(sentences) for sentences in paragraphs.values())
