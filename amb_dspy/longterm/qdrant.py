"""Qdrant through ``qdrant-client``: a Qdrant server, or qdrant-client's own local mode on a folder.

* ``QdrantStore.server(url, embedder, api_key=...)``: a Qdrant server (``AMB_LONGTERM_URL``, and
  ``AMB_LONGTERM_API_KEY``), checked at once: a server that does not answer fails the open;
* ``QdrantStore.local(path, embedder)``: ``QdrantClient(path=...)``, qdrant-client's local mode (numpy,
  persisted in SQLite files inside the folder). ``AMB_LONGTERM_BACKEND=qdrant`` no longer opens it: its
  search is a brute-force numpy scan in float64 (152 ms at 100k items) and every point is its own
  SQLite commit; Qdrant Edge (:mod:`.edge`) is the local mode now, and copies such a folder on its first
  open (:mod:`.qdrant_migrate`). It stays as the same client code a server runs, testable without one.
  Local mode lets one client at a time open a folder; every store of this process on the same folder
  shares one client, and a folder held by another process is a :class:`StoreUnavailableError`;
* ``QdrantStore.memory(embedder)``: the local mode without a folder.

Items live in one collection per namespace and kind, named from a hash of the namespace as in
:mod:`.chroma`: a search needs no payload filter. Vectors are stored unit-length under the dot
product, which is then their cosine: local mode's cosine distance re-normalises every stored vector on
every query (54 ms a search at 10k items here, against 2 ms with the dot product). A point's id is a UUID derived from
the item's id; its payload holds the item. The audit trail is one more collection (a constant
one-dimensional vector per row, never searched by it), and a meta collection records the embedding
size. Qdrant has no transactions across points and collections: a change is applied step by step and
the steps already done are undone if a later one fails.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from amb_dspy.longterm.base import (
    KINDS,
    AuditRecord,
    Change,
    Kind,
    LongTermStore,
    MemoryItem,
)
from amb_dspy.longterm.errors import StoreUnavailableError, unavailable_on_error
from amb_dspy.retrieval.embedding import Embedder

ITEMS_PREFIX = "amb-lt-"
AUDIT = "amb_longterm_audit"
META = "amb_longterm_meta"
FOLDER_NAME = "longterm-qdrant"
_PAGE = 1_000
_ID_SPACE = uuid.UUID("6f1d3a52-8a0e-4c8e-9a55-2c61d4b1e7a3")
_DIM_POINT = str(uuid.uuid5(_ID_SPACE, "embedding dimension"))
_LOCAL: dict[str, list] = {}  # resolved folder -> [client, open stores]
_LOCAL_LOCK = threading.Lock()


def _qdrant():
    try:
        import qdrant_client
        from qdrant_client import models
    except ImportError:
        raise StoreUnavailableError("the qdrant long-term backend needs qdrant-client: "
                                    "pip install 'amb-dspy[longterm]'") from None
    return qdrant_client, models


def point_id(item_id: str) -> str:
    """The Qdrant point id (a UUID) of an item id."""
    return str(uuid.uuid5(_ID_SPACE, item_id))


def unit(vector: np.ndarray) -> np.ndarray:
    """The vector scaled to length 1 (a zero vector stays zero), float32."""
    vector = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def collection_name(namespace: str, kind: str) -> str:
    return f"{ITEMS_PREFIX}{hashlib.sha1(namespace.encode('utf-8')).hexdigest()[:24]}-{kind}"


def _payload(item: MemoryItem) -> dict:
    return {"item": item.model_dump_json(), "namespace": item.namespace, "kind": item.kind}


def _item(payload: dict) -> MemoryItem:
    return MemoryItem.model_validate_json(payload["item"])


class QdrantStore(LongTermStore):
    """Long-term memory in Qdrant; build it with :meth:`local` or :meth:`server`."""

    name = "qdrant"

    def __init__(self, client, where: str, embedder: Embedder, *, release: Callable[[], None] | None = None,
                 **options):
        super().__init__(embedder, **options)
        _, self._models = _qdrant()
        self.where = where
        self._client = client
        self._release = release
        self._lock = threading.RLock()
        self._closed = False
        self._known: set[str] = set()
        try:
            with self._reaching("cannot open"):
                self._ensure(AUDIT, 1)
                self._ensure(META, 1)
                found = client.retrieve(META, ids=[_DIM_POINT], with_payload=True)
                if not found:
                    client.upsert(META, points=[self._models.PointStruct(id=_DIM_POINT, vector=[1.0],
                                                                         payload={"dim": embedder.dim})], wait=True)
                elif int(found[0].payload["dim"]) != embedder.dim:
                    raise StoreUnavailableError(f"long-term store {where}: holds {found[0].payload['dim']}-d "
                                                f"embeddings, the embedder gives {embedder.dim}-d")
        except StoreUnavailableError:
            self.close()
            raise

    @classmethod
    def local(cls, path: str | Path, embedder: Embedder, **options) -> QdrantStore:
        """Qdrant's embedded mode on the folder ``path``, shared by every store of this process there."""
        qdrant_client, _ = _qdrant()
        key = str(Path(path).resolve())
        with _LOCAL_LOCK, unavailable_on_error(str(path), "cannot open"):
            entry = _LOCAL.get(key)
            if entry is None:
                Path(path).mkdir(parents=True, exist_ok=True)
                entry = _LOCAL[key] = [qdrant_client.QdrantClient(path=key), 0]
            entry[1] += 1

        def release() -> None:
            with _LOCAL_LOCK:
                entry[1] -= 1
                if entry[1] == 0 and _LOCAL.get(key) is entry:
                    del _LOCAL[key]
                    entry[0].close()

        return cls(entry[0], str(path), embedder, release=release, **options)

    @classmethod
    def memory(cls, embedder: Embedder, **options) -> QdrantStore:
        """Qdrant's local mode without a folder: the same search code, nothing persisted (benchmarks, tests)."""
        qdrant_client, _ = _qdrant()
        with unavailable_on_error(":memory:", "cannot open"):
            client = qdrant_client.QdrantClient(location=":memory:")
        return cls(client, ":memory:", embedder, release=client.close, **options)

    @classmethod
    def server(cls, url: str, embedder: Embedder, *, api_key: str = "", timeout_s: float = 5.0,
               **options) -> QdrantStore:
        """A Qdrant server at ``url``; fails at once (within ``timeout_s``) if it does not answer."""
        qdrant_client, _ = _qdrant()
        client = None
        try:
            with unavailable_on_error(url, "cannot reach"):
                # reachability is checked right here; the client's own version probe would only warn
                client = qdrant_client.QdrantClient(url=url, api_key=api_key or None, timeout=int(max(1, timeout_s)),
                                                    check_compatibility=False)
                client.get_collections()
        except StoreUnavailableError:
            if client is not None:
                client.close()
            raise
        return cls(client, url, embedder, release=client.close, **options)

    @contextmanager
    def _reaching(self, doing: str = ""):
        with self._lock, unavailable_on_error(self.where, doing):
            if self._closed:
                raise StoreUnavailableError(f"long-term store {self.where}: closed")
            yield

    def _ensure(self, name: str, size: int) -> None:
        if name in self._known:
            return
        if not self._client.collection_exists(name):
            models = self._models
            self._client.create_collection(name, vectors_config=models.VectorParams(
                size=size, distance=models.Distance.DOT))
        self._known.add(name)

    def _exists(self, name: str) -> bool:
        if name not in self._known and self._client.collection_exists(name):
            self._known.add(name)
        return name in self._known

    # --- primitives ----------------------------------------------------------------------------
    def _points(self, pairs: list[tuple[MemoryItem, np.ndarray]]) -> list:
        return [self._models.PointStruct(id=point_id(item.id), vector=unit(vector).tolist(), payload=_payload(item))
                for item, vector in pairs]

    def _apply(self, change: Change) -> None:
        """One upsert or delete per collection (each is one commit in local mode), then the audit rows."""
        client = self._client
        upserts: dict[str, list[tuple[MemoryItem, np.ndarray]]] = {}
        deletes: dict[str, list[str]] = {}
        for item, vector in [*change.added, *change.replaced]:
            upserts.setdefault(collection_name(item.namespace, item.kind), []).append((item, vector))
        for item in change.removed:
            deletes.setdefault(collection_name(item.namespace, item.kind), []).append(point_id(item.id))
        with self._reaching():
            undo: list[Callable[[], None]] = []
            try:
                for name, pairs in upserts.items():
                    self._ensure(name, self.embedder.dim)
                    ids = [point_id(item.id) for item, _ in pairs]
                    old = client.retrieve(name, ids=ids, with_payload=True, with_vectors=True) if change.replaced else []
                    client.upsert(name, points=self._points(pairs), wait=True)
                    undo.append(lambda n=name, ids=ids, old=old: self._restore(n, ids, old))
                for name, ids in deletes.items():
                    if not self._exists(name):
                        continue
                    old = client.retrieve(name, ids=ids, with_payload=True, with_vectors=True)
                    self._delete(name, ids)
                    undo.append(lambda n=name, ids=ids, old=old: self._restore(n, ids, old))
                if change.audit:
                    first = time.time_ns()
                    client.upsert(AUDIT, wait=True, points=[
                        self._models.PointStruct(id=str(uuid.uuid4()), vector=[1.0],
                                                 payload={**r.model_dump(), "seq": first + n})
                        for n, r in enumerate(change.audit)])
            except BaseException:
                for step in reversed(undo):
                    try:
                        step()
                    except Exception:  # noqa: BLE001, S110 - the original error is the one to report
                        pass
                raise

    def _delete(self, name: str, ids: list[str]) -> None:
        self._client.delete(name, points_selector=self._models.PointIdsList(points=ids), wait=True)

    def _restore(self, name: str, ids: list[str], old: list) -> None:
        """Put the points ``ids`` of ``name`` back as they were (``old``; an id not in it did not exist)."""
        kept = {str(point.id) for point in old}
        if gone := [pid for pid in ids if pid not in kept]:
            self._delete(name, gone)
        if old:
            self._client.upsert(name, wait=True, points=[self._models.PointStruct(
                id=point.id, vector=point.vector, payload=point.payload) for point in old])

    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        query = unit(vector)
        nearest = []
        with self._reaching():
            for kind in kinds:
                name = collection_name(namespace, kind)
                if not self._exists(name):
                    continue
                found = self._client.query_points(name, query=query, limit=n, with_payload=True).points
                nearest += [(_item(point.payload), float(point.score)) for point in found]
        return nearest

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        with self._reaching():
            for kind in KINDS:
                name = collection_name(namespace, kind)
                if self._exists(name):
                    found = self._client.retrieve(name, ids=[point_id(item_id)], with_payload=True)
                    if found:
                        return _item(found[0].payload)
        return None

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        items = []
        with self._reaching():
            for kind_ in [kind] if kind else KINDS:
                name = collection_name(namespace, kind_)
                if self._exists(name):
                    items += [_item(point.payload) for point in self._scroll(name, None)]
        return items

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        models = self._models
        must = [models.FieldCondition(key="namespace", match=models.MatchValue(value=namespace))]
        if item_id:
            must.append(models.FieldCondition(key="item_id", match=models.MatchValue(value=item_id)))
        with self._reaching():
            rows = [point.payload for point in self._scroll(AUDIT, models.Filter(must=must))]
        rows.sort(key=lambda row: (row["at"], row.get("seq", 0)))
        return [AuditRecord(**{k: v for k, v in row.items() if k != "seq"}) for row in rows]

    def _scroll(self, name: str, where) -> list:
        points, offset = [], None
        while True:
            page, offset = self._client.scroll(name, scroll_filter=where, limit=_PAGE, offset=offset,
                                               with_payload=True, with_vectors=False)
            points += page
            if offset is None:
                return points

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._release is not None:
                    self._release()

