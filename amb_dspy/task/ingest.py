"""Ingest: documents converted into a bank's memory, no planning and no executor, and what they cost in all.

:class:`DocumentIngest` is the one owner of ingesting: :meth:`MemoryBank.ingest <amb_dspy.bank.MemoryBank.ingest>`
(one text), :meth:`MemoryBank.add_documents <amb_dspy.bank.MemoryBank.add_documents>` and ``amb ingest`` (files,
folders and globs) go through it. Each document is converted by a session of its own on the bank's store
(:meth:`~amb_dspy.memory.writer.MemoryWriter.add_documents`); an add sums the documents' usage, fallbacks and
errors into its :class:`~amb_dspy.memory.documents.AddResult`, which grows as documents are committed
(``added``: what an interrupted caller can say was kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from amb_dspy.agents.prepared import PreparedAnswers, answers_prepared
from amb_dspy.errors import InputError, one_line
from amb_dspy.lm import LMCallCapReached
from amb_dspy.memory.bank_writer import BankWriter
from amb_dspy.memory.documents import AddResult, Expected, NamedDocument, dated_sessions
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.ingest_ahead import Preparer, ReadAhead
from amb_dspy.storage import InsightDoc
from amb_dspy.task.inputs import checked_context
from amb_dspy.task.result import IngestResult
from amb_dspy.task.session import TaskSession
from amb_dspy.task.state import ProgressEvent
from amb_dspy.text import estimate_tokens, valid_text

__all__ = ["DocumentIngest"]


class DocumentIngest:
    """Ingests documents into a bank and sums their usage (see the module docstring).

    ``shared()``: what a new session shares with the bank's other tasks (config, agents, embedder, LMs), as the
    bank resolves it when a document starts; ``max_bytes``: the largest document; ``locate``: a bank named by
    path or name, as a file."""

    def __init__(self, shared: Callable[[], dict[str, Any]], *, embedder: Any, max_bytes: int,
                 locate: Callable[[str | Path], Path], progress: Callable[[ProgressEvent], None] | None = None):
        self.shared, self.embedder, self.max_bytes = shared, embedder, max_bytes
        self.locate, self.progress = locate, progress
        self.added = AddResult()  # the add as it grows (what an interrupt kept)
        self.store: MemoryStore | None = None  # the bank the latest document went into (what an interrupt kept)

    # --- one text ------------------------------------------------------------------------------
    def ingest(self, context: str, name: str = "context", *, into: MemoryStore | None = None,
               date: str = "") -> IngestResult:
        """Memory conversion of ``context`` alone into ``into`` (a new store by default); see
        :meth:`MemoryBank.ingest <amb_dspy.bank.MemoryBank.ingest>`."""
        started = time.monotonic()
        context, name = checked_context(valid_text(context), self.max_bytes), valid_text(name)  # stored as UTF-8
        if not context.strip():
            raise InputError("nothing to ingest: the context is empty")
        store = into if into is not None else MemoryStore(self.embedder, InsightDoc(task_goal=f"Ingest {name}"))
        self.store = store
        session = TaskSession(store, progress=self.progress, **self.shared())
        state, added, replaced = session.state, True, False
        parts = [(part.text, part.name, part.date) for part in dated_sessions(NamedDocument(name, context, date))]
        with session.meter.counting():
            try:
                conversions = [c for c in session.memory.add_documents(parts) if c is not None]
                added = bool(conversions)
                replaced = any(c.entry is not None and "supersedes" in c.entry.metadata for c in conversions)
            except LMCallCapReached as exc:
                state.errors.append(str(exc))
        session.emit("done", ("a newer version: ingested" if replaced else "ingested") if added
                     else "unchanged: already in the bank")
        return IngestResult(nodes=len(store.graph), edges=store.graph.edge_count, usage=session.meter.usage(),
                            fallbacks=dict(state.fallbacks), errors=state.errors,
                            seconds=round(time.monotonic() - started, 3), added=added, replaced=replaced).kept(store)

    # --- files, folders and globs --------------------------------------------------------------
    def add(self, paths: Iterable[str | Path], *, into: MemoryStore | str | Path | None = None,
            export: str | Path | None = None) -> AddResult:
        """Add ``paths`` to ``into``: see :meth:`MemoryBank.add_documents <amb_dspy.bank.MemoryBank.add_documents>`."""
        started, result = time.monotonic(), self.added
        path = self.locate(into) if into is not None and not isinstance(into, MemoryStore) else None
        store = into if isinstance(into, MemoryStore) else None
        with BankWriter(path, self.embedder, store=store, notify=lambda line: self._report("notice", line)) as writer:
            self._add_all(writer, paths)
            result.store = writer.store
            written = writer.close()
            store = writer.latest() if export is not None else writer.store  # a copy has every writer's commits
        result.written = [*([path] if writer.database and result.changed else []), *([written] if written else [])]
        if export is not None and (result.changed or (result.done and not Path(export).exists())):
            result.written.append(_exported(store, export))
        result.nodes, result.edges = len(store.graph), store.graph.edge_count
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def _add_all(self, writer: BankWriter, paths: Iterable[str | Path]) -> None:
        """The documents of ``paths`` committed by ``writer`` one at a time, in order, as a pipeline: the next ones
        are read and prepared meanwhile (:mod:`amb_dspy.memory.ingest_ahead`)."""
        answers, refused, expected = PreparedAnswers(), 0, Expected()
        bank = Path(writer.path) if isinstance(writer.path, str | Path) else None  # a file (not PostgreSQL's)
        with ReadAhead(paths, self.max_bytes, self._preparer(writer, answers), bank=bank) as reading, \
                answers_prepared(answers):
            for step in reading:
                expected.total = step.total - refused
                if step.document is None:
                    self.added.skipped.append(step.skipped)
                    self._report("notice", step.skipped, writer.store)
                    continue
                refused += not self._add_one(writer, step.document, expected)
                answers.discard(step.prepared)  # those of a document the bank held are not taken

    def _preparer(self, writer: BankWriter, answers: PreparedAnswers) -> Callable[[NamedDocument], list]:
        """What prepares the next documents' agent answers while one is committed: the deterministic policy's
        (:class:`~amb_dspy.memory.ingest_ahead.Preparer`) under the heuristic policy, else nothing."""
        shared = self.shared()
        if shared["config"].models.policy != "heuristic":
            return lambda document: []
        return Preparer(answers, shared["agents"], shared["lms"], self.embedder,
                        goal=lambda: writer.store.insight_doc.task_goal,
                        holds=lambda digest: writer.store.entry_with_hash(digest) is not None)

    def _add_one(self, writer: BankWriter, document: NamedDocument, expected: Expected) -> bool:
        """One document of :meth:`add`, committed by ``writer``; what cannot be added is skipped (False)."""
        result = self.added
        self._report("document", document.name, writer.store)
        try:
            ingested = writer.commit(lambda store: self.ingest(document.text, document.name, into=store,
                                                               date=document.date))
        except InputError as exc:
            result.skipped.append(line := f"skipped {document.name}: {one_line(exc)}")
            expected.total -= 1
            self._report("notice", line, writer.store)
            return False
        result.record(document.name, ingested, estimate_tokens(document.text))  # its usage, fallbacks and errors summed in
        phase = "unchanged" if not (ingested.added or ingested.replaced) else \
            "committed" if writer.database else "added"
        self._report(phase, document.name, writer.store, done=result.done, total=expected.total,
                     text_tokens=result.text_tokens)
        return True

    def _report(self, phase: str, message: str, store: MemoryStore | None = None, **count: int) -> None:
        """A progress event outside any session's (a document starting or committed, a file skipped); ``count``:
        ``done`` and ``total`` documents of an add, and the ``text_tokens`` of those done."""
        if self.progress is not None:
            nodes, edges = (len(store.graph), store.graph.edge_count) if store is not None else (0, 0)
            self.progress(ProgressEvent(phase=phase, loop=0, nodes=nodes, edges=edges, conflicts=0, lm_calls=0,
                                        tokens=0, message=message, **count))


def _exported(store: MemoryStore, export: str | Path) -> Path:
    """The whole bank written to ``export`` (a copy); the documents are in the bank whether or not it can be."""
    try:
        return store.save(export)
    except OSError as exc:
        raise InputError(f"cannot export the bank to {export}: {exc.strerror or one_line(exc)}") from None
