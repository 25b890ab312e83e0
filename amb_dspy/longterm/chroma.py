"""ChromaDB backend: an embedded persistent client, or a Chroma server shared by many processes.

* ``ChromaStore.persistent(path, embedder)``: ``chromadb.PersistentClient`` on a folder;
* ``ChromaStore.http(url, embedder)``: ``chromadb.HttpClient`` on a server started with
  ``chroma run --host 127.0.0.1 --port 8000 --path DIR``.

Chroma never embeds anything here: collections are opened with ``embedding_function=None`` and every
add, update and query passes our own vectors, so Chroma's default embedding function (which would
fetch an ONNX model) is never built. Telemetry is off (``anonymized_telemetry=False``).

Items live in one collection per namespace and kind (cosine space), named from a hash of the namespace:
a metadata filter (``where``) makes Chroma check every record's metadata, which at 10k items cost a
search about 35 ms against 2 ms without one, and a collection per namespace and kind needs none. Each
record's metadata holds the item (but its content, the record's document) JSON-encoded. The audit
trail is one more collection, which also records the embedding size; Chroma stores no record without
a vector, so each audit row carries the constant one-dimensional vector ``[1.0]`` and is never
searched by it.

Chroma has no transactions: a change is applied step by step and the steps already done are undone
if a later one fails, so an error leaves the store as it was (as far as the server still answers).
Any error from Chroma itself (server down, file unreadable) becomes :class:`StoreUnavailableError`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from amb_dspy.longterm.base import (
    KINDS,
    AuditRecord,
    Change,
    Kind,
    LongTermStore,
    MemoryItem,
)
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.longterm.errors import unavailable_on_error as _opening
from amb_dspy.longterm.ledger import Ledger
from amb_dspy.retrieval.embedding import Embedder

ITEMS_PREFIX = "amb-lt-"
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
    return MemoryItem.model_validate({**json.loads(meta["item"]), "id": item_id, "content": document})


def _meta(item: MemoryItem) -> dict:
    """The record's metadata: the item but its content, JSON-encoded (Chroma does not give floats back to
    the last bit, and its values are scalars), and namespace, kind and update time as plain values."""
    return {"item": item.model_dump_json(exclude={"content"}), "namespace": item.namespace, "kind": item.kind,
            "updated_at": item.updated_at}


def collection_name(namespace: str, kind: str) -> str:
    """A valid Chroma collection name for any namespace (they allow only [a-zA-Z0-9._-])."""
    return f"{ITEMS_PREFIX}{hashlib.sha1(namespace.encode('utf-8')).hexdigest()[:24]}-{kind}"


def _by_collection(items: list) -> dict[tuple[str, str], list]:
    """Group items (or ``(item, vector)`` pairs) by their namespace and kind."""
    groups: dict[tuple[str, str], list] = {}
    for entry in items:
        item = entry[0] if isinstance(entry, tuple) else entry
        groups.setdefault((item.namespace, item.kind), []).append(entry)
    return groups


class ChromaStore(LongTermStore):
    """Long-term memory in ChromaDB; build it with :meth:`persistent` or :meth:`http`."""

    name = "chroma"

    def __init__(self, client, where: str, embedder: Embedder, **options):
        super().__init__(embedder, **options)
        self.where = where
        self._client = client
        self._lock = threading.RLock()
        self._collections: dict[tuple[str, str], object] = {}
        with self._reaching("cannot open"):
            self._audit_collection = client.get_or_create_collection(AUDIT, embedding_function=None,
                                                                     metadata={"dim": embedder.dim})
        dim = (self._audit_collection.metadata or {}).get("dim")
        if dim is not None and int(dim) != embedder.dim:
            raise StoreUnavailableError(f"long-term store {where}: holds {dim}-d embeddings, the embedder "
                                        f"gives {embedder.dim}-d")

    @classmethod
    def persistent(cls, path: str | Path, embedder: Embedder, **options) -> ChromaStore:
        """Chroma embedded in this process, persisted in the folder ``path``."""
        path = Path(path)
        chromadb = _chromadb()
        ledger = Ledger(path)
        # checked and created with no write of another process in between
        with _opening(str(path)), ledger.writing():
            ledger.check_files(path / "chroma.sqlite3")
            path.mkdir(parents=True, exist_ok=True)
            client = chromadb.PersistentClient(path=str(path), settings=_settings())
            store = cls(client, str(path), embedder, **options)
            store._keep_ledger(ledger)
        return store

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
    def _collection(self, namespace: str, kind: str, create: bool = False):
        """The collection of a namespace and kind; ``None`` if it does not exist and ``create`` is off."""
        from chromadb.errors import NotFoundError

        collection = self._collections.get((namespace, kind))
        if collection is None:
            name = collection_name(namespace, kind)
            if create:
                collection = self._client.get_or_create_collection(
                    name, embedding_function=None, metadata={"hnsw:space": "cosine", "namespace": namespace,
                                                             "kind": kind})
            else:
                try:
                    collection = self._client.get_collection(name, embedding_function=None)
                except NotFoundError:
                    return None
            self._collections[(namespace, kind)] = collection
        return collection

    def _apply(self, change: Change) -> None:
        with self._reaching():
            undo: list[Callable[[], None]] = []
            try:
                for (namespace, kind), pairs in _by_collection(change.added).items():
                    collection = self._collection(namespace, kind, create=True)
                    ids = [item.id for item, _ in pairs]
                    self._add(collection, ids, [v for _, v in pairs], [i.content for i, _ in pairs],
                              [_meta(i) for i, _ in pairs])
                    undo.append(lambda c=collection, ids=ids: c.delete(ids=ids))
                for (namespace, kind), pairs in _by_collection(change.replaced).items():
                    collection = self._collection(namespace, kind, create=True)
                    old = collection.get(ids=[item.id for item, _ in pairs],
                                         include=["documents", "metadatas", "embeddings"])
                    collection.update(ids=[i.id for i, _ in pairs],
                                      embeddings=[np.asarray(v, dtype=np.float32) for _, v in pairs],
                                      documents=[i.content for i, _ in pairs], metadatas=[_meta(i) for i, _ in pairs])
                    undo.append(lambda c=collection, old=old: c.update(
                        ids=old["ids"], embeddings=old["embeddings"], documents=old["documents"],
                        metadatas=old["metadatas"]))
                for (namespace, kind), items in _by_collection(change.removed).items():
                    collection = self._collection(namespace, kind, create=True)
                    old = collection.get(ids=[item.id for item in items], include=["documents", "metadatas", "embeddings"])
                    collection.delete(ids=old["ids"])
                    undo.append(lambda c=collection, old=old: self._add(c, old["ids"], old["embeddings"],
                                                                        old["documents"], old["metadatas"]))
                if change.audit:
                    first = time.time_ns()  # "seq" keeps the change's own order among rows of one instant
                    self._add(self._audit_collection, [uuid.uuid4().hex for _ in change.audit],
                              [[1.0]] * len(change.audit), None,
                              [{**r.model_dump(), "seq": first + i} for i, r in enumerate(change.audit)])
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
        query = np.asarray(vector, dtype=np.float32)
        nearest = []
        with self._reaching():
            for kind in kinds:
                collection = self._collection(namespace, kind)
                if collection is None:
                    continue
                found = collection.query(query_embeddings=[query], n_results=n,
                                         include=["documents", "metadatas", "distances"])
                nearest += [(_item(item_id, document, meta), 1.0 - float(distance))
                            for item_id, document, meta, distance in zip(found["ids"][0], found["documents"][0],
                                                                         found["metadatas"][0], found["distances"][0])]
        return nearest

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        with self._reaching():
            for kind in KINDS:
                collection = self._collection(namespace, kind)
                if collection is not None:
                    found = collection.get(ids=[item_id], include=["documents", "metadatas"])
                    if found["ids"]:
                        return _item(found["ids"][0], found["documents"][0], found["metadatas"][0])
        return None

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        items = []
        for kind_ in [kind] if kind else KINDS:
            with self._reaching():
                collection = self._collection(namespace, kind_)
            if collection is not None:
                items += [_item(i, d, m) for found in self._pages(collection, None, ["documents", "metadatas"])
                          for i, d, m in zip(found["ids"], found["documents"], found["metadatas"])]
        return items

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        where = {"$and": [{"namespace": namespace}, {"item_id": item_id}]} if item_id else {"namespace": namespace}
        metas = [meta for found in self._pages(self._audit_collection, where, ["metadatas"]) for meta in found["metadatas"]]
        metas.sort(key=lambda meta: (meta["at"], meta.get("seq", 0)))
        return [AuditRecord(**{k: v for k, v in meta.items() if k != "seq"}) for meta in metas]

    def _count(self) -> int:
        with self._reaching():
            return sum(c.count() for c in self._client.list_collections() if c.name != AUDIT)

    def _pages(self, collection, where: dict | None, include: list[str]) -> list[dict]:
        pages, offset = [], 0
        with self._reaching():
            while True:
                found = collection.get(where=where, include=include, limit=_PAGE, offset=offset)
                pages.append(found)
                if len(found["ids"]) < _PAGE:
                    return pages
                offset += _PAGE
