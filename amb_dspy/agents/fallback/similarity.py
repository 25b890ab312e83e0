"""Vectors and scores the fallback policies share: sentence embeddings, centrality, topic direction."""

from __future__ import annotations

import numpy as np

from amb_dspy.retrieval.embedding import Embedder, default_embedder


def embedder_or_default(embedder: Embedder | None) -> Embedder:
    """``embedder``, else the process-wide all-MiniLM-L6-v2 (loaded offline on first use)."""
    return embedder if embedder is not None else default_embedder()


def embed(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """Unit vectors of ``texts`` as float64 rows (an empty ``(0, dim)`` array for no text)."""
    if not texts:
        return np.zeros((0, embedder.dim))
    return np.asarray(embedder.embed(texts), dtype=np.float64)


def direction(vectors: np.ndarray) -> np.ndarray:
    """The unit vector of the rows' sum: what a group of sentences is about, as one vector."""
    total = vectors.sum(axis=0)
    norm = np.linalg.norm(total)
    return total / norm if norm > 0 else total


def centrality(vectors: np.ndarray) -> np.ndarray:
    """Each row's mean cosine to the other rows (1.0 for a lone row): high for a text's most typical sentences."""
    n = len(vectors)
    if n < 2:
        return np.ones(n)
    similarity = vectors @ vectors.T
    return (similarity.sum(axis=1) - np.diag(similarity)) / (n - 1)
