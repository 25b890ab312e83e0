"""The embedders a user may choose instead of the bundled model (``AMB_EMBEDDER``, :mod:`amb_dspy.config.embedder_spec`).

* :class:`DspyEmbedder`: ``dspy.Embedder`` over a LiteLLM model string (a hosted model such as
  ``openai/text-embedding-3-small``) or over any callable ``texts -> vectors`` (your own model);
* :class:`FolderEmbedder`: a local sentence-transformers folder, loaded offline.

Both are :class:`~amb_dspy.retrieval.embedding_base.CachingEmbedder`\\ s, so the store, the FAISS index, the line
vectors and BM25 take them as they take the bundled one. Their dimension is learnt from the model (a probe embedding
for ``dspy.Embedder``, the model's own for a folder), their vectors are L2-normalised (cosine, as the bundled ones),
and each has a name of its own (``dspy:openai/text-embedding-3-small``, ``st:bge-small@<fingerprint>``) that bank
files, line-vector tables and corpus caches record: a bank made with another embedder is embedded again on load
(:meth:`amb_dspy.memory.bank_io.StoreFiles.from_loaded`), never mixed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from amb_dspy.config.embedder_spec import EmbedderSpec
from amb_dspy.errors import one_line
from amb_dspy.retrieval.embedding_base import (
    CachingEmbedder,
    EmbeddingError,
    load_sentence_transformer,
    model_fingerprint,
    model_label,
)

_PROBE = ["What dimension are your vectors?"]


def unit_rows(vectors, expected_rows: int, name: str) -> np.ndarray:
    """``vectors`` as float32 rows of length 1 (cosine by inner product), or :class:`EmbeddingError` when a model
    gave something else than one finite vector per text."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[0] != expected_rows or rows.shape[1] == 0 or not np.isfinite(rows).all():
        raise EmbeddingError(f"embedder {name} returned vectors of shape {rows.shape} for {expected_rows} texts")
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


class DspyEmbedder(CachingEmbedder):
    """``dspy.Embedder`` behind the bank's embedder interface: a LiteLLM model string, or a callable (``name`` then
    says what it is, for bank files: ``dspy:<name>``)."""

    def __init__(self, model: str | Callable[[list[str]], object], *, name: str | None = None,
                 batch_size: int | None = None, cache_size: int = 50_000):
        super().__init__(batch_size=batch_size or 200, cache_size=cache_size)
        self._dim = None  # learnt from a probe embedding
        self.model = model
        label = model if isinstance(model, str) else name or getattr(model, "__qualname__", type(model).__name__)
        self._name = f"dspy:{label}"
        self._embedder = None

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def model_id(self) -> str:
        return self._name

    def _client(self):
        if self._embedder is None:
            import dspy

            # dspy caches a hosted model's answers on disk; a callable is this process's own, cached by us
            self._embedder = dspy.Embedder(self.model, batch_size=self.batch_size, caching=isinstance(self.model, str))
        return self._embedder

    def _learn_dim(self) -> int:
        return int(self._encode(_PROBE).shape[1])

    def _encode(self, texts: list[str]) -> np.ndarray:
        try:
            raw = self._client()(texts)
        except Exception as exc:  # a provider's error, a key missing, a callable's bug: one line
            raise EmbeddingError(f"embedder {self._name} failed: {type(exc).__name__}: {one_line(exc, 200)}") from exc
        rows = unit_rows(raw, len(texts), self._name)
        if self._dim is None:
            self._dim = rows.shape[1]
        elif rows.shape[1] != self._dim:
            raise EmbeddingError(f"embedder {self._name} returned {rows.shape[1]}-d vectors after {self._dim}-d ones")
        return rows


class FolderEmbedder(CachingEmbedder):
    """A local sentence-transformers folder, loaded offline with sentence-transformers (torch)."""

    def __init__(self, model_dir: str | Path, batch_size: int | None = None, cache_size: int = 50_000):
        super().__init__(batch_size=batch_size or 64, cache_size=cache_size)
        self._dim = None  # the model's own, once loaded
        self.model_dir = Path(model_dir)
        self._model = None

    @functools.cached_property
    def model_name(self) -> str:
        """``st:<folder>@<fingerprint of its files>``: the same model copied elsewhere keeps its name, another
        model (or the same folder with other weights) gets another."""
        return f"st:{model_label(self.model_dir)}@{model_fingerprint(self.model_dir)}"

    @property
    def model_id(self) -> str:
        return self.model_name

    def _load(self):
        if self._model is None:
            model = load_sentence_transformer(self.model_dir)
            dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            self._dim, self._model = int(dimension()), model
        return self._model

    def _learn_dim(self) -> int:
        self._load()
        return self._dim

    def _encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._load().encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
        return unit_rows(vectors, len(texts), self.model_name)


def chosen_embedder(spec: EmbedderSpec, batch_size: int | None = None) -> CachingEmbedder:
    """The embedder of a folder or ``dspy`` setting (the bundled one is :func:`amb_dspy.retrieval.embedding.shared_embedder`'s)."""
    if spec.kind == "folder":
        return FolderEmbedder(spec.target, batch_size=batch_size)
    if spec.kind == "dspy":
        return DspyEmbedder(spec.target, batch_size=batch_size)
    raise EmbeddingError(f"not a chosen embedder: {spec}")
