"""The phases of one task's loop (spec §4.1-4.2): initialise, execute a step, answer, plan, stop.

Answering from memory (first, and as the last resort) is :class:`~amb_dspy.answering.AnswerPhases`.

:class:`LoopPhases` is mixed into :class:`~amb_dspy.bank.MemoryBank`; it works on the run's memory
(``store``, ``memory`` the :class:`~amb_dspy.memory_writer.MemoryWriter`, ``memory_adapter``), its images
(``images``), LMs (``lms``), ``config``, and the bank's ``_agent`` (call an agent with its LM) and ``_emit``
(report progress). It formats no prompt text: the adapter does. Planning, turning tool responses into
memory and writing the prompt are the run's :class:`~amb_dspy.task_memory.TaskMemory`'s (``session``),
which outside agents use through :class:`~amb_dspy.session.TaskSession`.
"""

from __future__ import annotations

from typing import Any

import dspy

from amb_dspy.adapter import TaskKind, knowledge_text, recognition_text
from amb_dspy.agents import answer_from_memory_task
from amb_dspy.answering import FAST_TERMINATION, AnswerPhases
from amb_dspy.errors import one_line
from amb_dspy.executor import ExecutionResult, Executor, citations
from amb_dspy.lm import LMCallCapReached
from amb_dspy.run_state import Conflict, RunState, revised
from amb_dspy.storage import Hop, HopCall, InsightDoc, QueryGraphNode, TaskStatus
from amb_dspy.tool_failures import note_tool_calls


class LoopPhases(AnswerPhases):
    """The steps of :meth:`MemoryBank.run` between setting up a run's memory and reporting its result."""

    def _initialise(self, state: RunState, context: str) -> None:
        self._emit("initialise", state)
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if context.strip():
            new_nodes, failure, _ = self.memory.convert(state, context, {"source": "user_context"})
        if self._answered_from_memory(state):
            return
        planned = self._plan(state, new_nodes, report="", failure=failure)
        if (failure or not planned) and not self.store.insight_doc.pending_tasks:
            # Nothing was planned because something failed: the executor still tries, rather than the
            # run ending as if the goal were met.
            self.store.set_insight_doc(revised(self.store.insight_doc, pending=[answer_from_memory_task(self.store.insight_doc.task_goal)]))

    def _step(self, state: RunState, executor) -> None:
        doc = self.store.insight_doc
        kind = self.memory_adapter.intercept_context(doc, cross_validation=state.active is not None,
                                                     images_staged=bool(self.images.pending_images(state.doc_id)))
        self._emit("execute", state, f"{kind.value}: {doc.current_task or doc.task_goal}")
        images = None
        if kind is TaskKind.IMAGE:
            images = [dspy.Image.from_path(str(i.temp_path)) for i in self.images.pending_images(state.doc_id)]
        before = self.meter.total()
        try:
            result = self._execute(executor, self._prompt(doc), images)
        except Exception as exc:  # noqa: BLE001 - fails the task, not the run (the LM-call cap is a BaseException)
            message = f"executor failed: {type(exc).__name__}: {one_line(exc)}"
            state.errors.append(message)
            if state.active is not None:  # the conflict is still there: check it again later
                self._requeue(state, state.active)
                state.active = None
            new_nodes, _ = self._remember(state, ExecutionResult("", list(executor.calls)), doc)
            self._plan(state, new_nodes, report="", failure=message)
            self._record_hop(state, doc, kind.value, ExecutionResult("", list(executor.calls)), before)
            return

        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if kind is TaskKind.CROSS_VALIDATE:
            new_nodes, failure = self.memory.resolve_conflict(state, result)
        elif kind is TaskKind.IMAGE:
            attachments = self.images.store_images(state.doc_id)
            new_nodes, failure, _ = self.memory.convert(state, recognition_text(doc.task_goal, result.answer), {"source": "image_recognition"}, attachments)
        else:
            state.answer, _ = citations(result, self.store.graph.nodes_dict)
            new_nodes, failure = self._remember(state, result, doc)
        self._plan(state, new_nodes, report=result.report(), failure=failure)
        self._record_hop(state, doc, kind.value, result, before)

    def _prompt(self, doc: InsightDoc) -> str:
        return self.session.prompt(doc)

    def _record_hop(self, state: RunState, doc: InsightDoc, kind: str, result: ExecutionResult,
                    before: dict[str, int]) -> None:
        """The executed subtask as a hop: its tool calls, answer, success (as planning recorded it) and cost."""
        note_tool_calls(state, result.tool_calls)  # a failed search or visit is an error of the run
        task = doc.current_task or doc.task_goal
        recorded = [t for t in self.store.insight_doc.completed_tasks if t.description == task]
        success = bool(recorded) and recorded[-1].status is TaskStatus.SUCCESS if kind != "ANSWER" else bool(result.answer)
        after = self.meter.total()
        self.store.record_hop(Hop(
            loop=state.loops, task=task, kind=kind, answer=result.answer, success=success,
            tool_calls=[HopCall(name=c.name, args=c.args, cached=c.cached) for c in result.tool_calls],
            lm_calls=after["calls"] - before["calls"],
            tokens=(after["prompt_tokens"] + after["completion_tokens"]) - (before["prompt_tokens"] + before["completion_tokens"]),
        ))

    def _execute(self, executor: Executor, prompt: str, images: list | None = None) -> ExecutionResult:
        """Run the executor; if the LM-call cap stops it, what its tools returned is kept before the run ends."""
        try:
            with self.lms.use("executor", tools=executor.tools):
                return executor(enhanced_prompt=prompt, images=images)
        except LMCallCapReached as exc:
            calls = ExecutionResult("", list(executor.calls)).knowledge
            if calls:
                self.memory.keep_raw(knowledge_text(calls), _tool_metadata(calls, self.store.insight_doc), str(exc))
            raise

    def _remember(self, state: RunState, result: ExecutionResult, doc: InsightDoc) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of what an execution's tools returned (nothing when they returned nothing new)."""
        knowledge = result.knowledge
        if not knowledge:
            return [], ""
        metadata = {**_tool_metadata(knowledge, doc), "answer": result.answer}
        return self.session.remember_calls(knowledge, metadata)

    def _final_answer(self, state: RunState, executor) -> None:
        """One last execution with nothing pending: the executor answers the goal from memory."""
        if state.answered_from_memory:
            return
        doc = self.store.insight_doc
        final_doc = revised(doc)
        self._emit("answer", state)
        before = self.meter.total()
        try:
            result = self._execute(executor, self._prompt(final_doc))
        except Exception as exc:  # noqa: BLE001 - the LM-call cap is a BaseException and passes through
            state.errors.append(f"final answer failed: {type(exc).__name__}: {one_line(exc)}")
            self._remember(state, ExecutionResult("", list(executor.calls)), final_doc)
            result = None
        self._record_hop(state, final_doc, "ANSWER", result or ExecutionResult("", list(executor.calls)), before)
        if result is not None:
            answer, state.citations = citations(result, self.store.graph.nodes_dict)
            self._remember(state, result, final_doc)  # what the last pass looked up stays in memory too
            if answer:
                state.answer = answer
                return
        if self.config.policy != "lm":
            # No tools and one plain field, then no LM at all: a step a small model can still answer in.
            self._last_answer(state, final_doc)

    def _termination(self, state: RunState) -> str | None:
        if state.answered_from_memory:
            return FAST_TERMINATION
        doc = self.store.insight_doc
        if doc.pending_tasks:
            return None
        if doc.all_succeeded:
            return "goal_met"
        failed = [t for t in doc.completed_tasks if t.status is TaskStatus.FAILURE and t.description not in state.retried]
        if not failed:
            return "finished_with_failures"
        retry = failed[-1].description
        state.retried.add(retry)
        self.store.set_insight_doc(revised(doc, pending=[retry]))
        return None

    # --- planning (the session's: outside agents plan the same way) -------------------------------
    def _next_conflict(self, state: RunState) -> Conflict | None:
        return self.session.next_conflict()

    def _requeue(self, state: RunState, conflict: Conflict) -> None:
        self.session.requeue(conflict)

    def _plan(self, state: RunState, new_nodes: list[QueryGraphNode], report: str, failure: str) -> bool:
        """Let planning revise the Insight Doc; False when the planning agent failed (a fallback was used)."""
        return self.session.plan_step(new_nodes, report, failure)


def _tool_metadata(calls: list, doc: InsightDoc) -> dict[str, Any]:
    return {"source": "executor", "task": doc.current_task or doc.task_goal,
            "tool_calls": [{"name": c.name, "args": c.args} for c in calls]}
