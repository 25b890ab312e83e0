"""What the rest of the bank may ask of an LM without knowing its backend."""

from __future__ import annotations

import dspy

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
