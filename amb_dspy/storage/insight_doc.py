"""Layer 1, the Insight Doc: what the task is, what has been done, and the one next step."""

from __future__ import annotations

import uuid
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class TaskType(str, Enum):
    NORMAL = "NORMAL"
    CROSS_VALIDATE = "CROSS_VALIDATE"


class TaskStatus(str, Enum):
    SUCCESS = "success"
    FAILURE = "failure"


class CompletedTask(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: TaskType = TaskType.NORMAL
    description: str
    status: TaskStatus
    context: str = Field("", description="one or two sentences on what the task found")


class InsightDoc(BaseModel):
    """Incremental plan: never a queue, at most one pending task (validated on every assignment)."""

    model_config = ConfigDict(validate_assignment=True)

    doc_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task_goal: str
    completed_tasks: list[CompletedTask] = Field(default_factory=list)
    pending_tasks: list[str] = Field(default_factory=list, max_length=1)

    @property
    def current_task(self) -> str | None:
        return self.pending_tasks[0] if self.pending_tasks else None

    @property
    def all_succeeded(self) -> bool:
        return all(t.status is TaskStatus.SUCCESS for t in self.completed_tasks)
