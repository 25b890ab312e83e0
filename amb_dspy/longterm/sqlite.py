"""The embedded default backend: one SQLite file (standard library, WAL) under the storage directory.

The rows are the truth. Search is served by the project's own hybrid index (BM25 + FAISS,
:class:`~amb_dspy.retrieval.hybrid.HybridIndex`), one per namespace and kind, built from the rows when
the store opens and kept in step with every change. Vectors are stored beside the rows (float32
blobs), so opening never re-embeds. The meta table records the embedder's name and dimension (``AMB_EMBEDDER``):
a store made by another embedder is refused in one line (a run goes on without long-term memory, with that notice)
rather than embedded again, since other processes may still be writing it with theirs; vectors are never mixed.

Each change is one SQLite transaction; the indexes change first and are put back if the transaction
fails, so the file and the indexes never disagree. Another process that writes the same file (an
``amb memory delete`` while a run is going) bumps SQLite's ``PRAGMA data_version``, and this store
then rebuilds its indexes from the rows before it next searches.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from amb_dspy.longterm.base import (
    AuditRecord,
    Change,
    ItemMetadata,
    Kind,
    LongTermStore,
    MemoryItem,
)
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.longterm.kind_indexes import candidates
from amb_dspy.longterm.ledger import Ledger
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.hybrid import HybridIndex

SCHEMA_VERSION = 1
FILE_NAME = "longterm.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    content TEXT NOT NULL,
    metadata TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    source_boost REAL NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS items_by_namespace ON items (namespace, kind);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    action TEXT NOT NULL,
    item_id TEXT NOT NULL,
    namespace TEXT NOT NULL,
    kind TEXT NOT NULL,
    task_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_by_item ON audit (namespace, item_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_ITEM_COLUMNS = "id, namespace, kind, content, metadata, created_at, updated_at, source_boost"
_AUDIT_COLUMNS = "at, action, item_id, namespace, kind, task_id, reason, detail"


def _item(row: tuple) -> MemoryItem:
    item_id, namespace, kind, content, metadata, created_at, updated_at, boost = row
    return MemoryItem(id=item_id, namespace=namespace, kind=kind, content=content,
                      metadata=ItemMetadata.model_validate_json(metadata), created_at=created_at,
                      updated_at=updated_at, source_boost=boost)


def _item_row(item: MemoryItem, vector: np.ndarray) -> tuple:
    return (item.id, item.namespace, item.kind, item.content, item.metadata.model_dump_json(), item.created_at,
            item.updated_at, item.source_boost, np.asarray(vector, dtype="<f4").tobytes())


class SQLiteStore(LongTermStore):
    """Long-term memory in one SQLite file; ``path`` is the file (created with its folder if missing).

    ``busy_timeout_s`` is how long a write waits for another process's write to finish.
    """

    name = "sqlite"

    def __init__(self, path: str | Path, embedder: Embedder, *, busy_timeout_s: float = 10.0, **options):
        super().__init__(embedder, **options)
        self.path = Path(path)
        self._lock = threading.RLock()
        self._indexes: dict[tuple[str, str], HybridIndex] = {}
        self._db: sqlite3.Connection | None = None
        ledger = Ledger(self.path)
        try:
            with ledger.writing():  # checked and created with no write of another process in between
                self._open(ledger, busy_timeout_s)
            self.ledger = ledger
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise StoreUnavailableError(f"long-term store {self.path}: cannot open ({exc})") from None
        except StoreUnavailableError:
            self.close()
            raise

    def _open(self, ledger: Ledger, busy_timeout_s: float) -> None:
        """Open (or create) the file, refusing one cut to 0 bytes or holding fewer items than its ledger."""
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise ledger.refuse("the file is empty (0 bytes), not a SQLite database")
        ledger.check_files(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=busy_timeout_s)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._check_version()
        with self._db:
            self._db.executescript(_SCHEMA)
            self._check_embedder()
        self._load()
        ledger.check_count(self._count())

    def _check_version(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreUnavailableError(f"long-term store {self.path}: schema {version} is newer than this "
                                        f"amb-dspy reads ({SCHEMA_VERSION})")
        if version == 0:
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _check_embedder(self) -> None:
        """Record the embedder's name and dimension in a new store; refuse one made by another embedder (one line).
        A store from before names were recorded takes the name of the first embedder of its dimension that opens it."""
        meta = dict(self._db.execute("SELECT key, value FROM meta WHERE key IN ('dim', 'model')").fetchall())
        name, dim = self._made_by_this_embedder(meta, self.path)
        self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", [("dim", str(dim)), ("model", name)])

    def _load(self) -> None:
        """(Re)build every index from the rows."""
        self._indexes = {}
        for item_id, namespace, kind, content, blob in self._db.execute(
                "SELECT id, namespace, kind, content, vector FROM items ORDER BY rowid"):
            self._index(namespace, kind).add(item_id, content, np.frombuffer(blob, dtype="<f4"))
        self._version = self._data_version()

    def _data_version(self) -> int:
        return self._db.execute("PRAGMA data_version").fetchone()[0]

    def _sync(self) -> None:
        if self._data_version() != self._version:
            self._load()

    def _index(self, namespace: str, kind: str) -> HybridIndex:
        index = self._indexes.get((namespace, kind))
        if index is None:
            index = self._indexes[(namespace, kind)] = HybridIndex(self.embedder.dim)
        return index

    def _reading(self, call: Callable):
        with self._lock:
            try:
                return call()
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"long-term store {self.path}: {exc}") from None

    # --- primitives ----------------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        with self._lock:
            undo: list[Callable[[], None]] = []
            try:
                self._sync()
                self._change_indexes(change, undo)
                with self._db:
                    self._db.executemany(f"INSERT INTO items ({_ITEM_COLUMNS}, vector) VALUES (?,?,?,?,?,?,?,?,?)",
                                         [_item_row(item, vector) for item, vector in change.added])
                    self._db.executemany(
                        "UPDATE items SET content = ?, metadata = ?, updated_at = ?, source_boost = ?, vector = ? "
                        "WHERE id = ?",
                        [(i.content, i.metadata.model_dump_json(), i.updated_at, i.source_boost,
                          np.asarray(v, dtype="<f4").tobytes(), i.id) for i, v in change.replaced])
                    self._db.executemany("DELETE FROM items WHERE id = ?", [(i.id,) for i in change.removed])
                    self._db.executemany(f"INSERT INTO audit ({_AUDIT_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
                                         [(r.at, r.action, r.item_id, r.namespace, r.kind, r.task_id, r.reason,
                                           r.detail) for r in change.audit])
            except BaseException as exc:
                for step in reversed(undo):
                    step()
                if isinstance(exc, sqlite3.Error):
                    raise StoreUnavailableError(f"long-term store {self.path}: {exc}") from None
                raise

    def _change_indexes(self, change: Change, undo: list[Callable[[], None]]) -> None:
        """Apply the change to the indexes, recording how to put each step back."""
        for item, vector in change.added:
            index = self._index(item.namespace, item.kind)
            index.add(item.id, item.content, vector)
            undo.append(lambda index=index, item_id=item.id: index.remove(item_id))
        for item, vector in change.replaced:
            index = self._index(item.namespace, item.kind)
            old = self._get(item.namespace, item.id)
            old_vector = index.vector_of(item.id)
            index.update(item.id, item.content, vector)
            undo.append(lambda index=index, old=old, v=old_vector: index.update(old.id, old.content, v))
        for item in change.removed:
            index = self._index(item.namespace, item.kind)
            old_vector = index.vector_of(item.id)
            index.remove(item.id)
            undo.append(lambda index=index, item=item, v=old_vector: index.add(item.id, item.content, v))

    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        def nearest():
            self._sync()
            cosines = candidates({kind: self._indexes.get((namespace, kind)) for kind in kinds}, kinds, vector, text,
                                 n, self.alpha)
            items = self._fetch(list(cosines))
            return [(items[item_id], cosine) for item_id, cosine in cosines.items() if item_id in items]

        return self._reading(nearest)

    def _fetch(self, ids: list[str]) -> dict[str, MemoryItem]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE id IN ({marks})", ids)
        return {row[0]: _item(row) for row in rows}

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        def get():
            row = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM items WHERE id = ? AND namespace = ?",
                                   (item_id, namespace)).fetchone()
            return _item(row) if row else None

        return self._reading(get)

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        where, args = ("namespace = ? AND kind = ?", (namespace, kind)) if kind else ("namespace = ?", (namespace,))
        return self._reading(lambda: [_item(row) for row in self._db.execute(
            f"SELECT {_ITEM_COLUMNS} FROM items WHERE {where}", args)])

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        where, args = ("namespace = ? AND item_id = ?", (namespace, item_id)) if item_id else ("namespace = ?", (namespace,))
        columns = _AUDIT_COLUMNS.split(", ")
        return self._reading(lambda: [AuditRecord(**dict(zip(columns, row))) for row in self._db.execute(
            f"SELECT {_AUDIT_COLUMNS} FROM audit WHERE {where} ORDER BY seq", args)])

    def _count(self) -> int:
        return self._reading(lambda: self._db.execute("SELECT COUNT(*) FROM items").fetchone()[0])

    def close(self) -> None:
        """Close the file; later calls raise StoreUnavailableError ("closed database")."""
        with self._lock:
            if self._db is not None:
                self._db.close()
