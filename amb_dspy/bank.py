"""MemoryBank: what the tasks of one agent share, and the doors that start them.

A bank holds the configuration, the agents (compiled or not), their LMs, the embedding model and the
factories of the executor's tools; nothing about any one task. Each task is a
:class:`~amb_dspy.task.session.TaskSession` of its own, so one bank runs many tasks at once, from as many
threads:

* :meth:`MemoryBank.run` starts a session for a task through the one door (:meth:`TaskSession.start`, which
  :meth:`MemoryBank.start_session` opens to the MCP server and the integrations too) and runs the spec's loop on
  it (:class:`~amb_dspy.task.loop.TaskLoop`); its :class:`~amb_dspy.task.result.RunResult` holds the task's
  memory (``result.export(path)``);
* :meth:`MemoryBank.resume` loads a checkpointed session (:meth:`TaskSession.load`) and goes on;
* :meth:`MemoryBank.ingest` and :meth:`MemoryBank.add_documents` ingest a text, or files, folders and globs,
  through the ingest owner (:class:`~amb_dspy.task.ingest.DocumentIngest`).

The bank keeps no task: whatever it ran, each result is its caller's.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.agents.compiled import apply_compiled
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError
from amb_dspy.lm import AgentLMs, is_embedded, reads_images, resolve_lms, task_strategy
from amb_dspy.memory.documents import AddResult
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import shared_embedder
from amb_dspy.storage.bank_names import bank_place
from amb_dspy.task.direct import DirectAnswer
from amb_dspy.task.executor import Executor
from amb_dspy.task.images import ImageStager
from amb_dspy.task.ingest import DocumentIngest
from amb_dspy.task.inputs import checked_context
from amb_dspy.task.loop import TaskLoop
from amb_dspy.task.result import IngestResult, RunInterrupted, RunResult
from amb_dspy.task.session import TaskSession
from amb_dspy.task.state import ProgressEvent, read_context_file
from amb_dspy.tools import DeepRetrievalTool, SearchTool, VisitTool, build_tools, load_corpus, make_search_backend

__all__ = ["IngestResult", "MemoryBank", "ProgressEvent", "RunInterrupted", "RunResult", "read_context_file"]


class MemoryBank:
    """An agent with a task-scoped, structured memory. ``run(task, context, images)`` answers a task.

    Tasks run at once, from as many threads, each have their own session; the bank keeps none of them: a
    run's memory is its result's (``result.store``, ``result.export(path)``).
    """

    def __init__(
        self,
        config: AmbConfig | None = None,
        *,
        lm: Any = None,
        agent_lms: dict[str, Any] | None = None,
        agents: dict[str, dspy.Module] | None = None,
        compiled: str | Path | None = None,
        embedder: Any = None,
        search: Any = None,
        corpus: Any = None,
        progress: Callable[[ProgressEvent], None] | None = None,
    ):
        self.config = config or AmbConfig()
        if self.config.tools.corpus is not None and not Path(self.config.tools.corpus).exists():
            raise InputError(f"corpus {self.config.tools.corpus}: no such file or folder")
        # Resolved now so that a bad spec fails here, and again when a task starts, so that the LM active in
        # DSPy's settings at that moment is the one that runs (see amb_dspy.lm.resolve_lms for the order).
        self._lm, self._agent_lms = lm, dict(agent_lms or {})
        self.lms: AgentLMs = resolve_lms(self.config, lm=lm, agent_lms=self._agent_lms)
        self.notice: str | None = self.lms.notice
        self.progress = progress
        self.embedder = embedder if embedder is not None else \
            shared_embedder(self.config.embedding, self.config.paths.cache_dir)
        self.strategy = ""  # the line saying which strategy a task started now takes, and why
        self._latest = threading.local()  # each thread's latest result, for the deprecated export() only

        # Agents count tokens with the active LM's tokenizer (exact for the embedded model).
        self.agents: dict[str, dspy.Module] = {name: cls(self.config) for name, cls in AGENT_CLASSES.items()}
        if compiled is not None:
            self.agents = apply_compiled(self.agents, compiled)  # keeps this bank's config
        self.agents.update(agents or {})
        for name, agent in self.agents.items():  # a window too small for its own prompt fails here, not mid-run
            if hasattr(agent, "check_window"):
                with self.lms.use(name):
                    agent.check_window()
        self._search, self._corpus = search, corpus

    @property
    def lm(self) -> dspy.BaseLM:
        """The main LM a run started now would use."""
        return self._lms_now().main

    def _lms_now(self) -> AgentLMs:
        """The LMs of a task started now (DSPy's settings at this moment are read: see resolve_lms)."""
        lms = resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms)
        self.notice = lms.notice
        return lms

    def task_config(self) -> AmbConfig:
        """The settings a task started now runs with: the strategy its LM takes resolved (under the direct
        strategy the ``auto`` policy is ``heuristic``: the memory agents call no LM)."""
        return task_strategy(self.config, self._lms_now().for_agent("executor"))[0]

    def _shared(self, config: AmbConfig | None = None) -> dict[str, Any]:
        """What a new session shares with this bank's other tasks; its config has the strategy the LM takes
        (:func:`~amb_dspy.lm.profile.task_strategy`), said once per bank in :attr:`strategy`."""
        lms = self._lms_now()
        config, self.strategy = task_strategy(config or self.config, lms.for_agent("executor"))
        return {"config": config, "agents": self.agents, "embedder": self.embedder, "lms": lms}

    # --- tools and executor ------------------------------------------------------------------
    def executor_for(self, session: TaskSession) -> Executor:
        """The executor of ``session``'s task: search, visit and deep retrieval over its memory, through its
        tool cache (and journal, when it checkpoints)."""
        config, settings = session.config, session.config.tools
        corpus = self._corpus if self._corpus is not None else \
            load_corpus(settings, self.embedder, cache_dir=config.paths.cache_dir)
        search = self._search if self._search is not None else make_search_backend(settings, corpus)
        # a 135M model with an 8k context reads three results better than ten
        k = min(settings.search_k, 3) if is_embedded(session.lms.for_agent("executor")) else settings.search_k
        tools = build_tools(
            search=SearchTool(search, k=k),
            visit=VisitTool(settings, corpus=corpus),
            deep_retrieval=DeepRetrievalTool(session.store, config.paths.storage_dir),
            max_observation_chars=settings.max_observation_chars,
        )
        return Executor(session.wrap_tools(tools), max_iters=config.executor.react_max_iters)

    # --- the doors ---------------------------------------------------------------------------
    def run(self, task: str, context: str = "", images: list[str | Path] = (),
            bank: str | Path | MemoryStore | None = None) -> RunResult:
        """Answer ``task`` with ``context`` (long text, may be empty) and optional image files; the result holds
        the task's memory (``result.export(path)`` saves it).

        ``bank``: a bank file (a name in ``STORAGE_DIR/banks/`` too, see
        :func:`~amb_dspy.storage.bank_names.bank_place`; a bank in the configured database) or a store to start from, e.g. one written by
        :meth:`ingest`: the run works on a copy of its Query Graph and Interaction Tree under a new Insight Doc;
        the file is not changed. Ctrl-C or SIGTERM once the task has started is
        :class:`~amb_dspy.task.result.RunInterrupted`, with the memory built so far.
        """
        started = time.monotonic()
        if not (task or "").strip():
            raise InputError("the task is empty: say what the agent should do")
        context = checked_context(context, self.config.limits.max_context_bytes)
        shared = self._shared()
        stager = ImageStager(self.config.paths.temp_dir, self.config.paths.storage_dir)
        session = TaskSession.start(task, bank=self._located(bank), attach=images, notice=self.strategy,
                                    images=stager, progress=self.progress, **shared)  # checks every image first
        session.submit(lambda: None).result()  # the bank's lines laid out (start's warm) before this thread reads them
        return self._answered(session, started, lambda loop: loop.run(context),
                              remember=self.config.longterm.remember)

    def resume(self, directory: str | Path) -> RunResult:
        """Continue the run whose checkpoint is in ``directory`` from its last completed loop (see
        :mod:`amb_dspy.task.checkpoint`); it goes on checkpointing there. This bank's config is not changed."""
        started = time.monotonic()
        shared = self._shared()
        session = TaskSession.load(directory, progress=self.progress, **shared)
        session.emit("notice", self.strategy)  # said first
        return self._answered(session, started, lambda loop: loop.run("", resumed=True))

    def _answered(self, session: TaskSession, started: float, run: Callable[[TaskLoop], str], *,
                  remember: bool = False) -> RunResult:
        """``run`` the loop over ``session``, and its result; with ``remember``, what the route keeps of the
        finished task goes into long-term memory. An interrupt is :class:`RunInterrupted` with the task's store."""
        try:
            with session.meter.counting():
                loop = self._loop(session)
                if session.images is not None and session.images.pending_images(session.task_id) and \
                        reads_images(session.lms.for_agent("executor")) is False:
                    loop.keep_unrecognised()
                termination = run(loop)
            result = RunResult.from_session(session, termination, started)
            if remember:
                result.notices.extend(session.memory.remember_longterm(result.answer, result.citations))
        except KeyboardInterrupt as interrupt:
            raise RunInterrupted(session.store) from interrupt
        self._latest.result = result  # for the deprecated export(), this thread's alone
        return result

    def ingester(self) -> DocumentIngest:
        """The owner of an ingest into this bank (:class:`~amb_dspy.task.ingest.DocumentIngest`), with this bank's
        agents, LMs, embedding model and progress; its ``added`` is an add as it grows."""
        return DocumentIngest(self._shared, embedder=self.embedder, max_bytes=self.config.limits.max_context_bytes,
                              locate=self._located, progress=self.progress)

    def ingest(self, context: str, name: str = "context", *, into: MemoryStore | None = None,
               date: str = "") -> IngestResult:
        """Memory conversion of ``context`` alone (classification -> structure -> nodes -> analysis): no
        planning, no executor. Save the bank afterwards (``result.export(path)``) and answer many tasks from it
        with ``run(bank=...)``.

        ``into``: a store to add the document to (``result.store`` of an earlier ingest, or
        ``MemoryStore.load(path, embedder)``), its new nodes related to the old ones; a new store by default.
        The document is its own entry, named ``name`` and dated ``date`` when given; a dialogue of dated
        sessions is cut at its sessions, each its own entry (``name#session_N``, dated), as when they are added
        one by one (:func:`~amb_dspy.memory.documents.dated_sessions`;
        :meth:`~amb_dspy.memory.writer.MemoryWriter.add_documents` says how they are converted). A document the
        store already holds (the same text) adds nothing (``added`` False), and so does a session of it."""
        result = self.ingester().ingest(context, name, into=into, date=date)
        self._latest.result = result  # for the deprecated export(), this thread's alone
        return result

    def add_documents(self, paths: Iterable[str | Path], *, into: MemoryStore | str | Path | None = None,
                      export: str | Path | None = None) -> AddResult:
        """Add files, folders (read recursively) and globs to a bank, each document with :meth:`ingest`: its own
        entry, named by its path (:mod:`amb_dspy.memory.documents` says what is read and how it is named).

        ``into``: a bank file, a store, or None (a new bank in memory). A bank database (``.sqlite``) gets each
        document as a commit of its own before the next starts, beside any other process adding to it
        (:class:`~amb_dspy.memory.bank_writer.BankWriter`): a missing file is a new bank, written at the first
        commit. A JSON bank file is written once, at the end, and refuses a second writer meanwhile. ``export``:
        a file the whole bank is written to at the end (a copy), when the add changed it or it is missing.
        ``AddResult.written`` names the files written.

        An unchanged document adds nothing; a changed one (same name, new text) is added and its old version's
        nodes are marked superseded. What cannot be read or is over ``max_context_bytes`` (per document) is a
        line of ``skipped`` (and a notice) and the rest is added. An interrupted caller that needs to say what was
        committed adds through :meth:`ingester` and reads its ``added``."""
        return self.ingester().add(paths, into=into, export=export)

    def start_session(self, goal: str, *, bank: str | Path | MemoryStore | None = None,
                      namespace: str | None = None) -> TaskSession:
        """A task for an agent outside this bank's loop (see :mod:`amb_dspy.task.session`), on this bank's
        agents, LMs and embedding model, which its sessions share."""
        return TaskSession.start(goal, bank=self._located(bank), namespace=namespace, images=None, **self._shared())

    def open_session(self, store: MemoryStore, *, namespace: str | None = None) -> TaskSession:
        """A session on ``store`` as it is (no copy, no recall): a task the server reopens after a restart,
        whose run state then comes back with :meth:`TaskSession.resume`."""
        return TaskSession(store, namespace=namespace, images=None, **self._shared())

    def _located(self, bank):
        """A bank named by path or name, as a file or a bank in the configured database
        (:func:`~amb_dspy.storage.bank_names.bank_place`)."""
        paths = self.config.paths
        return bank_place(bank, paths.storage_dir, paths.database_url) if bank is not None else None

    def export(self, path: str | Path) -> Path:
        """Deprecated (to be removed in the next release): save the bank of this thread's latest :meth:`run`,
        :meth:`resume` or :meth:`ingest`; ``result.export(path)`` saves a given task's bank, whatever other
        threads ran meanwhile. InputError when this thread has run none."""
        warnings.warn("MemoryBank.export is deprecated: save a task's bank with result.export(path) "
                      "(result = bank.run(...) or bank.ingest(...))", DeprecationWarning, stacklevel=2)
        result = getattr(self._latest, "result", None)
        if result is None:
            raise InputError("nothing to export: this bank has run no task in this thread (use result.export(path))")
        return result.export(path)

    # --- helpers -----------------------------------------------------------------------------
    def _loop(self, session: TaskSession) -> TaskLoop:
        """The loop over ``session`` with its executor (the direct strategy's one pass, or the spec's loop); a
        bad corpus fails here, before any LM call."""
        loop = DirectAnswer if session.config.executor.strategy == "direct" else TaskLoop
        try:
            return loop(session, self.executor_for(session))
        except BaseException:
            if session.images is not None:
                session.images.cleanup(session.task_id)
            raise
