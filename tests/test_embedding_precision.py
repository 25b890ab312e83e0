"""``AMB_EMBEDDING_PRECISION`` (issue 41): the int8 copy of the exported model is made beside it and loads; its
vectors do not depend on the texts they are embedded with; the setting switches the model and the name a bank
records, so a bank embedded at one precision is embedded again at the other, never mixed.

Real models (the float export in the cache dir, its real int8 quantization), real FAISS, real bank files, the
heuristic policy (no LM)."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time

import numpy as np
import pytest

from amb_dspy.config import AmbConfig
from amb_dspy.memory.bank_io import embedding_model_name
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import bundled_minilm_dir, default_embedder
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder, int8_model_path, onnx_model_path
from tests.test_bank_store import new_bank, sessions  # noqa: F401  (sessions: a fixture)
from tests.test_onnx_embedding import demo_passages


@pytest.fixture(scope="module")
def float32():
    model = default_embedder(config=AmbConfig(embedding_backend="onnx", embedding_precision="float32"))
    model.embed(["warm-up"])
    return model


@pytest.fixture(scope="module")
def int8():
    model = default_embedder(config=AmbConfig(embedding_backend="onnx", embedding_precision="int8"))
    model.embed(["warm-up"])
    return model


def test_the_int8_copy_is_made_beside_the_export_and_loads(tmp_path, float32):
    """The float export copied into an empty cache dir (no torch export): the int8 copy is made once, with a
    notice, beside it, and its vectors are close to the float ones, not equal."""
    model_dir = bundled_minilm_dir()
    target = onnx_model_path(model_dir, tmp_path)
    target.parent.mkdir(parents=True)
    shutil.copyfile(onnx_model_path(model_dir, float32.cache_dir), target)
    notes: list[str] = []
    int8 = OnnxEmbedder(cache_dir=tmp_path, precision="int8", notify=notes.append)
    texts = demo_passages()
    got, expected = int8.embed(texts), float32.embed(texts)
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.int8.unpadded.onnx", "model.onnx"]  # nothing partial left
    assert int8_model_path(target).is_file() and len(notes) == 1 and notes[0].startswith("quantizing the embedding model")
    cosines = (got * expected).sum(axis=1)
    assert cosines.min() >= 0.98 and not np.allclose(got, expected, atol=1e-3)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert OnnxEmbedder(cache_dir=tmp_path, precision="int8", notify=notes.append).embed(texts[:1]).shape == (1, 384)
    assert len(notes) == 1  # the second embedder loads the copy made by the first


def test_a_length_grouped_batch_gives_each_text_its_vector_alone(int8, float32):
    """Texts of very different lengths, embedded together (sorted by length, batched, put back in order): each
    row is the vector the text gets alone, at either precision."""
    texts = [*demo_passages()[:6], "x", "word " * 400, demo_passages()[0][:40]]
    for model in (int8, float32):
        together = model._encode(texts)
        alone = np.stack([model._encode([text])[0] for text in texts])
        assert np.allclose(together, alone, atol=1e-5), model.precision


def test_calls_from_several_threads_at_once_get_the_vectors_of_calls_one_after_another(int8):
    """The ONNX embedder lets calls run the model at once (an ingest's two preparers): four threads, started
    together on a fresh embedder (its first load among them), each embedding its share, get the rows a serial
    call gives, bit for bit; the time it reports in the model counts calls that ran at once once."""
    texts = [f"{passage} ({n})" for n, passage in enumerate(demo_passages() * 3)]
    expected = int8._encode(texts)
    fresh = OnnxEmbedder(precision="int8", cache_dir=int8.cache_dir)
    assert fresh.concurrent_calls and fresh._session is None
    start, got = threading.Barrier(4), {}

    def embed(share: int) -> None:
        start.wait(timeout=30)
        got[share] = fresh.embed(texts[share::4])

    threads = [threading.Thread(target=embed, args=(share,)) for share in range(4)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    wall = time.perf_counter() - started
    assert sorted(got) == [0, 1, 2, 3]
    for share in range(4):
        assert np.array_equal(got[share], expected[share::4])
    # the model's busy time, calls at once counted once: never more than the time they all took
    assert 0 < fresh.encode_seconds <= wall and fresh.encoded_texts == len(texts)


def test_the_precision_setting_switches_the_model_and_the_recorded_name(monkeypatch, int8, float32):
    monkeypatch.setenv("AMB_EMBEDDING_BACKEND", "onnx")
    monkeypatch.setenv("AMB_EMBEDDING_PRECISION", "float32")
    assert default_embedder() is float32 and float32.precision == "float32"
    monkeypatch.setenv("AMB_EMBEDDING_PRECISION", "int8")
    assert default_embedder() is int8 and int8.precision == "int8"
    assert (int8.model_file.name, float32.model_file.name) == ("model.int8.unpadded.onnx", "model.onnx")
    reference = default_embedder("sentence-transformers")
    assert embedding_model_name(float32) == embedding_model_name(reference)  # the same vectors, the same name
    assert embedding_model_name(int8) == f"{embedding_model_name(float32)}+int8"
    assert len({int8.model_id, float32.model_id, reference.model_id}) == 3  # corpus caches keep each its own


def test_a_float32_bank_opened_at_int8_is_embedded_again_never_mixed(tmp_path, int8, float32, sessions):  # noqa: F811
    bank = new_bank(tmp_path, float32)
    ingested = bank.ingest(sessions[0], "session 1", date="2023-05-08")
    path = ingested.store.export(tmp_path / "bank.sqlite")
    notices: list[str] = []
    store = MemoryStore.load(path, int8, notices)
    nodes = list(store.graph.nodes_dict.values())
    assert len(notices) == 1 and notices[0].endswith(f"{len(nodes)} nodes embedded again with {int8.model_name}")
    expected = int8.embed([node.embedding_text for node in nodes])
    assert np.allclose(np.stack([node.embedding for node in nodes]), expected, atol=1e-6)  # no float vector kept
    assert len(store.line_vectors) == 0 and store.line_vectors.model == f"{int8.model_name}/{int8.dim}"
    store.export(path)
    with sqlite3.connect(path) as connection:
        recorded = connection.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0]
    assert int8.model_name in recorded
    assert MemoryStore.load(path, int8, notices := []) and notices == []  # reopened at int8: nothing to embed
