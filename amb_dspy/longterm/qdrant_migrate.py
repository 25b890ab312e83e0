"""Copy a folder written by qdrant-client's local mode into a Qdrant Edge shard.

Before :mod:`.edge`, ``AMB_LONGTERM_BACKEND=qdrant`` kept its folder with ``QdrantClient(path=...)``
(``meta.json`` and a ``collection/`` folder of SQLite files). The first open of such a folder copies
every item (with its stored vector: nothing is re-embedded) and every audit row into a new shard at
``target``; the caller renames it into place only once the copy is complete, so a copy cut short is
started again on the next open. The old files are left as they were.
"""

from __future__ import annotations

from pathlib import Path

from amb_dspy.longterm.base import AuditRecord
from amb_dspy.longterm.edge_shard import audit_point, open_shard
from amb_dspy.longterm.qdrant import _DIM_POINT, AUDIT, ITEMS_PREFIX, META

_PAGE = 1_000


def is_client_folder(path: Path) -> bool:
    """Whether ``path`` holds a qdrant-client local-mode store."""
    return (path / "meta.json").is_file() and (path / "collection").is_dir()


def migrate_client_folder(path: Path, target: Path, dim: int) -> int:
    """Copy the qdrant-client store at ``path`` into a new Edge shard at ``target``; the items copied."""
    import qdrant_client
    import qdrant_edge as qe

    client = qdrant_client.QdrantClient(path=str(path))
    shard = None
    try:
        if client.collection_exists(META) and (found := client.retrieve(META, ids=[_DIM_POINT], with_payload=True)):
            dim = int(found[0].payload["dim"])  # the embedding size the old store was written with
        shard = open_shard(target, dim)
        copied = 0
        for collection in client.get_collections().collections:
            name = collection.name
            if not (name.startswith(ITEMS_PREFIX) or name == AUDIT):
                continue
            offset = None
            while True:
                page, offset = client.scroll(name, limit=_PAGE, offset=offset, with_payload=True,
                                             with_vectors=name != AUDIT)
                if name == AUDIT:
                    points = [audit_point(AuditRecord(**{k: v for k, v in p.payload.items() if k != "seq"}),
                                          p.payload.get("seq", 0), str(p.id)) for p in page]
                else:
                    points = [qe.Point(str(p.id), {"item": list(p.vector)}, {"type": "item", **p.payload})
                              for p in page]
                    copied += len(points)
                if points:
                    shard.update(qe.UpdateOperation.upsert_points(points))
                if offset is None:
                    break
        shard.flush()
        return copied
    finally:
        if shard is not None:
            shard.close()
        client.close()
