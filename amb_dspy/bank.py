"""MemoryBank: what the tasks of one agent share, and the doors that start them.

A bank holds the configuration, the agents (compiled or not), their LMs, the embedding model and the
factories of the executor's tools; nothing about any one task. Each task is a
:class:`~amb_dspy.task.session.TaskSession` of its own, so one bank runs many tasks at once, from as many
threads:

* :meth:`MemoryBank.run` starts a session for a task and runs the spec's loop on it
  (:class:`~amb_dspy.task.loop.TaskLoop`);
* :meth:`MemoryBank.resume` loads a checkpointed session (:meth:`TaskSession.load`) and goes on;
* :meth:`MemoryBank.ingest` converts a context into memory, no planning and no executor;
* :meth:`MemoryBank.add_documents` ingests files, folders and globs into a new or existing bank;
* :meth:`MemoryBank.start_session` hands a session to an agent outside the loop (MCP, LangGraph...).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.agents.compiled import apply_compiled
from amb_dspy.agents.prepared import PreparedAnswers, answers_prepared
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError, one_line
from amb_dspy.lm import AgentLMs, LMCallCapReached, is_embedded, reads_images, resolve_lms, task_strategy
from amb_dspy.memory.bank_writer import BankWriter
from amb_dspy.memory.documents import AddResult, Expected, NamedDocument, dated_sessions
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.ingest_ahead import Preparer, ReadAhead
from amb_dspy.memory.view import export_bank
from amb_dspy.retrieval.embedding import shared_embedder
from amb_dspy.storage import InsightDoc
from amb_dspy.storage.bank_names import bank_place
from amb_dspy.task.direct import DirectAnswer
from amb_dspy.task.executor import Executor
from amb_dspy.task.images import ImageStager
from amb_dspy.task.inputs import start_store
from amb_dspy.task.loop import TaskLoop
from amb_dspy.task.session import TaskSession
from amb_dspy.task.state import IngestResult, ProgressEvent, RunResult, read_context_file
from amb_dspy.text import valid_text
from amb_dspy.tools import DeepRetrievalTool, SearchTool, VisitTool, build_tools, load_corpus, make_search_backend

__all__ = ["MemoryBank", "ProgressEvent", "RunResult", "read_context_file"]


class MemoryBank:
    """An agent with a task-scoped, structured memory. ``run(task, context, images)`` answers a task.

    ``session`` is the latest task this bank started (its store, run state, meter...), kept for the
    caller to inspect or export after a run; tasks run at once each have their own.
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
        self.session: TaskSession | None = None  # the latest task started (see the class docstring)
        self.added: AddResult | None = None  # the latest add_documents, as it grows (what an interrupt kept)
        self.strategy = ""  # the line saying which strategy the latest task took, and why

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
        config = session.config
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
        """Answer ``task`` with ``context`` (long text, may be empty) and optional image files.

        ``bank``: a bank file (a name in ``STORAGE_DIR/banks/`` too, see
        :func:`~amb_dspy.storage.bank_names.bank_path`) or a store to start from, e.g. one written by
        :meth:`ingest`: the run works on a copy of its Query Graph and Interaction Tree under a new Insight Doc;
        the file is not changed.
        """
        started = time.monotonic()
        task = (task or "").strip()
        if not task:
            raise InputError("the task is empty: say what the agent should do")
        context = self._checked_context(context)
        doc = InsightDoc(task_goal=task)
        store, load_notices = start_store(self.embedder, self._located(bank), doc)
        stager = ImageStager(self.config.paths.temp_dir, self.config.paths.storage_dir)
        staged = stager.stage_images(doc.doc_id, [Path(p) for p in images])  # checks every image first
        # Input is valid: from here on the task has a session of its own.
        session = self.session = TaskSession(store, images=stager, progress=self.progress, **self._shared())
        session.emit("notice", self.strategy)  # said first; the bank keeps it (strategy)
        for notice in load_notices:
            session.notify(notice)
        for notice in session.memory.recall(task):  # earlier tasks' items for the task (config.recall)
            session.emit("notice", notice)
        with session.meter.counting():
            loop = self._loop(session)
            if staged and reads_images(session.lms.for_agent("executor")) is False:
                loop.keep_unrecognised()
            termination = loop.run(context)
        result = self._result(session, termination, started)
        if self.config.longterm.remember:  # what the route keeps of the finished task, into long-term memory
            result.notices.extend(session.memory.remember_longterm(result.answer, result.citations))
        return result

    def resume(self, directory: str | Path) -> RunResult:
        """Continue the run whose checkpoint is in ``directory`` from its last completed loop (see
        :mod:`amb_dspy.task.checkpoint`); it goes on checkpointing there. This bank's config is not changed."""
        started = time.monotonic()
        shared = self._shared()
        session = self.session = TaskSession.load(directory, progress=self.progress, **shared)
        session.emit("notice", self.strategy)  # said first; the bank keeps it (strategy)
        with session.meter.counting():
            termination = self._loop(session).run("", resumed=True)
        return self._result(session, termination, started)

    def ingest(self, context: str, name: str = "context", *, into: MemoryStore | None = None,
               date: str = "") -> IngestResult:
        """Memory conversion of ``context`` alone (classification -> structure -> nodes -> analysis): no
        planning, no executor. Export the bank afterwards and answer many tasks from it with ``run(bank=...)``.

        ``into``: a store to add the document to (``bank.session.store`` after an earlier ingest, or
        ``MemoryStore.load(path, embedder)``), its new nodes related to the old ones; a new store by default.
        The document is its own entry, named ``name`` and dated ``date`` when given; a dialogue of dated
        sessions is cut at its sessions, each its own entry (``name#session_N``, dated), as when they are added
        one by one (:func:`~amb_dspy.memory.documents.dated_sessions`;
        :meth:`~amb_dspy.memory.writer.MemoryWriter.add_documents` says how they are converted). A document the
        store already holds (the same text) adds nothing (``added`` False), and so does a session of it."""
        started = time.monotonic()
        context, name = self._checked_context(valid_text(context)), valid_text(name)  # what is stored is UTF-8
        if not context.strip():
            raise InputError("nothing to ingest: the context is empty")
        store = into if into is not None else MemoryStore(self.embedder, InsightDoc(task_goal=f"Ingest {name}"))
        session = self.session = TaskSession(store, progress=self.progress, **self._shared())
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
                            seconds=round(time.monotonic() - started, 3), added=added, replaced=replaced)

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
        line of ``skipped`` (and a notice) and the rest is added. ``added`` is the result as it grows, so that an
        interrupted caller can say what was committed."""
        started, result, expected = time.monotonic(), AddResult(), Expected()
        self.added = result
        path = self._located(into) if into is not None and not isinstance(into, MemoryStore) else None
        store = into if isinstance(into, MemoryStore) else None
        with BankWriter(path, self.embedder, store=store, notify=lambda line: self._report("notice", line)) as writer:
            self._add_all(writer, paths, result, expected)
            written = writer.close()
            store = writer.latest() if export is not None else writer.store  # a copy has every writer's commits
        result.written = [*([path] if writer.database and result.changed else []), *([written] if written else [])]
        if export is not None and (result.changed or (result.done and not Path(export).exists())):
            try:
                result.written.append(export_bank(store, export))
            except OSError as exc:  # the documents are in the bank all the same
                raise InputError(f"cannot export the bank to {export}: {exc.strerror or one_line(exc)}") from None
        result.nodes, result.edges = len(store.graph), store.graph.edge_count
        result.seconds = round(time.monotonic() - started, 3)
        return result

    def _add_all(self, writer: BankWriter, paths: Iterable[str | Path], result: AddResult, expected: Expected) -> None:
        """The documents of ``paths`` committed by ``writer`` one at a time, in order, as a pipeline: the next ones
        are read and prepared meanwhile (:mod:`amb_dspy.memory.ingest_ahead`)."""
        shared, answers, refused = self._shared(), PreparedAnswers(), 0
        prepare = Preparer(answers, shared["agents"], shared["lms"], self.embedder,
                           goal=lambda: writer.store.insight_doc.task_goal,
                           holds=lambda digest: writer.store.entry_with_hash(digest) is not None) \
            if shared["config"].models.policy == "heuristic" else (lambda document: [])
        with ReadAhead(paths, self.config.limits.max_context_bytes, prepare) as reading, answers_prepared(answers):
            for step in reading:
                expected.total = step.total - refused
                if step.document is None:
                    result.skipped.append(step.skipped)
                    self._report("notice", step.skipped, writer.store)
                    continue
                refused += not self._add_one(writer, step.document, result, expected)
                answers.discard(step.prepared)  # those of a document the bank held are not taken

    def _add_one(self, writer: BankWriter, document: NamedDocument, result: AddResult, expected: Expected) -> bool:
        """One document of :meth:`add_documents`, committed by ``writer``; what cannot be added is skipped (False)."""
        self._report("document", document.name, writer.store)
        try:
            ingested = writer.commit(lambda store: self.ingest(document.text, document.name, into=store,
                                                               date=document.date))
        except InputError as exc:
            result.skipped.append(line := f"skipped {document.name}: {one_line(exc)}")
            expected.total -= 1
            self._report("notice", line, writer.store)
            return False
        result.record(document.name, ingested)
        phase = "unchanged" if not (ingested.added or ingested.replaced) else \
            "committed" if writer.database else "added"
        self._report(phase, document.name, writer.store, done=result.done, total=expected.total)
        return True

    def _report(self, phase: str, message: str, store: MemoryStore | None = None, **count: int) -> None:
        """A progress event outside any session's (a document starting or committed, a file skipped); ``count``:
        ``done`` and ``total`` documents of an add."""
        if self.progress is not None:
            nodes, edges = (len(store.graph), store.graph.edge_count) if store is not None else (0, 0)
            self.progress(ProgressEvent(phase=phase, loop=0, nodes=nodes, edges=edges, conflicts=0, lm_calls=0,
                                        tokens=0, message=message, **count))

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
        """Write the latest task's bank file (see ``session``); returns the file written (another name when a
        larger bank is at ``path``: an export never replaces more memory with less)."""
        if self.session is None:
            raise InputError("nothing to export: this bank has run no task yet")
        return export_bank(self.session.store, path)

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

    def _checked_context(self, context: str) -> str:
        context = context or ""
        if len(context.encode("utf-8")) > self.config.limits.max_context_bytes:
            raise InputError(
                f"the context is {len(context.encode('utf-8')) / 1e6:.1f} MB, over the "
                f"{self.config.limits.max_context_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)"
            )
        return context

    @staticmethod
    def _result(session: TaskSession, termination: str, started: float) -> RunResult:
        session.emit("done", termination)
        state, store = session.state, session.store
        return RunResult(
            answer=state.answer,
            termination=termination,
            loops=state.loops,
            insight_doc=store.insight_doc.model_dump(mode="json"),
            query_graph={"nodes": [n.model_dump(mode="json", exclude={"embedding"}) for n in store.graph.nodes_dict.values()],
                         "edges": [list(e) for e in store.graph.edges()]},
            interaction_tree=store.tree.to_dict(),
            usage=session.meter.usage(),
            errors=state.errors,
            notices=state.notices,
            fallbacks=dict(state.fallbacks),
            hops=[hop.model_dump(mode="json") for hop in store.hops],
            citations=[session.memory.citation(node_id) for node_id in state.citations if node_id in store.graph],
            extractive=state.extractive,
            seconds=round(time.monotonic() - started, 3),
        )
