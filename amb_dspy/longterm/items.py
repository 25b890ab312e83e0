"""A long-term item and its provenance, and an audit row: the records every backend stores."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from amb_dspy.longterm.checks import Kind
from amb_dspy.longterm.scoring import source_boost

AuditAction = Literal["write", "merge", "update", "delete", "prune"]


class SourceSpan(BaseModel):
    """Where an item's content came from: a source (URL, file, corpus id) and, if known, a quote."""

    model_config = ConfigDict(frozen=True)

    source: str
    quote: str = ""
    start: int | None = None
    end: int | None = None


class ItemMetadata(BaseModel):
    """Provenance of an item. Merges take the union of both items' lists."""

    model_config = ConfigDict(frozen=True)

    source_task_id: str = ""
    task_ids: tuple[str, ...] = ()
    node_ids: tuple[str, ...] = ()
    source_spans: tuple[SourceSpan, ...] = ()
    citations: tuple[str, ...] = ()
    extra: dict[str, str] = Field(default_factory=dict)

    def merged_with(self, newer: ItemMetadata) -> ItemMetadata:
        def union(a: Iterable, b: Iterable) -> tuple:
            return tuple(dict.fromkeys([*a, *b]))

        return ItemMetadata(
            source_task_id=self.source_task_id or newer.source_task_id,
            task_ids=union(self.task_ids, newer.task_ids),
            node_ids=union(self.node_ids, newer.node_ids),
            source_spans=union(self.source_spans, newer.source_spans),
            citations=union(self.citations, newer.citations),
            extra={**self.extra, **newer.extra},
        )

    def with_task(self, task_id: str) -> ItemMetadata:
        """The same provenance, naming ``task_id`` too (as the source task if there is none yet)."""
        if not task_id or task_id in self.task_ids:
            return self
        return self.model_copy(update={"source_task_id": self.source_task_id or task_id,
                                       "task_ids": (*self.task_ids, task_id)})

    def redacted(self, clean: Callable[[str], str]) -> ItemMetadata:
        """The same provenance with every text in it passed through ``clean`` (redaction)."""
        return self.model_copy(update={
            "source_spans": tuple(s.model_copy(update={"source": clean(s.source), "quote": clean(s.quote)})
                                  for s in self.source_spans),
            "citations": tuple(clean(c) for c in self.citations),
            "extra": {key: clean(value) for key, value in self.extra.items()}})

    def boost(self) -> float:
        return source_boost(spans=len(self.source_spans), node_ids=len(self.node_ids),
                            citations=len(self.citations))


class MemoryItem(BaseModel):
    """One long-term memory. ``source_boost`` and ``updated_at`` are the score's stored inputs."""

    model_config = ConfigDict(frozen=True)

    id: str
    namespace: str
    content: str
    kind: Kind
    metadata: ItemMetadata = Field(default_factory=ItemMetadata)
    created_at: float = Field(description="POSIX seconds")
    updated_at: float = Field(description="POSIX seconds; a merge or an update renews it")
    source_boost: float = Field(0.0, ge=0.0, le=1.0)

    @property
    def updated(self) -> datetime:
        return datetime.fromtimestamp(self.updated_at, tz=timezone.utc)

    @property
    def created(self) -> datetime:
        return datetime.fromtimestamp(self.created_at, tz=timezone.utc)


class AuditRecord(BaseModel):
    """One audit row: what happened to which item, when, in which task, and why."""

    model_config = ConfigDict(frozen=True)

    at: float
    action: AuditAction
    item_id: str
    namespace: str
    kind: Kind
    task_id: str = ""
    reason: str = ""
    detail: str = ""
