"""FAISS holds the embedding half of hybrid retrieval: exact inner product on normalised vectors.

Vectors are keyed by the same integer keys as the BM25 index (``IndexIDMap2`` over ``IndexFlatIP``),
so a key can be searched, reconstructed for exact rescoring, replaced and removed.
"""

from __future__ import annotations

import numpy as np


class VectorIndex:
    def __init__(self, dim: int):
        import faiss  # imported here: FAISS is not needed for `amb --help`

        self.dim = dim
        self._faiss = faiss
        self._index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def _check(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of dimension {self.dim}, got shape {vectors.shape}")
        return vectors

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        self._index.add_with_ids(self._check(vectors), np.ascontiguousarray(keys, dtype=np.int64))

    def remove(self, keys: np.ndarray) -> None:
        self._index.remove_ids(np.ascontiguousarray(keys, dtype=np.int64))

    def search(self, query: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``top`` keys with the highest inner product, best first, and those products."""
        top = min(top, len(self))
        if top <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        sims, keys = self._index.search(self._check(query.reshape(1, -1)), top)
        found = keys[0] >= 0
        return keys[0][found], sims[0][found]

    def vectors(self, keys: np.ndarray) -> np.ndarray:
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if len(keys) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_batch(keys)
