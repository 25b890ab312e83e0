"""LM backends: any ``dspy.LM`` model string, per-agent LMs, an embedded llama.cpp model, usage metering.

One module per job:

* :mod:`~amb_dspy.lm.specs` -- what a user may name, and which spec a configuration resolves to;
* :mod:`~amb_dspy.lm.build` -- a ``dspy.LM`` from a spec (hosted through LiteLLM, or a GGUF file);
* :mod:`~amb_dspy.lm.grammar_adapter` -- the JSON adapter whose schemas become llama.cpp grammars;
* :mod:`~amb_dspy.lm.introspect` -- what the bank may ask of any LM (embedded? prompt room? its window?);
* :mod:`~amb_dspy.lm.llama_engine` and :mod:`~amb_dspy.lm.llama_models` -- the in-process engine,
  its shared models and grammars;
* :mod:`~amb_dspy.lm.agent_lms` -- the main LM plus per-agent LMs;
* :mod:`~amb_dspy.lm.usage` -- LM calls and tokens per agent, and the cap on calls of a run.
"""

from amb_dspy.lm.agent_lms import AgentLMs, resolve_lms
from amb_dspy.lm.build import build_lm
from amb_dspy.lm.errors import LMConfigError
from amb_dspy.lm.grammar_adapter import GrammarJSONAdapter, adapter_for
from amb_dspy.lm.introspect import input_window, is_embedded, prompt_budget, reads_images
from amb_dspy.lm.llama_engine import LOCAL_MAX_TOKENS, LlamaCppEngine, PromptTooLongError, smollm2_path
from amb_dspy.lm.specs import GGUF_PREFIX, LOCAL_NOTICE, LOCAL_SPEC, resolve_lm_spec
from amb_dspy.lm.usage import AgentUsage, LMCallCapReached, UsageMeter, metered_as

__all__ = [
    "AgentLMs", "AgentUsage", "GGUF_PREFIX", "GrammarJSONAdapter", "LMCallCapReached", "LMConfigError",
    "LOCAL_MAX_TOKENS", "LOCAL_NOTICE", "LOCAL_SPEC", "LlamaCppEngine", "PromptTooLongError", "UsageMeter",
    "adapter_for", "build_lm", "input_window", "is_embedded", "metered_as", "prompt_budget", "reads_images", "resolve_lm_spec",
    "resolve_lms", "smollm2_path",
]
