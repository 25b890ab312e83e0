"""FAISS holds the embedding half of hybrid retrieval: inner products of normalised vectors.

Two copies of each vector, both with the row number equal to the integer key the BM25 index uses
(the hybrid index hands out small keys and reuses freed ones):

* a FAISS ``IndexScalarQuantizer`` in float16 that every search scans. A single query is bound by
  memory bandwidth (100k x 384 float32 is 150 MB per query), and half precision halves that. Its
  scores are within :meth:`VectorIndex.search_error` of the exact ones, which lets the hybrid
  ranking stay exact (it rescores its candidates and widens its stopping bound by that error).
* the exact float32 vectors in a numpy array, for exact scores of a few candidates.

Replacing or removing a vector is an O(dim) write into both, instead of ``IndexIDMap2.remove_ids``,
which shifts every later row and rebuilds its id map, O(n) per update. A removed row is zeroed and
marked dead; a search asks FAISS for as many extra results as there are dead rows and drops them.
"""

from __future__ import annotations

import numpy as np

# One query is a single scan. On small machines OpenMP workers that spin-wait after each search
# fight the caller (and numpy's BLAS threads) for the cores and cost far more than they save, so
# searches run on the calling thread.
SEARCH_THREADS = 1

# |float16(v).q - v.q| <= 2**-11 * |v| |q| (rounding to half precision) plus float32 summation
# error (about dim * 2**-24 * |v| |q| for each of the two sums compared); 1e-3 covers both for any
# dimension up to 4096 with room to spare.
_RELATIVE_ERROR = 1e-3


class VectorIndex:
    def __init__(self, dim: int):
        import faiss  # imported here: FAISS is not needed for `amb --help`

        self.dim = dim
        self._faiss = faiss
        self._index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        self._exact = np.zeros((0, dim), dtype=np.float32)  # row -> exact vector (grown by doubling)
        self._alive = np.zeros(0, dtype=bool)  # row -> holds a vector
        self._count = 0
        self._max_norm = 0.0  # largest norm ever stored: bounds the float16 error of any row

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (int, np.integer)) and 0 <= key < len(self._alive) and bool(self._alive[key])

    def _half_rows(self) -> np.ndarray:
        """FAISS's float16 codes as a writable (ntotal, dim) view; fetched anew because adds reallocate."""
        total = int(self._index.ntotal)
        if total == 0:
            return np.empty((0, self.dim), dtype=np.float16)
        codes = self._faiss.rev_swig_ptr(self._index.codes.data(), total * self._index.code_size)
        return codes.view(np.float16).reshape(total, self.dim)

    def _check(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of dimension {self.dim}, got shape {vectors.shape}")
        if not np.isfinite(vectors).all() or np.abs(vectors).max(initial=0.0) > 6e4:
            raise ValueError("vectors must hold finite numbers within float16 range (normalise them)")
        return vectors

    def _held(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        inside = (keys >= 0) & (keys < len(self._alive))
        if not inside.all() or not self._alive[keys].all():
            missing = [key for key in keys.tolist() if key not in self]
            raise KeyError(f"no vector for key(s) {missing}")
        return keys

    def add(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        vectors = self._check(vectors)
        keys = np.asarray(keys, dtype=np.int64).reshape(-1)
        if len(keys) != len(vectors):
            raise ValueError(f"{len(keys)} keys for {len(vectors)} vectors")
        if len(keys) == 0:
            return
        ordered = np.sort(keys)  # not np.unique: it hashes, many times slower on a bank's 25,000 lines
        if ordered[0] < 0 or (ordered[1:] == ordered[:-1]).any():
            raise ValueError("keys must be distinct non-negative integers")
        held = keys[keys < len(self._alive)]
        if self._alive[held].any():
            raise KeyError(f"key(s) {held[self._alive[held]].tolist()} already hold a vector")
        top = int(keys.max()) + 1
        if top > len(self._exact):
            grown = np.zeros((max(top, 2 * len(self._exact), 64), self.dim), dtype=np.float32)
            grown[: len(self._exact)] = self._exact
            self._exact = grown
        total = int(self._index.ntotal)
        if top > total:  # FAISS's storage grows with dead (zero) rows up to the highest new key
            self._index.add(np.zeros((top - total, self.dim), dtype=np.float32))
            self._alive = np.concatenate([self._alive, np.zeros(top - total, dtype=bool)])
        self._exact[keys] = vectors
        self._half_rows()[keys] = vectors.astype(np.float16)
        self._alive[keys] = True
        self._count += len(keys)
        self._max_norm = max(self._max_norm, float(np.linalg.norm(vectors, axis=1).max()))

    def copy(self) -> VectorIndex:
        """An index of the same vectors that changes apart from this one (FAISS's codes cloned, not re-encoded)."""
        other = VectorIndex.__new__(VectorIndex)
        other.dim, other._faiss, other._index = self.dim, self._faiss, self._faiss.clone_index(self._index)
        other._exact, other._alive = self._exact.copy(), self._alive.copy()
        other._count, other._max_norm = self._count, self._max_norm
        return other

    def remove(self, keys: np.ndarray) -> None:
        keys = np.unique(self._held(keys))
        self._exact[keys] = 0.0
        self._half_rows()[keys] = 0.0
        self._alive[keys] = False
        self._count -= len(keys)

    def search(self, query: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``top`` keys with the highest inner product, best first, and those products as
        scanned in half precision: each within :meth:`search_error` of the exact value."""
        top = min(top, self._count)
        if top <= 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        dead = int(self._index.ntotal) - self._count
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        threads = self._faiss.omp_get_max_threads()
        self._faiss.omp_set_num_threads(SEARCH_THREADS)
        try:
            sims, keys = self._index.search(query, top + dead)
        finally:
            self._faiss.omp_set_num_threads(threads)
        keys, sims = keys[0], sims[0]
        found = keys >= 0
        if dead:
            found &= self._alive[np.maximum(keys, 0)]
        return keys[found][:top], sims[found][:top]

    def search_error(self, query: np.ndarray) -> float:
        """How far a score from :meth:`search` may be from the exact inner product."""
        return _RELATIVE_ERROR * float(np.linalg.norm(query)) * self._max_norm

    def inner(self, keys: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Exact (float32) inner products of the query with the vectors under ``keys``."""
        keys = self._held(keys)
        # einsum, not BLAS: a small product is not worth waking a BLAS thread pool for.
        return np.einsum("ij,j->i", self._exact[keys], np.asarray(query, dtype=np.float32).reshape(-1))

    def vectors(self, keys: np.ndarray) -> np.ndarray:
        return self._exact[self._held(keys)]
