"""The spec's loop (§4.1-4.2) over one task: initialise, execute a step, plan, stop, answer.

:class:`TaskLoop` receives the task's :class:`~amb_dspy.task.session.TaskSession` and an executor, and
works only through them: the task's memory (``session.memory``, a :class:`~amb_dspy.task.memory.TaskMemory`:
its store, writer, adapter, tool cache, agent runner, run state, images) and the session's meter and LMs.
It formats no prompt text (the adapter does) and decides no LM-or-policy question (the runner does).
Answering from memory, first and as the last resort, is :mod:`amb_dspy.task.answering`::

    termination = TaskLoop(session, executor).run(context)

1. initialise (§4.1): the user's context goes through memory conversion, planning writes the Insight Doc;
2. loop (§4.2): enhance the prompt, execute, intercept (NORMAL / CROSS_VALIDATE / IMAGE), convert what
   the tools returned into memory (§4.3), resolve a checked conflict by merging (§4.4), plan;
3. stop when nothing is pending and every completed task succeeded, or when a cap is hit; then one last
   execution answers the goal from memory.

An agent failure marks the current task failed and the run goes on (§13); a failed memory conversion
leaves the graph as it was and still keeps the raw text in the Interaction Tree.
"""

from __future__ import annotations

import dspy

from amb_dspy.agents.fallback.planning import pending_after_failure
from amb_dspy.errors import one_line
from amb_dspy.lm import LMCallCapReached
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import (
    Hop,
    HopCall,
    InsightDoc,
    InteractionEntry,
    PendingTask,
    QueryGraphNode,
    TaskKind,
    TaskStatus,
)
from amb_dspy.task.adapter import recognition_text
from amb_dspy.task.answering import (
    EXTRACTIVE_TERMINATION,
    FAST_TERMINATION,
    accepted,
    answered_from_memory,
    last_answer,
)
from amb_dspy.task.executor import ExecutionResult, Executor, citations
from amb_dspy.task.session import TaskSession
from amb_dspy.task.state import RunState, revised
from amb_dspy.task.tool_failures import note_tool_calls, tool_termination

__all__ = ["TaskLoop"]


class TaskLoop:
    """The loop of spec §4 over ``session``'s task, executing with ``executor`` (see the module docstring)."""

    def __init__(self, session: TaskSession, executor: Executor):
        self.session, self.executor = session, executor
        self.memory = session.memory

    @property
    def state(self) -> RunState:
        return self.memory.state

    @property
    def store(self) -> MemoryStore:
        return self.memory.store

    def run(self, context: str = "", resumed: bool = False) -> str:
        """Work the task (:meth:`work`) and say how it ended: the LM-call cap, an extractive answer, no answer
        and sources that all failed are each an ending of their own; the task's staged images are removed."""
        memory, state = self.memory, self.state
        termination = "running"
        try:
            termination = self.work(context, resumed)
            if state.extractive:
                termination = EXTRACTIVE_TERMINATION  # never goal_met: no LM answered
        except LMCallCapReached as exc:
            termination = "lm_call_cap"
            state.errors.append(str(exc))
        finally:
            if memory.images is not None:
                memory.images.cleanup(state.doc_id)
        if termination == "goal_met" and not state.answer:
            termination = "no_answer"  # the goal is met only by an answer
        return tool_termination(state, termination)  # nor by sources that all failed

    def work(self, context: str, resumed: bool) -> str:
        """Initialise (unless resumed), execute until done or capped, answer; returns why the loop stopped."""
        session, state = self.session, self.state
        if not resumed:
            self.initialise(context)
            self.checkpoint()
        while True:
            termination = self.stop_reason() or ("loop_cap" if state.loops >= session.config.loops.max_loops else "")
            if termination:
                break
            state.loops += 1
            self.step()
            self.checkpoint()
        self.final_answer()
        session.keep_unasked()  # resumed in the final pass: what it did not ask again is kept
        return termination

    def checkpoint(self) -> None:
        if self.session.config.paths.checkpoint_dir is not None:
            self.session.save()

    def keep_unrecognised(self) -> None:
        """A text-only executor cannot recognise images: keep them as attachments and say so, before any LM call."""
        session, images = self.session, self.memory.images
        names = ", ".join(image.original_name for image in images.pending_images(self.state.doc_id))
        model = getattr(session.lms.for_agent("executor"), "model", "the executor's LM")
        notice = f"{model} reads text only: image(s) {names} kept as attachments, not recognised"
        attachments = images.store_images(self.state.doc_id)
        self.store.record_entry(InteractionEntry(
            text=f"Images attached to the task, not recognised: {names}",
            metadata={"source": "image", "recognised": False, "reason": notice}, attachments=tuple(attachments)))
        session.notify(notice)

    # --- the phases ----------------------------------------------------------------------------
    def initialise(self, context: str) -> None:
        self.session.emit("initialise")
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if context.strip():
            new_nodes, failure, _ = self.memory.convert(context, {"source": "user_context"})
        if answered_from_memory(self.session):
            return
        planned = self.memory.plan_step(new_nodes, report="", failure=failure)
        doc = self.store.insight_doc
        if (failure or not planned) and not doc.pending:  # planning's rule (its policy's) after a failure
            self.store.set_insight_doc(revised(doc, pending=pending_after_failure(doc)))

    def step(self) -> None:
        session, memory, state, doc = self.session, self.memory, self.state, self.store.insight_doc
        pending_images = memory.images.pending_images(state.doc_id) if memory.images is not None else []
        kind = memory.adapter.intercept_context(doc, cross_validation=state.active is not None,
                                                images_staged=bool(pending_images))
        session.emit("execute", f"{kind.value}: {doc.current_task or doc.task_goal}")
        images = [dspy.Image.from_path(str(i.temp_path)) for i in pending_images] if kind is TaskKind.IMAGE else None
        before = session.meter.total()
        try:
            result = self.execute(memory.prompt(doc), images)
        except Exception as exc:  # noqa: BLE001 - fails the task, not the run (the LM-call cap is a BaseException)
            self._failed_step(doc, kind, exc, before)
            return
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if kind is TaskKind.CROSS_VALIDATE:
            new_nodes, failure, _ = memory.resolve_conflict(result)
        elif kind is TaskKind.IMAGE:
            attachments = memory.images.store_images(state.doc_id)
            new_nodes, failure, _ = memory.convert(recognition_text(doc.task_goal, result.answer),
                                                   {"source": "image_recognition"}, attachments)
        else:
            new_nodes, failure = self.convert_observations(result, doc)
            answer, _ = citations(result, self.store.graph.nodes_dict)
            if accepted(session, answer, doc, "a step"):  # else an earlier answer stands
                state.answer = answer
        memory.plan_step(new_nodes, report=result.report(), failure=failure)
        self.record_hop(doc, kind, result, before)

    def _failed_step(self, doc: InsightDoc, kind: TaskKind, exc: Exception, before: dict[str, int]) -> None:
        """The executor failed: the task fails, what its tools returned is kept, planning goes on."""
        state = self.state
        message = f"executor failed: {type(exc).__name__}: {one_line(exc)}"
        state.errors.append(message)
        if state.active is not None:  # the conflict is still there: check it again later
            self.memory.requeue(state.active)
            state.active = None
        new_nodes, _ = self.convert_observations(ExecutionResult("", list(self.executor.calls)), doc)
        self.memory.plan_step(new_nodes, report="", failure=message)
        self.record_hop(doc, kind, ExecutionResult("", list(self.executor.calls)), before)

    def final_answer(self) -> None:
        """One last execution with nothing pending: the executor answers the goal from memory."""
        session, state = self.session, self.state
        if state.answered_from_memory:
            return
        final_doc = revised(self.store.insight_doc)
        session.emit("answer")
        before = session.meter.total()
        try:
            result = self.execute(self.memory.prompt(final_doc))
        except Exception as exc:  # noqa: BLE001 - the LM-call cap is a BaseException and passes through
            state.errors.append(f"final answer failed: {type(exc).__name__}: {one_line(exc)}")
            self.convert_observations(ExecutionResult("", list(self.executor.calls)), final_doc)
            result = None
        self.record_hop(final_doc, TaskKind.ANSWER, result or ExecutionResult("", list(self.executor.calls)), before)
        if result is not None:
            answer, cited = citations(result, self.store.graph.nodes_dict)
            self.convert_observations(result, final_doc)  # what the last pass looked up stays in memory too
            if accepted(session, answer, final_doc, "the executor's answer"):
                state.answer, state.citations = answer, cited
                return
        # No tools and one plain field, then no LM at all: a step a small model can still answer in.
        last_answer(session, final_doc)

    def stop_reason(self) -> str | None:
        """How the loop ends now, or None while there is work: a pending task, or a failed one to retry once."""
        if self.state.answered_from_memory:
            return FAST_TERMINATION
        doc = self.store.insight_doc
        if doc.pending_tasks:
            return None
        if doc.all_succeeded:
            return "goal_met"
        failed = [t for t in doc.completed_tasks
                  if t.status is TaskStatus.FAILURE and t.description not in self.state.retried]
        if not failed:
            return "finished_with_failures"
        retry = failed[-1]
        self.state.retried.add(retry.description)
        self.store.set_insight_doc(revised(doc, pending=[PendingTask(kind=retry.type, description=retry.description)]))
        return None

    # --- executing and remembering -------------------------------------------------------------
    def execute(self, prompt: str, images: list | None = None) -> ExecutionResult:
        """Run the executor; if the LM-call cap stops it, what its tools returned is kept before the run ends."""
        try:
            with self.session.lms.use("executor", tools=self.executor.tools):
                return self.executor(enhanced_prompt=prompt, images=images)
        except LMCallCapReached as exc:
            calls = ExecutionResult("", list(self.executor.calls)).knowledge
            if calls:
                self.memory.keep_raw_calls(calls, str(exc))
            raise

    def convert_observations(self, result: ExecutionResult, doc: InsightDoc) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of what an execution's tools returned (nothing when they returned nothing new)."""
        knowledge = result.knowledge
        if not knowledge:
            return [], ""
        metadata = {**self.memory.tool_metadata(knowledge, doc=doc), "answer": result.answer}
        return self.memory.convert_calls(knowledge, metadata)

    def record_hop(self, doc: InsightDoc, kind: TaskKind, result: ExecutionResult, before: dict[str, int]) -> None:
        """The executed subtask as a hop: its tool calls, answer, success (as planning recorded it) and cost."""
        note_tool_calls(self.state, result.tool_calls)  # a failed search or visit is an error of the run
        task = doc.current_task or doc.task_goal
        recorded = [t for t in self.store.insight_doc.completed_tasks if t.description == task]
        if kind is TaskKind.ANSWER:
            success = bool(result.answer)
        else:
            success = bool(recorded) and recorded[-1].status is TaskStatus.SUCCESS
        after = self.session.meter.total()
        self.store.record_hop(Hop(
            loop=self.state.loops, task=task, kind=kind.value, answer=result.answer, success=success,
            tool_calls=[HopCall(name=c.name, args=c.args, cached=c.cached) for c in result.tool_calls],
            lm_calls=after["calls"] - before["calls"],
            tokens=(after["prompt_tokens"] + after["completion_tokens"]) - (before["prompt_tokens"] + before["completion_tokens"]),
        ))
