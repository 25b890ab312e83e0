"""Exact nearest neighbours by inner product over string ids: the search side of the Qdrant Edge store.

:class:`NearestIndex` keeps one vector per id in the project's :class:`~amb_dspy.retrieval.vector.VectorIndex`
(a FAISS scan in half precision plus the exact float32 rows) and answers the ``n`` ids with the highest
exact inner product, the same answer as a brute-force float32 scan: it fetches a pool by the
half-precision scan, rescores the pool exactly, and widens the pool until no id outside it can beat the
``n``-th (every score outside is at most the pool's lowest scanned score plus the scan's error bound).
It is derived data: its owner builds it from the store and changes it after the store has changed.
"""

from __future__ import annotations

import numpy as np

from amb_dspy.retrieval.vector import VectorIndex

_MIN_POOL = 64


class NearestIndex:
    def __init__(self, dim: int):
        self.dim = dim
        self._vectors = VectorIndex(dim)
        self._key_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self._free: list[int] = []
        self._next_key = 0

    def __len__(self) -> int:
        return len(self._key_of)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._key_of

    def put(self, ids: list[str], vectors: np.ndarray) -> None:
        """Add the ids' vectors, replacing the vector of an id already held."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), self.dim)
        if len(set(ids)) != len(ids):
            raise ValueError("the ids of one put must be distinct")
        held = [i for i in ids if i in self._key_of]
        if held:
            self._vectors.remove(np.array([self._key_of[i] for i in held]))
        keys = []
        for item_id in ids:
            key = self._key_of.get(item_id)
            if key is None:
                if self._free:
                    key = self._free.pop()
                else:
                    key, self._next_key = self._next_key, self._next_key + 1
                self._key_of[item_id], self._id_of[key] = key, item_id
            keys.append(key)
        self._vectors.add(np.array(keys, dtype=np.int64), vectors)

    def remove(self, ids: list[str]) -> None:
        keys = [self._key_of.pop(i) for i in ids if i in self._key_of]
        if keys:
            self._vectors.remove(np.array(keys, dtype=np.int64))
        for key in keys:
            del self._id_of[key]
            self._free.append(key)

    def vector(self, item_id: str) -> np.ndarray:
        return self._vectors.vectors(np.array([self._key_of[item_id]]))[0]

    def nearest(self, query: np.ndarray, n: int) -> list[tuple[str, float]]:
        """The ``n`` ids with the highest exact inner product with ``query``, best first (ties by id)."""
        held = len(self._key_of)
        n = min(n, held)
        if n <= 0:
            return []
        query = np.asarray(query, dtype=np.float32).reshape(-1)
        pool = max(_MIN_POOL, 4 * n)
        while True:
            keys, scanned = self._vectors.search(query, min(pool, held))
            exact = self._vectors.inner(keys, query)
            ids = [self._id_of[int(k)] for k in keys]
            order = sorted(range(len(ids)), key=lambda j: (-float(exact[j]), ids[j]))[:n]
            if len(keys) >= held or float(exact[order[-1]]) >= float(scanned.min()) + self._vectors.search_error(query):
                return [(ids[j], float(exact[j])) for j in order]
            pool *= 4
