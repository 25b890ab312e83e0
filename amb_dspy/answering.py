"""Answering a run's goal from memory: first, when the run starts with memory, and last, when all else failed.

:class:`AnswerPhases` is mixed into :class:`~amb_dspy.bank.MemoryBank` (through
:class:`~amb_dspy.phases.LoopPhases`); it uses the same run parts (``store``, ``memory_adapter``, ``agents``,
``lms``, ``meter``, ``config``, ``embedder``, ``_emit``). Both steps ask the one answer agent
(:mod:`amb_dspy.agents.answer`) over the ``<memory>`` block the adapter writes for the goal.

* **The fast path** (``config.fast_path``, on by default; see :func:`fast_path_on`): a run whose memory is not empty once its context
  is converted (an ingested bank, ``--bank``, a context) asks the answer agent once. A sufficient answer
  that cites a node of memory ends the run (termination ``answered_from_memory``, one hop recorded);
  otherwise the verdict, the draft answer and what is missing go into the Insight Doc as a completed
  :data:`~amb_dspy.agents.planning.MEMORY_CHECK_TASK`, and planning and the executor run as without it.
  Empty memory makes no call, and a reply that does not parse is not asked again (:func:`one_attempt`):
  the fast path costs at most one call.
* **The last answer**: when the executor's final pass gave no answer (and the policy allows a fallback),
  the answer agent answers alone (one output field, read leniently when it does not parse); when even
  that fails and no earlier step answered, the deterministic policy quotes the best evidence line of
  ``<memory>`` with its citation, and the run ends ``extractive_answer`` (never ``goal_met``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dspy

from amb_dspy.agents import MEMORY_CHECK_TASK, AgentError
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.config import AmbConfig
from amb_dspy.errors import one_line
from amb_dspy.executor import resolve_node_id
from amb_dspy.lm import LOCAL_SPEC, is_embedded
from amb_dspy.run_state import RunState, revised
from amb_dspy.storage import CompletedTask, Hop, InsightDoc, TaskStatus, TaskType

FAST_TERMINATION = "answered_from_memory"
EXTRACTIVE_TERMINATION = "extractive_answer"


def fast_path_on(config: AmbConfig, lm: dspy.BaseLM) -> bool:
    """``config.fast_path`` when set; by default on, except with the heuristic policy (no LM verdict) and with
    the bundled SmolLM2-135M, which calls memory sufficient whatever it holds (on the demo's notes, which do
    not name the river the question asks for, 2 verdicts of 2), so the demo would never search."""
    if config.fast_path is not None:
        return config.fast_path
    engine = getattr(lm, "engine", None)
    return config.policy != "heuristic" and not (is_embedded(lm) and getattr(engine, "gguf", "") == LOCAL_SPEC)


@contextmanager
def one_attempt() -> Iterator[None]:
    """No JSONAdapter retry after a ChatAdapter reply that does not parse: the fast path costs one call at most."""
    if type(dspy.settings.adapter) is dspy.ChatAdapter:
        with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
            yield
    else:
        yield


class AnswerPhases:
    """The answer agent's two places in a run (see module docstring)."""

    def _answered_from_memory(self, state: RunState) -> bool:
        """The fast path: True when memory sufficed and the run can end with ``state.answer``."""
        doc = self.store.insight_doc
        if not fast_path_on(self.config, self.lms.for_agent("answer")) or len(self.store.graph) == 0:
            return False
        self._emit("answer", state, "from memory first")
        before = self.meter.total()
        output = None
        try:
            with self.lms.use("answer"), one_attempt():
                output = self.agents["answer"](task_goal=doc.task_goal, memory=self.memory_adapter.memory_text(doc))
        except Exception as exc:  # noqa: BLE001 - the loop answers instead (the LM-call cap passes through)
            message = str(exc) if isinstance(exc, AgentError) else f"answer agent: {type(exc).__name__}: {one_line(exc)}"
            state.errors.append(f"{message} (memory not judged; the loop runs)")
        cited = self._resolved(output.cited_node_ids) if output else []
        sufficient = bool(output and output.sufficient and cited)
        if output is not None:  # the verdict, for planning and the record (a failed call taught nothing)
            if sufficient:
                context = f"Answered from memory: {output.answer}. {output.reason}"
            else:
                why = output.reason or "no reason given"
                if output.sufficient:
                    why = f"the answer cites no node of memory ({why})"
                context = f"Memory does not suffice: {why}. Draft answer: {output.answer or '(none)'}"
            check = CompletedTask(type=TaskType.NORMAL, description=MEMORY_CHECK_TASK, status=TaskStatus.SUCCESS,
                                  context=context[:300])
            self.store.set_insight_doc(revised(doc, completed=[*doc.completed_tasks, check], pending=doc.pending_tasks))
        after = self.meter.total()
        self.store.record_hop(Hop(
            loop=state.loops, task=MEMORY_CHECK_TASK, kind="MEMORY", answer=output.answer if output else "",
            success=sufficient, tool_calls=[], lm_calls=after["calls"] - before["calls"],
            tokens=(after["prompt_tokens"] + after["completion_tokens"]) - (before["prompt_tokens"] + before["completion_tokens"]),
        ))
        if sufficient:
            state.answer, state.citations, state.answered_from_memory = output.answer, cited, True
        return sufficient

    def _last_answer(self, state: RunState, doc: InsightDoc) -> None:
        """The executor's final pass gave no answer: the answer agent alone, else the earlier answer, else the
        extractive answer (see module docstring). Counted as the executor's fallback, the extractive one as
        the answer agent's."""
        state.fallbacks["executor"] = state.fallbacks.get("executor", 0) + 1
        memory = self.memory_adapter.memory_text(doc)
        try:
            with self.lms.use("answer"):
                output = self.agents["answer"](task_goal=doc.task_goal, memory=memory, judge=False)
            state.answer = output.answer
            if output.lenient:
                state.errors.append(f"answer agent: its reply did not parse; the answer was read from its text ({output.reason})")
            return
        except Exception as exc:  # noqa: BLE001 - a failing LM leaves the earlier or the extractive answer
            message = str(exc) if isinstance(exc, AgentError) else f"{type(exc).__name__}: {one_line(exc)}"
            state.errors.append(f"answer from memory failed: {message}")
        if state.answer:
            return
        with self.lms.use("answer"):  # token counting follows the answer agent's LM; no LM call is made
            output = POLICIES["answer"](self.agents["answer"], self.embedder, task_goal=doc.task_goal, memory=memory)
        state.fallbacks["answer"] = state.fallbacks.get("answer", 0) + 1
        if output.answer:
            state.answer, state.citations, state.extractive = output.answer, self._resolved(output.cited_node_ids), True

    def _resolved(self, fragments: list[str]) -> list[str]:
        """The graph's node ids that ``fragments`` (ids or unique prefixes) name, in order, each once."""
        known = self.store.graph.nodes_dict
        return list(dict.fromkeys(node_id for node_id in (resolve_node_id(f, known) for f in fragments) if node_id))
