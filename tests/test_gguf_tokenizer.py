"""The embedded model's tokenizer rebuilt in ``tokenizers`` from its GGUF file counts as llama.cpp counts, or is not used."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from amb_dspy.lm import llama_models
from amb_dspy.lm.gguf_tokenizer import CHECK_TEXTS, GGUFFormatError, fast_counter, read_tokenizer_fields

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.fixture(scope="module")
def smollm2() -> str:
    pytest.importorskip("llama_cpp")
    from amb_dspy.lm.llama_engine import smollm2_path

    return str(smollm2_path())


@pytest.fixture(scope="module")
def llama_count(smollm2):
    import llama_cpp

    model = llama_cpp.Llama(model_path=smollm2, vocab_only=True, verbose=False)
    return lambda text: len(model.tokenize(text.encode("utf-8"), add_bos=False, special=False))


def shared_texts() -> list[str]:
    """Questions, sentences and whole paragraphs of HotpotQA 0-149, and the turns of LoCoMo 26."""
    texts = []
    with open(SHARED / "hotpotqa" / "dev_distractor_300.jsonl", encoding="utf-8") as lines:
        for _, line in zip(range(150), lines):
            item = json.loads(line)
            texts.append(item["question"])
            for title, sentences in item["context"]:
                texts += [title, *sentences, "".join(sentences)]
    conversation = json.loads((SHARED / "locomo" / "26.json").read_text(encoding="utf-8"))
    texts += [turn["text"] for key, turns in conversation.items() if key.startswith("session_") and isinstance(turns, list)
              for turn in turns]
    return texts


def test_the_rebuilt_tokenizer_counts_the_shared_texts_as_llama_cpp(smollm2, llama_count):
    counter = fast_counter(smollm2, llama_count)
    assert counter is not None
    texts = [*shared_texts(), *CHECK_TEXTS]
    assert len(texts) > 9_000
    assert [counter(text) for text in texts] == [llama_count(text) for text in texts]


def test_count_tokens_counts_with_it_while_the_model_is_not_loaded(smollm2, llama_count):
    text = "Elko Regional Airport handled 31,254 passengers in 2019."
    assert llama_models._count(smollm2, text) == llama_count(text)
    assert llama_models._fast_counters[smollm2] is not None
    with pytest.raises(UnicodeEncodeError):  # no valid Unicode: refused as llama.cpp's binding refuses it
        llama_models._count(smollm2, "a lone \udc80 surrogate")


def test_a_counter_that_disagrees_with_llama_cpp_is_not_used(smollm2, llama_count):
    assert fast_counter(smollm2, lambda text: llama_count(text) + (text == CHECK_TEXTS[-1])) is None


def _gguf(path: Path, fields: list[tuple[str, int, object]]) -> Path:
    """A GGUF file of these (key, type, value) fields and no tensors: types 4 (uint32), 8 (string), and
    (9, item type) arrays of strings or float32."""
    def string(text: str) -> bytes:
        data = text.encode("utf-8")
        return struct.pack("<Q", len(data)) + data

    out = b"GGUF" + struct.pack("<IQQ", 3, 0, len(fields))
    for key, kind, value in fields:
        out += string(key)
        if kind == 4:
            out += struct.pack("<II", 4, value)
        elif kind == 8:
            out += struct.pack("<I", 8) + string(value)
        else:
            item = kind[1]
            out += struct.pack("<IIQ", 9, item, len(value))
            out += b"".join(string(v) if item == 8 else struct.pack("<f", v) for v in value)
    path.write_bytes(out)
    return path


def test_the_header_reader_takes_the_tokenizer_fields_and_skips_the_others(tmp_path):
    path = _gguf(tmp_path / "m.gguf", [
        ("general.architecture", 8, "llama"), ("llama.block_count", 4, 30),
        ("tokenizer.ggml.scores", (9, 6), [0.5, -1.0]), ("tokenizer.ggml.model", 8, "gpt2"),
        ("tokenizer.ggml.tokens", (9, 8), ["a", "b", "ab"]), ("tokenizer.ggml.merges", (9, 8), ["a b"]),
        ("tokenizer.ggml.pre", 8, "llama-bpe"),
    ])
    assert read_tokenizer_fields(path) == {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
                                           "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "llama-bpe"}
    # a pre-tokenizer whose rules are not rebuilt here: llama.cpp keeps counting
    assert fast_counter(path, lambda text: 1) is None


def test_a_file_that_is_no_gguf_gives_no_counter(tmp_path):
    (tmp_path / "notes.gguf").write_bytes(b"not a model at all")
    with pytest.raises(GGUFFormatError):
        read_tokenizer_fields(tmp_path / "notes.gguf")
    assert fast_counter(tmp_path / "notes.gguf", lambda text: 1) is None
    truncated = _gguf(tmp_path / "cut.gguf", [("tokenizer.ggml.tokens", (9, 8), ["a", "b"])])
    truncated.write_bytes(truncated.read_bytes()[:-3])
    assert fast_counter(truncated, lambda text: 1) is None
