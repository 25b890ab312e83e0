"""The in-memory search side of a long-term store whose rows are the truth (SQLite, PostgreSQL): one
:class:`~amb_dspy.retrieval.hybrid.HybridIndex` (BM25 + FAISS) per namespace and kind, built from the stored rows,
and the candidates a search or a merge check gets from them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from amb_dspy.retrieval.hybrid import HybridIndex


def candidates(indexes: Mapping[str, HybridIndex | None], kinds: Sequence[str], vector: np.ndarray, text: str,
               n: int, alpha: float) -> dict[str, float]:
    """The ``n`` best ids of each of ``kinds`` by hybrid score over their index (``indexes[kind]``; a kind without
    one has none), each with its exact cosine to ``vector``."""
    cosines: dict[str, float] = {}
    for kind in kinds:
        index = indexes.get(kind)
        if index is None:
            continue
        for item_id, _ in index.rank(vector, text, k=n, alpha=alpha):
            cosines[item_id] = float(index.vector_of(item_id) @ vector)
    return cosines


def built_indexes(dim: int, rows: Iterable[tuple[str, str, str, bytes]]) -> dict[str, HybridIndex]:
    """One index per kind of the rows ``(id, kind, content, float32 vector bytes)``, each filled in one batch."""
    grouped: dict[str, tuple[list[str], list[str], list[bytes]]] = {}
    for item_id, kind, content, blob in rows:
        ids, texts, blobs = grouped.setdefault(kind, ([], [], []))
        ids.append(item_id)
        texts.append(content)
        blobs.append(bytes(blob))
    indexes = {}
    for kind, (ids, texts, blobs) in grouped.items():
        index = indexes[kind] = HybridIndex(dim)
        index.add_many(ids, texts, np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), dim))
    return indexes
