"""Double writes (``AMB_LONGTERM_DUAL_WRITE=1``): every change to the local SQLite store and to the server.

:class:`DualStore` keeps the two in step item by item: the same ids, contents and audit rows. It
reads from the server while the server answers (other processes write there too) and from the local
store otherwise. A change the server misses (it was down when the run started, or went away
mid-run) is applied locally and its item ids and audit rows are appended to a journal file beside
the local store; :meth:`DualStore.reconcile`, called when a later run connects, copies those items'
current local state to the server (added, replaced or removed) with the missed audit rows, then
empties the journal. A server failure never fails a write: the local store has it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from amb_dspy.longterm.base import AuditRecord, Change, Kind, LongTermStore, MemoryItem
from amb_dspy.longterm.errors import LongTermError

JOURNAL_NAME = "longterm-pending.jsonl"
logger = logging.getLogger(__name__)


def fit_change(change: Change, target: LongTermStore) -> Change:
    """``change`` as ``target`` can apply it: an item replaced there but missing is added, an item
    removed there but missing is skipped (the two stores may differ by what one of them missed)."""
    fitted = Change(added=list(change.added), audit=list(change.audit))
    for item, vector in change.replaced:
        (fitted.replaced if target._get(item.namespace, item.id) is not None else fitted.added).append((item, vector))
    fitted.removed = [item for item in change.removed if target._get(item.namespace, item.id) is not None]
    return fitted


class DualStore(LongTermStore):
    """The local store and a server (``remote``, ``None`` when it could not be reached), written together."""

    name = "dual"

    def __init__(self, local: LongTermStore, remote: LongTermStore | None, journal: str | Path):
        super().__init__(local.embedder, weights=local.weights, alpha=local.alpha,
                         dedup_threshold=local.dedup_threshold, clock=local.clock)
        self.local, self.remote = local, remote
        self.ledger, self.redactor = local.ledger, local.redactor  # the local store's lock, count and redaction
        self.journal = Path(journal)
        self.notices: list[str] = []

    @property
    def _reader(self) -> LongTermStore:
        return self.remote if self.remote is not None else self.local

    def _lost_remote(self, exc: LongTermError) -> None:
        self.notices.append(f"long-term server unreachable ({exc}); writing the local store only, caught up later")
        logger.warning(self.notices[-1])
        remote, self.remote = self.remote, None
        try:
            remote.close()
        except Exception:  # noqa: BLE001, S110 - it is gone already
            pass

    # --- primitives ----------------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        self.local._apply(fit_change(change, self.local))
        if self.remote is not None:
            try:
                self.remote._apply(fit_change(change, self.remote))
                return
            except LongTermError as exc:
                self._lost_remote(exc)
        self._write_journal(change)

    def _count(self) -> int:
        return self.local._count()

    def _nearest(self, namespace: str, kinds: Sequence[Kind], vector: np.ndarray, text: str,
                 n: int) -> list[tuple[MemoryItem, float]]:
        return self._read("_nearest", namespace, kinds, vector, text, n)

    def _get(self, namespace: str, item_id: str) -> MemoryItem | None:
        return self._read("_get", namespace, item_id)

    def _items(self, namespace: str, kind: Kind | None) -> list[MemoryItem]:
        return self._read("_items", namespace, kind)

    def _audit_rows(self, namespace: str, item_id: str | None) -> list[AuditRecord]:
        return self._read("_audit_rows", namespace, item_id)

    def _read(self, primitive: str, *args):
        if self.remote is not None:
            try:
                return getattr(self.remote, primitive)(*args)
            except LongTermError as exc:
                self._lost_remote(exc)
        return getattr(self.local, primitive)(*args)

    # --- the journal -------------------------------------------------------------------------
    def _write_journal(self, change: Change) -> None:
        lines = [json.dumps({"namespace": i.namespace, "id": i.id})
                 for i in [*(i for i, _ in change.added), *(i for i, _ in change.replaced), *change.removed]]
        lines += [json.dumps({"audit": r.model_dump()}) for r in change.audit]
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        with self.journal.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fsync(handle.fileno())

    def pending(self) -> tuple[list[tuple[str, str]], list[AuditRecord]]:
        """The items (namespace, id) and audit rows the server has not had yet."""
        if not self.journal.is_file():
            return [], []
        keys, audit = {}, []
        for line in self.journal.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a crash: its change is in the local store
                continue
            if "audit" in entry:
                audit.append(AuditRecord(**entry["audit"]))
            else:
                keys[(entry["namespace"], entry["id"])] = True
        return list(keys), audit

    def reconcile(self) -> int:
        """Copy to the server what it missed; returns how many items were brought up to date."""
        if self.remote is None:
            return 0
        keys, audit = self.pending()
        if not keys and not audit:
            return 0
        change = Change(audit=audit)
        for namespace, item_id in keys:
            item = self.local._get(namespace, item_id)
            if item is not None:
                change.replaced.append((item, self._embed(item.content)))
            elif (gone := self.remote._get(namespace, item_id)) is not None:
                change.removed.append(gone)
        try:
            self.remote._apply(fit_change(change, self.remote))
        except LongTermError as exc:
            self._lost_remote(exc)
            return 0
        self.journal.unlink(missing_ok=True)
        return len(keys)

    def close(self) -> None:
        for store in (self.local, self.remote):
            if store is not None:
                store.close()
