"""The adapter between the memory bank and the executor (design §3.3.1): it writes prompts and tells
task kinds, nothing else.

* ``enhance_prompt`` writes ``<task>`` (the Insight Doc) and ``<memory>`` (nodes retrieved by hybrid
  search for the pending task) into the executor's prompt, spec §6.3.
* ``intercept_context`` tells what the executed task was: NORMAL, CROSS_VALIDATE or IMAGE (a
  :class:`~amb_dspy.storage.TaskKind`, read from the typed pending task, never from its text).
* The texts the memory agents are given about an execution (a cross-validation, an image recognition) and
  the recognition task's wording are written here too; tool responses become one text in the writer's own
  terms (:func:`amb_dspy.memory.written.knowledge_text`).

Staging image files lives in :mod:`amb_dspy.task.images`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from amb_dspy.errors import InputError
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import MemoryView, RankWeights, ViewName, view_for
from amb_dspy.storage import InsightDoc, PendingTask, QueryGraphNode, TaskKind
from amb_dspy.task.executor import ExecutionResult

IMAGE_TASK_PREFIX = "Recognise the attached image"  # the wording; the kind is the task's own
NO_MEMORY = "No related memory yet."

__all__ = [
    "IMAGE_TASK_PREFIX", "NO_MEMORY", "InputError", "MemoryAdapter", "PromptBlocks", "format_memory", "format_task",
    "image_task", "recognition_text", "validation_text",
]


def format_memory(nodes: list[QueryGraphNode]) -> str:
    if not nodes:
        return NO_MEMORY
    blocks = []
    for i, node in enumerate(nodes, 1):
        blocks.append(
            f"Memory {i} (node {node.id}):\n"
            f"Topic: {node.context}\n"
            f"Keywords: {', '.join(node.keywords)}\n"
            f"Summary: {node.summary}"
        )
    return "\n\n".join(blocks)


def format_task(doc: InsightDoc, already_fetched: Sequence[str] = ()) -> str:
    lines = [f"Task goal: {doc.task_goal}", "", "Completed subtasks:"]
    if not doc.completed_tasks:
        lines.append("(none yet)")
    for i, task in enumerate(doc.completed_tasks, 1):
        lines.append(f"{i}. [{task.type.value}] {task.description} - {task.status.value}")
        if task.context:
            lines.append(f"   Knowledge context: {task.context}")
    lines += ["", "Pending task:"]
    lines.append(f"1. {doc.pending_tasks[0]}" if doc.pending_tasks else "(none: answer the task goal)")
    if already_fetched:
        lines += ["", "Already searched / already read in this task (their results are in memory; no need to "
                      "call them again), most recent first:", *(f"- {item}" for item in already_fetched)]
    return "\n".join(lines)


def image_task(image_names: Sequence[str]) -> PendingTask | None:
    """The pending task that schedules the recognition of the staged images (None when there are none)."""
    if not image_names:
        return None
    return PendingTask(kind=TaskKind.IMAGE, description=f"{IMAGE_TASK_PREFIX}s ({', '.join(image_names)}) and "
                                                        "describe what they show that bears on the goal")


def recognition_text(goal: str, answer: str) -> str:
    """An image recognition, as the text that memory conversion turns into nodes."""
    return f"Image recognition for: {goal}\n\n{answer}"


def validation_text(result: ExecutionResult) -> str:
    """A cross-validation (its answer and the tool responses behind it), for the integration agent."""
    return "\n\n".join([f"Validation answer: {result.answer}", *(call.observation for call in result.knowledge)])


@dataclass(frozen=True)
class PromptBlocks:
    """What the executor reads before a step: the ``<task>`` block's text (the Insight Doc) and the
    ``<memory>`` block's (the notes for ``pending_task``, or the goal when none); ``text`` is the prompt
    they make together."""

    task: str
    memory: str
    pending_task: str | None = None

    @property
    def text(self) -> str:
        return (f"<task>\n{self.task}\n</task>\n\n<memory>\n{self.memory}\n</memory>\n\n"
                "Carry out the next step based on the task and memory above.")


class MemoryAdapter:
    """``<memory>`` in one of :mod:`amb_dspy.memory.view`'s views, at most ``budget`` tokens: ``view="evidence"``
    the raw source lines ranked through the graph, ``"summary"`` the spec's node blocks (a node whose summary does
    not fit shows its topic and best lines)."""

    def __init__(self, store: MemoryStore, *, k: int = 5, alpha: float = 0.5, view: ViewName = "summary",
                 budget: int = 1000, weights: RankWeights | None = None):
        self.store = store
        self.k, self.alpha = k, alpha
        self.view: MemoryView = view_for(store, view, weights=weights, k=k, alpha=alpha)
        self.budget = budget
        self.recalled = ""  # long-term memory's lines "from earlier tasks"

    # --- prompt enhancement ------------------------------------------------------------------
    def memory_for(self, doc: InsightDoc) -> list[QueryGraphNode]:
        query = doc.current_task or doc.task_goal
        if not query or len(self.store.graph) == 0:
            return []
        return self.store.retrieve_for_text(query, k=self.k, alpha=self.alpha)

    def memory_text(self, doc: InsightDoc, budget: int | None = None) -> str:
        """The <memory> section's text for ``doc``'s pending task (or its goal), in the configured view within
        ``budget`` tokens (default ``self.budget``), then what long-term memory recalled from earlier tasks
        (``recalled``, set by the bank)."""
        query = doc.current_task or doc.task_goal
        text = (self.view.block(query, budget or self.budget).text if query and len(self.store.graph) else "") or NO_MEMORY
        return f"{text}\n\n{self.recalled}" if self.recalled else text

    def blocks(self, doc: InsightDoc, already_fetched: Sequence[str] = (), budget: int | None = None) -> PromptBlocks:
        """The ``<task>`` and ``<memory>`` blocks for ``doc``'s pending task (see :meth:`enhance_prompt`)."""
        return PromptBlocks(task=format_task(doc, already_fetched), memory=self.memory_text(doc, budget),
                            pending_task=doc.current_task)

    def enhance_prompt(self, doc: InsightDoc, already_fetched: Sequence[str] = (), budget: int | None = None) -> str:
        return self.blocks(doc, already_fetched, budget).text

    # --- interception ------------------------------------------------------------------------
    def intercept_context(self, doc: InsightDoc, *, cross_validation: bool, images_staged: bool = False) -> TaskKind:
        """What kind of task was just executed; ``cross_validation`` says a conflict was being checked,
        ``images_staged`` that the task's images still wait for recognition."""
        task = doc.pending_task
        if cross_validation:
            return TaskKind.CROSS_VALIDATE
        if task is not None and task.kind is TaskKind.IMAGE and images_staged:
            return TaskKind.IMAGE
        return TaskKind.NORMAL
