"""What a node says, and how a relation or a merge re-describes one: the values agents produce and
:mod:`amb_dspy.memory.graph_ops` stores. Ids, timestamps and embeddings are the store's business."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class NodeContent(BaseModel):
    """A node's compressed text: its summary, a one-line context naming its topic, and keywords.

    Positional arguments are accepted in field order: ``NodeContent(summary, context, keywords)``.
    """

    model_config = ConfigDict(frozen=True)

    summary: str
    context: str
    keywords: list[str] = Field(default_factory=list)

    def __init__(self, *args: Any, **data: Any):
        data.update(zip(("summary", "context", "keywords"), args))
        super().__init__(**data)


class ContextUpdate(BaseModel):
    """A node's new context and keywords (after it is related to another node, or inherits a merge).

    Positional arguments are accepted in field order: ``ContextUpdate(context, keywords)``.
    """

    model_config = ConfigDict(frozen=True)

    context: str
    keywords: list[str]

    def __init__(self, *args: Any, **data: Any):
        data.update(zip(("context", "keywords"), args))
        super().__init__(**data)
