"""Building a ``dspy.LM`` from a spec: hosted models through LiteLLM, GGUF files through llama.cpp."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import dspy

from amb_dspy.config.environment import provider_api_key
from amb_dspy.lm.errors import LMConfigError
from amb_dspy.lm.llama_engine import LOCAL_MAX_TOKENS, LlamaCppEngine
from amb_dspy.lm.specs import GGUF_PREFIX, LOCAL_SPEC, PYTHON_PREFIX, check_provider

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig, ModelSettings

def build_lm(spec: str, config: AmbConfig) -> dspy.LM:
    """A ``dspy.LM`` for ``spec``; raises ``LMConfigError`` (one line) when it cannot be built.

    Nothing is loaded or contacted here: a GGUF model loads on its first call.
    """
    spec = spec.strip()
    if not spec:
        raise LMConfigError("empty LM spec: use a DSPy model string, 'local' or 'gguf:PATH'")
    if spec == LOCAL_SPEC:
        return _embedded_lm(LOCAL_SPEC, config.models)
    if spec.startswith(PYTHON_PREFIX):
        return _python_lm(spec[len(PYTHON_PREFIX):].strip())
    if spec.startswith(GGUF_PREFIX):
        path = spec[len(GGUF_PREFIX):].strip()
        if not path:
            raise LMConfigError("'gguf:' needs a path, e.g. gguf:models/my-model.gguf")
        return _embedded_lm(path, config.models)
    return _hosted_lm(spec, config.models)


def _python_lm(target: str) -> dspy.BaseLM:
    """The LM a factory of the user's own code returns: ``module.path:factory`` (called with no arguments)."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise LMConfigError(f"'{PYTHON_PREFIX}' needs module:factory, e.g. {PYTHON_PREFIX}my_lms:make_lm")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
        lm = factory()
    except Exception as exc:  # noqa: BLE001 - import errors, a missing attribute, the factory's own errors
        raise LMConfigError(f"cannot build an LM from {PYTHON_PREFIX}{target}: {type(exc).__name__}: {exc}") from None
    if not isinstance(lm, dspy.BaseLM):
        raise LMConfigError(f"{PYTHON_PREFIX}{target} returned {type(lm).__name__}, not a dspy.BaseLM")
    return lm


def _hosted_lm(spec: str, models: ModelSettings) -> dspy.LM:
    check_provider(spec)
    kwargs: dict[str, Any] = {}
    api_key = models.llm_api_key
    if not api_key and spec.startswith("deepseek/"):
        api_key = provider_api_key("deepseek")
    if api_key:
        kwargs["api_key"] = api_key
    if models.llm_base_url:
        kwargs["api_base"] = models.llm_base_url
    try:
        return dspy.LM(spec, temperature=models.temperature, max_tokens=models.max_tokens, **kwargs)
    except (ValueError, TypeError) as exc:
        raise LMConfigError(f"cannot use LM {spec!r}: {exc}") from exc


def _embedded_lm(gguf: str, models: ModelSettings) -> dspy.LM:
    engine = LlamaCppEngine(gguf)
    return dspy.LM(
        engine.model_name,
        engine=engine,
        temperature=models.temperature,
        max_tokens=min(models.max_tokens, LOCAL_MAX_TOKENS),
    )
