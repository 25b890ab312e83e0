"""Ingest as a pipeline: the next documents are read, split and prepared while the current one is committed.

:meth:`~amb_dspy.bank.MemoryBank.add_documents` commits one document at a time, in order, through one
:class:`~amb_dspy.memory.bank_writer.BankWriter` (the unit of durability stays its ``commit``). What a document's
conversion computes without the bank runs ahead of it, in one thread (:class:`ReadAhead`):

* reading and decoding the files (:func:`~amb_dspy.memory.documents.read_documents`), a line for each skipped;
* under the heuristic policy (:class:`Preparer`), for each dated session (:func:`~amb_dspy.memory.documents.dated_sessions`)
  the bank does not hold yet: the classification and structure policies' answers (they read the text, the task
  goal and the agents' settings, never the bank), kept in :class:`~amb_dspy.agents.prepared.PreparedAnswers`
  for the commit's calls to take, and the vectors of every text the commit will embed whatever the bank holds
  (the sentences those policies embed, the new nodes' texts, their source lines), left in the embedder's cache.

The model runs in ONNX Runtime, which lets the GIL go, so the commit's analysis, indexing and save use one core
while the embedding of the documents after it uses the other. The commit finds its answers and vectors made
from the same inputs by the same code: the bank is the one the serial path makes. The queue holds
:data:`AHEAD_DOCUMENTS` documents; with the one being prepared and the one committing, no more than that plus two
documents' texts (each at most ``max_context_bytes``) are in flight, whatever the size of the input.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.agents.prepared import PreparedAnswers
from amb_dspy.errors import AmbError
from amb_dspy.lm import AgentLMs
from amb_dspy.memory.documents import Expected, NamedDocument, dated_sessions, read_documents
from amb_dspy.memory.view.lines import LINE_TOKENS, pieces
from amb_dspy.memory.writer import cut_clusters, structure_batch
from amb_dspy.storage.query_graph import node_text

AHEAD_DOCUMENTS = 4  # documents read and prepared ahead of the one being committed


@dataclass(frozen=True)
class Read:
    """One step of the reading, in order: a document to commit and the keys of the answers prepared for it, or
    (``document`` None) the line saying what was skipped. ``total``: the documents expected in all, as far as
    the reading knows then (a progress bar's total)."""

    document: NamedDocument | None
    skipped: str
    total: int
    prepared: tuple[str, ...] = ()


class _Stopped(AmbError):
    """The consumer closed the pipeline: the reading thread ends (caught there, never shown)."""


_END = object()


class ReadAhead:
    """The documents of ``paths`` as :class:`Read` steps, read and prepared (``prepare(document)``: the keys of
    the answers it prepared) in a thread of their own, at most ``depth`` steps ahead of the consumer. Use it as
    a context manager: leaving it (a commit that failed included) stops the thread and waits for it."""

    def __init__(self, paths: Iterable, max_bytes: int, prepare: Callable[[NamedDocument], list[str]],
                 depth: int = AHEAD_DOCUMENTS):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._prepare = prepare
        self._thread = threading.Thread(target=self._run, args=(list(paths), max_bytes), name="amb-ingest-ahead",
                                        daemon=True)

    def __enter__(self) -> ReadAhead:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Read]:
        while (step := self._queue.get()) is not _END:
            if isinstance(step, BaseException):  # the reading failed outside what read_documents skips
                raise step
            yield step

    def close(self) -> None:
        """Stop the reading thread and wait for it (it ends at its next step; a document being prepared is
        finished first)."""
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.05)  # a put waiting for room returns
            except queue.Empty:
                pass
        self._thread.join()

    def _run(self, paths: list, max_bytes: int) -> None:
        expected, skipped = Expected(), []
        try:
            for document in read_documents(paths, max_bytes, skipped.append, expected):
                self._flush(skipped, expected)
                self._put(Read(document, "", expected.total, tuple(self._prepared(document))))
            self._flush(skipped, expected)
            self._put(_END)
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(exc, stopping=False)

    def _prepared(self, document: NamedDocument) -> list[str]:
        """What ``prepare`` made ready; nothing when it failed (the commit computes it all, and meets the failure
        where the serial path would)."""
        try:
            return self._prepare(document)
        except Exception:  # noqa: BLE001 - preparing is an optimisation only
            return []

    def _flush(self, skipped: list[str], expected: Expected) -> None:
        for line in skipped:
            self._put(Read(None, line, expected.total))
        skipped.clear()

    def _put(self, step: object, stopping: bool = True) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(step, timeout=0.1)
                return
            except queue.Full:
                continue
        if stopping:
            raise _Stopped


class Preparer:
    """What the heuristic policy's conversion of a document computes without the bank, worked out ahead (see the
    module docstring): ``goal()`` is the bank's task goal, ``holds(sha256)`` whether the bank holds a text."""

    def __init__(self, answers: PreparedAnswers, agents: dict[str, Any], lms: AgentLMs, embedder: Any,
                 goal: Callable[[], str], holds: Callable[[str], bool]):
        self.answers, self.agents, self.lms, self.embedder = answers, agents, lms, embedder
        self.goal, self.holds = goal, holds

    def __call__(self, document: NamedDocument) -> list[str]:
        """The keys of the answers prepared for ``document``'s sessions that the bank does not hold yet."""
        keys: list[str] = []
        for part in dated_sessions(document):
            if not self.holds(hashlib.sha256(part.text.encode("utf-8")).hexdigest()):
                keys += self._prepare(part.text, self.goal())
        return keys

    def _prepare(self, text: str, goal: str) -> list[str]:
        """Classification and structure of ``text`` as :meth:`~amb_dspy.memory.writer.MemoryWriter.convert` asks
        for them, and the vectors its nodes and their lines will need."""
        asked = {"context": text, "task_goal": goal}
        clusters = self._policy("classification", asked)
        keys = [self.answers.put("classification", asked, clusters)]
        cut = cut_clusters(clusters.clusters, text, [0])
        if not cut:
            return keys
        asked = {"batch": structure_batch(cut), "task_goal": goal}
        structured = self._policy("structure", asked)
        keys.append(self.answers.put("structure", asked, structured))
        self.embedder.embed([node_text(s.summary, c.context, list(c.keywords)) for (_, c, _), s in zip(cut, structured)])
        self.embedder.embed([text[a:b] for _, _, spans in cut for span in spans
                             for a, b, _ in pieces(text, *span, estimate_tokens, LINE_TOKENS)])
        return keys

    def _policy(self, agent: str, inputs: dict[str, Any]) -> Any:
        with self.lms.use(agent):  # the agent's windows follow its LM, as in the runner's call
            return POLICIES[agent](self.agents[agent], self.embedder, **inputs)
