"""The ONNX Runtime embedding backend: the same vectors as sentence-transformers, without torch at run time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amb_dspy.config import AmbConfig
from amb_dspy.retrieval.embedding import (
    EmbeddingError,
    SentenceTransformerEmbedder,
    bundled_minilm_dir,
    default_embedder,
    resolve_backend,
)
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder, onnx_model_path

DEMO = Path(__file__).resolve().parent.parent / "datasets" / "demo"


@pytest.fixture(scope="module")
def reference():
    model = SentenceTransformerEmbedder()
    model.embed(["warm-up"])
    return model


def demo_passages() -> list[str]:
    """The paragraphs of the demo corpus's Markdown files."""
    return [p.strip() for f in sorted(DEMO.glob("*.md")) for p in f.read_text().split("\n\n") if p.strip()]


def test_onnx_vectors_match_sentence_transformers(reference):
    """At float32; the int8 default's vectors are close, not equal (tests/test_embedding_precision.py)."""
    onnx = default_embedder(config=AmbConfig(embedding_backend="onnx", embedding_precision="float32"))
    assert isinstance(onnx, OnnxEmbedder)
    texts = demo_passages() + ["x", "word " * 400]  # a one-token text and one cut at 256 tokens
    got, expected = onnx.embed(texts), reference.embed(texts)
    assert got.shape == expected.shape == (len(texts), 384) and got.dtype == np.float32
    assert float((got * expected).sum(axis=1).min()) >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batch_composition_does_not_change_a_vector():
    onnx = OnnxEmbedder(cache_dir=default_embedder("onnx").cache_dir, batch_size=3)
    texts = demo_passages()[:7]
    alone = np.stack([onnx._encode([t])[0] for t in texts])
    assert np.allclose(onnx._encode(texts), alone, atol=1e-5)  # padding to a batch's longest text is masked out


def test_backends_are_chosen_by_config(monkeypatch):
    monkeypatch.setenv("AMB_EMBEDDING_BACKEND", "sentence-transformers")
    assert isinstance(default_embedder(), SentenceTransformerEmbedder)
    monkeypatch.setenv("AMB_EMBEDDING_BACKEND", "onnx")
    assert isinstance(default_embedder(), OnnxEmbedder)
    assert resolve_backend("auto") == "onnx"  # onnxruntime is installed with amb-dspy
    assert default_embedder("onnx").model_id != default_embedder("sentence-transformers").model_id
    with pytest.raises(EmbeddingError, match="unknown embedding backend 'tensorflow'"):
        resolve_backend("tensorflow")


def test_embedding_with_onnx_imports_no_torch():
    code = (
        "import sys\n"
        "from amb_dspy.retrieval.embedding import default_embedder\n"
        "vectors = default_embedder('onnx').embed(['The Seine flows through Paris.'])\n"
        "assert vectors.shape == (1, 384), vectors.shape\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sentence_transformers', 'transformers'))\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_missing_or_broken_export_is_exported_again_with_a_notice(tmp_path):
    """One real export (torch, about 10-20 s): into an empty cache dir, then over a corrupt file."""
    notes: list[str] = []
    onnx = OnnxEmbedder(cache_dir=tmp_path, notify=notes.append)
    first = onnx.embed(["a harbour at night"])
    path = onnx_model_path(bundled_minilm_dir(), tmp_path)
    assert path.is_file() and len(notes) == 1 and notes[0].startswith("exporting the embedding model to ONNX once")
    assert [p.name for p in path.parent.iterdir()] == ["model.onnx"]  # no partial file left behind
    path.write_bytes(b"not an onnx model")
    notes.clear()
    again = OnnxEmbedder(cache_dir=tmp_path, notify=notes.append).embed(["a harbour at night"])
    assert len(notes) == 1 and "cannot be loaded; exporting it again" in notes[0]
    assert np.allclose(first, again, atol=1e-6)


def test_the_banks_config_picks_its_embedder_and_each_setting_its_own(tmp_path):
    """A bank's embedding section and cache dir reach its embedder (they were read from the environment
    alone), and the process-wide cache keeps one embedder per combination of them."""
    from scripted_lm import ScriptedLM

    from amb_dspy.bank import MemoryBank
    from amb_dspy.config import AmbConfig

    config = AmbConfig(embedding_backend="onnx", embedding_precision="float32", embedding_batch_size=3, cache_dir=tmp_path / "models",
                       storage_dir=tmp_path / "s", temp_dir=tmp_path / "t")
    embedder = MemoryBank(config, lm=ScriptedLM()).embedder
    assert isinstance(embedder, OnnxEmbedder)
    assert (embedder.batch_size, embedder.cache_dir) == (3, tmp_path / "models")
    assert default_embedder(config=config) is embedder  # the same settings share one embedder and its vectors
    wider = default_embedder(config=config.model_copy(update={"embedding_batch_size": 4}))
    elsewhere = default_embedder(config=config.model_copy(update={"cache_dir": tmp_path / "other"}))
    assert (wider.batch_size, elsewhere.cache_dir) == (4, tmp_path / "other")
    assert len({id(embedder), id(wider), id(elsewhere)}) == 3
    torch = default_embedder(config=config.model_copy(update={"embedding_backend": "sentence-transformers"}))
    assert isinstance(torch, SentenceTransformerEmbedder) and torch.batch_size == 3


def test_an_onnx_embedder_without_a_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert OnnxEmbedder().cache_dir == tmp_path / "amb-dspy"
