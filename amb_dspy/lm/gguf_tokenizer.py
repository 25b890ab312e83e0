"""A GGUF model's tokenizer rebuilt in Hugging Face ``tokenizers``, for counting tokens without llama.cpp.

An ingest under the heuristic policy sizes its chunks and summaries in the embedded model's tokens without loading
the model (:func:`~amb_dspy.lm.llama_models.count_tokens`). llama.cpp's tokenizer of SmolLM2 takes about 175 us for a
HotpotQA sentence, holding the GIL: 3 s of a 226k-token ingest's 18 s of Python. The same byte-level BPE in
``tokenizers`` (Rust) takes about 64 us, and lets the GIL go while it runs (each text is counted as a batch of one:
``encode_batch_fast`` releases the GIL and skips the offsets a count does not need, ``encode`` does neither), so an
ingest's counts no longer hold up its other threads' Python. It is built from the GGUF file's own vocabulary and
merges, read here from the file's header (:func:`read_tokenizer_fields`), for the pre-tokenizers whose rules it can
say exactly (:data:`PRE_TOKENIZERS`: SmolLM2's), and kept only if it counts :data:`CHECK_TEXTS` as llama.cpp does;
otherwise llama.cpp counts, as before. Nothing is written to disk: building it takes about 0.2 s.

The header is read by hand, not by the ``gguf`` package: its reader makes Python objects of every field and tensor
(4.7 s for SmolLM2's 98k vocabulary strings), where the tokenizer needs four fields.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from amb_dspy.errors import AmbError

# GGUF value types (ggml's gguf.h) of a fixed size, as struct formats; 8 is a string, 9 an array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_FIXED = {kind: struct.calcsize(form) for kind, form in _SCALAR.items()}  # their sizes in bytes
_STRING, _ARRAY = 8, 9
WANTED = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.merges")
# llama.cpp's pre-tokenizer name -> the tokenizers pre-tokenizers that split text as it does
PRE_TOKENIZERS = {"smollm": ("digits", "byte_level")}
CHECK_TEXTS = [
    "The Seine flows through Paris into the English Channel.", "  two leading spaces", "tabs\tand\nnew\n\nlines \n",
    "1,234,567.89 and 2023-05-08T10:00", "don't, it's, we'll, THEY'RE", "émigré café naïve Æsop",
    "中文测试，日本語のテキスト", "emoji 😀👍🏽 done", "<|im_start|>user\nhi<|im_end|>", "a" * 300, "x" + " " * 40 + "y",
    "Caroline: [8 May, 2023] I went to a LGBTQ support group!", "$100 (approx.) -- \"quoted\" 'single' ...",
]


class GGUFFormatError(AmbError, ValueError):
    """The file is no GGUF file this reader understands."""


def read_tokenizer_fields(path: str | Path) -> dict[str, Any]:
    """The ``tokenizer.ggml.*`` fields of :data:`WANTED` that the GGUF file at ``path`` holds (strings, lists of
    strings), read from its header without reading the tensors."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"GGUF":
            raise GGUFFormatError(f"{path} is no GGUF file")
        version, _tensors, count = struct.unpack_from("<IQQ", data, 4)
        if version < 2:
            raise GGUFFormatError(f"{path}: GGUF version {version} is not read here")
        found: dict[str, Any] = {}
        offset = 24
        for _ in range(count):
            key, offset = _string(data, offset)
            (kind,), offset = struct.unpack_from("<I", data, offset), offset + 4
            value, offset = _value(data, offset, kind, keep=key in WANTED)
            if key in WANTED:
                found[key] = value
                if len(found) == len(WANTED):
                    break
        return found


def _string(data, offset: int) -> tuple[str, int]:
    (size,) = struct.unpack_from("<Q", data, offset)
    start = offset + 8
    return data[start : start + size].decode("utf-8", "surrogateescape"), start + size


def _value(data, offset: int, kind: int, keep: bool) -> tuple[Any, int]:
    """The value of type ``kind`` at ``offset`` (None unless ``keep``) and the offset after it."""
    if kind == _STRING:
        return _string(data, offset) if keep else (None, offset + 8 + struct.unpack_from("<Q", data, offset)[0])
    if kind in _FIXED:
        return (struct.unpack_from(_SCALAR[kind], data, offset)[0] if keep else None), offset + _FIXED[kind]
    if kind != _ARRAY:
        raise GGUFFormatError(f"unknown GGUF value type {kind}")
    item, size = struct.unpack_from("<IQ", data, offset)
    offset += 12
    if item in _FIXED and not keep:
        return None, offset + size * _FIXED[item]
    items = []
    for _ in range(size):
        value, offset = _value(data, offset, item, keep)
        items.append(value)
    return (items if keep else None), offset


def fast_counter(path: str | Path, reference: Callable[[str], int]) -> Callable[[str], int] | None:
    """A counter of the GGUF file's tokens in ``tokenizers``, if its tokenizer is one rebuilt here and it counts
    :data:`CHECK_TEXTS` as ``reference`` (llama.cpp's count) does; else None."""
    try:
        tokenizer = _byte_level_bpe(read_tokenizer_fields(path))
    except Exception:  # noqa: BLE001 - a faster count only: whatever stops it, llama.cpp counts as before
        return None
    if tokenizer is None:
        return None

    def count(text: str) -> int:
        try:  # a batch of one: ``encode_batch_fast`` lets the GIL go while it runs, ``encode`` does not
            return len(tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids)
        except (TypeError, UnicodeEncodeError):  # no valid Unicode (a lone surrogate): the reference refuses it its own way
            return reference(text)

    return count if all(count(text) == reference(text) for text in CHECK_TEXTS) else None


def _byte_level_bpe(fields: dict[str, Any]):
    """The GPT-2 style byte-level BPE of ``fields`` with its pre-tokenizer, or None for another tokenizer."""
    if fields.get("tokenizer.ggml.model") != "gpt2" or fields.get("tokenizer.ggml.pre") not in PRE_TOKENIZERS:
        return None
    from tokenizers import Tokenizer, models, pre_tokenizers

    steps = {"digits": pre_tokenizers.Digits(individual_digits=True),
             "byte_level": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)}
    vocab = {token: number for number, token in enumerate(fields["tokenizer.ggml.tokens"])}
    merges = [tuple(merge.split(" ", 1)) for merge in fields["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([steps[name] for name in PRE_TOKENIZERS[fields["tokenizer.ggml.pre"]]])
    return tokenizer
