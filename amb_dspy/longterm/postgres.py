"""Long-term memory in PostgreSQL (``AMB_LONGTERM_BACKEND=postgres``): one store that every process on any machine
shares, the replicas of ``amb serve`` among them.

The rows are the truth: items with their vectors (pgvector's ``vector`` where the server has the extension,
float32 ``BYTEA`` on a stock server: :mod:`amb_dspy.storage.pg_vectors`; schema step 2 converts a database of
step 1), the audit trail, the embedder that made the vectors (``amb_longterm_meta``) and one version number per namespace
(``amb_longterm_versions``), all the component ``longterm`` of :func:`~amb_dspy.storage.postgres.migrate`.
Search is served as the SQLite backend serves it, by the project's hybrid index (BM25 + FAISS,
:mod:`.kind_indexes`), one per namespace and kind, held in a cache this process shares between its stores
(the server opens a store per call). A search ranks on the cache, then reads the items it found together with
the namespace's version in the database (one round trip); when another process changed the namespace since
it was cached, the namespace is loaded again and the search ranks again, so a write anywhere is seen by the
next read everywhere. A change bumps the version of each namespace it touches in its own
transaction; once it has committed, this process applies it to its cached indexes (or drops them when it
missed a version), so its own writes cost no reload.

Writers take one advisory lock (``pg_advisory_xact_lock``) around the merge check and the change, held by the
transaction that makes the change: two processes writing the same fact make one item, and an error rolls the
whole change back. Whatever the database or the driver raises becomes :class:`StoreUnavailableError` (one line).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from amb_dspy.errors import one_line
from amb_dspy.longterm.base import AuditRecord, Change, ItemMetadata, Kind, LongTermStore, MemoryItem
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.longterm.kind_indexes import built_indexes, candidates
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.storage.pg_vectors import VectorColumn, float32_bytes, vector_column, vector_columns_step
from amb_dspy.storage.postgres import DatabaseError, lock_key, migrate, shown, transaction

try:
    from psycopg import Error as _DriverError

    _DRIVER_ERRORS: tuple[type[Exception], ...] = (_DriverError,)
except ImportError:  # no psycopg: opening fails with storage.postgres's one line on how to install it
    _DRIVER_ERRORS = ()

COMPONENT = "longterm"
SCHEMA = [  # one entry per version; append, never edit (storage/postgres.py migrates a database forward)
    """CREATE TABLE amb_longterm_items (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, kind TEXT NOT NULL,
        content TEXT NOT NULL, metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL, source_boost DOUBLE PRECISION NOT NULL, vector BYTEA NOT NULL);
    CREATE INDEX amb_longterm_items_by_namespace ON amb_longterm_items (namespace, kind);
    CREATE TABLE amb_longterm_audit (seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL, action TEXT NOT NULL,
        item_id TEXT NOT NULL, namespace TEXT NOT NULL, kind TEXT NOT NULL, task_id TEXT NOT NULL,
        reason TEXT NOT NULL, detail TEXT NOT NULL);
    CREATE INDEX amb_longterm_audit_by_item ON amb_longterm_audit (namespace, item_id);
    CREATE TABLE amb_longterm_versions (namespace TEXT PRIMARY KEY, version BIGINT NOT NULL);
    CREATE TABLE amb_longterm_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    vector_columns_step(("amb_longterm_items", "vector", ("id",))),  # pgvector where the server has it
]
_ITEM_COLUMNS = "id, namespace, kind, content, metadata, created_at, updated_at, source_boost"
_AUDIT_COLUMNS = "at, action, item_id, namespace, kind, task_id, reason, detail"
_WRITERS_LOCK = lock_key("amb_longterm_writers")


@dataclass
class _Cached:
    """A namespace's indexes as of ``version`` of its rows."""

    version: int
    indexes: dict[str, HybridIndex] = field(default_factory=dict)


_cache: dict[tuple[str, str], _Cached] = {}  # (url, namespace) -> its indexes, shared by this process's stores
_cache_lock = threading.RLock()


def _item(row: tuple) -> MemoryItem:
    item_id, namespace, kind, content, metadata, created_at, updated_at, boost = row
    return MemoryItem(id=item_id, namespace=namespace, kind=kind, content=content,
                      metadata=ItemMetadata.model_validate_json(metadata), created_at=created_at,
                      updated_at=updated_at, source_boost=boost)


def _text(text: str) -> str:
    """``text`` as a PostgreSQL text column holds it: a NUL character (which it refuses; a tool's output may carry
    one) becomes U+FFFD, the character that says one could not be kept."""
    return text.replace("\x00", "\ufffd")


def _stored(item: MemoryItem, vector: np.ndarray, column: VectorColumn) -> tuple:
    """What a row holds of ``item`` beside its id, namespace and kind: content, metadata, times, boost, vector (as
    ``column`` keeps it)."""
    return (_text(item.content), item.metadata.model_dump_json(), item.created_at, item.updated_at, item.source_boost,
            column.value(np.asarray(vector, dtype="<f4")))


class PostgresStore(LongTermStore):
    """Long-term memory in the PostgreSQL database at ``url`` (see the module docstring)."""

    name = "postgres"

    def __init__(self, url: str, embedder: Embedder, **options):
        super().__init__(embedder, **options)
        self.url, self.where = url, shown(url)
        self._local = threading.local()  # the connection of this thread's write, while it lasts
        with self._unavailable_on_error("cannot open"):
            migrate(url, COMPONENT, SCHEMA)
        with self._db("cannot open") as connection:
            self._check_embedder(connection)

    @contextmanager
    def _db(self, doing: str = "") -> Iterator:
        """The connection of this thread's write when there is one, else a pooled one in a transaction of its own;
        what the database or the driver raises becomes StoreUnavailableError (one line), other errors pass as
        they are (a merger's, a bad input's)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            yield connection
            return
        with self._unavailable_on_error(doing), transaction(self.url) as connection:
            yield connection

    @contextmanager
    def _unavailable_on_error(self, doing: str = "") -> Iterator[None]:
        try:
            yield
        except (DatabaseError, *_DRIVER_ERRORS) as exc:
            raise StoreUnavailableError(f"long-term store {self.where}: {doing + ' ' if doing else ''}"
                                        f"({one_line(exc, 200)})") from None

    def _check_embedder(self, connection) -> None:
        """Record the embedder's name and dimension in a new store; refuse one made by another embedder."""
        meta = dict(connection.execute("SELECT key, value FROM amb_longterm_meta").fetchall())
        name, dim = self._made_by_this_embedder(meta, self.where)
        if not meta:
            connection.execute("INSERT INTO amb_longterm_meta (key, value) VALUES ('dim', %s), ('model', %s) "
                               "ON CONFLICT (key) DO NOTHING", (str(dim), name))

    # --- writing -------------------------------------------------------------------------------------
    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One transaction holding the writers' lock around a merge check and its change (re-entrant); after it
        commits, the change goes into this process's cached indexes."""
        if getattr(self._local, "connection", None) is not None:
            yield
            return
        committed: list[tuple[str, int, Change]] = []
        with self._db() as connection:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_WRITERS_LOCK,))
            self._local.connection, self._local.committed = connection, committed
            try:
                yield
            finally:
                self._local.connection = self._local.committed = None
        for namespace, version, change in committed:
            _cache_change(self.url, namespace, version, change)

    def _apply(self, change: Change) -> None:
        with self._writing(), self._db() as connection:
            column = vector_column(connection, self.url, "amb_longterm_items")  # before the cursor: it copies adapters
            cursor = connection.cursor()
            cursor.executemany(f"INSERT INTO amb_longterm_items ({_ITEM_COLUMNS}, vector) VALUES "
                               "(%s, %s, %s, %s, %s, %s, %s, %s, %b)",
                               [(i.id, i.namespace, i.kind, *_stored(i, v, column)) for i, v in change.added])
            cursor.executemany("UPDATE amb_longterm_items SET content = %s, metadata = %s, created_at = %s, "
                               "updated_at = %s, source_boost = %s, vector = %b WHERE id = %s",
                               [(*_stored(i, v, column), i.id) for i, v in change.replaced])
            cursor.executemany("DELETE FROM amb_longterm_items WHERE id = %s", [(i.id,) for i in change.removed])
            cursor.executemany(f"INSERT INTO amb_longterm_audit ({_AUDIT_COLUMNS}) VALUES "
                               "(%s, %s, %s, %s, %s, %s, %s, %s)",
                               [(r.at, r.action, r.item_id, r.namespace, r.kind, _text(r.task_id), _text(r.reason),
                                 _text(r.detail)) for r in change.audit])
            for namespace in sorted(_namespaces_of(change)):
                version = connection.execute(
                    "INSERT INTO amb_longterm_versions (namespace, version) VALUES (%s, 1) ON CONFLICT (namespace) "
                    "DO UPDATE SET version = amb_longterm_versions.version + 1 RETURNING version",
                    (namespace,)).fetchone()[0]
                self._local.committed.append((namespace, version, _part_of(change, namespace)))

    # --- reading -------------------------------------------------------------------------------------
    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        with self._db("search") as connection:
            for _attempt in range(2):
                with _cache_lock:
                    cached = _cache.get((self.url, namespace)) or self._load(connection, namespace)
                    ranked_at = cached.version
                    cosines = candidates(cached.indexes, kinds, vector, text, n, self.alpha)
                version, items = self._fetch(connection, namespace, list(cosines))
                if version == ranked_at:
                    break
                with _cache_lock:  # another process wrote there since this one loaded it: load it again, once
                    if _cache.get((self.url, namespace)) is cached:
                        del _cache[(self.url, namespace)]
        return [(items[item_id], cosine) for item_id, cosine in cosines.items() if item_id in items]

    def _fetch(self, connection, namespace: str, ids: list[str]) -> tuple[int, dict[str, MemoryItem]]:
        """The namespace's version in the database and the items ``ids``, in one round trip."""
        rows = connection.execute(
            f"SELECT v.version, {', '.join('i.' + c for c in _ITEM_COLUMNS.split(', '))} FROM (SELECT "
            "coalesce(max(version), 0) AS version FROM amb_longterm_versions WHERE namespace = %s) v "
            "LEFT JOIN amb_longterm_items i ON i.id = ANY(%s)", (namespace, ids)).fetchall()
        return rows[0][0], {row[1]: _item(row[1:]) for row in rows if row[1] is not None}

    def _load(self, connection, namespace: str) -> _Cached:
        """This process's indexes of ``namespace``, built from the database (its version read first: rows newer
        than the version only cost one more load)."""
        row = connection.execute("SELECT version FROM amb_longterm_versions WHERE namespace = %s",
                                 (namespace,)).fetchone()
        vector_column(connection, self.url, "amb_longterm_items")  # readies the connection for pgvector's vectors
        rows = ((item_id, kind, content, float32_bytes(vector)) for item_id, kind, content, vector in
                connection.cursor(binary=True).execute("SELECT id, kind, content, vector FROM amb_longterm_items "
                                                       "WHERE namespace = %s ORDER BY created_at, id", (namespace,)))
        cached = _cache[(self.url, namespace)] = _Cached(row[0] if row else 0, built_indexes(self.embedder.dim, rows))
        return cached

    def _rows(self, sql: str, args: tuple) -> list[tuple]:
        with self._db() as connection:
            return connection.execute(sql, args).fetchall()

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        rows = self._rows(f"SELECT {_ITEM_COLUMNS} FROM amb_longterm_items WHERE id = %s AND namespace = %s",
                          (item_id, namespace))
        return _item(rows[0]) if rows else None

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        where, args = ("namespace = %s AND kind = %s", (namespace, kind)) if kind else ("namespace = %s", (namespace,))
        return [_item(row) for row in self._rows(f"SELECT {_ITEM_COLUMNS} FROM amb_longterm_items WHERE {where}", args)]

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        where, args = (("namespace = %s AND item_id = %s", (namespace, item_id)) if item_id
                       else ("namespace = %s", (namespace,)))
        columns = _AUDIT_COLUMNS.split(", ")
        return [AuditRecord(**dict(zip(columns, row))) for row in self._rows(
            f"SELECT {_AUDIT_COLUMNS} FROM amb_longterm_audit WHERE {where} ORDER BY seq", args)]

    def _count(self) -> int:
        return self._rows("SELECT count(*) FROM amb_longterm_items", ())[0][0]


def _namespaces_of(change: Change) -> set[str]:
    return {i.namespace for i, _ in change.added} | {i.namespace for i, _ in change.replaced} | {
        i.namespace for i in change.removed}


def _part_of(change: Change, namespace: str) -> Change:
    """The items of ``change`` in ``namespace`` (its audit rows are not indexed)."""
    return Change(added=[(i, v) for i, v in change.added if i.namespace == namespace],
                  replaced=[(i, v) for i, v in change.replaced if i.namespace == namespace],
                  removed=[i for i in change.removed if i.namespace == namespace])


def _cache_change(url: str, namespace: str, version: int, change: Change) -> None:
    """Bring this process's cached indexes of ``namespace`` from ``version - 1`` to ``version`` with the committed
    ``change``; cached indexes of another version are dropped (the next search loads them)."""
    with _cache_lock:
        cached = _cache.get((url, namespace))
        if cached is None or cached.version >= version:
            return
        if cached.version != version - 1:
            del _cache[(url, namespace)]
            return
        try:
            for item, vector in change.added:
                cached.indexes.setdefault(item.kind, HybridIndex(len(vector))).add(item.id, item.content, vector)
            for item, vector in change.replaced:
                cached.indexes[item.kind].update(item.id, item.content, vector)
            for item in change.removed:
                cached.indexes[item.kind].remove(item.id)
        except (KeyError, ValueError):  # the cache did not hold what the rows held: load it again
            del _cache[(url, namespace)]
            return
        cached.version = version
