"""``AMB_EMBEDDING_WORKERS`` (issue 41): the ONNX backend runs a call's batches on several sessions at once, and
the vectors, and so the banks made with them, are the one-session path's bit for bit, at either precision.

Real models (the float export and its int8 copy in the cache dir), the heuristic policy (no LM), real bank files."""

from __future__ import annotations

import numpy as np
import pytest

from amb_dspy.config import AmbConfig
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder
from tests.test_bank_store import new_bank, sessions  # noqa: F401  (sessions: a fixture)
from tests.test_onnx_embedding import demo_passages


def texts() -> list[str]:
    """Paragraphs, sentences of them and texts of one token and of the 256-token cut: batches of every shape."""
    paragraphs = demo_passages()
    return [*paragraphs, *(s.strip() for p in paragraphs[:6] for s in p.split(". ") if s.strip()), "x", "word " * 400]


@pytest.mark.parametrize("precision", ["int8", "float32"])
def test_several_workers_give_the_vectors_of_one_session(precision):
    cache_dir = default_embedder("onnx").cache_dir
    one = OnnxEmbedder(cache_dir=cache_dir, precision=precision, workers=1)
    three = OnnxEmbedder(cache_dir=cache_dir, precision=precision, workers=3)
    expected, got = one._encode(texts()), three._encode(texts())
    assert len(three._more_sessions) == 2 and one._more_sessions == []  # three sessions ran this call's batches
    assert np.array_equal(got, expected)
    assert np.array_equal(three._encode(texts()[:1]), expected[:1])  # one batch: the first session alone


def test_the_workers_setting_reaches_the_embedder(monkeypatch):
    monkeypatch.setenv("AMB_EMBEDDING_BACKEND", "onnx")
    monkeypatch.setenv("AMB_EMBEDDING_WORKERS", "3")
    three = default_embedder()
    assert isinstance(three, OnnxEmbedder) and three.workers == 3 and three.threads == 1
    monkeypatch.setenv("AMB_EMBEDDING_WORKERS", "1")
    assert default_embedder().workers == 1 and default_embedder() is not three
    assert OnnxEmbedder(workers=1).threads == 0  # one session: ONNX Runtime's own intra-op threads


def test_a_bank_made_by_several_workers_is_the_one_session_bank(tmp_path, sessions):  # noqa: F811
    """The same conversation session ingested with one worker and with two: the same nodes, bit-identical vectors."""
    banks = []
    for workers in (1, 2):
        config = AmbConfig(embedding_backend="onnx", embedding_precision="int8", embedding_workers=workers)
        embedder = default_embedder(config=config)
        assert embedder.workers == workers
        store = new_bank(tmp_path / str(workers), embedder).ingest(sessions[0], "session 1", date="2023-05-08").store
        nodes = sorted(store.graph.nodes_dict.values(), key=lambda node: node.embedding_text)
        banks.append(([node.embedding_text for node in nodes], np.stack([node.embedding for node in nodes])))
    assert banks[0][0] == banks[1][0] and len(banks[0][0]) > 3
    assert np.array_equal(banks[0][1], banks[1][1])
