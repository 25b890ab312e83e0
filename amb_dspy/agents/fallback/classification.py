"""Classification without an LM: adjacent segments on the same topic stay together.

The input is cut exactly as :class:`~amb_dspy.agents.classification.ClassificationAgent` cuts it
(paragraphs; sentence runs for an over-long paragraph, see :func:`~amb_dspy.agents.chunking.segment`),
so every segment lands in exactly one cluster and clusters hold the original text.

Grouping walks the segments in order and keeps a segment in the open cluster while its vector stays
close to the cluster's running centroid and the cluster stays within the agent's topic size
(``agent.topic_tokens``, ``AMB_TOPIC_MIN_TOKENS`` to ``AMB_TOPIC_MAX_TOKENS``: a cluster under the minimum
takes the next segment of its paragraph whatever its cosine); otherwise a new cluster starts. A new
paragraph -- in a dialogue, a new session -- starts a new cluster once the open one holds the minimum. "Close" is a cosine of at least :data:`SAME_TOPIC_COSINE` (0.6)
between paragraphs, but only :data:`SAME_TOPIC_COSINE_SHORT` (0.35) when the segment or the one before
it is about a sentence long (under :data:`SHORT_SEGMENT_TOKENS` estimated tokens): sentences of one
topic embed far less alike than paragraphs do ("He was born in 1950." shares little with the sentence
naming him), while whole paragraphs on neighbouring topics embed quite alike. A segment's vector is the
direction of its sentences' vectors, so a long paragraph is not cut at the model's 256-word-piece limit.

A heading (a short single line that does not end like a sentence) always opens a cluster, and the
segment after it joins it: a section title belongs with its section, whatever their cosine.

Why a centroid and not TextTiling's depth scores: measured on HotpotQA train (see the constants),
TextTiling (blocks of two segments, depth at least 0.2) groups sentences better (ARI 0.62 against 0.41)
but merges whole paragraphs on neighbouring topics (0.14 against 0.81): depth is relative, with no
notion of "these two are simply different", and most inputs here are paragraphs.

Each cluster is described from its own text: its context is its most central sentence (highest mean
cosine to the cluster's other sentences, headings aside), its keywords the terms of highest BM25 weight, the clusters
being BM25's documents, so a cluster's keywords are what sets it apart from the others (for a single
cluster, its most frequent terms). The idf is Lucene's, ``ln(1 + (N - df + 0.5) / (df + 0.5))``, not
Okapi's as in :mod:`amb_dspy.retrieval.keyword`: over one or two clusters Okapi's idf is zero or
negative for every term. Keywords short of :data:`KEYWORDS` are filled with the most frequent words,
as on the LM path.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from amb_dspy.agents.base import dedupe, fallback_context, fallback_keywords
from amb_dspy.agents.chunking import TokenCounter, estimate_tokens, paragraph_breaks, split_sentences
from amb_dspy.agents.classification import ClassificationAgent, ClassificationOutput, Cluster
from amb_dspy.agents.fallback.similarity import centrality, direction, embed, embedder_or_default
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.keyword import tokenize
from amb_dspy.text import ends_clause, locate, words

# Calibrated on train_100.jsonl with optimize.metrics.grade_classification (ARI x coverage) on two
# sets of 100 inputs of two gold paragraphs and a distractor: optimize.trainsets' classification
# examples (one sentence per segment) and the same paragraphs whole (one paragraph per segment).
# Mean score sentences / paragraphs in a first sweep: one threshold 0.35: 0.41 / 0.40; 0.5: 0.21 / 0.72;
# 0.6: 0.12 / 0.85; these three constants: 0.41 / 0.81 (SHORT 40 or 80: 0.35 / 0.85, 0.41 / 0.76).
# bench/heuristic_policy.py (its own draw of distractors) gives 0.41 / 0.84 on train with them.
SAME_TOPIC_COSINE = 0.6
SAME_TOPIC_COSINE_SHORT = 0.35
SHORT_SEGMENT_TOKENS = 60  # by estimate_tokens: HotpotQA's median sentence is 41, its shortest tenth of paragraphs 80+
KEYWORDS = 5
BM25_K1, BM25_B = 1.5, 0.75  # the keyword index's parameters
CONTEXT_WORDS = 30


def classify_by_similarity(
    agent: ClassificationAgent, embedder: Embedder | None = None, *, context: str, task_goal: str = ""
) -> ClassificationOutput:
    """Topic clusters of ``context`` by embedding similarity of adjacent segments (see module docstring).

    ``task_goal`` is accepted for the agent's signature; topics here come from the text alone.
    """
    if not context.strip():
        return ClassificationOutput(should_cluster=False, clusters=[])
    embedder = embedder_or_default(embedder)
    limit = agent.window
    low, high = agent.topic_tokens
    segments = agent.topic_segments(context, limit)
    sentences = [[s.strip() for s in split_sentences(seg) if s.strip()] or [seg] for seg in segments]
    flat = [s for group in sentences for s in group]
    vectors = embed(embedder, flat)
    starts = np.cumsum([0] + [len(group) for group in sentences])
    segment_vectors = [direction(vectors[starts[i]:starts[i + 1]]) for i in range(len(segments))]

    spans = locate(context, segments)
    groups = _adjacent_groups(segment_vectors, segments, agent.count_topic_tokens, (low, high),
                              paragraph_breaks(context, spans), window=(agent.count_tokens, limit))
    texts = ["\n\n".join(segments[i] for i in members) for members in groups]
    keywords = _bm25_keywords(texts)
    clusters = []
    for n, (members, text) in enumerate(zip(groups, texts)):
        prose = [i for i in members if not is_heading(segments[i])] or members  # a heading names, it does not describe
        rows = [r for i in prose for r in range(starts[i], starts[i + 1])]
        central = flat[rows[int(np.argmax(centrality(vectors[rows])))]]
        clusters.append(Cluster(
            cluster_id=f"c{n + 1}",
            context=fallback_context(central, words=CONTEXT_WORDS),
            content=text,
            keywords=dedupe(keywords[n] + fallback_keywords(text, KEYWORDS))[:KEYWORDS],
            spans=[spans[i] for i in members],
        ))
    return ClassificationOutput(should_cluster=len(clusters) > 1, clusters=clusters)


def is_heading(segment: str) -> bool:
    """A short single line that does not end like a sentence: a title, a section heading, a label."""
    line = segment.strip()
    return "\n" not in line and estimate_tokens(line) < SHORT_SEGMENT_TOKENS and not ends_clause(line)


def _adjacent_groups(vectors: list[np.ndarray], segments: list[str], count: TokenCounter, bounds: tuple[int, int],
                     breaks: list[bool], window: tuple[TokenCounter, int] | None = None) -> list[list[int]]:
    """Segment indices grouped in order (see module docstring): a segment joins the open group while the group
    is under ``bounds[0]`` tokens, or when it is close enough to the group's centroid, or the group holds only
    headings; a heading opens a group, and so does a new paragraph (a dialogue's new session) once the group
    holds ``bounds[0]`` tokens. No group goes over ``bounds[1]`` tokens, nor over ``window``'s limit by its counter
    (the LM's window, in the LM's tokens)."""
    low, high = bounds
    window_count, window_limit = window or (count, high)
    sep_tokens, window_sep = count("\n\n"), window_count("\n\n")
    short = [estimate_tokens(s) < SHORT_SEGMENT_TOKENS for s in segments]
    heading = [is_heading(s) for s in segments]
    groups: list[list[int]] = []
    total, size, window_size = None, 0, 0
    for i, vector in enumerate(vectors):
        tokens, window_tokens = count(segments[i]), window_count(segments[i])
        if groups and size + sep_tokens + tokens <= high and window_size + window_sep + window_tokens <= window_limit:
            threshold = SAME_TOPIC_COSINE_SHORT if short[i] or short[i - 1] else SAME_TOPIC_COSINE
            centroid = total / (np.linalg.norm(total) or 1.0)
            under_headings = all(heading[j] for j in groups[-1])
            similar = float(vector @ centroid) >= threshold
            if under_headings or not heading[i] and (similar and size < low if breaks[i] else similar or size < low):
                groups[-1].append(i)
                total, size = total + vector, size + sep_tokens + tokens
                window_size += window_sep + window_tokens
                continue
        groups.append([i])
        total, size, window_size = vector.copy(), tokens, window_tokens
    return groups


def _bm25_keywords(texts: list[str]) -> list[list[str]]:
    """Per text, its :data:`KEYWORDS` terms of highest BM25 weight, the texts being the documents, in
    their first written form."""
    surface: dict[str, str] = {}
    for word in words("\n".join(texts)):  # the keyword index's tokens, to find a term's original casing
        surface.setdefault(word.lower(), word)
    counts = [Counter(t for t in tokenize(text) if _keyword_term(t)) for text in texts]
    df = Counter(term for c in counts for term in c)
    lengths = [sum(c.values()) for c in counts]
    average = sum(lengths) / len(lengths) or 1.0
    out = []
    for c, length in zip(counts, lengths):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * length / average)
        weight = {t: math.log(1 + (len(texts) - df[t] + 0.5) / (df[t] + 0.5)) * tf * (BM25_K1 + 1) / (tf + norm)
                  for t, tf in c.items()}
        # sorted() is stable and Counter keeps first-seen order: ties go to the earlier term
        out.append([surface.get(t, t) for t in sorted(weight, key=lambda t: -weight[t])[:KEYWORDS]])
    return out


def _keyword_term(term: str) -> bool:
    """Words of three characters or more ("s" of "France's" is not one) and years; other numbers are
    pieces of a figure the tokenizer cut at its commas ("182" of "182,000")."""
    return len(term) == 4 if term.isdigit() else len(term) >= 3
