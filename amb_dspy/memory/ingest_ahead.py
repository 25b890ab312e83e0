"""Ingest as a pipeline: the next documents are read, split and prepared while the current one is committed.

:meth:`~amb_dspy.bank.MemoryBank.add_documents` commits one document at a time, in order, through one
:class:`~amb_dspy.memory.bank_writer.BankWriter` (the unit of durability stays its ``commit``). What a document's
conversion computes without the bank runs ahead of it (:class:`ReadAhead`): one thread reads, and
:data:`PREPARERS` threads prepare the documents read, two at once, handed over in reading order:

* reading and decoding the files (:func:`~amb_dspy.memory.documents.read_documents`), a line for each skipped;
* under the heuristic policy (:class:`Preparer`), for each dated session (:func:`~amb_dspy.memory.documents.dated_sessions`)
  the bank does not hold yet: the classification and structure policies' answers (they read the text, the task
  goal and the agents' settings, never the bank), kept in :class:`~amb_dspy.agents.prepared.PreparedAnswers`
  for the commit's calls to take, and the vectors of every text the commit will embed whatever the bank holds
  (the sentences those policies embed, the new nodes' texts, their source lines), left in the embedder's cache.

The model runs in ONNX Runtime, which lets the GIL go, so the commit's analysis, indexing and save use one core
while the embedding of the documents after it uses the other. It takes the GIL back after every text, though (int8
runs one text a call, a few milliseconds each), and a thread that wants the GIL from one running Python waits up to
the interpreter's switch interval (5 ms) for it: with the commit busy, the embedding ran at half its rate. While a
pipeline runs the interval is :data:`GIL_SWITCH_S` (:func:`quick_gil_handoff`; measured with a thread running
Python beside the embedder: 77-81 texts/s at 5 ms, 111-151 at 0.5 ms, 142-284 with no such thread). The commit finds its answers and vectors made
from the same inputs by the same code: the bank is the one the serial path makes. The queue holds
:data:`AHEAD_DOCUMENTS` documents; with those being prepared and the one committing, no more than that plus
:data:`PREPARERS` plus one documents' texts (each at most ``max_context_bytes``) are in flight, whatever the size of
the input.

Two documents are prepared at once so that one's Python (the policies, the token counts) runs while the model runs
for the other, and the model runs both preparers' calls at once where the embedder allows it
(:attr:`~amb_dspy.retrieval.embedding_base.CachingEmbedder.concurrent_calls`, the ONNX backend). Measured in
alternating runs (docs/benchmarks.md, Session 19): two preparers alone, their calls to the model one at a time, were
within this machine's noise; with the calls at once, a 775-passage .jsonl ingested in 8-22% less time.
"""

from __future__ import annotations

import hashlib
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.agents.prepared import PreparedAnswers
from amb_dspy.errors import AmbError
from amb_dspy.lm import AgentLMs
from amb_dspy.memory.documents import Expected, NamedDocument, dated_sessions, read_documents
from amb_dspy.memory.view.lines import LINE_TOKENS, pieces
from amb_dspy.memory.writer import cut_clusters, structure_batch
from amb_dspy.retrieval.embedding_base import embed_node_texts
from amb_dspy.storage.query_graph import node_text

AHEAD_DOCUMENTS = 4  # documents read and prepared ahead of the one being committed
PREPARERS = 2  # documents prepared at once (the policies' Python of one runs while the model runs for another)
GIL_SWITCH_S = 0.0005  # the interpreter's switch interval while a pipeline runs (see the module docstring)
_handoff_lock = threading.Lock()
_handoff_users = [0, 0.0]  # pipelines running now, and the interval before the first of them


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
    the answers it prepared) in a thread of their own, at most ``depth`` steps ahead of the consumer; ``bank``, the
    bank file the add writes to, is never read (:func:`~amb_dspy.memory.documents.read_documents`). Use it as a
    context manager: leaving it (a commit that failed included) stops the thread and waits for it."""

    def __init__(self, paths: Iterable, max_bytes: int, prepare: Callable[[NamedDocument], list[str]],
                 depth: int = AHEAD_DOCUMENTS, bank: Path | None = None, preparers: int = PREPARERS):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._prepare, self._bank = prepare, bank  # the bank file written to, never read as a document
        self._preparers = max(1, preparers)
        self._thread = threading.Thread(target=self._run, args=(list(paths), max_bytes), name="amb-ingest-ahead",
                                        daemon=True)

    def __enter__(self) -> ReadAhead:
        self._handoff = quick_gil_handoff()
        self._handoff.__enter__()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.close()
        finally:
            self._handoff.__exit__(None, None, None)

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
        # the steps read and not yet handed over, in order: a skipped line, or a document and its preparation
        pending: deque[str | tuple[NamedDocument, Future]] = deque()
        pool = ThreadPoolExecutor(self._preparers, thread_name_prefix="amb-ingest-prepare")
        try:
            for document in read_documents(paths, max_bytes, skipped.append, expected, self._bank):
                pending.extend(skipped)
                skipped.clear()
                pending.append((document, pool.submit(self._prepared, document)))
                self._hand_over(pending, expected, self._preparers - 1)
            pending.extend(skipped)
            self._hand_over(pending, expected, 0)
            self._put(_END)
        except _Stopped:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, which raises it
            self._put(exc, stopping=False)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # a document being prepared is finished first

    def _hand_over(self, pending: deque, expected: Expected, keep: int) -> None:
        """Put the pending steps in order until at most ``keep`` documents are left being prepared."""
        while sum(not isinstance(step, str) for step in pending) > keep:
            step = pending.popleft()
            if isinstance(step, str):
                self._put(Read(None, step, expected.total))
            else:
                document, preparing = step
                self._put(Read(document, "", expected.total, tuple(preparing.result())))
        while pending and isinstance(pending[0], str):  # lines skipped before the documents still being prepared
            self._put(Read(None, pending.popleft(), expected.total))

    def _prepared(self, document: NamedDocument) -> list[str]:
        """What ``prepare`` made ready; nothing when it failed (the commit computes it all, and meets the failure
        where the serial path would)."""
        try:
            return self._prepare(document)
        except Exception:  # noqa: BLE001 - preparing is an optimisation only
            return []

    def _put(self, step: object, stopping: bool = True) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(step, timeout=0.1)
                return
            except queue.Full:
                continue
        if stopping:
            raise _Stopped


@contextmanager
def quick_gil_handoff() -> Iterator[None]:
    """The interpreter's switch interval at most :data:`GIL_SWITCH_S` inside, so that the embedding thread gets the
    GIL back soon after each model run; the interval is the process's, so it is put back when the last pipeline
    running ends."""
    with _handoff_lock:
        if _handoff_users[0] == 0:
            _handoff_users[1] = sys.getswitchinterval()
            sys.setswitchinterval(min(GIL_SWITCH_S, _handoff_users[1]))
        _handoff_users[0] += 1
    try:
        yield
    finally:
        with _handoff_lock:
            _handoff_users[0] -= 1
            if _handoff_users[0] == 0:
                sys.setswitchinterval(_handoff_users[1])


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
        embed_node_texts(self.embedder, [node_text(s.summary, c.context, list(c.keywords))
                                         for (_, c, _), s in zip(cut, structured)])
        self.embedder.embed([text[a:b] for _, _, spans in cut for span in spans
                             for a, b, _ in pieces(text, *span, estimate_tokens, LINE_TOKENS)])
        return keys

    def _policy(self, agent: str, inputs: dict[str, Any]) -> Any:
        with self.lms.use(agent):  # the agent's windows follow its LM, as in the runner's call
            return POLICIES[agent](self.agents[agent], self.embedder, **inputs)
