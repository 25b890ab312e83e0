"""What the rest of the bank may ask of an LM without knowing its backend."""

from __future__ import annotations

import contextlib
import functools
import io

import dspy

from amb_dspy.config.environment import use_bundled_litellm_model_table
from amb_dspy.lm.llama_engine import LOCAL_MAX_TOKENS, LlamaCppEngine


def is_embedded(lm: dspy.BaseLM) -> bool:
    """Whether ``lm`` runs in-process on the llama.cpp engine (serialised, text only, grammar-held)."""
    return isinstance(getattr(lm, "engine", None), LlamaCppEngine)


def prompt_budget(lm: dspy.BaseLM) -> int | None:
    """Prompt tokens an embedded model accepts (context minus the answer's share); None if unknown."""
    engine = getattr(lm, "engine", None)
    if not isinstance(engine, LlamaCppEngine):
        return None
    return engine.n_ctx - int(lm.kwargs.get("max_tokens") or LOCAL_MAX_TOKENS)


def reads_images(lm: dspy.BaseLM) -> bool | None:
    """Whether ``lm`` accepts images: False for the embedded model, an engine's own ``supports_vision``
    when it declares one, else what LiteLLM's model table says; None when nobody knows (then try)."""
    if is_embedded(lm):
        return False
    declared = getattr(getattr(lm, "engine", None), "supports_vision", None)
    if isinstance(declared, bool):
        return declared
    supported = _model_info(str(getattr(lm, "model", ""))).get("supports_vision")
    return supported if isinstance(supported, bool) else None


def input_window(lm: dspy.BaseLM) -> int | None:
    """The prompt tokens ``lm`` accepts as LiteLLM's model table gives them (``max_input_tokens``), None when
    the table does not know the model; an embedded model's room is :func:`prompt_budget`'s."""
    if is_embedded(lm):
        return prompt_budget(lm)
    tokens = _model_info(str(getattr(lm, "model", ""))).get("max_input_tokens")
    return tokens if isinstance(tokens, int) and tokens > 0 else None


@functools.lru_cache(maxsize=64)
def _model_info(model: str) -> dict:
    """LiteLLM's entry for ``model`` ({} for a model it does not know); asked once per model string."""
    use_bundled_litellm_model_table()
    try:
        import litellm

        with contextlib.redirect_stdout(io.StringIO()):  # it prints a provider list for an unknown model
            info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - LiteLLM raises plain Exceptions for models it does not know
        return {}
    return dict(info)
