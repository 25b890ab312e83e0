"""The int8 model without its padding mask (issue 41): it runs one text a call, so the mask's steps change no value
and are taken out; its vectors are bit-identical to the masked graph's, and an edit that would change a vector is
not kept.

Real models: the float export in the cache dir, its real int8 quantization with the mask (made here once), the
int8 model the default embedder runs (made by ``make install`` without it)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
import pytest

from amb_dspy.retrieval import onnx_embedding, onnx_graph
from amb_dspy.retrieval.embedding import bundled_minilm_dir
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder, onnx_model_path
from tests.test_embedding_precision import int8  # noqa: F401  (a fixture: the default int8 embedder)
from tests.test_onnx_embedding import demo_passages


def op_types(path) -> set[str]:
    return {node.op_type for node in onnx.load(str(path)).graph.node}


@pytest.fixture(scope="module")
def masked_int8(tmp_path_factory, int8):  # noqa: F811
    """The int8 quantization of the same float export, its padding mask left in."""
    model_dir = bundled_minilm_dir()
    target = tmp_path_factory.mktemp("masked") / "model.int8.masked.onnx"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnx_embedding, "_unpadded", lambda model_dir, path: None)
        onnx_embedding.quantize_int8(model_dir, onnx_model_path(model_dir, int8.cache_dir), target)
    return target


def texts_of_many_lengths() -> list[str]:
    passages = demo_passages()
    return [*passages, "x", "Short.", " ".join(passages) * 3, *(passage[: len(passage) // 3] for passage in passages)]


def test_the_int8_model_has_no_padding_mask_and_the_masked_models_vectors(int8, masked_int8):  # noqa: F811
    assert {"IsNaN", "Where"} <= op_types(masked_int8)
    assert "IsNaN" not in op_types(int8.model_file) and "Where" not in op_types(int8.model_file)
    masked = OnnxEmbedder(onnx_path=masked_int8, precision="int8", workers=1)
    texts = texts_of_many_lengths()
    assert np.array_equal(int8._encode(texts), masked._encode(texts))


def test_an_edit_that_would_change_a_vector_is_not_kept(tmp_path, masked_int8, monkeypatch):
    copy = tmp_path / "model.onnx"
    shutil.copyfile(masked_int8, copy)
    real_drop = onnx_graph.drop_padding_mask

    def drop_and_break(model) -> int:
        dropped = real_drop(model)
        weight = next(init for init in model.graph.initializer if init.data_type == onnx.TensorProto.FLOAT)
        values = onnx.numpy_helper.to_array(weight) * 1.01
        weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
        return dropped

    monkeypatch.setattr(onnx_graph, "drop_padding_mask", drop_and_break)
    onnx_embedding._unpadded(bundled_minilm_dir(), copy)
    assert copy.read_bytes() == masked_int8.read_bytes()
    monkeypatch.setattr(onnx_graph, "drop_padding_mask", real_drop)
    onnx_embedding._unpadded(bundled_minilm_dir(), copy)
    assert "IsNaN" in op_types(masked_int8) and "IsNaN" not in op_types(copy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no edited copy left beside it


def test_a_graph_without_the_mask_is_left_as_it_is(int8):  # noqa: F811
    model = onnx.load(str(int8.model_file))
    nodes = len(model.graph.node)
    assert onnx_graph.drop_padding_mask(model) == 0 and len(model.graph.node) == nodes


def test_int8_runs_one_text_a_call_whatever_batch_is_asked(int8):  # noqa: F811
    asked = OnnxEmbedder(precision="int8", batch_size=8, workers=1)
    assert asked.batch_size == 1 and OnnxEmbedder(precision="float32", batch_size=16).batch_size == 16
    texts = texts_of_many_lengths()
    assert np.array_equal(asked._encode(texts), int8._encode(texts))
