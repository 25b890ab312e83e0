"""Which long-term store a configuration opens, without a code change.

``AMB_LONGTERM_BACKEND`` names the backend (``sqlite``, the default, ``chroma``, ``qdrant`` or ``postgres``);
``AMB_LONGTERM_URL`` points Chroma or Qdrant at a server (``AMB_LONGTERM_API_KEY`` for Qdrant's), else
it is embedded; ``postgres`` is a PostgreSQL database, ``AMB_LONGTERM_URL`` when that is a ``postgresql://`` URL,
else ``AMB_DATABASE_URL`` (:mod:`.postgres`) (Qdrant's: a Qdrant Edge shard, :mod:`.edge`). Embedded stores live under ``AMB_STORAGE_DIR``: ``longterm.sqlite3``, or the folder
``longterm-chroma`` or ``longterm-qdrant``.

:func:`open_store_with_fallback` is what a run uses: a configured backend that cannot be reached
gives way to the local SQLite store (one notice says so), and ``AMB_LONGTERM_DUAL_WRITE=1`` writes
both (:mod:`.dual`), catching the server up on the next connection. With ``AMB_REDACT=1`` (``config.longterm.redact``)
the opened store redacts everything it writes, whichever door the write came through.

A new backend is one function here that builds it from the configuration, plus its module.
"""

from __future__ import annotations

from collections.abc import Callable

from amb_dspy.config import AmbConfig
from amb_dspy.longterm.base import LongTermStore
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.retrieval.embedding import Embedder, shared_embedder


def _sqlite(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    from amb_dspy.longterm.sqlite import FILE_NAME, SQLiteStore

    return SQLiteStore(config.paths.storage_dir / FILE_NAME, embedder, **options)


def _chroma(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    from amb_dspy.longterm.chroma import FOLDER_NAME, ChromaStore

    settings, storage_dir = config.longterm, config.paths.storage_dir
    if settings.longterm_url:
        return ChromaStore.http(settings.longterm_url, embedder, **options)
    return ChromaStore.persistent(storage_dir / FOLDER_NAME, embedder, **options)


def _qdrant(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    settings, storage_dir = config.longterm, config.paths.storage_dir
    if settings.longterm_url:
        from amb_dspy.longterm.qdrant import QdrantStore

        return QdrantStore.server(settings.longterm_url, embedder, api_key=settings.longterm_api_key, **options)
    from amb_dspy.longterm.edge import FOLDER_NAME, QdrantEdgeStore

    return QdrantEdgeStore.local(storage_dir / FOLDER_NAME, embedder, **options)


def _postgres(config: AmbConfig, embedder: Embedder, options: dict) -> LongTermStore:
    url = database_url(config)
    if not url:
        raise StoreUnavailableError("the postgres long-term backend needs a database: AMB_DATABASE_URL or "
                                    "AMB_LONGTERM_URL=postgresql://user@host:port/database")
    from amb_dspy.longterm.postgres import PostgresStore

    return PostgresStore(url, embedder, **options)


def database_url(config: AmbConfig) -> str:
    """The PostgreSQL database of the ``postgres`` backend: ``longterm_url`` when it is a ``postgresql://`` URL,
    else ``database_url`` (AMB_DATABASE_URL); empty when neither is set."""
    from amb_dspy.storage.postgres import is_database_url

    url = config.longterm.longterm_url.strip()
    return url if is_database_url(url) else config.paths.database_url.strip()


# Each backend is built from the configuration (its long-term and paths sections: server, storage folder).
BACKENDS: dict[str, Callable[[AmbConfig, Embedder, dict], LongTermStore]] = {
    "sqlite": _sqlite, "chroma": _chroma, "qdrant": _qdrant, "postgres": _postgres}


def open_store(config: AmbConfig, *, embedder: Embedder | None = None, **options) -> LongTermStore:
    """The store ``config`` names. It reads four sections: long-term (backend, server, redaction), paths (the
    storage folder), retrieval (``alpha``, the default of that option) and embedding (when no ``embedder`` is
    given). ``options`` go to the store (``weights``, ``dedup_threshold``, ``clock``). Raises
    :class:`StoreUnavailableError`."""
    settings = config.longterm
    backend = settings.longterm_backend.strip().lower()
    if backend not in BACKENDS:
        raise StoreUnavailableError(f"unknown long-term backend {settings.longterm_backend!r}; "
                                    f"known: {', '.join(BACKENDS)}")
    if embedder is None:
        embedder = shared_embedder(config.embedding, config.paths.cache_dir)
    options.setdefault("alpha", config.retrieval.retrieval_alpha)
    store = BACKENDS[backend](config, embedder, options)
    if settings.redact:  # a property of the store's write path: every door that writes through it redacts
        store.redactor = redacting()
    return store


def redacting(region: str = "US") -> Callable[[str], str]:
    """The redaction a store with ``config.longterm.redact`` applies to every text it writes."""
    from amb_dspy.longterm.redact import redact

    return lambda text: redact(text, region=region).text


def open_store_or_notice(config: AmbConfig, *, embedder: Embedder | None = None,
                         **options) -> tuple[LongTermStore | None, str | None]:
    """``(store, None)``, or ``(None, notice)`` when the store cannot be opened or reached: the
    caller goes on without long-term memory and shows the one-line notice."""
    try:
        return open_store(config, embedder=embedder, **options), None
    except StoreUnavailableError as exc:
        return None, f"no long-term memory this run: {exc}"


def open_store_with_fallback(config: AmbConfig, *, embedder: Embedder | None = None,
                             **options) -> tuple[LongTermStore | None, str | None]:
    """The configured store, or the local SQLite store when the configured one cannot be reached, with
    a one-line notice saying so; with ``longterm_dual_write`` a :class:`~amb_dspy.longterm.dual.DualStore`
    of both (the notice then tells what was caught up). ``(None, notice)`` only when even the local
    store cannot be opened."""
    backend = config.longterm.longterm_backend.strip().lower()
    if backend == "sqlite":
        return open_store_or_notice(config, embedder=embedder, **options)
    if embedder is None:
        embedder = shared_embedder(config.embedding, config.paths.cache_dir)
    local_config = config.model_copy(update={"longterm_backend": "sqlite", "longterm_url": ""})
    try:
        remote, unreachable = open_store(config, embedder=embedder, **options), None
    except StoreUnavailableError as exc:
        remote, unreachable = None, str(exc)
    if remote is not None and not config.longterm.longterm_dual_write:
        return remote, None
    local, notice = open_store_or_notice(local_config, embedder=embedder, **options)
    if local is None:
        if remote is not None:
            remote.close()
        return None, notice if unreachable is None else f"no long-term memory this run: {unreachable}; {notice}"
    if config.longterm.longterm_dual_write:
        from amb_dspy.longterm.dual import JOURNAL_NAME, DualStore

        store = DualStore(local, remote, config.paths.storage_dir / JOURNAL_NAME)
        caught_up = store.reconcile()
        if caught_up:
            return store, (f"long-term store {config.longterm.longterm_url or backend}: caught up {caught_up} "
                           "item(s) written while it was unreachable")
        if remote is None:
            return store, f"{unreachable}; writing the local SQLite store only this run (caught up on the next connection)"
        return store, store.notices[-1] if store.notices else None
    return local, f"{unreachable}; using the local SQLite store this run"


def store_exists(config: AmbConfig) -> bool:
    """Whether a long-term store was written before: a server is named, or its file or folder is there
    (the local SQLite file counts for every backend: a run that fell back to it wrote there)."""
    from amb_dspy.longterm import chroma, qdrant
    from amb_dspy.longterm.sqlite import FILE_NAME

    settings, storage_dir = config.longterm, config.paths.storage_dir
    if settings.longterm_backend.strip().lower() == "postgres" and database_url(config):
        return True
    folder = {"chroma": chroma.FOLDER_NAME, "qdrant": qdrant.FOLDER_NAME}.get(settings.longterm_backend.strip().lower())
    if folder and (settings.longterm_url or (storage_dir / folder).exists()):
        return True
    return (storage_dir / FILE_NAME).exists()
