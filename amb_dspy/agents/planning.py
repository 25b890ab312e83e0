"""The planning agent: incremental planning, one next step at a time (spec §6.2, §7.5).

The Insight Doc's pending task, if any, is the task that was just executed. The LM is asked only for
what is new: the outcome (status and one or two sentences of context) of that task, and the single
next task, or none when the goal is met. The code assembles the full :class:`PlanningOutput`: the goal
and earlier completed tasks are copied, never retyped; the executed task is appended with its kind
(:meth:`InsightDoc.with_finished`); ``pending_tasks`` has 0 or 1 typed items. The LM reads and writes
plain text: its next task becomes a :class:`PendingTask` here, in :meth:`PlanningAgent.forward`.

Rules enforced in code, not left to the LM:

* a non-empty ``failure_reason`` makes the executed task a failure with that reason as its context;
* a :class:`ConflictNotification` makes the next task :func:`cross_validation_task` of it;
* when neither the outcome nor the next task needs judging (a conflict, and no executed task or a
  known failure), no LM call is made.

When the prompt would overflow the window, the execution report is cut to half the room left and the
oldest new memories are left out (both logged); the history of completed tasks is shortened from the
oldest only if it alone does not fit.

Predictor: ``plan`` (:class:`PlanNextTask`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.analysis import NodeInfo
from amb_dspy.agents.base import MIN_INPUT_BUDGET, MemoryAgent, fallback_context, logger
from amb_dspy.agents.chunking import hard_split
from amb_dspy.storage import CompletedTask, InsightDoc, PendingTask, TaskKind, TaskStatus

CROSS_VALIDATE_PREFIX = "CROSS_VALIDATE"


class ConflictNotification(BaseModel):
    conflicting_node_ids: list[str] = Field(min_length=1)
    conflict_description: str


class PlanningOutput(BaseModel):
    task_goal: str
    completed_tasks: list[CompletedTask]
    pending_tasks: list[PendingTask] = Field(max_length=1)


def cross_validation_task(conflict: ConflictNotification) -> PendingTask:
    """The task of cross-validating a conflict: its kind and node ids typed, its text naming them for the executor."""
    ids = list(conflict.conflicting_node_ids)
    return PendingTask(kind=TaskKind.CROSS_VALIDATE, node_ids=ids, description=(
        f"{CROSS_VALIDATE_PREFIX} {json.dumps(ids)}: find out which of these conflicting memories is correct. "
        f"{conflict.conflict_description.strip()}"
    ))


ANSWER_FROM_MEMORY = "Answer the task goal from memory"
# The completed task the bank records when it asked the answer agent first (amb_dspy.task.answering): its
# context holds the verdict, the draft answer and what is missing. It is no execution of the goal.
MEMORY_CHECK_TASK = "Check whether memory already answers the task goal"


def answer_from_memory_task(task_goal: str) -> PendingTask:
    """The task that asks the executor to answer the goal; it quotes the goal so memory retrieval finds it."""
    return PendingTask(description=f"{ANSWER_FROM_MEMORY}: {task_goal.strip()}")


class TaskRecord(BaseModel):
    description: str
    status: str
    context: str


class MemoryBrief(BaseModel):
    context: str
    keywords: list[str]
    summary: str


class PlanNextTask(dspy.Signature):
    """Plan a research task one step at a time.

    First judge the sub-task just executed, if there is one: success if its execution report achieved
    what it asked, otherwise failure, with one or two sentences of context on what it found. Then decide
    the single next sub-task that brings the goal closer, as one concrete instruction (what to search
    for, read or check), without repeating completed work. When the completed tasks and the memories
    already answer the goal, leave next_task empty.
    """

    task_goal: str = dspy.InputField(desc="the user's question")
    completed_tasks: list[TaskRecord] = dspy.InputField(desc="earlier sub-tasks, oldest first")
    executed_task: str = dspy.InputField(desc="the sub-task just executed; empty before the first one")
    execution_report: str = dspy.InputField(desc="what executing it returned; may be empty")
    new_memories: list[MemoryBrief] = dspy.InputField(desc="memories added since the last plan")
    executed_status: Literal["success", "failure"] = dspy.OutputField(
        desc="the executed sub-task's outcome; success when none was executed"
    )
    executed_context: str = dspy.OutputField(desc="one or two sentences on what it found; empty when none was executed")
    next_task: str = dspy.OutputField(desc="the next sub-task, or empty when the goal is met")


class PlanningAgent(MemoryAgent):
    """Incremental planner over the Insight Doc (see module docstring)."""

    name = "planning"

    def __init__(self, config=None, token_counter=None, lm=None):
        super().__init__(config, token_counter, lm)
        self.plan = dspy.Predict(PlanNextTask)

    def forward(
        self,
        insight_doc: InsightDoc,
        new_memory_nodes: Sequence[NodeInfo] = (),
        conflict: ConflictNotification | None = None,
        execution_report: str = "",
        failure_reason: str = "",
    ) -> PlanningOutput:
        executed = insight_doc.current_task
        failure_reason = failure_reason.strip()
        prediction = None
        if conflict is None or (executed is not None and not failure_reason):
            report = execution_report.strip()
            if failure_reason:
                report = f"The task failed: {failure_reason}" + (f"\n\n{report}" if report else "")
            prediction = self.call(self.plan, **self._fitted_inputs(insight_doc, executed, report, new_memory_nodes))

        completed = list(insight_doc.completed_tasks)
        if executed is not None:
            if failure_reason:
                status, context = TaskStatus.FAILURE, failure_reason
            else:
                status = TaskStatus(prediction.executed_status)
                context = str(prediction.executed_context or "").strip() or fallback_context(execution_report)
            completed = insight_doc.with_finished(status, context)

        if conflict is not None:
            pending = [cross_validation_task(conflict)]
        else:  # the LM's plain text becomes a typed task here, and only here
            next_task = str(prediction.next_task or "").strip()
            pending = [PendingTask(description=next_task)] if next_task else []
        return PlanningOutput(task_goal=insight_doc.task_goal, completed_tasks=completed, pending_tasks=pending)

    def _fitted_inputs(self, doc: InsightDoc, executed: str | None, report: str, memories: Sequence[NodeInfo]) -> dict:
        """The predictor's inputs, cut to the window (see module docstring)."""
        records = [TaskRecord(description=t.description, status=t.status.value, context=t.context) for t in doc.completed_tasks]
        fixed = dict(task_goal=doc.task_goal, executed_task=executed or "", execution_report="", new_memories=[])
        while True:
            overhead = self.prompt_tokens(self.plan, completed_tasks=records, **fixed)
            budget = int(self.window * self.settings.chunk_ratio) - overhead
            if budget >= MIN_INPUT_BUDGET or not records:
                break
            records = records[1:]
            logger.warning("planning: oldest completed task left out of the prompt to fit the window")
        budget = max(budget, MIN_INPUT_BUDGET)

        if report and self.count_tokens(report) > budget // 2:
            report = hard_split(report, budget // 2, self.count_tokens)[0]
            logger.warning("planning: execution report cut to %d tokens to fit the window", budget // 2)
        room = budget - self.count_tokens(report)
        briefs = [MemoryBrief(context=m.context, keywords=m.keywords, summary=m.summary) for m in memories]
        kept: list[MemoryBrief] = []
        for brief in reversed(briefs):  # newest last in, first kept
            cost = self.count_tokens(json.dumps(brief.model_dump(), ensure_ascii=False)) + 1
            if cost > room:
                break
            kept.insert(0, brief)
            room -= cost
        if len(kept) < len(briefs):
            logger.warning("planning: %d oldest new memories left out of the prompt to fit the window", len(briefs) - len(kept))
        return dict(fixed, completed_tasks=records, execution_report=report, new_memories=kept)
