"""Qdrant's local mode on a folder: Qdrant Edge (``qdrant-edge-py``), Qdrant's embedded engine in Rust.

``QdrantEdgeStore.local(path, embedder)`` is what ``AMB_LONGTERM_BACKEND=qdrant`` opens without a URL
(a server goes through :class:`~amb_dspy.longterm.qdrant.QdrantStore`). The folder holds one Edge shard,
``edge/``: items are points with a named vector ``item`` (unit length, dot product) and their payload;
audit rows and the embedding size are points of the same shard without a vector. Every update goes to
the shard's write-ahead log before it returns, so a process that dies between writes loses none of
them; a change is at most two updates (the removals, then the items with their audit rows in one
upsert), and the one already done is undone if the second fails.

Search does not use the shard's own: at 100k points (random 384-d vectors) Qdrant Edge's brute force
with the namespace and kind filter took 17-32 ms on this 2-core machine, and its HNSW (4 ms) is
approximate and took 3-4 minutes of ``optimize()`` to build. Each namespace and kind has an exact
:class:`~.nearest.NearestIndex` (FAISS), derived from the shard: built from it on open and changed in
the same call as every write, after the shard. One process opens a folder at a time (the shard locks its log); the stores of one process on
the same folder share the shard and the indexes, so a second handle sees the first one's changes.

A folder written by qdrant-client's local mode (the backend before this one) is copied into ``edge/``
when it is first opened (:mod:`.qdrant_migrate`); the old files are left where they were.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from amb_dspy.longterm.base import AuditRecord, Change, Kind, LongTermStore, MemoryItem
from amb_dspy.longterm.edge_shard import META_ID, VECTOR, audit_points, item_point, open_shard, qdrant_edge
from amb_dspy.longterm.errors import StoreUnavailableError, unavailable_on_error
from amb_dspy.longterm.ledger import Ledger
from amb_dspy.longterm.nearest import NearestIndex
from amb_dspy.longterm.qdrant import FOLDER_NAME, point_id, unit
from amb_dspy.longterm.qdrant_migrate import is_client_folder, migrate_client_folder
from amb_dspy.retrieval.embedding import Embedder

__all__ = ["FOLDER_NAME", "QdrantEdgeStore", "SHARD", "open_shard"]

SHARD = "edge"
_PAGE = 2_000
_OPEN: dict[str, _Folder] = {}
_OPEN_LOCK = threading.Lock()
OPEN_TIMEOUT_S = 30.0  # how long an open waits for another process to let go of the folder


def _item(payload: dict) -> MemoryItem:
    return MemoryItem.model_validate_json(payload["item"])


def _match(**fields):
    qe = qdrant_edge()
    return qe.Filter(must=[qe.FieldCondition(key, match=qe.MatchValue(value)) for key, value in fields.items()])


class _Folder:
    """One opened folder: the shard, the indexes derived from it, and the lock both change under."""

    def __init__(self, where: str, shard, dim: int):
        self.where, self.shard, self.dim = where, shard, dim
        self.lock = threading.RLock()
        self.users = 0
        self.release_owner: Callable[[], None] = lambda: None  # the hold on the folder among processes
        self.indexes: dict[tuple[str, str], NearestIndex] = {}
        self.load()

    def load(self) -> None:
        """(Re)build every index from the shard."""
        self.indexes = {}
        self.put((p.payload["namespace"], p.payload["kind"], str(p.id), p.vector[VECTOR])
                 for p in self.scroll(_match(type="item"), with_vector=True, payload=["namespace", "kind"]))

    def put(self, rows: Iterable[tuple[str, str, str, Sequence[float]]]) -> None:
        """Index ``(namespace, kind, point id, vector)`` rows, one batch per namespace and kind."""
        groups: dict[tuple[str, str], tuple[list[str], list]] = {}
        for namespace, kind, pid, vector in rows:
            ids, vectors = groups.setdefault((namespace, kind), ([], []))
            ids.append(pid)
            vectors.append(vector)
        for (namespace, kind), (ids, vectors) in groups.items():
            self.index(namespace, kind).put(ids, np.asarray(vectors, dtype=np.float32))

    def index(self, namespace: str, kind: str) -> NearestIndex:
        index = self.indexes.get((namespace, kind))
        if index is None:
            index = self.indexes[(namespace, kind)] = NearestIndex(self.dim)
        return index

    def scroll(self, where, *, with_vector: bool = False, payload: bool | list[str] = True) -> list:
        qe = qdrant_edge()
        points, offset = [], None
        while True:
            page, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=_PAGE, filter=where,
                                                              with_payload=payload, with_vector=with_vector))
            points += page
            if offset is None:
                return points

    def retrieve(self, ids: list[str]) -> list:
        return self.shard.retrieve(ids, True, False) if ids else []


class QdrantEdgeStore(LongTermStore):
    """Long-term memory in a Qdrant Edge shard on a folder; open it with :meth:`local`."""

    name = "qdrant"

    def __init__(self, folder: _Folder, embedder: Embedder, release: Callable[[], None], **options):
        super().__init__(embedder, **options)
        self.where = folder.where
        self._folder = folder
        self._release = release
        self._closed = False

    @classmethod
    def local(cls, path: str | Path, embedder: Embedder, **options) -> QdrantEdgeStore:
        """The store on the folder ``path`` (created if missing), shared by every store of this process there."""
        key, ledger = str(Path(path).resolve()), Ledger(Path(path))
        with _OPEN_LOCK, unavailable_on_error(str(path), "cannot open"):
            folder = _OPEN.get(key) or _open_waiting(Path(key), str(path), embedder.dim, ledger)
            if folder.dim != embedder.dim:
                if folder.users == 0:
                    folder.shard.close()
                    folder.release_owner()
                raise StoreUnavailableError(f"long-term store {path}: holds {folder.dim}-d embeddings, "
                                            f"the embedder gives {embedder.dim}-d")
            _OPEN[key] = folder
            folder.users += 1

        def release() -> None:
            with _OPEN_LOCK:
                folder.users -= 1
                if folder.users == 0 and _OPEN.get(key) is folder:
                    del _OPEN[key]
                    with folder.lock:
                        folder.shard.flush()
                        folder.shard.close()
                    folder.release_owner()

        store = cls(folder, embedder, release, **options)
        store._keep_ledger(ledger)
        return store

    def _reaching(self, doing: str = ""):
        if self._closed:
            raise StoreUnavailableError(f"long-term store {self.where}: closed")
        return unavailable_on_error(self.where, doing)

    # --- primitives ----------------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        qe, folder = qdrant_edge(), self._folder
        upserts = [*change.added, *change.replaced]
        removed = [point_id(item.id) for item in change.removed]
        with folder.lock, self._reaching():
            old = folder.shard.retrieve([point_id(i.id) for i, _ in change.replaced] + removed, True, True) \
                if change.replaced or removed else []
            if removed:
                folder.shard.update(qe.UpdateOperation.delete_points(removed))
            try:
                points = [item_point(item, vector) for item, vector in upserts] + audit_points(change.audit)
                if points:
                    folder.shard.update(qe.UpdateOperation.upsert_points(points))
            except BaseException:
                self._restore([point_id(i.id) for i, _ in change.added], old)
                raise
            try:
                folder.put((item.namespace, item.kind, point_id(item.id), unit(vector)) for item, vector in upserts)
                for item in change.removed:
                    folder.index(item.namespace, item.kind).remove([point_id(item.id)])
            except BaseException:
                folder.load()  # the shard changed: the indexes follow it
                raise

    def _restore(self, added: list[str], old: list) -> None:
        """Put the shard back as it was before a change: its new points gone, its old points back."""
        qe, shard = qdrant_edge(), self._folder.shard
        try:
            if added:
                shard.update(qe.UpdateOperation.delete_points(added))
            if old:
                shard.update(qe.UpdateOperation.upsert_points(
                    [qe.Point(point.id, point.vector, point.payload) for point in old]))
        except Exception:  # noqa: BLE001, S110 - the original error is the one to report
            pass

    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        folder, query = self._folder, unit(vector)
        with folder.lock, self._reaching():
            cosines: dict[str, float] = {}
            for kind in kinds:
                index = folder.indexes.get((namespace, kind))
                if index is not None:
                    cosines.update(index.nearest(query, n))
            items = {str(point.id): _item(point.payload) for point in folder.retrieve(list(cosines))}
        return [(items[pid], cosine) for pid, cosine in cosines.items() if pid in items]

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        with self._folder.lock, self._reaching():
            found = self._folder.retrieve([point_id(item_id)])
        item = _item(found[0].payload) if found else None
        return item if item is not None and item.namespace == namespace else None

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        where = _match(type="item", namespace=namespace, **({"kind": kind} if kind else {}))
        with self._folder.lock, self._reaching():
            return [_item(point.payload) for point in self._folder.scroll(where)]

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        where = _match(type="audit", namespace=namespace, **({"item_id": item_id} if item_id else {}))
        with self._folder.lock, self._reaching():
            rows = [(AuditRecord.model_validate_json(p.payload["row"]), p.payload["seq"])
                    for p in self._folder.scroll(where)]
        rows.sort(key=lambda row: (row[0].at, row[1]))
        return [record for record, _ in rows]

    def _count(self) -> int:
        with self._folder.lock:
            return sum(len(index) for index in self._folder.indexes.values())

    def close(self) -> None:
        with self._folder.lock:
            if self._closed:
                return
            self._closed = True
        self._release()


def _open_waiting(path: Path, where: str, dim: int, ledger: Ledger) -> _Folder:
    """Open the folder for this process alone, waiting up to ``OPEN_TIMEOUT_S`` for another process to let
    go of it (then one line naming that process); a shard that is gone or damaged is refused with how to recover."""
    release = ledger.own(OPEN_TIMEOUT_S, "Qdrant's local mode allows one process at a time; a Qdrant server allows more")
    try:
        ledger.check_files(path / SHARD / "edge_config.json")
        folder = _open_folder(path, where, dim)
    except Exception as exc:  # noqa: BLE001 - the shard's own error, made one line
        release()
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if isinstance(exc, StoreUnavailableError) or not ledger.recorded():
            raise
        raise ledger.refuse(f"cannot open it ({why})") from None
    folder.release_owner = release
    return folder


def _open_folder(path: Path, where: str, dim: int) -> _Folder:
    """Open (or create) the folder's shard, first copying a qdrant-client folder into it if there is one."""
    path.mkdir(parents=True, exist_ok=True)
    shard_path = path / SHARD
    if not (shard_path / "edge_config.json").exists():
        partial = path / f"{SHARD}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        if is_client_folder(path):
            migrate_client_folder(path, partial, dim)
            partial.rename(shard_path)
    shard = open_shard(shard_path, dim)
    try:
        found = shard.retrieve([META_ID], True, False)
        held = int(found[0].payload["dim"]) if found else dim
        return _Folder(where, shard, held)
    except BaseException:
        shard.close()
        raise
