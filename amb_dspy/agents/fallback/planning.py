"""Planning without an LM: three rules over the Insight Doc.

1. A pending conflict gives its cross-validation task (:func:`~amb_dspy.agents.planning.cross_validation_task`).
2. Else, until one ordinary (non-cross-validation) task has been executed (the bank's check of whether
   memory already answers the goal, :data:`~amb_dspy.agents.planning.MEMORY_CHECK_TASK`, is none), the next task asks the
   executor to answer the goal from memory (:func:`~amb_dspy.agents.planning.answer_from_memory_task`). That is "the first loop",
   also when a conflict check had to come first.
3. Else the plan is finished: no pending task.

The task just executed, if any, is recorded as the LM path records it (its kind is the pending task's:
:meth:`~amb_dspy.storage.InsightDoc.with_finished`), a failure with ``failure_reason`` as its context when there is one, else a success described by
the execution report's first sentence (nothing else here can judge the report).

When the planning agent itself fails (policy "lm"), :func:`failed_plan` is what is recorded instead, and
:func:`pending_after_failure` keeps a run whose first plan failed from ending as if its goal were met.
"""

from __future__ import annotations

from collections.abc import Sequence

from amb_dspy.agents.analysis import NodeInfo
from amb_dspy.agents.base import fallback_context
from amb_dspy.agents.planning import (
    MEMORY_CHECK_TASK,
    ConflictNotification,
    PlanningAgent,
    PlanningOutput,
    answer_from_memory_task,
    cross_validation_task,
)
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.storage import InsightDoc, PendingTask, TaskKind, TaskStatus


def plan_by_rules(
    agent: PlanningAgent,
    embedder: Embedder | None = None,
    *,
    insight_doc: InsightDoc,
    new_memory_nodes: Sequence[NodeInfo] = (),
    conflict: ConflictNotification | None = None,
    execution_report: str = "",
    failure_reason: str = "",
) -> PlanningOutput:
    """The next step by the rules of the module docstring (``new_memory_nodes`` do not change them)."""
    completed = list(insight_doc.completed_tasks)
    if insight_doc.current_task is not None:
        failure_reason = failure_reason.strip()
        if failure_reason:
            status, context = TaskStatus.FAILURE, failure_reason
        else:
            status, context = TaskStatus.SUCCESS, fallback_context(execution_report)
        completed = insight_doc.with_finished(status, context)

    if conflict is not None:
        pending = [cross_validation_task(conflict)]
    elif not any(task.type is TaskKind.NORMAL and task.description != MEMORY_CHECK_TASK for task in completed):
        pending = [answer_from_memory_task(insight_doc.task_goal)]
    else:
        pending = []
    return PlanningOutput(task_goal=insight_doc.task_goal, completed_tasks=completed, pending_tasks=pending)


def failed_plan(insight_doc: InsightDoc, conflict: ConflictNotification | None, reason: str) -> PlanningOutput:
    """What is recorded when the planning agent failed: the executed task, if any, a failure ("planning
    failed: ..."); next, a pending conflict's cross-validation, else nothing."""
    completed = insight_doc.with_finished(TaskStatus.FAILURE, f"planning failed: {reason}"[:300])
    pending = [cross_validation_task(conflict)] if conflict else []
    return PlanningOutput(task_goal=insight_doc.task_goal, completed_tasks=completed, pending_tasks=pending)


def pending_after_failure(insight_doc: InsightDoc) -> list[PendingTask]:
    """The pending tasks once something failed: nothing planned means the executor still answers the goal
    from memory, rather than the run ending as if the goal were met."""
    return list(insight_doc.pending_tasks) or [answer_from_memory_task(insight_doc.task_goal)]
