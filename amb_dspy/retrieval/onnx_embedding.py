"""all-MiniLM-L6-v2 on ONNX Runtime: the same vectors as sentence-transformers, without torch at run time.

The bundled weights are exported to ONNX once, by torch (``torch.onnx``), into
``<cache dir>/models/<model>-<fingerprint>/model.onnx``, and an int8 copy of that export is made beside it
(``model.int8.unpadded.onnx``, by ONNX Runtime's dynamic quantization, without the padding mask a text run alone
does not need: :mod:`amb_dspy.retrieval.onnx_graph`): at install (``python -m
amb_dspy.retrieval.onnx_embedding``, which ``make install`` runs) or on first use, with a notice.
The export is checked against sentence-transformers before it is kept (cosine >= 0.9999), the int8 copy
against the export (cosine >= 0.98), and a file that ONNX Runtime cannot load is made again. Nothing is
downloaded.

``precision`` (``AMB_EMBEDDING_PRECISION``) picks the model run: ``float32``, the export itself (the vectors
of sentence-transformers), or ``int8``, about twice as fast on a CPU with int8 instructions, whose vectors
are close to the float ones (cosine 0.99 on HotpotQA paragraphs), not equal: its :attr:`model_name` says
``+int8`` so that banks and line-vector tables never mix the two.

At run time only ``onnxruntime`` and the Rust ``tokenizers`` are imported (a fraction of a second,
against seconds for torch and transformers). Texts are tokenized together, sorted by length and
batched so that little padding is computed; each batch's token vectors are mean-pooled over the
attention mask and L2-normalised, as the model's sentence-transformers modules do. Batches are small
(float32: 8 texts; on a 2-core machine 8 ran about twice as fast as 64 on HotpotQA paragraphs, probably
because the attention tensors of a large batch outgrow the CPU caches; int8: 1 text, see ``_BATCH_SIZE``).

The batches of one call run ``workers`` at once (``AMB_EMBEDDING_WORKERS``; default one per CPU, at most
:data:`_MAX_WORKERS`), each worker on its own session of the same model file with one intra-op thread: an ingest
embeds short texts (HotpotQA sentences average about 30 tokens), for which ONNX Runtime's intra-op threads
barely helped (int8, 2 threads against 1: +6%) while two texts at once on two sessions nearly doubled the rate.
A batch's rows do not depend on the session or the thread count that computed them (ONNX Runtime's CPU kernels
gave bit-identical vectors at 1, 2 and "all" threads, float32 and int8), so the vectors are the serial path's.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from amb_dspy.config.environment import user_cache_dir
from amb_dspy.files import new_temp_beside, replace_with
from amb_dspy.notices import Notify, notice
from amb_dspy.retrieval.embedding_base import (
    CachingEmbedder,
    EmbeddingError,
    bundled_minilm_dir,
    load_sentence_transformer,
    model_fingerprint,
    model_label,
)

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_CHECK_TEXTS = ["The Seine flows through Paris into the English Channel.", "A violin concerto in D major.",
                "Short.", "HotpotQA asks questions whose answers need two Wikipedia paragraphs. " * 12]
_MIN_EXPORT_COSINE = 0.9999
_MIN_INT8_COSINE = 0.98
PRECISIONS = ("int8", "float32")
_PRECISION_SUFFIX = {"float32": "", "int8": "-int8"}
# int8 runs one text a call: its activations are scaled per call, so a text's vector would otherwise depend on
# the texts (and the padding) it is batched with; and with no padding at all it ran as fast as batches of 8.
_BATCH_SIZE = {"float32": 8, "int8": 1}  # int8: always 1 (its model has no padding mask)
_MAX_WORKERS = 4  # sessions running batches at once by default: each holds its own copy of the weights
_export_lock = threading.RLock()  # an export checks itself with a second embedder


def onnx_model_path(model_dir: Path, cache_dir: Path) -> Path:
    """Where the ONNX export of ``model_dir`` lives (or will) under ``cache_dir``."""
    return Path(cache_dir).expanduser() / "models" / f"{model_label(model_dir)}-{model_fingerprint(model_dir)}" / "model.onnx"


def _sentence_config(model_dir: Path) -> int:
    """The model's max sequence length; only mean pooling + normalisation (all-MiniLM-L6-v2's) is supported."""
    modules = json.loads((model_dir / "modules.json").read_text())
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    pooling_file = model_dir / next((m["path"] for m in modules if m.get("type", "").endswith("Pooling")), "-") / "config.json"
    pooling = json.loads(pooling_file.read_text()) if pooling_file.is_file() else {}
    if kinds != ["Transformer", "Pooling", "Normalize"] or not pooling.get("pooling_mode_mean_tokens"):
        raise EmbeddingError(f"{model_dir}: the onnx backend needs a Transformer + mean Pooling + Normalize model "
                             "(use AMB_EMBEDDING_BACKEND=sentence-transformers)")
    config = model_dir / "sentence_bert_config.json"
    return int(json.loads(config.read_text()).get("max_seq_length", 256)) if config.is_file() else 256


def int8_model_path(float_path: Path) -> Path:
    """Where the int8 copy of the exported model ``float_path`` lives: beside it. It runs one text a call, so its
    graph has no padding mask (:mod:`amb_dspy.retrieval.onnx_graph`); an older copy with one, ``model.int8.onnx``,
    is left where it is, unused."""
    return float_path.with_name(f"{float_path.stem}.int8.unpadded.onnx")


def quantize_int8(model_dir: Path, float_path: Path, target: Path) -> Path:
    """Write a dynamically quantized (int8 weights, int8 activations scaled per call) copy of the exported
    model ``float_path`` to ``target``, without its padding mask (:func:`_unpadded`), once checked against the
    float model (cosine >= 0.98)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = new_temp_beside(target)
    try:
        # Only the products of an activation and a weight matrix, the weights scaled per output channel: with the
        # attention products or the embedding table in int8 too, or one scale per weight matrix, the cosine to the
        # float vectors fell to 0.91 on HotpotQA paragraphs (0.99 like this).
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # its advice to pre-process the model goes to the root logger
        try:
            quantize_dynamic(float_path, partial, weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"], extra_options={"MatMulConstBOnly": True})
        finally:
            root.setLevel(level)
        _unpadded(model_dir, partial)
        expected = OnnxEmbedder(model_dir=model_dir, onnx_path=float_path)._encode(_CHECK_TEXTS)
        _keep_if_close(model_dir, partial, target, expected, _MIN_INT8_COSINE, "int8",
                       f"the int8 copy of {model_dir.name} differs from the float model (cosine {{:.4f}}); "
                       "use AMB_EMBEDDING_PRECISION=float32")
    except EmbeddingError:
        raise
    except Exception as exc:  # any other failure becomes one clear error
        raise _one_error(exc, f"cannot quantize {float_path} to int8") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


def _unpadded(model_dir: Path, path: Path) -> None:
    """Take the padding mask out of the int8 model at ``path`` (:func:`~amb_dspy.retrieval.onnx_graph.drop_padding_mask`)
    if the edited graph gives the check texts bit-identical vectors, run one a call as int8 runs them; otherwise
    (another exporter's graph) the model stays as it is: right, only slower."""
    import onnx

    from amb_dspy.retrieval.onnx_graph import drop_padding_mask

    model = onnx.load(str(path))
    if not drop_padding_mask(model):
        return
    edited = new_temp_beside(path)
    try:
        onnx.save(model, str(edited))
        texts = [*_CHECK_TEXTS, " ".join(_CHECK_TEXTS) * 2]  # the last cut at the model's longest
        before, after = (OnnxEmbedder(model_dir=model_dir, onnx_path=p, precision="int8")._encode(texts) for p in (path, edited))
        if np.array_equal(before, after):
            replace_with(edited, path)
    finally:
        edited.unlink(missing_ok=True)


def _keep_if_close(model_dir: Path, partial: Path, target: Path, expected: np.ndarray, least: float,
                   precision: str, differs: str) -> None:
    """Put the model written at ``partial`` in place at ``target`` if its vectors of the check texts (run as
    ``precision`` runs them) are each within cosine ``least`` of ``expected``; else EmbeddingError (``differs``,
    formatted with the lowest cosine)."""
    got = OnnxEmbedder(model_dir=model_dir, onnx_path=partial, precision=precision)._encode(_CHECK_TEXTS)
    cosine = float((expected * got).sum(axis=1).min())
    if cosine < least:
        raise EmbeddingError(differs.format(cosine))
    replace_with(partial, target)


def _one_error(exc: Exception, doing: str) -> EmbeddingError:
    """A failure while making a model file, as one clear error."""
    return EmbeddingError(f"{doing}: {type(exc).__name__}: {exc}".splitlines()[0])


def export_onnx(model_dir: Path, target: Path) -> Path:
    """Export the transformer of a local sentence-transformers model to ``target`` and check it.

    Needs torch and the ``onnx`` package (both installed with amb-dspy). The file appears under its
    name only once checked, so a crash leaves no half-written model behind.
    """
    import torch

    model = load_sentence_transformer(model_dir)
    transformer = model[0].auto_model.eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask,
                                    token_type_ids=token_type_ids).last_hidden_state

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = new_temp_beside(target)
    example = tuple(torch.ones((2, 8), dtype=torch.long) if name != "token_type_ids" else torch.zeros((2, 8), dtype=torch.long)
                    for name in _INPUTS)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python control flow: the check below decides
            torch.onnx.export(
                LastHiddenState(), example, str(partial), input_names=list(_INPUTS), output_names=["last_hidden_state"],
                dynamic_axes={name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")},
                opset_version=17, dynamo=False,
            )
        expected = model.encode(_CHECK_TEXTS, normalize_embeddings=True, convert_to_numpy=True)
        _keep_if_close(model_dir, partial, target, expected, _MIN_EXPORT_COSINE, "float32",
                       f"the ONNX export of {model_dir.name} differs from sentence-transformers (cosine {{:.5f}})")
    except EmbeddingError:
        raise
    except Exception as exc:  # any other failure becomes one clear error
        raise _one_error(exc, f"cannot export {model_dir.name} to ONNX") from exc
    finally:
        partial.unlink(missing_ok=True)
    return target


class OnnxEmbedder(CachingEmbedder):
    """all-MiniLM-L6-v2 (or a local model of the same shape) through ONNX Runtime and ``tokenizers``."""

    # ONNX Runtime runs a session from several threads at once (each run in its calling thread at one intra-op
    # thread): an ingest's two preparers embed at once instead of waiting for each other's calls
    concurrent_calls = True

    def __init__(self, model_dir: str | Path | None = None, *, cache_dir: str | Path | None = None,
                 onnx_path: str | Path | None = None, batch_size: int | None = None, cache_size: int = 50_000,
                 threads: int = 0, precision: str = "float32", workers: int | None = None,
                 node_vectors: str = "whole", notify: Notify = notice):
        if precision not in PRECISIONS:
            raise EmbeddingError(f"unknown embedding precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        # int8 runs one text a call whatever is asked: its graph has no padding mask (int8_model_path)
        super().__init__(batch_size=_BATCH_SIZE[precision] if precision == "int8" else batch_size or _BATCH_SIZE[precision],
                         cache_size=cache_size, node_vectors=node_vectors)
        self.precision = precision
        self.model_dir = Path(model_dir) if model_dir else None
        self.cache_dir = Path(cache_dir) if cache_dir else user_cache_dir() / "amb-dspy"
        self.onnx_path = Path(onnx_path) if onnx_path else None
        self.workers = workers or default_workers()  # sessions running a call's batches at once
        # 0: ONNX Runtime's choice (one per physical core) for a single session; one each when several run at once
        self.threads = threads or (1 if self.workers > 1 else 0)
        self.notify = notify
        self._session = None
        self._more_sessions: list = []  # the other workers' sessions, opened on the first call that uses them
        self._pool: ThreadPoolExecutor | None = None
        self._tokenizer = None
        self.model_file: Path | None = None  # the ONNX file run, once loaded

    @functools.cached_property
    def model_id(self) -> str:
        model_dir = self.model_dir or bundled_minilm_dir()
        return f"{model_label(model_dir)}-{model_fingerprint(model_dir)}/onnx" + _PRECISION_SUFFIX[self.precision]

    @property
    def model_name(self) -> str:
        """The model's name, marked ``+int8`` for the quantized copy: its vectors are close to the float ones
        (cosine >= 0.98), not equal, so a bank made at one precision is embedded again at the other."""
        return super().model_name + _PRECISION_SUFFIX[self.precision].replace("-", "+")

    def _open(self, path: Path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = self.threads
        options.log_severity_level = 3  # errors only
        # Idle workers sleep instead of spinning: on a small shared machine spinning threads take the
        # cores from everything else (the LM engine, other processes) for little gain.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def _load(self):
        if self._session is not None:
            return self._session
        with _export_lock:  # calls run at once: the first loads, the others wait for it
            return self._session if self._session is not None else self._load_now()

    def _load_now(self):
        """Load the tokenizer and the model's session (making the model file first if need be); under ``_export_lock``."""
        model_dir = self.model_dir or bundled_minilm_dir()
        try:
            import onnxruntime  # noqa: F401 - fail here, with the hint, not in _open
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbeddingError(f"the onnx embedding backend needs onnxruntime and tokenizers: {exc}") from exc
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=_sentence_config(model_dir))
        tokenizer.no_padding()
        if self.onnx_path is not None:
            path, session = self.onnx_path, self._open_given(self.onnx_path)
        else:
            path = float_path = onnx_model_path(model_dir, self.cache_dir)
            session = self._open_made(float_path, ("exporting the embedding model to ONNX", "exporting it"),
                                      lambda: export_onnx(model_dir, float_path))
            if self.precision == "int8":
                path = int8_model_path(float_path)
                session = self._open_made(path, ("quantizing the embedding model to int8", "quantizing it"),
                                          lambda: quantize_int8(model_dir, float_path, path))
        self.model_file = path
        width = session.get_outputs()[0].shape[-1]
        self.dim = width if isinstance(width, int) else self.dim
        self._tokenizer, self._session = tokenizer, session
        return session

    def _open_given(self, path: Path):
        """The session of a model file the caller named: it is never made or replaced here."""
        try:
            return self._open(path)
        except Exception as exc:  # ONNX Runtime raises its own classes for a bad file
            raise EmbeddingError(f"cannot load the ONNX model {path}: {exc}".splitlines()[0]) from exc

    def _open_made(self, path: Path, making: tuple[str, str], make: Callable[[], Path]):
        """The session of a model file this package makes (``make``) when it is missing or cannot be loaded;
        ``making`` says, for the notices, what making it is (first time, again)."""
        if not path.is_file():
            self.notify(f"{making[0]} once, into {path.parent} (about 20 s)")
            make()
        try:
            return self._open(path)
        except Exception:  # ONNX Runtime raises its own classes for a bad file
            self.notify(f"the exported ONNX model at {path} cannot be loaded; {making[1]} again")
            make()
            return self._open(path)

    def _encode(self, texts: list[str]) -> np.ndarray:
        self._load()
        encodings = self._tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")  # longest first: each batch pads to similar lengths
        batches = [order[start : start + self.batch_size] for start in range(0, len(texts), self.batch_size)]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        pending = iter(batches)
        taking = threading.Lock()

        def work(session) -> None:
            while True:
                with taking:
                    rows = next(pending, None)
                if rows is None:
                    return
                out[rows] = _pooled(session, [encodings[row].ids for row in rows])

        sessions = self._sessions(len(batches))
        others = [self._pool.submit(work, session) for session in sessions[1:]] if len(sessions) > 1 else []
        try:
            work(sessions[0])
        finally:
            wait(others)  # no session is left running into the next call
        for done in others:
            done.result()  # a worker's failure is the call's
        return out

    def _sessions(self, batches: int) -> list:
        """The sessions that run ``batches`` batches: the loaded one, and as many of the other workers' (opened
        once, from the same model file) as there are batches for them."""
        wanted = min(self.workers, batches)
        if wanted > 1 + len(self._more_sessions):
            with _export_lock:
                while len(self._more_sessions) < wanted - 1:
                    self._more_sessions.append(self._open(self.model_file))
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="amb-embedding")
        return [self._session, *self._more_sessions[: wanted - 1]]


def default_workers() -> int:
    """The sessions an embedder runs at once when neither its caller nor ``AMB_EMBEDDING_WORKERS`` says: one per
    CPU this process may use, at most :data:`_MAX_WORKERS`."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cpus, _MAX_WORKERS))


def _pooled(session, rows: list[list[int]]) -> np.ndarray:
    """The L2-normalised mean-pooled vectors of one batch of token ids (padded to its longest, the padding masked)."""
    width = max(len(ids) for ids in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
    summed = np.einsum("btd,bt->bd", hidden, mask.astype(np.float32))
    pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


def main() -> None:
    """Export the bundled model once and make its int8 copy (``make install`` runs this), into AMB_CACHE_DIR or
    ~/.cache/amb-dspy; a file already there is kept."""
    from amb_dspy.config import PathSettings

    model_dir = bundled_minilm_dir()
    path = onnx_model_path(model_dir, PathSettings().cache_dir)
    try:
        for target, make in ((path, lambda: export_onnx(model_dir, path)),
                             (int8_model_path(path), lambda: quantize_int8(model_dir, path, int8_model_path(path)))):
            print(f"ONNX embedding model already made: {target}" if target.is_file() else f"ONNX embedding model made: {make()}")
    except EmbeddingError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()
