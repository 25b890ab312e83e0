"""The long-term store's item model and interface: write, search, update, delete, list.

The bank forgets everything when a task ends (spec §1); a long-term store keeps what a finished task
concluded so that the next task on the topic does not start from nothing. Items live in namespaces
(a user, an agent, a task type) and have a kind:

* ``conclusion``: a task's answer to its goal, with the citations behind it;
* ``fact``: what one completed subtask found;
* ``trajectory``: how a task went (its hops, success or failure);
* ``preference``: something a user wants, where the newest statement wins;
* ``tool_effect``: what a tool call of a task did (a query run, a page read, a file written).

The design's four memory kinds group them (:data:`MEMORY_KINDS`), each with its merge rule
(:data:`amb_dspy.longterm.merge.MERGE_RULES`): the user profile (``preference``: overwrite), domain
facts (``fact``: one merged statement), task traces (``conclusion``: merged statement; ``trajectory``:
append) and tool effects (``tool_effect``: append).

:class:`LongTermStore` holds everything the backends share: validation (:mod:`.checks`), embedding,
merging of near-duplicates before a write, scoring, and the audit trail; the records themselves are in
:mod:`.items`. Every write passes the store's own policies, whichever door it came through: redaction
(``redactor``, set by :func:`~amb_dspy.longterm.registry.open_store` when ``config.redact`` is on) and,
for an embedded store, the :class:`~amb_dspy.longterm.ledger.Ledger` (its writers' lock around the merge
check and the change, and the item count it checks on open). A backend (:mod:`.sqlite`,
:mod:`.chroma`) implements a handful of storage primitives, the ``_``-prefixed abstract methods, and
applies each :class:`Change` all or nothing; adding a backend (Qdrant, say) means writing those and
one line in :mod:`.registry`.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from amb_dspy.longterm.checks import (  # noqa: F401 - MAX_CONTENT_CHARS is part of this module's surface
    KINDS,
    MAX_CONTENT_CHARS,
    Kind,
    check_content,
    check_kind,
    check_namespace,
)
from amb_dspy.longterm.errors import ItemNotFoundError, LongTermInputError, StoreUnavailableError
from amb_dspy.longterm.items import AuditAction, AuditRecord, ItemMetadata, MemoryItem, SourceSpan  # noqa: F401
from amb_dspy.longterm.ledger import Ledger
from amb_dspy.longterm.merge import DEDUP_THRESHOLD, Merger, merge_items
from amb_dspy.longterm.scoring import (
    ScoreWeights,
    age_days,
    decay,
    dice,
    hybrid_similarity,
    overlap,
    score,
)
from amb_dspy.longterm.statements import different_facts
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.embedding_base import embedding_model_name
from amb_dspy.retrieval.keyword import tokenize

MemoryKind = Literal["profile", "domain", "trace", "tool"]
# The design's memory kinds and the item kinds that hold each.
MEMORY_KINDS: dict[MemoryKind, tuple[Kind, ...]] = {
    "profile": ("preference",), "domain": ("fact",), "trace": ("conclusion", "trajectory"), "tool": ("tool_effect",)}

_DEDUP_CANDIDATES = 5
_MIN_SEARCH_POOL = 32


@dataclass(frozen=True)
class ScoredItem:
    item: MemoryItem
    score: float
    similarity: float
    recency: float


@dataclass(frozen=True)
class WriteOutcome:
    """What a write did: ``added`` a new item, or ``merged`` it into an existing one (``item``).

    ``similarity`` is to the closest item of the same namespace and kind: the one merged into, or the
    one that was not close enough (0 when there was none).
    """

    item: MemoryItem
    action: Literal["added", "merged"]
    similarity: float = 0.0


@dataclass
class Change:
    """One all-or-nothing change a backend applies: items added, replaced and removed, and audit rows."""

    added: list[tuple[MemoryItem, np.ndarray]] = field(default_factory=list)
    replaced: list[tuple[MemoryItem, np.ndarray]] = field(default_factory=list)
    removed: list[MemoryItem] = field(default_factory=list)
    audit: list[AuditRecord] = field(default_factory=list)


class LongTermStore(ABC):
    """Write, search, update, delete and list long-term items; every change leaves an audit row.

    ``alpha`` weighs words against meaning in the similarity; ``dedup_threshold`` is the similarity
    over which a write merges into an existing item of the same namespace and kind; ``clock`` gives
    POSIX seconds (tests pass their own to age items).
    """

    name = "store"

    def __init__(self, embedder: Embedder, *, weights: ScoreWeights | None = None, alpha: float = 0.5,
                 dedup_threshold: float = DEDUP_THRESHOLD, clock: Callable[[], float] = time.time):
        self.embedder = embedder
        self.weights = weights or ScoreWeights()
        self.alpha = alpha
        self.dedup_threshold = dedup_threshold
        self.clock = clock
        # Set by the backend (an embedded store's item count and writers' lock) and by
        # registry.open_store (config.redact): every write of this store goes through both.
        self.ledger: Ledger | None = None
        self.redactor: Callable[[str], str] | None = None

    # --- the interface -----------------------------------------------------------------------
    def write(self, namespace: str, content: str, kind: str, *, metadata: ItemMetadata | None = None,
              task_id: str = "", reason: str = "", merge: Merger | None = None) -> WriteOutcome:
        """Store ``content``, or merge it into the most similar item of the same namespace and kind
        when their similarity reaches ``dedup_threshold``.

        Merging keeps the newest preference, appends trajectories and tool effects, and makes one statement of facts
        and conclusions: ``merge(old, new) -> str`` when given (an LM), else a heuristic
        (:func:`amb_dspy.longterm.merge.heuristic_merge`).
        """
        namespace, kind, content = check_namespace(namespace), check_kind(kind), check_content(self._private(content))
        metadata = self._private_metadata(metadata or ItemMetadata()).with_task(task_id)
        vector = self._embed(content)
        with self._writing():  # the merge check and the change, as one step among processes
            return self._write(namespace, content, kind, metadata, vector, task_id, self._private(reason), merge)

    def _write(self, namespace: str, content: str, kind: Kind, metadata: ItemMetadata, vector: np.ndarray,
               task_id: str, reason: str, merge: Merger | None) -> WriteOutcome:
        duplicate, similarity = self._closest(namespace, content, kind, vector)
        now = self.clock()
        close = duplicate is not None and similarity >= self.dedup_threshold
        merged_content = merge_items(kind, duplicate.content, content, merge) if close else None
        if merged_content is None:  # nothing close enough, or too long to be one statement
            item = MemoryItem(id=uuid.uuid4().hex, namespace=namespace, content=content, kind=kind,
                              metadata=metadata, created_at=now, updated_at=now, source_boost=metadata.boost())
            self._commit(Change(added=[(item, vector)], audit=[self._record("write", item, task_id, reason)]))
            return WriteOutcome(item, "added", similarity)
        merged_content = check_content(merged_content)
        merged_metadata = duplicate.metadata.merged_with(metadata)
        merged = duplicate.model_copy(update={"content": merged_content, "metadata": merged_metadata,
                                              "updated_at": now, "source_boost": merged_metadata.boost()})
        new_vector = vector if merged_content == content else self._embed(merged_content)
        detail = f"similarity {similarity:.3f}; merged statement: {content[:200]}"
        self._commit(Change(replaced=[(merged, new_vector)],
                           audit=[self._record("merge", merged, task_id, reason, detail)]))
        return WriteOutcome(merged, "merged", similarity)

    def add_many(self, namespace: str, contents: Sequence[str], kind: str, *, task_id: str = "",
                 reason: str = "bulk load", vectors: np.ndarray | None = None) -> list[MemoryItem]:
        """Add items as they are, without merging (imports and bulk loads), in one change."""
        namespace, kind = check_namespace(namespace), check_kind(kind)
        contents = [check_content(self._private(c)) for c in contents]
        if not contents:
            return []
        vectors = self.embedder.embed(contents) if vectors is None else np.asarray(vectors, dtype=np.float32)
        if len(vectors) != len(contents):
            raise LongTermInputError(f"{len(contents)} contents but {len(vectors)} vectors")
        metadata = ItemMetadata().with_task(task_id)
        now = self.clock()
        change = Change()
        for content, vector in zip(contents, vectors):
            item = MemoryItem(id=uuid.uuid4().hex, namespace=namespace, content=content, kind=kind,
                              metadata=metadata, created_at=now, updated_at=now, source_boost=metadata.boost())
            change.added.append((item, vector))
            change.audit.append(self._record("write", item, task_id, reason))
        self._commit(change)
        return [item for item, _ in change.added]

    def search(self, namespace: str, query: str, *, k: int = 5, kinds: Iterable[str] | None = None,
               min_score: float = 0.0) -> list[ScoredItem]:
        """The ``k`` best items for ``query`` by ``S``, best first, none under ``min_score``."""
        namespace = check_namespace(namespace)
        kinds = tuple(check_kind(k_) for k_ in kinds) if kinds else KINDS
        if not query.strip() or k <= 0:
            return []
        vector = self._embed(query)
        query_tokens = tokenize(query)
        now = self.clock()
        scored = []
        for item, cosine in self._nearest(namespace, kinds, vector, query, max(_MIN_SEARCH_POOL, 4 * k)):
            similarity = hybrid_similarity(cosine, overlap(query_tokens, tokenize(item.content)), self.alpha)
            recency = decay(age_days(item.updated_at, now), self.weights.decay_per_day)
            total = score(similarity, recency, item.source_boost, self.weights)
            if total >= min_score:
                scored.append(ScoredItem(item, total, similarity, recency))
        scored.sort(key=lambda s: (-s.score, -s.item.updated_at, s.item.id))
        return scored[:k]

    def get(self, namespace: str, item_id: str) -> MemoryItem:
        item = self._get(check_namespace(namespace), item_id)
        if item is None:
            raise ItemNotFoundError(f"no long-term item {item_id!r} in namespace {namespace!r}")
        return item

    def update(self, namespace: str, item_id: str, *, content: str | None = None,
               metadata: ItemMetadata | None = None, task_id: str = "", reason: str = "") -> MemoryItem:
        """Replace an item's content and/or metadata (re-embedded when the content changes)."""
        item = self.get(namespace, item_id)
        changes: dict = {"updated_at": self.clock()}
        if content is not None:
            changes["content"] = check_content(self._private(content))
        if metadata is not None:
            metadata = self._private_metadata(metadata)
            changes.update(metadata=metadata, source_boost=metadata.boost())
        updated = item.model_copy(update=changes)
        vector = self._embed(updated.content)
        self._commit(Change(replaced=[(updated, vector)], audit=[self._record("update", updated, task_id, reason)]))
        return updated

    def delete(self, namespace: str, item_id: str, *, task_id: str = "", reason: str = "") -> MemoryItem:
        """Remove an item from the store and from search; the audit row stays."""
        item = self.get(namespace, item_id)
        self._commit(Change(removed=[item], audit=[self._record("delete", item, task_id, reason, item.content[:200])]))
        return item

    def prune(self, namespace: str, *, older_than_days: float, kind: str | None = None, task_id: str = "",
              reason: str = "") -> list[MemoryItem]:
        """Remove the items not updated for ``older_than_days`` days, one audit row each."""
        if older_than_days < 0:
            raise LongTermInputError(f"older_than_days must not be negative, got {older_than_days}")
        cutoff = self.clock() - older_than_days * 86_400.0
        stale = [item for item in self.list(namespace, kind=kind) if item.updated_at < cutoff]
        reason = reason or f"not updated for {older_than_days:g} days"
        if stale:
            self._commit(Change(removed=stale, audit=[self._record("prune", i, task_id, reason, i.content[:200])
                                                     for i in stale]))
        return stale

    def list(self, namespace: str, *, kind: str | None = None, limit: int | None = None) -> list[MemoryItem]:
        """The namespace's items, most recently updated first."""
        items = self._items(check_namespace(namespace), check_kind(kind) if kind else None)
        items.sort(key=lambda i: (-i.updated_at, i.id))
        return items[:limit] if limit is not None else items

    def audit(self, namespace: str, *, item_id: str | None = None) -> list[AuditRecord]:
        """The namespace's audit rows (or one item's), oldest first."""
        return self._audit_rows(check_namespace(namespace), item_id)

    def close(self) -> None:  # noqa: B027 - a backend without resources has nothing to close
        """Release the backend's resources."""

    def __enter__(self) -> LongTermStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- shared helpers ----------------------------------------------------------------------
    def _private(self, text: str) -> str:
        """``text`` as this store keeps it: redacted when the store redacts (config.redact)."""
        return self.redactor(text) if self.redactor and text else text

    def _private_metadata(self, metadata: ItemMetadata) -> ItemMetadata:
        return metadata.redacted(self._private) if self.redactor else metadata

    def _writing(self):
        """The writers' lock of an embedded store (no-op for a server, which orders writes itself)."""
        return self.ledger.writing() if self.ledger else nullcontext()

    def _keep_ledger(self, ledger: Ledger) -> None:
        """Check this freshly opened store against ``ledger`` (closing it, and raising, when it holds fewer
        items than recorded), then record its writes there."""
        try:
            ledger.check_count(self._count())
        except Exception:
            self.close()
            raise
        self.ledger = ledger

    def _commit(self, change: Change) -> None:
        """Apply ``change`` and, for an embedded store, record its new item count in the ledger."""
        with self._writing():
            self._apply(change)
            if self.ledger is not None:
                self.ledger.record(self._count())

    def _made_by_this_embedder(self, recorded: dict[str, str], where: object) -> tuple[str, int]:
        """Refuse (one line) a store whose recorded embedder (``recorded``: its ``dim`` and ``model``, where known) is
        not this one: vectors of two models are never mixed. The embedder's name and dimension, to record."""
        name, dim = embedding_model_name(self.embedder), self.embedder.dim
        if recorded.get("dim", str(dim)) != str(dim):
            raise StoreUnavailableError(f"long-term store {where}: holds {recorded['dim']}-d embeddings, the "
                                        f"embedder gives {dim}-d")
        if recorded.get("model", name) != name:
            raise StoreUnavailableError(f"long-term store {where}: holds vectors of {recorded['model']}, the embedder "
                                        f"is {name} (AMB_EMBEDDER): open it with the embedder that made it")
        return name, dim

    def _embed(self, text: str) -> np.ndarray:
        return np.asarray(self.embedder.embed([text])[0], dtype=np.float32)

    def closest(self, namespace: str, content: str, kind: str) -> tuple[MemoryItem | None, float]:
        """The item a write of ``content`` would merge into if the similarity reached ``dedup_threshold``,
        and that similarity (``(None, 0.0)`` when there is none); writes nothing. An item the content is a
        different fact from (:func:`~amb_dspy.longterm.statements.different_facts`) is never a candidate."""
        namespace, kind, content = check_namespace(namespace), check_kind(kind), check_content(content)
        return self._closest(namespace, content, kind, self._embed(content))

    def _closest(self, namespace: str, content: str, kind: Kind,
                 vector: np.ndarray) -> tuple[MemoryItem | None, float]:
        tokens = tokenize(content)
        best, best_similarity = None, 0.0
        for item, cosine in self._nearest(namespace, (kind,), vector, content, _DEDUP_CANDIDATES):
            similarity = hybrid_similarity(cosine, dice(tokens, tokenize(item.content)), self.alpha)
            if (best is None or similarity > best_similarity) and not different_facts(content, item.content):
                best, best_similarity = item, similarity
        return best, best_similarity

    def _record(self, action: AuditAction, item: MemoryItem, task_id: str, reason: str,
                detail: str = "") -> AuditRecord:
        return AuditRecord(at=self.clock(), action=action, item_id=item.id, namespace=item.namespace,
                           kind=item.kind, task_id=task_id, reason=reason, detail=detail)

    # --- what a backend implements -------------------------------------------------------------
    @abstractmethod
    def _apply(self, change: Change) -> None:
        """Apply every part of ``change`` or none of it."""

    @abstractmethod
    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        """Up to ``n`` candidate items of those kinds for a query, each with its cosine to ``vector``."""

    @abstractmethod
    def _get(self, namespace: str, item_id: str) -> MemoryItem | None: ...

    @abstractmethod
    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]: ...

    @abstractmethod
    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]: ...

    def _count(self) -> int:
        """How many items the whole store holds (a backend with a ledger implements it)."""
        raise NotImplementedError
