"""The phases of one task's loop (spec §4.1-4.2): initialise, execute a step, answer, plan, stop.

:class:`LoopPhases` is mixed into :class:`~amb_dspy.bank.MemoryBank`; it works on the run's memory
(``store``, ``memory`` the :class:`~amb_dspy.memory_writer.MemoryWriter`, ``memory_adapter``), its images
(``images``), LMs (``lms``), ``config``, and the bank's ``_agent`` (call an agent with its LM) and ``_emit``
(report progress). It formats no prompt text: the adapter does.
"""

from __future__ import annotations

from typing import Any

import dspy

from amb_dspy.adapter import TaskKind, image_task, knowledge_text, recognition_text
from amb_dspy.agents import (
    AgentError,
    ConflictNotification,
    answer_from_memory_task,
    cross_validation_task,
    is_cross_validation_task,
)
from amb_dspy.errors import one_line
from amb_dspy.executor import AnswerFromMemory, ExecutionResult, Executor, citations
from amb_dspy.lm import LMCallCapReached
from amb_dspy.memory_writer import node_info
from amb_dspy.run_state import Conflict, RunState, revised
from amb_dspy.storage import CompletedTask, Hop, HopCall, InsightDoc, QueryGraphNode, TaskStatus, TaskType


class LoopPhases:
    """The steps of :meth:`MemoryBank.run` between setting up a run's memory and reporting its result."""

    def _initialise(self, state: RunState, context: str) -> None:
        self._emit("initialise", state)
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if context.strip():
            new_nodes, failure, _ = self.memory.convert(state, context, {"source": "user_context"})
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
        return self.memory_adapter.enhance_prompt(doc, already_fetched=self.tool_cache.already_fetched())

    def _record_hop(self, state: RunState, doc: InsightDoc, kind: str, result: ExecutionResult,
                    before: dict[str, int]) -> None:
        """The executed subtask as a hop: its tool calls, answer, success (as planning recorded it) and cost."""
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
        text = knowledge_text(knowledge)
        converted = self.memory.convert(state, text, metadata)
        if converted.remembered is not None:
            self.tool_cache.recorded(knowledge, converted.remembered.entry_id)  # a repeat reads its response back here
        else:
            self.tool_cache.forget(knowledge)  # not memory yet: a repeat fetches and converts it again
        return converted.nodes, converted.failure

    def _final_answer(self, state: RunState, executor) -> None:
        """One last execution with nothing pending: the executor answers the goal from memory."""
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
            # No tools and one plain field: a step a small model can still answer in.
            state.answer = self._answer_from_memory(state, final_doc) or state.answer

    def _answer_from_memory(self, state: RunState, doc: InsightDoc) -> str:
        """The goal answered from <memory> by one ``dspy.Predict`` (counted as the executor's fallback)."""
        state.fallbacks["executor"] = state.fallbacks.get("executor", 0) + 1
        try:
            with self.lms.use("executor"):
                prediction = dspy.Predict(AnswerFromMemory)(task_goal=doc.task_goal,
                                                            memory=self.memory_adapter.memory_text(doc))
        except Exception as exc:  # noqa: BLE001 - the last resort failing leaves the last answer standing
            state.errors.append(f"answer from memory failed: {type(exc).__name__}: {one_line(exc)}")
            return ""
        return str(prediction.answer or "").strip()

    def _termination(self, state: RunState) -> str | None:
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

    # --- planning ----------------------------------------------------------------------------
    def _next_conflict(self, state: RunState) -> Conflict | None:
        while state.conflicts:
            conflict = state.conflicts.pop(0)
            alive = [i for i in conflict.node_ids if i in self.store.graph]
            if len(alive) >= 2:
                conflict.node_ids = alive
                return conflict
        return None

    def _requeue(self, state: RunState, conflict: Conflict) -> None:
        if conflict.round + 1 > self.config.max_merge_rounds:
            state.errors.append(f"conflict between {conflict.node_ids} left unresolved: round cap reached")
            return
        state.conflicts.insert(0, Conflict(conflict.node_ids, conflict.description, conflict.round + 1))

    def _plan(self, state: RunState, new_nodes: list[QueryGraphNode], report: str, failure: str) -> bool:
        """Let planning revise the Insight Doc; False when the planning agent failed (a fallback was used)."""
        doc = self.store.insight_doc
        state.active = self._next_conflict(state)
        notification = None
        if state.active is not None:
            notification = ConflictNotification(conflicting_node_ids=state.active.node_ids,
                                                 conflict_description=state.active.description)
        self._emit("plan", state)
        try:
            plan = self._agent("planning", insight_doc=doc, new_memory_nodes=[node_info(n) for n in new_nodes
                                                                              if n.id in self.store.graph],
                               conflict=notification, execution_report=report, failure_reason=failure)
            new_doc = revised(doc, completed=plan.completed_tasks, pending=plan.pending_tasks[:1])
            planned = True
        except AgentError as exc:
            planned = False
            state.errors.append(str(exc))
            completed = list(doc.completed_tasks)
            if doc.current_task:
                completed.append(CompletedTask(
                    type=TaskType.CROSS_VALIDATE if is_cross_validation_task(doc.current_task) else TaskType.NORMAL,
                    description=doc.current_task, status=TaskStatus.FAILURE, context=f"planning failed: {exc}"[:300],
                ))
            pending = [cross_validation_task(notification)] if notification else []
            new_doc = revised(doc, completed=completed, pending=pending)
        if state.active is None:
            recognition = image_task([image.original_name for image in self.images.pending_images(state.doc_id)])
            if recognition:
                new_doc = revised(new_doc, pending=[recognition])
        self.store.set_insight_doc(new_doc)
        return planned


def _tool_metadata(calls: list, doc: InsightDoc) -> dict[str, Any]:
    return {"source": "executor", "task": doc.current_task or doc.task_goal,
            "tool_calls": [{"name": c.name, "args": c.args} for c in calls]}
