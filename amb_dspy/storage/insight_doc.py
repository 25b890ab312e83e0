"""Layer 1, the Insight Doc: what the task is, what has been done, and the one next step.

Task kinds are typed (:class:`TaskKind`), never read back from a task's text: the pending task is a
:class:`PendingTask` (kind, description, the node ids a cross-validation checks), and a finished one is
recorded by :meth:`InsightDoc.with_finished`, the one place that turns the pending task into a
:class:`CompletedTask`, for the planning agent, its policy and an outside agent's session alike.
"""

from __future__ import annotations

import json
import uuid
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator


class TaskKind(str, Enum):
    """What a task is: the executor's ordinary step, the check of a conflict, the recognition of the task's
    images, the answer agent's check of memory (the fast path), the executor's final answer of the goal."""

    NORMAL = "NORMAL"
    CROSS_VALIDATE = "CROSS_VALIDATE"
    IMAGE = "IMAGE"
    MEMORY = "MEMORY"
    ANSWER = "ANSWER"


class TaskStatus(str, Enum):
    SUCCESS = "success"
    FAILURE = "failure"


class PendingTask(BaseModel):
    """The next step: its kind, its instruction (the text the executor and the LM read), and for a
    cross-validation the conflicting nodes it checks."""

    model_config = ConfigDict(frozen=True)

    kind: TaskKind = TaskKind.NORMAL
    description: str
    node_ids: list[str] = Field(default_factory=list)


class CompletedTask(BaseModel):
    """A finished step as the Insight Doc records it: NORMAL or CROSS_VALIDATE, the spec's two kinds (§6.2);
    an image recognition is recorded as an ordinary step."""

    model_config = ConfigDict(frozen=True)

    type: TaskKind = TaskKind.NORMAL
    description: str
    status: TaskStatus
    context: str = Field("", description="one or two sentences on what the task found")


class InsightDoc(BaseModel):
    """Incremental plan: never a queue, at most one pending task (validated on every assignment).

    ``pending`` holds the typed pending task; ``pending_tasks`` is its text, as the LM and outside agents
    read it (and as bank files of schemas 1-2 stored it: :func:`legacy_pending` reads those)."""

    model_config = ConfigDict(validate_assignment=True)

    doc_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task_goal: str
    completed_tasks: list[CompletedTask] = Field(default_factory=list)
    pending: list[PendingTask] = Field(default_factory=list, max_length=1)

    @model_validator(mode="before")
    @classmethod
    def _typed_pending(cls, data: Any) -> Any:
        """``pending_tasks=[text]`` (a plain task each) where no ``pending`` is given; both must agree."""
        if not isinstance(data, dict) or "pending_tasks" not in data:
            return data
        data = dict(data)
        texts = data.pop("pending_tasks")
        if "pending" not in data:
            data["pending"] = [PendingTask(description=t) if isinstance(t, str) else t for t in texts]
        elif [p["description"] if isinstance(p, dict) else p.description for p in data["pending"]] != texts:
            raise ValueError(f"pending_tasks {texts!r} are not the pending tasks' descriptions")
        return data

    @computed_field
    @property
    def pending_tasks(self) -> list[str]:
        """The pending task's instruction (0 or 1 item)."""
        return [task.description for task in self.pending]

    @property
    def pending_task(self) -> PendingTask | None:
        return self.pending[0] if self.pending else None

    @property
    def current_task(self) -> str | None:
        return self.pending[0].description if self.pending else None

    @property
    def all_succeeded(self) -> bool:
        return all(t.status is TaskStatus.SUCCESS for t in self.completed_tasks)

    def with_finished(self, status: TaskStatus, context: str, description: str | None = None) -> list[CompletedTask]:
        """The completed tasks with the pending one (or the task ``description`` names) recorded as finished,
        with its kind: the pending task's when it is the one, else NORMAL. Unchanged when there is no task."""
        task = self.pending_task
        description = description or (task.description if task else None)
        if not description:
            return list(self.completed_tasks)
        kind = task.kind if task is not None and task.description == description else TaskKind.NORMAL
        recorded = TaskKind.CROSS_VALIDATE if kind is TaskKind.CROSS_VALIDATE else TaskKind.NORMAL
        return [*self.completed_tasks, CompletedTask(type=recorded, description=description, status=status,
                                                     context=context)]


CROSS_VALIDATE_TEXT = "CROSS_VALIDATE "  # how schemas 1-2 wrote a cross-validation task: "CROSS_VALIDATE [ids]: ..."
IMAGE_TEXT = "Recognise the attached image"  # and an image recognition


def legacy_pending(text: str) -> PendingTask:
    """A pending task as bank files of schemas 1-2 stored it (its text alone), typed: the one place a kind is
    read from text, for files written before kinds were stored."""
    if text.startswith(CROSS_VALIDATE_TEXT + "["):
        try:
            ids, _ = json.JSONDecoder().raw_decode(text, len(CROSS_VALIDATE_TEXT))
        except ValueError:
            ids = None
        if isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids):
            return PendingTask(kind=TaskKind.CROSS_VALIDATE, description=text, node_ids=ids)
    if text.startswith(IMAGE_TEXT):
        return PendingTask(kind=TaskKind.IMAGE, description=text)
    return PendingTask(description=text)
