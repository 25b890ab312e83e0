"""Answering a run's goal from memory: first, when the run starts with memory, and last, when all else failed.

Both are steps of :class:`~amb_dspy.task.loop.TaskLoop`, written here as functions of the task's
:class:`~amb_dspy.task.session.TaskSession`. Both ask the one answer agent (:mod:`amb_dspy.agents.answer`),
through the session's agent runner (:class:`~amb_dspy.agents.runner.AgentRunner`), over the ``<memory>``
block the adapter writes for the goal.

* **The fast path** (``config.fast_path``, on by default; see :func:`fast_path_on`): a run whose memory is not empty once its context
  is converted (an ingested bank, ``--bank``, a context) asks the answer agent once. A sufficient answer
  that cites a node of memory ends the run (termination ``answered_from_memory``, one hop recorded);
  otherwise the verdict, the draft answer and what is missing go into the Insight Doc as a completed
  :data:`~amb_dspy.agents.planning.MEMORY_CHECK_TASK`, and planning and the executor run as without it.
  Empty memory makes no call, and a reply that does not parse is not asked again (the runner's ``one_attempt``):
  the fast path costs at most one call.
* **The last answer**: when the executor's final pass gave no answer (and the policy allows a fallback),
  the answer agent answers alone (one output field, read leniently when it does not parse); when even
  that fails and no earlier step answered, the deterministic policy quotes the best evidence line of
  ``<memory>`` with its citation, and the run ends ``extractive_answer`` (never ``goal_met``).

Every answer an LM gives, here, in the executor's steps and in the direct strategy, passes
:func:`accepted` (:func:`amb_dspy.task.grounding.ungrounded` over :func:`evidence_text`) before it counts:
a placeholder, noise or text that rests on nothing the task holds is no answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dspy

from amb_dspy.agents import MEMORY_CHECK_TASK
from amb_dspy.config import AmbConfig
from amb_dspy.lm import LOCAL_SPEC, is_embedded
from amb_dspy.storage import CompletedTask, Hop, InsightDoc, TaskKind, TaskStatus
from amb_dspy.task.adapter import NO_MEMORY
from amb_dspy.task.executor import resolve_node_id
from amb_dspy.task.grounding import uncopied, ungrounded
from amb_dspy.task.state import revised

if TYPE_CHECKING:
    from amb_dspy.task.session import TaskSession

FAST_TERMINATION = "answered_from_memory"
EXTRACTIVE_TERMINATION = "extractive_answer"


def fast_path_on(config: AmbConfig, lm: dspy.BaseLM) -> bool:
    """``config.fast_path`` when set; by default on, except with the heuristic policy (no LM verdict) and with
    the bundled SmolLM2-135M, which calls memory sufficient whatever it holds (on the demo's notes, which do
    not name the river the question asks for, 2 verdicts of 2), so the demo would never search."""
    if config.executor.fast_path is not None:
        return config.executor.fast_path
    engine = getattr(lm, "engine", None)
    return config.models.policy != "heuristic" and not (is_embedded(lm) and getattr(engine, "gguf", "") == LOCAL_SPEC)


def answered_from_memory(session: TaskSession) -> bool:
    """The fast path: True when memory sufficed and the task can end with its answer."""
    state, store, doc = session.state, session.store, session.store.insight_doc
    if not fast_path_on(session.config, session.lms.for_agent("answer")) or len(store.graph) == 0:
        return False
    session.emit("answer", "from memory first")
    before = session.meter.total()
    output = session.memory.runner.judge_memory(doc.task_goal, session.memory.adapter.memory_text(doc))
    cited = resolved(session, output.cited_node_ids) if output else []
    sufficient = bool(output and output.sufficient and cited and accepted(session, output.answer, doc, "the fast path"))
    if output is not None:  # the verdict, for planning and the record (a failed call taught nothing)
        check = CompletedTask(type=TaskKind.NORMAL, description=MEMORY_CHECK_TASK, status=TaskStatus.SUCCESS,
                              context=_verdict(output, sufficient)[:300])
        store.set_insight_doc(revised(doc, completed=[*doc.completed_tasks, check], pending=doc.pending))
    after = session.meter.total()
    store.record_hop(Hop(
        loop=state.loops, task=MEMORY_CHECK_TASK, kind=TaskKind.MEMORY.value, answer=output.answer if output else "",
        success=sufficient, tool_calls=[], lm_calls=after["calls"] - before["calls"],
        tokens=(after["prompt_tokens"] + after["completion_tokens"]) - (before["prompt_tokens"] + before["completion_tokens"]),
    ))
    if sufficient:
        state.answer, state.citations, state.answered_from_memory = output.answer, cited, True
    return sufficient


def _verdict(output, sufficient: bool) -> str:
    """The answer agent's verdict as the memory check's context: the answer, or why memory does not suffice."""
    if sufficient:
        return f"Answered from memory: {output.answer}. {output.reason}"
    why = output.reason or "no reason given"
    if output.sufficient:
        why = f"the answer was not accepted or cites no node of memory ({why})"
    return f"Memory does not suffice: {why}. Draft answer: {output.answer or '(none)'}"


def last_answer(session: TaskSession, doc: InsightDoc) -> None:
    """The executor's final pass gave no answer: the answer agent alone, else the earlier answer, else the
    extractive answer (see module docstring); the runner decides which and counts it."""
    state = session.state
    memory = session.memory.adapter.memory_text(doc)
    given = session.memory.runner.last_answer(doc.task_goal, memory, answered=bool(state.answer))
    if given is None:
        return
    output, extractive = given
    if not extractive:
        if accepted(session, output.answer, doc, "the last answer"):
            state.answer = output.answer
            return
        if state.answer:  # the earlier answer stands
            return
        output = session.memory.runner.extract(doc.task_goal, memory)
    if output.answer:
        state.answer, state.citations, state.extractive = output.answer, resolved(session, output.cited_node_ids), True


def evidence_text(session: TaskSession, doc: InsightDoc) -> str:
    """What an answer of the task may rest on: ``<memory>`` for the goal (long-term items included) and every
    raw text the task keeps (its context, the tools' responses) in the Interaction Tree."""
    raw = [entry.text for entry in session.store.tree.entries.values()]
    memory = session.memory.adapter.memory_text(doc)
    return "\n".join([memory.replace(NO_MEMORY, ""), *raw])


def accepted(session: TaskSession, answer: str, doc: InsightDoc, where: str, copied_from: list[str] | None = None) -> bool:
    """Whether ``answer`` passes as an answer (:func:`~amb_dspy.task.grounding.ungrounded`; with
    ``copied_from``, the lines a tiny LM was shown, also :func:`~amb_dspy.task.grounding.uncopied`); a refusal
    is recorded in the run's errors, so that the user sees why the run fell back."""
    reason = ungrounded(answer, evidence_text(session, doc))
    if not reason and copied_from:
        reason = uncopied(answer, copied_from, doc.task_goal)
    if reason and answer.strip():
        session.state.errors.append(f"{where}: the answer {' '.join(answer.split())[:80]!r} was not accepted: {reason}")
    return not reason


def resolved(session: TaskSession, fragments: list[str]) -> list[str]:
    """The graph's node ids that ``fragments`` (ids or unique prefixes) name, in order, each once."""
    known = session.store.graph.nodes_dict
    return list(dict.fromkeys(node_id for node_id in (resolve_node_id(f, known) for f in fragments) if node_id))
