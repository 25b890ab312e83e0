"""BankWriter: adds to one bank, one commit per document, beside any number of other writers of that bank.

A commit (:meth:`BankWriter.commit`) is the unit every door that adds documents goes through: take the bank's
write lock (:mod:`amb_dspy.storage.bank_lock`), bring the store up to the bank as the last commit of any writer
left it, convert the document into it, save what changed (a bank database's incremental save), let the lock go.
So a document is in the bank before the next one starts (``kill -9`` keeps every commit before it, and adding
the same documents again adds only what is missing: a document whose text the bank holds adds nothing), and each
writer's analysis sees everything the others committed before it, so two writers never make two nodes of one
passage. Writers wait for each other one document at a time.

Bringing the store up to date: when the database's save id is not the one the store last saved or loaded,
another writer committed, and the store is loaded again in full (rows, vectors and both indexes: 1.4 s for a
1M-token bank of 5,000 nodes, ``bench/bank_open.py``). An incremental reload would need to know which old nodes the other
writer changed (re-linked, re-described), which the database does not record. A writer adding alone never
reloads.

Where the bank lives is :func:`~amb_dspy.storage.bank_place.bank_at`'s: a bank database file (its lock a ``flock``
beside it) or a named bank in PostgreSQL (an advisory lock, :mod:`amb_dspy.storage.bank_pg`); the commit is the
same on both.

A JSON bank is one document rewritten whole: it cannot take each writer's commits. Its writer holds the lock
from the start of the add to the end, when it writes the file once (:meth:`close`); a second writer meanwhile is
refused in one line that names the bank database form, rather than one of the two losing its work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from amb_dspy.errors import InputError
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.storage.bank_place import bank_at
from amb_dspy.storage.insight_doc import InsightDoc

T = TypeVar("T")


class BankWriter:
    """The writer of one add to the bank at ``path`` (a database or a JSON file, or a named bank in PostgreSQL:
    :func:`~amb_dspy.storage.bank_place.bank_at`), or to a store in memory (``path`` None: ``store``, or a new
    one); ``notify`` hears what a user should know (a wait, a reload's notices)."""

    def __init__(self, path, embedder: Embedder, *, store: MemoryStore | None = None,
                 notify: Callable[[str], None] = lambda line: None):
        self.path, self.embedder, self.notify = path, embedder, notify
        self.place = bank_at(path) if path is not None else None
        self.database = self.place is not None and self.place.grows
        self._lock = self.place.lock() if self.place is not None else None
        self._waited = False
        self._held = None  # the place's held_open(), entered by __enter__
        self._stale = False  # the store holds changes a failed commit did not save: the next one reloads
        if path is not None and not self.database and not self._lock.acquire(wait=False):
            raise InputError(f"{path} is being written by another process: a JSON bank takes one writer at a time "
                             f"(add to the bank database {Path(path).with_suffix('.sqlite')} to run many at once)")
        try:
            self.store = store if store is not None else self._open()
        except BaseException:
            self._release_json()
            raise
        self._revision = self.store.revision

    def commit(self, convert: Callable[[MemoryStore], T]) -> T:
        """``convert(store)`` as one commit (see the module docstring); returns what it returned. On a bank
        database the store it is given holds every commit made so far, by any writer, and what it adds is saved
        before this returns; on a JSON bank or in memory it is the add's one store."""
        if not self.database:
            return convert(self.store)
        self._acquire()
        try:
            store = self._fresh()
            try:
                outcome = convert(store)
                if store.has_unsaved() and len(store.tree):
                    store.save(self.path)
            except BaseException:
                self._stale = self._stale or store.has_unsaved()  # it holds what the bank does not: read it again
                raise
        finally:
            self._lock.release()
        return outcome

    def latest(self) -> MemoryStore:
        """The bank as it is now: on a bank database, every writer's commits so far (a reload when another
        committed since this writer's last); else the add's store."""
        if not self.database:
            return self.store
        self._acquire()
        try:
            return self._fresh()
        finally:
            self._lock.release()

    def close(self):
        """End the add: a JSON bank is written (when the add changed it) and its lock let go. Returns the file
        written, or None (a bank database was written at each commit)."""
        if self.path is None or self.database:
            return None
        try:
            return self.store.save(self.path) if self.store.revision != self._revision else None
        finally:
            self._release_json()

    def __enter__(self) -> BankWriter:
        """Inside, a bank database's saves go through one connection (:meth:`~amb_dspy.storage.bank_place.BankPlace.held_open`)
        rather than one each, with their checkpoints."""
        self._held = self.place.held_open() if self.database else None
        if self._held is not None:
            self._held.__enter__()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        """A JSON bank's lock is let go whatever ended the add; it is written only by :meth:`close`."""
        try:
            self._release_json()
        finally:
            if self._held is not None:
                self._held.__exit__(kind, error, traceback)
                self._held = None

    # --- helpers -----------------------------------------------------------------------------------
    def _acquire(self) -> None:
        if not self._lock.acquire(wait=False):
            if not self._waited:
                self.notify(f"{self.path}: another writer is adding to this bank; each document waits for its "
                            "commit")
                self._waited = True
            self._lock.acquire()

    def _fresh(self) -> MemoryStore:
        """The store, loaded again when another writer committed since it was saved or loaded (under the lock)."""
        point, current = self.store.save_point, self.place.saved_id()
        if current is None and point is None and not self._stale:
            return self.store  # a new bank nobody has saved yet
        if self._stale or point is None or bank_at(point.where) != self.place or point.save_id != current:
            self.store, self._stale = self._open(), False
        return self.store

    def _open(self) -> MemoryStore:
        """The bank at ``path`` (BankFileError, one line, when the file is no bank), or a new one when the file
        holds none (missing, or a database without tables that an interrupted first save used to leave)."""
        if self.place is None or (self.database and self.place.holds_no_bank()) or not self.place.exists():
            return MemoryStore(self.embedder, InsightDoc(task_goal="Ingest documents"))
        notices: list[str] = []
        store = MemoryStore.load(self.path, self.embedder, notices)
        for line in notices:
            self.notify(line)
        return store

    def _release_json(self) -> None:
        if self.path is not None and not self.database and self._lock is not None:
            self._lock.release()
            self._lock = None
