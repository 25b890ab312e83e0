"""Which long-term store a configuration opens, without a code change.

``AMB_LONGTERM_BACKEND`` names the backend (``sqlite``, the default, or ``chroma``);
``AMB_LONGTERM_URL`` points the Chroma backend at a server, else it is embedded. Embedded stores live
under ``AMB_STORAGE_DIR``: ``longterm.sqlite3`` or the folder ``longterm-chroma``.

A new backend is one function here that builds it from the configuration, plus its module.
"""

from __future__ import annotations

from collections.abc import Callable

from amb_dspy.config import AmbConfig
from amb_dspy.longterm.base import LongTermStore
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.retrieval.embedding import Embedder


def _sqlite(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    from amb_dspy.longterm.sqlite import FILE_NAME, SQLiteStore

    return SQLiteStore(config.storage_dir / FILE_NAME, embedder, **options)


def _chroma(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    from amb_dspy.longterm.chroma import FOLDER_NAME, ChromaStore

    if config.longterm_url:
        return ChromaStore.http(config.longterm_url, embedder, **options)
    return ChromaStore.persistent(config.storage_dir / FOLDER_NAME, embedder, **options)


BACKENDS: dict[str, Callable[[AmbConfig, Embedder, dict], LongTermStore]] = {"sqlite": _sqlite, "chroma": _chroma}


def open_store(config: AmbConfig | None = None, *, embedder: Embedder | None = None, **options) -> LongTermStore:
    """The configured store. ``options`` go to the store (``weights``, ``dedup_threshold``, ``clock``);
    ``alpha`` defaults to the configured retrieval alpha. Raises :class:`StoreUnavailableError`."""
    config = config or AmbConfig()
    backend = config.longterm_backend.strip().lower()
    if backend not in BACKENDS:
        raise StoreUnavailableError(f"unknown long-term backend {config.longterm_backend!r}; "
                                    f"known: {', '.join(BACKENDS)}")
    if embedder is None:
        from amb_dspy.retrieval.embedding import default_embedder

        embedder = default_embedder()
    options.setdefault("alpha", config.retrieval_alpha)
    return BACKENDS[backend](config, embedder, options)


def open_store_or_notice(config: AmbConfig | None = None, *, embedder: Embedder | None = None,
                         **options) -> tuple[LongTermStore | None, str | None]:
    """``(store, None)``, or ``(None, notice)`` when the store cannot be opened or reached: the
    caller goes on without long-term memory and shows the one-line notice."""
    try:
        return open_store(config, embedder=embedder, **options), None
    except StoreUnavailableError as exc:
        return None, f"no long-term memory this run: {exc}"


def store_exists(config: AmbConfig) -> bool:
    """Whether a long-term store was written before: a server is named, or its file or folder is there."""
    if config.longterm_backend == "chroma":
        from amb_dspy.longterm.chroma import FOLDER_NAME

        return bool(config.longterm_url) or (config.storage_dir / FOLDER_NAME).exists()
    from amb_dspy.longterm.sqlite import FILE_NAME

    return (config.storage_dir / FILE_NAME).exists()
