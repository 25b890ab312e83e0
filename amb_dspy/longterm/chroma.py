"""ChromaDB backend: an embedded persistent client, or a Chroma server shared by many processes.

* ``ChromaStore.persistent(path, embedder)``: ``chromadb.PersistentClient`` on a folder;
* ``ChromaStore.http(url, embedder)``: ``chromadb.HttpClient`` on a server started with
  ``chroma run --host 127.0.0.1 --port 8000 --path DIR``.

Chroma never embeds anything here: collections are opened with ``embedding_function=None`` and every
add, update and query passes our own vectors, so Chroma's default embedding function (which would
fetch an ONNX model) is never built. Telemetry is off (``anonymized_telemetry=False``).

Items live in one collection (cosine space), namespace and kind in each record's metadata, the item's
provenance JSON-encoded (Chroma metadata values are scalars). The audit trail is a second collection;
Chroma stores no record without a vector, so each audit row carries the constant one-dimensional
vector ``[1.0]`` and is never searched by it.

Chroma has no transactions: a change is applied step by step and the steps already done are undone
if a later one fails, so an error leaves the store as it was (as far as the server still answers).
Any error from Chroma itself (server down, file unreadable) becomes :class:`StoreUnavailableError`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from amb_dspy.longterm.base import (
    AuditRecord,
    Change,
    ItemMetadata,
    Kind,
    LongTermError,
    LongTermStore,
    MemoryItem,
    StoreUnavailableError,
)
from amb_dspy.retrieval.embedding import Embedder

ITEMS = "amb_longterm_items"
AUDIT = "amb_longterm_audit"
FOLDER_NAME = "longterm-chroma"
_PAGE = 5_000  # records per get/add call, under Chroma's maximum batch size


def _chromadb():
    try:
        import chromadb
    except ImportError:
        raise StoreUnavailableError("the chroma long-term backend needs chromadb: "
                                    "pip install 'amb-dspy[longterm]'") from None
    return chromadb


def _settings():
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def _item(item_id: str, document: str, meta: dict) -> MemoryItem:
    return MemoryItem(id=item_id, namespace=meta["namespace"], kind=meta["kind"], content=document,
                      metadata=ItemMetadata.model_validate_json(meta["provenance"]),
                      created_at=meta["created_at"], updated_at=meta["updated_at"],
                      source_boost=meta["source_boost"])


def _meta(item: MemoryItem) -> dict:
    return {"namespace": item.namespace, "kind": item.kind, "provenance": item.metadata.model_dump_json(),
            "created_at": item.created_at, "updated_at": item.updated_at, "source_boost": item.source_boost}


def _where(namespace: str, kinds: Sequence[str] | None = None) -> dict:
    if not kinds:
        return {"namespace": namespace}
    kind = {"kind": kinds[0]} if len(kinds) == 1 else {"kind": {"$in": list(kinds)}}
    return {"$and": [{"namespace": namespace}, kind]}


class ChromaStore(LongTermStore):
    """Long-term memory in ChromaDB; build it with :meth:`persistent` or :meth:`http`."""

    name = "chroma"

    def __init__(self, client, where: str, embedder: Embedder, **options):
        super().__init__(embedder, **options)
        self.where = where
        self._client = client
        self._lock = threading.RLock()
        with self._reaching("cannot open"):
            self._items_collection = client.get_or_create_collection(
                ITEMS, embedding_function=None, metadata={"hnsw:space": "cosine", "dim": embedder.dim})
            self._audit_collection = client.get_or_create_collection(AUDIT, embedding_function=None)
        dim = (self._items_collection.metadata or {}).get("dim")
        if dim is not None and int(dim) != embedder.dim:
            raise StoreUnavailableError(f"long-term store {where}: holds {dim}-d embeddings, the embedder "
                                        f"gives {embedder.dim}-d")

    @classmethod
    def persistent(cls, path: str | Path, embedder: Embedder, **options) -> ChromaStore:
        """Chroma embedded in this process, persisted in the folder ``path``."""
        path = Path(path)
        chromadb = _chromadb()
        with _opening(str(path)):
            path.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(path), settings=_settings())
        return cls(client, str(path), embedder, **options)

    @classmethod
    def http(cls, url: str, embedder: Embedder, **options) -> ChromaStore:
        """A Chroma server at ``url`` (``http://host:port``); fails at once if it does not answer."""
        parsed = urlparse(url if "://" in url else f"http://{url}")
        if not parsed.hostname:
            raise StoreUnavailableError(f"long-term store {url!r}: not an http(s)://host:port address")
        chromadb = _chromadb()
        with _opening(url):
            client = chromadb.HttpClient(host=parsed.hostname, port=parsed.port or 8000,
                                         ssl=parsed.scheme == "https", settings=_settings())
            client.heartbeat()
        return cls(client, url, embedder, **options)

    @contextmanager
    def _reaching(self, doing: str = ""):
        with self._lock, _opening(self.where, doing):
            yield

    # --- primitives ----------------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        items, audit = self._items_collection, self._audit_collection
        with self._reaching():
            undo: list[Callable[[], None]] = []
            try:
                if change.added:
                    ids = [item.id for item, _ in change.added]
                    self._add(items, ids, [v for _, v in change.added], [i.content for i, _ in change.added],
                              [_meta(i) for i, _ in change.added])
                    undo.append(lambda: items.delete(ids=ids))
                if change.replaced:
                    ids = [item.id for item, _ in change.replaced]
                    old = items.get(ids=ids, include=["documents", "metadatas", "embeddings"])
                    items.update(ids=ids, embeddings=[np.asarray(v, dtype=np.float32) for _, v in change.replaced],
                                 documents=[i.content for i, _ in change.replaced],
                                 metadatas=[_meta(i) for i, _ in change.replaced])
                    undo.append(lambda: items.update(ids=old["ids"], embeddings=old["embeddings"],
                                                     documents=old["documents"], metadatas=old["metadatas"]))
                if change.removed:
                    ids = [item.id for item in change.removed]
                    old = items.get(ids=ids, include=["documents", "metadatas", "embeddings"])
                    items.delete(ids=ids)
                    undo.append(lambda: self._add(items, old["ids"], old["embeddings"], old["documents"],
                                                  old["metadatas"]))
                if change.audit:
                    self._add(audit, [uuid.uuid4().hex for _ in change.audit], [[1.0]] * len(change.audit),
                              None, [r.model_dump() for r in change.audit])
            except BaseException:
                for step in reversed(undo):
                    try:
                        step()
                    except Exception:  # noqa: BLE001, S110 - the original error is the one to report
                        pass
                raise

    @staticmethod
    def _add(collection, ids, embeddings, documents, metadatas) -> None:
        for start in range(0, len(ids), _PAGE):
            page = slice(start, start + _PAGE)
            collection.add(ids=list(ids[page]), embeddings=[np.asarray(v, dtype=np.float32) for v in embeddings[page]],
                           documents=list(documents[page]) if documents is not None else None,
                           metadatas=list(metadatas[page]))

    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        with self._reaching():
            found = self._items_collection.query(query_embeddings=[np.asarray(vector, dtype=np.float32)],
                                                 n_results=n, where=_where(namespace, kinds),
                                                 include=["documents", "metadatas", "distances"])
        return [(_item(item_id, document, meta), 1.0 - float(distance))
                for item_id, document, meta, distance in zip(found["ids"][0], found["documents"][0],
                                                             found["metadatas"][0], found["distances"][0])]

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        with self._reaching():
            found = self._items_collection.get(ids=[item_id], include=["documents", "metadatas"])
        items = [_item(i, d, m) for i, d, m in zip(found["ids"], found["documents"], found["metadatas"])]
        return next((item for item in items if item.namespace == namespace), None)

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        pages = self._pages(self._items_collection, _where(namespace, [kind] if kind else None), ["documents", "metadatas"])
        return [_item(i, d, m) for found in pages for i, d, m in zip(found["ids"], found["documents"], found["metadatas"])]

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        where = {"$and": [{"namespace": namespace}, {"item_id": item_id}]} if item_id else {"namespace": namespace}
        rows = [AuditRecord(**meta) for found in self._pages(self._audit_collection, where, ["metadatas"])
                for meta in found["metadatas"]]
        rows.sort(key=lambda r: r.at)
        return rows

    def _pages(self, collection, where: dict, include: list[str]) -> list[dict]:
        pages, offset = [], 0
        with self._reaching():
            while True:
                found = collection.get(where=where, include=include, limit=_PAGE, offset=offset)
                pages.append(found)
                if len(found["ids"]) < _PAGE:
                    return pages
                offset += _PAGE


@contextmanager
def _opening(where: str, doing: str = ""):
    """Turn whatever Chroma raises into one :class:`StoreUnavailableError` line."""
    try:
        yield
    except LongTermError:
        raise
    except Exception as exc:  # noqa: BLE001 - a client, server or file problem: the store is unusable
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        raise StoreUnavailableError(f"long-term store {where}: {doing + ' ' if doing else ''}({why})") from None

