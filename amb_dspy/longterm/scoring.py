"""How a long-term item is scored for a query: small pure functions, no storage.

``S = a * sim + b * decay + c * source_boost`` where

* ``sim`` is an absolute hybrid similarity, ``alpha * overlap + (1 - alpha) * cosine``. The bank's
  retrieval normalises BM25 by the best match of each query (spec §6.1), which is right for ranking
  but cannot carry a fixed threshold: the best match always gets the full lexical half, however
  weak it is. Long-term memory needs thresholds (a minimum score to recall, a similarity to merge
  duplicates), so the lexical part here is the share of the query's words that the item contains,
  a number that means the same thing in every store and every namespace;
* ``decay = exp(-lambda * age_days)``, the age counted from the item's last update (a merge renews it);
* ``source_boost`` is in [0, 1]: 1 for items backed by source spans, 0.5 for items that only name
  graph nodes or citations, 0 for unsourced ones (see :func:`source_boost`).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class ScoreWeights:
    """The weights of ``S = a * sim + b * decay + c * source_boost`` and the decay rate.

    The default ``decay_per_day`` of 0.01 halves the recency term in about 69 days.
    """

    similarity: float = 0.7
    recency: float = 0.2
    source: float = 0.1
    decay_per_day: float = 0.01

    def __post_init__(self) -> None:
        for name in ("similarity", "recency", "source", "decay_per_day"):
            if getattr(self, name) < 0:
                raise ValueError(f"score weight {name} must not be negative, got {getattr(self, name)}")


def decay(age_days: float, decay_per_day: float) -> float:
    """``exp(-lambda * age_days)``; an age below zero (a clock set back) counts as zero."""
    return math.exp(-decay_per_day * max(0.0, age_days))


def age_days(updated_at: float, now: float) -> float:
    """Days between two POSIX timestamps."""
    return (now - updated_at) / SECONDS_PER_DAY


def overlap(query_tokens: Collection[str], doc_tokens: Collection[str]) -> float:
    """The share of the query's distinct words that the document contains, in [0, 1]."""
    query = set(query_tokens)
    if not query:
        return 0.0
    return len(query & set(doc_tokens)) / len(query)


def containment(a_tokens: Collection[str], b_tokens: Collection[str]) -> float:
    """Symmetric overlap of two statements: the larger of each one's share found in the other."""
    return max(overlap(a_tokens, b_tokens), overlap(b_tokens, a_tokens))


def dice(a_tokens: Collection[str], b_tokens: Collection[str]) -> float:
    """Dice coefficient of two statements' distinct words, ``2|A & B| / (|A| + |B|)``: the harmonic mean
    of each one's share found in the other. The near-duplicate test uses it rather than
    :func:`containment`, which gives a short statement contained in a longer one (a different,
    narrower fact about the same thing) the full lexical half."""
    a, b = set(a_tokens), set(b_tokens)
    return 2 * len(a & b) / (len(a) + len(b)) if a or b else 0.0


def hybrid_similarity(cosine: float, lexical: float, alpha: float) -> float:
    """``alpha * lexical + (1 - alpha) * cosine``, the cosine clipped to [0, 1]."""
    return alpha * lexical + (1.0 - alpha) * min(1.0, max(0.0, cosine))


def score(similarity: float, recency: float, boost: float, weights: ScoreWeights) -> float:
    """``S = a * sim + b * decay + c * source_boost``."""
    return weights.similarity * similarity + weights.recency * recency + weights.source * boost


def source_boost(*, spans: int, node_ids: int, citations: int) -> float:
    """How well an item is backed: 1 with source spans, 0.5 with node ids or citations only, else 0."""
    if spans:
        return 1.0
    if node_ids or citations:
        return 0.5
    return 0.0
