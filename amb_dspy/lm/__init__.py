"""LM backends: any ``dspy.LM`` model string, per-agent LMs, an embedded llama.cpp model, usage metering.

One module per job:

* :mod:`~amb_dspy.lm.specs` -- what a user may name, and which spec a configuration resolves to;
* :mod:`~amb_dspy.lm.build` -- a ``dspy.LM`` from a spec (hosted through LiteLLM, or a GGUF file);
* :mod:`~amb_dspy.lm.grammar_adapter` -- the JSON adapter whose schemas become llama.cpp grammars;
* :mod:`~amb_dspy.lm.introspect` -- what the bank may ask of any LM (embedded? prompt room? its window?);
* :mod:`~amb_dspy.lm.llama_engine` and :mod:`~amb_dspy.lm.llama_models` -- the in-process engine,
  its shared models and grammars;
* :mod:`~amb_dspy.lm.agent_lms` -- the main LM plus per-agent LMs;
* :mod:`~amb_dspy.lm.usage` -- LM calls and tokens per agent, and the cap on calls of a run;
* :mod:`~amb_dspy.lm.profile` -- the strategy a task takes on its LM (the full loop, or one answer).
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it. Loaded on first use, so that reading a spec or checking a setting
# (amb_dspy.lm.specs, the CLI before any work) does not import DSPy and LiteLLM.
_EXPORTS = {
    "AgentLMs": "agent_lms", "resolve_lms": "agent_lms", "build_lm": "build", "LMConfigError": "errors",
    "GrammarJSONAdapter": "grammar_adapter", "adapter_for": "grammar_adapter", "input_window": "introspect",
    "is_embedded": "introspect", "prompt_budget": "introspect", "reads_images": "introspect",
    "LOCAL_MAX_TOKENS": "llama_engine", "LlamaCppEngine": "llama_engine", "PromptTooLongError": "llama_engine",
    "smollm2_path": "llama_engine", "GGUF_PREFIX": "specs", "LOCAL_NOTICE": "specs", "LOCAL_SPEC": "specs",
    "resolve_lm_spec": "specs", "AgentUsage": "usage", "LMCallCapReached": "usage", "UsageMeter": "usage",
    "metered_as": "usage", "is_tiny": "profile", "task_strategy": "profile",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
