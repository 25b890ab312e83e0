"""Hybrid retrieval (spec §6.1): ``alpha * BM25/max(BM25) + (1 - alpha) * cosine``.

:class:`HybridIndex` ranks documents exactly as the spec's formula over *all* documents would, but
without computing the cosine of every document in Python. It takes the ``m`` best documents by
cosine (a FAISS scan) and the ``m`` best by BM25 (BM25 is already a dense vector), rescores that
union exactly, and stops when no document outside the union can beat the k-th result: such a
document scores at most ``alpha * bm25_m + (1 - alpha) * (cos_m + e)``, the ``m``-th values of each
list, ``e`` being the error bound of FAISS's half-precision scan. If the bound is not met, ``m``
grows (the threshold algorithm of Fagin et al.).

:func:`retrieve` adds the graph part: top-k, one hop of neighbours, newest first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import numpy as np

from amb_dspy.retrieval.keyword import BM25Index, terms
from amb_dspy.retrieval.vector import VectorIndex
from amb_dspy.storage.query_graph import QueryGraph, QueryGraphNode

_MIN_POOL = 256
_PREFETCH_FROM = 50_000


class HybridIndex:
    """BM25 and FAISS over the same documents, kept in step, keyed by string ids."""

    def __init__(self, dim: int):
        self.dim = dim
        self.keyword = BM25Index()
        self.vector = VectorIndex(dim)
        self._key_of: dict[str, int] = {}
        self._id_of: dict[int, str] = {}
        self._free: list[int] = []
        self._next_key = 0
        self._alive = np.zeros(1024, dtype=bool)  # key -> holds a document

    def __len__(self) -> int:
        return len(self._key_of)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._key_of

    def ids(self) -> set[str]:
        return set(self._key_of)

    def _vector(self, vector: np.ndarray) -> np.ndarray:
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.dim:
            raise ValueError(f"expected a vector of dimension {self.dim}, got {vector.shape[0]}")
        return vector

    def add(self, doc_id: str, text: str, vector: np.ndarray) -> None:
        if doc_id in self._key_of:
            raise KeyError(f"{doc_id!r} is already indexed")
        vector = self._vector(vector)
        tokens = terms(text)
        key = self._free[-1] if self._free else self._next_key
        if key >= len(self._alive):
            self._alive = np.concatenate([self._alive, np.zeros(len(self._alive), dtype=bool)])
        self._put(key, tokens, vector)
        if self._free:
            self._free.pop()
        else:
            self._next_key += 1
        self._key_of[doc_id] = key
        self._id_of[key] = doc_id
        self._alive[key] = True

    def add_many(self, doc_ids: list[str], texts: list[str] | None, vectors: np.ndarray, *,
                 token_lists: list[list[str]] | None = None) -> None:
        """Index many documents at once, all or none: one FAISS write for all the vectors instead of one
        per document (a 5,000-document corpus loads in a fraction of the time). They take new keys.
        ``token_lists``: the texts' :func:`~amb_dspy.retrieval.keyword.terms`, when the caller has them already
        (``texts`` is then not read)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if token_lists is None:
            token_lists = [terms(text) for text in texts]
        if len(token_lists) != len(doc_ids) or vectors.shape != (len(doc_ids), self.dim):
            raise ValueError(f"{len(doc_ids)} ids, {len(token_lists)} texts and vectors of shape {vectors.shape} "
                             f"(expected {(len(doc_ids), self.dim)})")
        if len(set(doc_ids)) != len(doc_ids) or any(d in self._key_of for d in doc_ids):
            raise KeyError("document ids must be distinct and not indexed yet")
        if not doc_ids:
            return
        keys = np.arange(self._next_key, self._next_key + len(doc_ids))
        if keys[-1] >= len(self._alive):
            self._alive = np.concatenate([self._alive, np.zeros(max(len(self._alive), len(keys)), dtype=bool)])
        self.vector.add(keys, vectors)
        try:
            self.keyword.add_many(keys.tolist(), token_lists)
        except BaseException:
            for key in keys.tolist():
                if key in self.keyword:
                    self.keyword.remove(key)
            self.vector.remove(keys)
            raise
        self._next_key += len(doc_ids)
        for key, doc_id in zip(keys.tolist(), doc_ids):
            self._key_of[doc_id] = key
            self._id_of[key] = doc_id
        self._alive[keys] = True

    def copy(self) -> HybridIndex:
        """An index of the same documents under the same keys that changes apart from this one."""
        other = HybridIndex.__new__(HybridIndex)
        other.dim, other.keyword, other.vector = self.dim, self.keyword.copy(), self.vector.copy()
        other._key_of, other._id_of, other._free = dict(self._key_of), dict(self._id_of), list(self._free)
        other._next_key, other._alive = self._next_key, self._alive.copy()
        return other

    def remove(self, doc_id: str) -> None:
        key = self._key_of[doc_id]
        self._take(key)
        del self._key_of[doc_id]
        del self._id_of[key]
        self._alive[key] = False
        self._free.append(key)

    def update(self, doc_id: str, text: str, vector: np.ndarray) -> None:
        """Replace a document's text and vector under the same key; on failure the old one stays."""
        vector = self._vector(vector)
        key = self._key_of[doc_id]
        tokens = terms(text)
        old_tokens, old_vector = self._take(key)
        try:
            self._put(key, tokens, vector)
        except BaseException:
            self._put(key, old_tokens, old_vector)
            raise

    # Both indexes change together or not at all, so that a failure (which graph_ops' transactions
    # roll back) never leaves a document in one index and not the other.
    def _put(self, key: int, tokens: list[str], vector: np.ndarray) -> None:
        self.vector.add(np.array([key]), vector[None, :])
        try:
            self.keyword.add(key, tokens)
        except BaseException:
            self.vector.remove(np.array([key]))
            raise

    def _take(self, key: int) -> tuple[list[str], np.ndarray]:
        tokens, vector = self.keyword.tokens(key), self.vector.vectors(np.array([key]))[0]
        self.vector.remove(np.array([key]))
        try:
            self.keyword.remove(key)
        except BaseException:
            self.vector.add(np.array([key]), vector[None, :])
            raise
        return tokens, vector

    def vector_of(self, doc_id: str) -> np.ndarray:
        return self.vector.vectors(np.array([self._key_of[doc_id]]))[0]

    def tokens_of(self, doc_id: str) -> list[str]:
        """The document's indexed tokens."""
        return self.keyword.tokens(self._key_of[doc_id])

    def scores_of(self, query_vector: np.ndarray, query_text: str | Iterable[str], doc_ids: Iterable[str],
                  alpha: float = 0.5) -> np.ndarray:
        """The hybrid scores of ``doc_ids`` alone, each as :meth:`rank` would give it (BM25 over the best of all
        documents): a ranking that needs a few documents' exact scores need not rank them all."""
        keys = np.array([self._key_of[doc_id] for doc_id in doc_ids], dtype=np.int64)
        if len(keys) == 0:
            return np.zeros(0)
        words = query_text if isinstance(query_text, str) else " ".join(query_text)
        bm25 = self.keyword.scores(terms(words))[: self._next_key]
        top_bm25 = float(bm25[self._alive[: self._next_key]].max())
        bm25n = bm25[keys] / top_bm25 if top_bm25 > 0 else np.zeros(len(keys))
        cos = self.vector.inner(keys, self._vector(query_vector)).astype(np.float64)
        return alpha * bm25n + (1 - alpha) * cos

    def rank(
        self,
        query_vector: np.ndarray,
        query_text: str | Iterable[str],
        k: int = 5,
        alpha: float = 0.5,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """The ``k`` best documents by hybrid score, best first, as ``(doc_id, score)``.

        ``query_text`` is free text or an iterable of keywords; both are tokenised the same way.
        """
        n = len(self._key_of)
        if n == 0 or k <= 0:
            return []
        query_vector = self._vector(query_vector)
        bm25n, bm25n_live = self._bm25_normalised(query_text)
        excluded = {self._key_of[d] for d in exclude if d in self._key_of}
        wanted = min(k, n - len(excluded))
        if wanted <= 0:
            return []
        scored = self._top_keys(query_vector, bm25n, bm25n_live, excluded, k, alpha, wanted)
        return [(self._id_of[c], score) for score, c in scored]

    def _bm25_normalised(self, query_text: str | Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        """Every key slot's BM25 for the query over the best document's, and the same with the empty slots at
        minus infinity (they never rank)."""
        words = query_text if isinstance(query_text, str) else " ".join(query_text)
        alive = self._alive[: self._next_key]
        bm25 = self.keyword.scores(terms(words))[: self._next_key]
        top_bm25 = float(bm25[alive].max())
        bm25n = bm25 / top_bm25 if top_bm25 > 0 else np.zeros_like(bm25)
        return bm25n, np.where(alive, bm25n, -np.inf)

    def _top_keys(self, query_vector: np.ndarray, bm25n: np.ndarray, bm25n_live: np.ndarray, excluded: set[int],
                  k: int, alpha: float, wanted: int) -> list[tuple[float, int]]:
        """The ``wanted`` best keys not ``excluded`` as ``(score, key)``, best first: scored among a pool of the best
        by cosine and by BM25, the pool widened until no document outside it can beat the last one kept."""
        n = len(self._key_of)
        excluded_keys = np.fromiter(excluded, dtype=np.int64, count=len(excluded))
        # A FAISS search scans every vector whatever the number of results, and keeping 4x more
        # results costs a fixed ~0.3 ms. On a large index it is cheaper to fetch enough for a
        # second round of the loop at once than to scan again when one is needed (about 1 query in 10).
        pool = max(_MIN_POOL, 4 * (k + len(excluded)))
        ahead = 4 if n >= _PREFETCH_FROM else 1
        fetched_keys, fetched_vals = self.vector.search(query_vector, ahead * pool)
        while True:
            pool = min(pool, n)
            if pool > len(fetched_keys) and len(fetched_keys) < n:
                fetched_keys, fetched_vals = self.vector.search(query_vector, ahead * pool)
            cos_keys, cos_vals = fetched_keys[:pool], fetched_vals[:pool]
            by_bm25 = np.argpartition(-bm25n_live, pool - 1)[:pool]
            candidates = np.union1d(cos_keys, by_bm25)
            scored = self._best_of(candidates, query_vector, bm25n, excluded_keys, alpha, wanted)
            if pool >= n or len(candidates) >= n:
                return scored
            # No document outside the candidates has a BM25 above the pool's lowest or a cosine
            # above the pool's lowest (widened by the half-precision scan's error).
            cos_bound = float(cos_vals.min()) + self.vector.search_error(query_vector)
            bound = alpha * float(bm25n[by_bm25].min()) + (1 - alpha) * cos_bound
            if len(scored) == wanted and scored[-1][0] >= bound:
                return scored
            pool *= 4

    def _best_of(self, candidates: np.ndarray, query_vector: np.ndarray, bm25n: np.ndarray, excluded_keys: np.ndarray,
                 alpha: float, wanted: int) -> list[tuple[float, int]]:
        """The ``wanted`` best ``candidates`` (keys) not excluded, by hybrid score, ties by key, as ``(score, key)``."""
        cos = self.vector.inner(candidates, query_vector).astype(np.float64)
        scores = alpha * bm25n[candidates] + (1 - alpha) * cos
        if len(excluded_keys):
            allowed = ~np.isin(candidates, excluded_keys)
            candidates, scores = candidates[allowed], scores[allowed]
        best = np.lexsort((candidates, -scores))[:wanted]  # by score, ties by key
        return list(zip(scores[best].tolist(), candidates[best].tolist()))


def retrieve(
    graph: QueryGraph,
    index: HybridIndex,
    query_vector: np.ndarray,
    query_text: str | Iterable[str],
    k: int = 5,
    alpha: float = 0.5,
    exclude: Collection[str] = (),
) -> list[QueryGraphNode]:
    """Spec §6.1: the top-k nodes plus their one-hop neighbours, newest first, never an excluded node."""
    exclude = set(exclude)
    top = [doc_id for doc_id, _ in index.rank(query_vector, query_text, k=k, alpha=alpha, exclude=exclude)]
    found = dict.fromkeys(top)
    for node_id in top:
        for neighbour in graph.node(node_id).links:
            if neighbour not in exclude:
                found[neighbour] = None
    nodes = [graph.node(node_id) for node_id in found]
    nodes.sort(key=lambda node: node.timestamp, reverse=True)
    return nodes
