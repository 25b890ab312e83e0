"""Long-term memory: what finished tasks concluded, kept across tasks, namespaced, decaying, audited.

The bank itself is task-scoped (spec §1). This package keeps what a task produced for later tasks::

    from amb_dspy.longterm import open_store_or_notice, recall, remember_task, format_recalled

    store, notice = open_store_or_notice(config)          # AMB_LONGTERM_BACKEND=sqlite|chroma|qdrant|postgres
    if store:
        remember_task(store, namespace="alice", task_id=doc_id, goal=goal, answer=answer,
                      citations=[...], completed_tasks=[...], hops=[...], redact=True)
        lines = format_recalled(recall(store, namespace="alice", query=next_goal))

See :mod:`.base` for the interface and the memory kinds, :mod:`.scoring` for
``S = a*sim + b*decay + c*source_boost``, :mod:`.merge` for near-duplicate merging, :mod:`.redact`,
:mod:`.route` for when to read and write, :mod:`.summarize` for condensing what was recalled,
:mod:`.run_memory` for a run's hooks, and the backends :mod:`.sqlite`, :mod:`.chroma`,
:mod:`.qdrant` and :mod:`.postgres`, chosen by :mod:`.registry` (with the local fallback and :mod:`.dual` writes).
"""

from amb_dspy.longterm.base import (
    KINDS,
    MEMORY_KINDS,
    AuditRecord,
    ItemMetadata,
    LongTermStore,
    MemoryItem,
    ScoredItem,
    SourceSpan,
    WriteOutcome,
)
from amb_dspy.longterm.errors import (
    ItemNotFoundError,
    LongTermError,
    LongTermInputError,
    StoreUnavailableError,
)
from amb_dspy.longterm.merge import DEDUP_THRESHOLD, MERGE_RULES, heuristic_merge
from amb_dspy.longterm.redact import Redaction, redact
from amb_dspy.longterm.registry import open_store, open_store_or_notice, open_store_with_fallback
from amb_dspy.longterm.remember import (
    RecalledItem,
    format_recalled,
    recall,
    remember_task,
)
from amb_dspy.longterm.route import RouteDecision, TaskTrace, route
from amb_dspy.longterm.scoring import ScoreWeights
from amb_dspy.longterm.summarize import summarize

__all__ = [
    "DEDUP_THRESHOLD", "KINDS", "MEMORY_KINDS", "MERGE_RULES", "RouteDecision", "TaskTrace", "AuditRecord", "ItemMetadata", "ItemNotFoundError", "LongTermError",
    "LongTermInputError", "LongTermStore", "MemoryItem", "RecalledItem", "Redaction", "ScoreWeights",
    "ScoredItem", "SourceSpan", "StoreUnavailableError", "WriteOutcome", "format_recalled", "heuristic_merge",
    "open_store", "open_store_or_notice", "open_store_with_fallback", "recall", "redact", "remember_task", "route",
    "summarize",
]
