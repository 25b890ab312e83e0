"""What each memory tool returns, defined once: the return annotation of its function in the table
(:mod:`amb_dspy.task.tools`), so every door shows the same shape.

Each result is a :class:`ToolResult`, a pydantic model whose typed, described fields are the tool's
output schema: the MCP server declares it and sends the fields as structured content. Its
:meth:`~ToolResult.as_text` is the text form beside them, and what a text-reading agent (``dspy.Tool``,
PydanticAI, LangGraph) is given: the JSON of the fields, but for :class:`MemoryContext`, whose text is
the ``<task>``/``<memory>`` prompt block itself.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from amb_dspy.storage import CompletedTask, InsightDoc, PendingTask

__all__ = [
    "Deleted", "ExportedBank", "FoundItem", "InsightDocResult", "LongTermItem", "MemoryContext", "NodeRecord",
    "Observation", "RecordEntry", "SearchResult", "SourceSpan", "TaskStarted", "TaskSummary", "ToolResult",
    "WrittenItem",
]


class ToolResult(BaseModel):
    """A memory tool's answer: its fields are the tool's output schema."""

    model_config = ConfigDict(extra="forbid")

    def as_text(self) -> str:
        """The text form: the fields as JSON."""
        return self.model_dump_json()


# --- a task's tools ------------------------------------------------------------------------------
class TaskStarted(ToolResult):
    """memory_start_task: the new task."""

    task_id: str = Field(description="the id every other task tool takes")
    notices: list[str] = Field(description="what happened while the task started (e.g. a bank embedded again)")


class Observation(ToolResult):
    """memory_observe: what became of the tool result handed over."""

    entry_id: str | None = Field(description="the Interaction Tree entry holding the raw result; null while "
                                             "queued (wait: false)")
    node_ids: list[str] = Field(description="the memory nodes made from it (or, for a repeat, that hold it)")
    repeat: bool = Field(description="the same call with the same result was observed before: not stored again")
    failure: str = Field(description="why no node was made (the raw text is kept all the same); empty if none")
    message: str = Field(description="one line on what was done")


class MemoryContext(ToolResult):
    """memory_context: the <task> and <memory> blocks to read before the next step."""

    task_id: str
    pending_task: str | None = Field(description="the subtask to work on next; null when the goal is to be answered")
    task: str = Field(description="the <task> block's text: the goal, completed subtasks, the pending one, "
                                  "what was already fetched")
    memory: str = Field(description="the <memory> block's text: the notes for the pending subtask, with node ids")
    text: str = Field(description="the whole prompt block (<task>...</task> <memory>...</memory>), as an agent "
                                  "reads it")

    def as_text(self) -> str:
        """The prompt block itself, unchanged, for agents that read text."""
        return self.text


class SourceSpan(ToolResult):
    """One exact source passage a node was built from."""

    entry_id: str
    start: int = Field(description="character offset in the entry's text")
    end: int
    text: str


class RecordEntry(ToolResult):
    """One Interaction Tree entry behind a node."""

    entry_id: str
    text: str = Field(description="the raw text (long texts cut with a marker)")
    timestamp: str = Field(description="ISO 8601, UTC")
    metadata: dict[str, Any] = Field(description="where it came from: source, task, tool calls")
    attachments: list[dict[str, Any]] = Field(description="files: id, type, content (the path), file_content, "
                                                          "encoding, error")


class NodeRecord(ToolResult):
    """memory_deep_retrieval: the raw record behind one memory node."""

    node_id: str = Field(description="the node (a merged node's id leads to the node it was merged into)")
    summary: str
    note: str | None = Field(None, description="what was shortened or resolved, if anything")
    entries: list[RecordEntry] | None = Field(None, description="every entry of the node, oldest first "
                                                                "(null with sources_only)")
    sources: list[SourceSpan] | None = Field(None, description="the exact source passages (sources_only only)")


class InsightDocResult(ToolResult):
    """memory_plan, memory_complete: the task's Insight Doc after the step."""

    doc_id: str = Field(description="the task id")
    task_goal: str
    completed_tasks: list[CompletedTask]
    pending: list[PendingTask] = Field(description="the pending subtask, typed (0 or 1)")
    pending_tasks: list[str] = Field(description="the pending subtask's instruction (0 or 1): none when the goal "
                                                 "is met")

    @classmethod
    def of(cls, doc: InsightDoc) -> InsightDocResult:
        return cls.model_validate(doc.model_dump(mode="json"))


class ExportedBank(ToolResult):
    """memory_export: where the task's bank file was written."""

    path: str = Field(description="the bank file on the server (amb show reads it)")


class TaskSummary(ToolResult):
    """memory_end_task: the ended task."""

    task_id: str
    answer: str = Field(description="the task's answer (set by memory_complete on the goal)")
    nodes: int = Field(description="memory nodes in its Query Graph")
    entries: int = Field(description="entries in its Interaction Tree")
    errors: list[str]
    notices: list[str]
    fallbacks: dict[str, int] = Field(description="per agent, how often its deterministic policy stood in for its LM")


# --- long-term memory ----------------------------------------------------------------------------
class LongTermItem(ToolResult):
    """memory_update: one long-term memory item."""

    item_id: str
    kind: str = Field(description="fact, preference, conclusion, trajectory or tool_effect")
    text: str
    updated: str = Field(description="when it last changed, ISO 8601")


class FoundItem(LongTermItem):
    """A long-term item found by a search."""

    score: float = Field(description="similarity, recency and sources together, higher is better")


class SearchResult(ToolResult):
    """memory_search: the items found, best first."""

    items: list[FoundItem]


class WrittenItem(LongTermItem):
    """memory_write: the item written."""

    action: Literal["added", "merged"] = Field(description="added as a new item, or merged into a near duplicate")


class Deleted(ToolResult):
    """memory_delete: the item deleted."""

    deleted: str = Field(description="the deleted item's id (its audit row stays)")
