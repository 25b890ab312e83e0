"""What a task asks of its LM: the full loop, or one answer from memory (the one place that decides).

The spec's loop asks an LM to plan, judge conflicts, summarise and fill a ReAct trajectory. A tiny model
(the bundled SmolLM2-135M, other models of a few hundred million parameters) can do none of it: asking costs
minutes and gives text the deterministic policies then replace. So each task runs one of two strategies:

* ``loop`` -- the spec's loop (:class:`~amb_dspy.task.loop.TaskLoop`): the memory agents' LMs, planning,
  the ReAct executor;
* ``direct`` -- the memory agents' deterministic policies (unless ``policy`` is ``lm``), then retrieve and
  one answer call from ``<memory>``, the corpus searched first when memory does not cover the goal
  (:class:`~amb_dspy.task.direct.DirectAnswer`).

``strategy`` (``--strategy``, ``AMB_STRATEGY``) is ``auto`` by default: ``direct`` for a tiny LM
(:func:`is_tiny`), ``loop`` for any other. :func:`task_strategy` returns the configuration a task runs with
and the line that says which strategy it took and why.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from amb_dspy.lm.specs import LOCAL_SPEC

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig

__all__ = ["TINY_MODEL", "is_tiny", "task_strategy"]

# Model names of tiny LMs: SmolLM(2), TinyLlama, and sizes up to 0.6B written in the name (qwen2.5-0.5b,
# gemma-3-270m, smollm2-360m...).
TINY_MODEL = re.compile(r"smollm|tinyllama|(?<![\d.])(?:0\.[1-6]b|[1-9]\d{1,2}m)(?![a-z\d])", re.IGNORECASE)


def is_tiny(lm: Any) -> bool:
    """Whether ``lm`` is a tiny model: the bundled SmolLM2-135M, or a model whose name says it is one."""
    engine = getattr(lm, "engine", None)
    if getattr(engine, "gguf", None) == LOCAL_SPEC:
        return True
    names = f"{getattr(lm, 'model', '')} {getattr(engine, 'path', '')}"
    return TINY_MODEL.search(names) is not None


def task_strategy(config: AmbConfig, lm: Any) -> tuple[AmbConfig, str]:
    """The configuration a task on ``lm`` runs with (``strategy`` resolved to ``loop`` or ``direct``; under
    ``direct`` the ``auto`` policy becomes ``heuristic``) and one line saying which strategy and why."""
    model = _model_name(lm)
    if config.executor.strategy == "auto":
        tiny = is_tiny(lm)
        strategy = "direct" if tiny else "loop"
        why = (f"{model} is a tiny model that cannot plan or run a ReAct loop: memory by the deterministic policies, "
               "one answer from memory; --strategy loop runs the full loop" if tiny
               else f"{model} runs the full loop: plan, search, answer")
    else:
        strategy, why = config.executor.strategy, f"as set (--strategy / AMB_STRATEGY), with {model}"
    update: dict[str, Any] = {"strategy": strategy}
    if strategy == "direct" and config.models.policy == "auto":
        update["policy"] = "heuristic"
    return config.model_copy(update=update), f"strategy: {strategy} ({why})"


def _model_name(lm: Any) -> str:
    engine = getattr(lm, "engine", None)
    if getattr(engine, "gguf", None) == LOCAL_SPEC:
        return "the embedded SmolLM2-135M"
    return str(getattr(lm, "model", None) or type(lm).__name__)
