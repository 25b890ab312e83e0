"""Qdrant's local mode on Qdrant Edge: what the shared suite (tests/test_longterm.py) cannot show.

Real parts: the all-MiniLM-L6-v2 embedder, a Qdrant Edge shard on disk, FAISS, qdrant-client's local
mode (the folders written before Qdrant Edge), and a child process killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from amb_dspy.longterm import StoreUnavailableError
from amb_dspy.longterm.edge import SHARD, QdrantEdgeStore
from amb_dspy.longterm.nearest import NearestIndex
from amb_dspy.longterm.qdrant import QdrantStore

SEINE = "The Seine flows through Paris and into the English Channel at Le Havre."
DERRICKSON = "Scott Derrickson is an American film director, screenwriter and producer."
DERRICKSON_PARAPHRASE = "Scott Derrickson, an American director of films, also writes screenplays and produces."
WOOD = "Ed Wood was an American filmmaker known for low-budget science fiction films."


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _exact(ids: list[str], vectors: np.ndarray, query: np.ndarray, n: int) -> list[str]:
    scores = vectors.astype(np.float64) @ query.astype(np.float64)
    return [ids[j] for j in sorted(range(len(ids)), key=lambda j: (-float(scores[j]), ids[j]))[:n]]


def test_nearest_index_answers_exactly_what_a_float32_scan_answers():
    rng = np.random.default_rng(7)
    base = _unit(rng.standard_normal((1, 64)))
    # near-ties closer than half precision can tell apart: the half-precision pool must widen
    vectors = _unit(np.vstack([base + 3e-3 * rng.standard_normal((300, 64)), rng.standard_normal((700, 64))]))
    ids = [f"id{i:04d}" for i in range(len(vectors))]
    index = NearestIndex(64)
    index.put(ids, vectors)
    index.remove(ids[:50:3])
    vectors[5] = _unit(rng.standard_normal((1, 64)))[0]
    index.put([ids[5]], vectors[5:6])  # a replaced vector
    index.put(["new"], base)
    held = [i for i in range(len(ids)) if i % 3 or i >= 50]
    all_ids = [ids[i] for i in held] + ["new"]
    all_vectors = np.vstack([vectors[held], base])
    for query in [base[0], *_unit(rng.standard_normal((5, 64)))]:
        for n in (1, 5, 32):
            found = index.nearest(query, n)
            exact = {i: float(v.astype(np.float64) @ query) for i, v in zip(all_ids, all_vectors)}
            # the same ranking as a float64 scan, up to ties that float32 cannot tell apart (1e-6)
            assert len(found) == n and len({i for i, _ in found}) == n
            assert np.allclose([exact[i] for i, _ in found], [exact[i] for i in _exact(all_ids, all_vectors, query, n)],
                               rtol=0, atol=1e-6)
            assert np.allclose([s for _, s in found], [exact[i] for i, _ in found], rtol=0, atol=1e-6)
    assert len(index) == len(all_ids) and index.nearest(base[0], 0) == []


class _FailingShard:
    """The real shard, except that the ``fail_at``-th update from now raises (as a full disk would)."""

    def __init__(self, shard, fail_at: int):
        self._shard, self._left = shard, fail_at

    def update(self, operation):
        self._left -= 1
        if self._left == 0:
            raise OSError("No space left on device")
        return self._shard.update(operation)

    def __getattr__(self, name):
        return getattr(self._shard, name)


@pytest.mark.parametrize("step", ["write", "merge", "delete"])
def test_a_change_that_fails_midway_leaves_shard_and_index_as_they_were(tmp_path, embedder, step):
    store = QdrantEdgeStore.local(tmp_path / "qdrant", embedder)
    kept = store.write("ns", DERRICKSON, "fact").item
    folder = store._folder
    real = folder.shard
    folder.shard = _FailingShard(real, fail_at=2 if step == "delete" else 1)  # a delete's audit row is its 2nd update
    with pytest.raises(StoreUnavailableError, match="No space left on device"):
        {"write": lambda: store.write("ns", SEINE, "fact"),
         "merge": lambda: store.write("ns", DERRICKSON_PARAPHRASE, "fact"),
         "delete": lambda: store.delete("ns", kept.id)}[step]()
    folder.shard = real
    assert [(i.id, i.content) for i in store.list("ns")] == [(kept.id, DERRICKSON)]
    assert [h.item.id for h in store.search("ns", "Derrickson film director", k=5)] == [kept.id]
    assert [h.item.id for h in store.search("ns", "Seine Paris river", k=5)] == [kept.id]
    assert [r.action for r in store.audit("ns")] == ["write"]
    store.close()
    reopened = QdrantEdgeStore.local(tmp_path / "qdrant", embedder)
    assert [(i.id, i.content) for i in reopened.list("ns")] == [(kept.id, DERRICKSON)]
    reopened.close()


KILLED = """
import os, signal, sys
from amb_dspy.longterm.edge import QdrantEdgeStore
from amb_dspy.retrieval.embedding import default_embedder
store = QdrantEdgeStore.local(sys.argv[1], default_embedder())
for text in sys.argv[2:]:
    print(store.write("ns", text, "fact").item.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush
"""


def test_writes_survive_a_process_killed_between_them(tmp_path, embedder):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "qdrant"), SEINE, DERRICKSON, WOOD],
                           capture_output=True, text=True, env=env, timeout=300)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    ids = child.stdout.split()
    assert len(ids) == 3
    store = QdrantEdgeStore.local(tmp_path / "qdrant", embedder)
    assert sorted(i.id for i in store.list("ns")) == sorted(ids)
    assert store.search("ns", "low-budget science fiction", k=1)[0].item.id == ids[2]  # the index is rebuilt
    assert [r.item_id for r in store.audit("ns")] == ids
    store.close()


def test_a_qdrant_client_folder_is_copied_on_first_open_and_left_in_place(tmp_path, embedder):
    old = QdrantStore.local(tmp_path / "qdrant", embedder)
    seine = old.write("ns", SEINE, "fact", task_id="t1").item
    derrickson = old.write("ns", DERRICKSON, "fact").item
    merged = old.write("ns", DERRICKSON_PARAPHRASE, "fact").item
    wood = old.write("other", WOOD, "conclusion").item
    old.delete("ns", seine.id)
    before = {ns: (old.list(ns), old.audit(ns), [(h.item.id, round(h.score, 5)) for h in old.search(ns, "film director")])
              for ns in ("ns", "other")}
    old.close()
    assert merged.id == derrickson.id

    store = QdrantEdgeStore.local(tmp_path / "qdrant", embedder)
    for ns, (items, audit, hits) in before.items():
        assert store.list(ns) == items
        assert store.audit(ns) == audit
        assert [(h.item.id, round(h.score, 5)) for h in store.search(ns, "film director")] == hits
    added = store.write("other", SEINE, "fact").item
    store.close()
    assert (tmp_path / "qdrant" / SHARD).is_dir() and (tmp_path / "qdrant" / "meta.json").is_file()
    assert not (tmp_path / "qdrant" / f"{SHARD}.partial").exists()

    store = QdrantEdgeStore.local(tmp_path / "qdrant", embedder)  # copied once: the new item is still there
    assert {i.id for i in store.list("other")} == {wood.id, added.id}
    store.close()


def test_a_folder_held_by_another_process_is_one_line(tmp_path, embedder):
    QdrantEdgeStore.local(tmp_path / "qdrant", embedder).close()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, qdrant_edge; s = qdrant_edge.EdgeShard.load("
                               "sys.argv[1]); print('holding', flush=True); sys.stdin.readline()",
                               str(tmp_path / "qdrant" / SHARD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(StoreUnavailableError, match="cannot open") as caught:
            QdrantEdgeStore.local(tmp_path / "qdrant", embedder)
        assert "\n" not in str(caught.value)
    finally:
        holder.communicate("release\n", timeout=30)
    QdrantEdgeStore.local(tmp_path / "qdrant", embedder).close()  # free again
