"""The layout of an amb Qdrant Edge shard: how it is created, and what its points look like.

One shard holds everything of a long-term folder: items are points with the named vector ``item``
(unit length, dot product), audit rows are points without a vector, and one meta point records the
embedding size. :mod:`.edge` (the store) and :mod:`.qdrant_migrate` (the copy of an older folder into a
shard) both write such points, so they share this module instead of importing each other.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from amb_dspy.longterm.base import AuditRecord, MemoryItem
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.longterm.qdrant import point_id, unit

VECTOR = "item"
META_ID = point_id("edge meta")  # the id space of every amb point (the same id as before: shards stay readable)


def qdrant_edge():
    """The ``qdrant_edge`` module, or a one-line error naming the extra to install."""
    try:
        import qdrant_edge
    except ImportError:
        raise StoreUnavailableError("the qdrant long-term backend needs qdrant-edge-py: "
                                    "pip install 'amb-dspy[longterm]'") from None
    return qdrant_edge


def open_shard(path: Path, dim: int):
    """The Edge shard at ``path``, created (with its payload indexes and the embedding size) if missing."""
    qe = qdrant_edge()
    if (path / "edge_config.json").exists():
        return qe.EdgeShard.load(str(path))
    shard = qe.EdgeShard.create(str(path), qe.EdgeConfig(
        vectors={VECTOR: qe.EdgeVectorParams(size=dim, distance=qe.Distance.Dot)}))
    for field in ("type", "namespace", "kind", "item_id"):
        shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
    shard.update(qe.UpdateOperation.upsert_points([qe.Point(META_ID, {}, {"type": "meta", "dim": dim})]))
    return shard


def item_point(item: MemoryItem, vector: np.ndarray):
    return qdrant_edge().Point(point_id(item.id), {VECTOR: unit(vector).tolist()},
                               {"type": "item", "item": item.model_dump_json(), "namespace": item.namespace,
                                "kind": item.kind})


def audit_point(record: AuditRecord, seq: int, point: str | None = None):
    """An audit row as a point without a vector. The row is kept as JSON text: a float payload field
    comes back from the shard up to one unit in the last place off (``at`` would not round-trip)."""
    return qdrant_edge().Point(point or str(uuid.uuid4()), {}, {
        "type": "audit", "namespace": record.namespace, "item_id": record.item_id, "seq": seq,
        "row": record.model_dump_json()})


def audit_points(records: Sequence[AuditRecord]) -> list:
    first = time.time_ns()
    return [audit_point(record, first + n) for n, record in enumerate(records)]
