"""The llama.cpp models of this process: loaded once per file, closed at exit, with their chat templates
and the grammars that hold their output to a JSON schema.

Only llama-cpp-python's public API and llama.cpp's C API (as llama-cpp-python binds it) are used here.
``llama_cpp`` is imported inside the functions: it loads a native library, and nothing that merely
names the embedded backend (``amb --help``, a hosted run) should pay for that.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from typing import Any

from amb_dspy.lm.errors import LMConfigError

logger = logging.getLogger(__name__)

# Used when a GGUF file carries no chat template of its own.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_load_lock = threading.Lock()
_llamas: dict[str, Any] = {}
_run_locks: dict[str, threading.Lock] = {}
_vocab_models: dict[str, Any] = {}  # path -> a model loaded with its vocabulary only (see count_tokens)
_vocabs: dict[str, Any] = {}  # path -> that model's vocabulary
_fast_counters: dict[str, Callable[[str], int] | None] = {}  # path -> its tokenizer in ``tokenizers`` (see _count)
_fast_lock = threading.Lock()
COUNTED_TEXTS = 16_384  # counts count_tokens keeps, of texts up to COUNTED_CHARS long: 32 MB at most
COUNTED_CHARS = 2_000


def load_llama(path: str, n_ctx: int, n_threads: int, seed: int):
    """The model for the GGUF file at ``path``, loaded on first use and shared by the whole process."""
    with _load_lock:
        if path not in _llamas:
            if not _llamas:
                atexit.register(_close_llamas)
            _llamas[path] = _new_llama(path, n_ctx, n_threads, seed)
            _run_locks[path] = threading.Lock()
        return _llamas[path]


def count_tokens(path: str, text: str) -> int:
    """Tokens of ``text`` for the GGUF file at ``path``, exactly as the model would count them.

    With the model loaded, its own tokenizer; else its tokenizer rebuilt in ``tokenizers`` from the file's
    vocabulary and merges (:mod:`amb_dspy.lm.gguf_tokenizer`: SmolLM2's, checked against llama.cpp's when made),
    else its vocabulary alone, loaded once without weights or a context (milliseconds): a bank whose agents never
    generate (the heuristic policy, ``amb serve --policy heuristic``) sizes its chunks in the model's tokens without
    loading the model. The last :data:`COUNTED_TEXTS` counts of texts up to :data:`COUNTED_CHARS` long are kept: an
    ingest counts the same sentences and paragraphs again and again (its classification, its structure's units and
    summaries), and the tokenizers give the same count.
    """
    return _counted(path, text) if len(text) <= COUNTED_CHARS else _count(path, text)


@lru_cache(maxsize=COUNTED_TEXTS)
def _counted(path: str, text: str) -> int:
    """:func:`_count`, remembered (a short text's count)."""
    return _count(path, text)


def _count(path: str, text: str) -> int:
    """Tokens of ``text`` by the loaded model's tokenizer, else by its tokenizer rebuilt in ``tokenizers``
    (:mod:`amb_dspy.lm.gguf_tokenizer`, three times faster), else by its vocabulary alone: the same count."""
    llama = _llamas.get(path)
    if llama is not None:
        return len(llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))
    fast = _fast_counter(path)
    return fast(text) if fast is not None else _vocab_count(path, text)


def _vocab_count(path: str, text: str) -> int:
    """Tokens of ``text`` by llama.cpp's tokenizer of the model's vocabulary alone."""
    data = text.encode("utf-8")
    count = _tokenize_holding_gil()
    return -count(_counting_vocab(path), data, len(data), None, 0, False, False)  # no room: minus the count


def _fast_counter(path: str) -> Callable[[str], int] | None:
    """The model's tokenizer rebuilt in ``tokenizers`` (:func:`~amb_dspy.lm.gguf_tokenizer.fast_counter`), made
    once per file; None where it cannot be rebuilt or counts otherwise than llama.cpp."""
    if path not in _fast_counters:
        with _fast_lock:
            if path not in _fast_counters:
                from amb_dspy.lm.gguf_tokenizer import fast_counter

                _fast_counters[path] = fast_counter(path, lambda text: _vocab_count(path, text))
    return _fast_counters[path]


@cache
def _tokenize_holding_gil():
    """llama.cpp's ``llama_tokenize``, as llama-cpp-python binds it, called without letting go of the GIL: a count
    takes ~50 us, and a thread that lets the GIL go for it waits up to the interpreter's switch interval to take it
    back from a thread running Python (an ingest's read-ahead beside its commits: ~0.6 ms a count measured)."""
    import ctypes

    from llama_cpp import llama_cpp as llama_c

    bound = llama_c.llama_tokenize
    return ctypes.PYFUNCTYPE(bound.restype, *bound.argtypes)(ctypes.cast(bound, ctypes.c_void_p).value)


def _counting_vocab(path: str):
    """The vocabulary of the model loaded for counting (:func:`_vocab_model`), looked up once."""
    vocab = _vocabs.get(path)
    if vocab is None:
        from llama_cpp import llama_cpp as llama_c

        vocab = _vocabs[path] = llama_c.llama_model_get_vocab(_vocab_model(path))
    return vocab


def _vocab_model(path: str):
    with _load_lock:
        if path not in _vocab_models:
            from llama_cpp import llama_cpp as llama_c

            quiet = logging.getLogger("llama-cpp-python")  # what Llama(verbose=False) sets: no load report
            if quiet.level == logging.NOTSET:
                quiet.setLevel(logging.ERROR)
            params = llama_c.llama_model_default_params()
            params.vocab_only = True
            model = llama_c.llama_model_load_from_file(path.encode("utf-8"), params)
            if not model:
                raise LMConfigError(f"llama.cpp cannot read the vocabulary of {path}")
            if not _llamas and not _vocab_models:
                atexit.register(_close_llamas)
            _vocab_models[path] = model
        return _vocab_models[path]


def run_lock(path: str) -> threading.Lock:
    """One generation at a time per model: a llama.cpp context is not thread-safe."""
    return _run_locks[path]


def _close_llamas() -> None:
    # Freed before interpreter teardown; left to the garbage collector, llama-cpp-python's finalizers
    # can run after the modules they call are gone and print errors at exit.
    for llama in _llamas.values():
        llama.close()
    _llamas.clear()
    _vocabs.clear()
    if _vocab_models:
        from llama_cpp import llama_cpp as llama_c

        for model in _vocab_models.values():
            llama_c.llama_model_free(model)
        _vocab_models.clear()


def _new_llama(path: str, n_ctx: int, n_threads: int, seed: int):
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as llama_c
    except ImportError as exc:
        raise LMConfigError("the embedded LM needs the 'local' extra: pip install 'amb-dspy[local]'") from exc

    # Weights stay in plain CPU buffers. The "extra" buffer types (AMX, repacked layouts) are
    # selected from CPU flags alone, and llama.cpp's AMX kernels segfault where the kernel does not
    # grant AMX tile state (seen in sandboxed VMs). Llama() takes no option for this, so its source
    # of default model parameters is swapped for the duration of the load.
    default_params = llama_c.llama_model_default_params

    def plain_buffer_params():
        params = default_params()
        params.use_extra_bufts = False
        return params

    llama_c.llama_model_default_params = plain_buffer_params
    try:
        return llama_cpp.Llama(
            model_path=path, n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, seed=seed, verbose=False
        )
    except ValueError as exc:
        raise LMConfigError(f"llama.cpp cannot load {path}: {exc}") from exc
    finally:
        llama_c.llama_model_default_params = default_params


def _vocab(llama):
    from llama_cpp import llama_cpp as llama_c

    return llama_c.llama_model_get_vocab(llama.model)


def token_text(llama, token: int) -> str:
    """The text of a special token (BOS, EOS) as the chat template writes it; "" for none (-1)."""
    from llama_cpp import llama_cpp as llama_c

    return llama_c.llama_vocab_get_text(_vocab(llama), token).decode("utf-8") if token != -1 else ""


@cache
def chat_formatter(path: str):
    """The chat formatter of the loaded model at ``path``: its own template, else ChatML."""
    from llama_cpp import llama_chat_format

    llama = _llamas[path]
    eos, bos = llama.token_eos(), llama.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=llama.metadata.get("tokenizer.chat_template") or CHATML_TEMPLATE,
        eos_token=token_text(llama, eos),
        bos_token=token_text(llama, bos),
        stop_token_ids=[eos],
    )


def grammar_key(response_format: Mapping[str, Any] | None) -> str | None:
    """A hashable key for a DSPy response format: its schema as JSON, "" for any JSON object, None for none."""
    if response_format is None:
        return None
    if response_format.get("type") == "json_schema":
        # Key order is kept: the grammar emits fields in schema order (DSPy puts reasoning first).
        return json.dumps(response_format["schema"])
    return ""  # json_object: any JSON object


@lru_cache(maxsize=256)
def grammar(path: str, schema_json: str | None):
    """The grammar for a response format: its schema's, or any JSON object when that cannot be had."""
    if schema_json is None:
        return None
    from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar, json_schema_to_gbnf

    if schema_json:
        try:
            gbnf = json_schema_to_gbnf(schema_json)
        except Exception as exc:  # the converter raises bare Exceptions for unsupported schema features
            logger.debug("JSON schema has no llama.cpp grammar (%s); constraining to any JSON object", exc)
        else:
            if _grammar_parses(path, gbnf):
                return LlamaGrammar.from_string(gbnf, verbose=False)
            logger.debug("llama.cpp rejected the grammar of a JSON schema; constraining to any JSON object")
    return LlamaGrammar.from_string(JSON_GBNF, verbose=False)


def _grammar_parses(path: str, gbnf: str) -> bool:
    # llama.cpp reports a bad grammar by returning NULL, which crashes the process once sampled from.
    from llama_cpp import llama_cpp as llama_c

    sampler = llama_c.llama_sampler_init_grammar(_vocab(_llamas[path]), gbnf.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_c.llama_sampler_free(sampler)
    return True
