"""MemoryBank: the plain-Python loop of spec §4 that ties storage, agents, adapter and executor together.

One ``run`` is one task with its own memory (task-scoped):

1. initialise (§4.1): the user's context goes through memory conversion, planning writes the Insight Doc;
2. loop (§4.2): enhance the prompt, execute, intercept (NORMAL / CROSS_VALIDATE / IMAGE), convert what
   the tools returned into memory (§4.3), resolve a checked conflict by merging (§4.4), plan;
3. stop when nothing is pending and every completed task succeeded, or when a cap is hit.

An agent failure marks the current task failed and the run goes on (§13); a failed memory conversion
leaves the graph as it was and still keeps the raw text in the Interaction Tree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.answering import EXTRACTIVE_TERMINATION
from amb_dspy.checkpoint import CHECKPOINT_FILE, read_checkpoint, read_tool_record, write_checkpoint
from amb_dspy.compiled import apply_compiled
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError
from amb_dspy.executor import Executor
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.images import ImageStager
from amb_dspy.lm import AgentLMs, LMCallCapReached, UsageMeter, is_embedded, reads_images, resolve_lms
from amb_dspy.phases import LoopPhases
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.run_state import (
    IngestResult,
    ProgressEvent,
    RunResult,
    RunState,
    read_context_file,
)
from amb_dspy.session import TaskSession
from amb_dspy.storage import (
    InsightDoc,
    InteractionEntry,
)
from amb_dspy.task_memory import SessionAttribute, TaskMemory, start_store
from amb_dspy.tool_cache import ToolCache
from amb_dspy.tool_journal import ToolJournal, keep_unasked
from amb_dspy.tools import DeepRetrievalTool, SearchTool, VisitTool, build_tools, load_corpus, make_search_backend

__all__ = ["MemoryBank", "ProgressEvent", "RunResult", "read_context_file"]


class MemoryBank(LoopPhases):
    """An agent with a task-scoped, structured memory. ``run(task, context, images)`` answers a task.

    A run's memory is a :class:`~amb_dspy.task_memory.TaskMemory` (``self.session``): ``store``, ``memory``,
    ``memory_adapter``, ``tool_cache``, ``meter`` and ``_run`` are its attributes.
    """

    store = SessionAttribute()
    memory = SessionAttribute()
    memory_adapter = SessionAttribute()
    tool_cache = SessionAttribute()
    meter = SessionAttribute()
    _run = SessionAttribute("state")

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
        if self.config.corpus is not None and not Path(self.config.corpus).exists():
            raise InputError(f"corpus {self.config.corpus}: no such file or folder")
        # Resolved now so that a bad spec fails here, and again when a run starts, so that the LM active in
        # DSPy's settings at that moment is the one that runs (see amb_dspy.lm.resolve_lms for the order).
        self._lm, self._agent_lms = lm, dict(agent_lms or {})
        self.lms: AgentLMs = resolve_lms(self.config, lm=lm, agent_lms=self._agent_lms)
        self.notice: str | None = self.lms.notice
        self.session: TaskMemory | None = None  # the current run's memory (see SessionAttribute)
        self.meter: UsageMeter | None = None
        self.progress = progress
        self.embedder = embedder if embedder is not None else default_embedder()

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
        self.store = MemoryStore(self.embedder)
        self.memory_adapter = None
        self.memory = None
        self._run: RunState | None = None  # the run under way (its errors and fallback counts)
        self.tool_cache: ToolCache | None = None  # the run's searches and visits (built with its executor)
        self.tool_journal: ToolJournal | None = None  # with a checkpoint: every tool response as it returns
        self._resumed_tools: dict | None = None  # a resumed run's checkpoint record of its tools
        self.images = ImageStager(self.config.temp_dir, self.config.storage_dir)

    @property
    def lm(self) -> dspy.BaseLM:
        """The main LM a run started now would use."""
        return resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms).main

    # --- agent calls -------------------------------------------------------------------------
    def _agent(self, name: str, **inputs):
        """Call an agent as ``config.policy`` says (see :meth:`TaskSession.call_agent`)."""
        return self.session.call_agent(name, **inputs)

    def _emit(self, phase: str, state: RunState, message: str = "") -> None:
        if self.progress is None or self.meter is None:
            return
        totals = self.meter.total()
        self.progress(ProgressEvent(
            phase=phase, loop=state.loops, nodes=len(self.store.graph), edges=self.store.graph.edge_count,
            conflicts=len(state.conflicts) + (state.active is not None), lm_calls=totals["calls"],
            tokens=totals["prompt_tokens"] + totals["completion_tokens"], message=message, usage=self.meter.usage(),
            fallbacks=dict(state.fallbacks),
        ))

    # --- tools and executor ------------------------------------------------------------------
    def _build_executor(self) -> Executor:
        corpus = self._corpus if self._corpus is not None else load_corpus(self.config, self.embedder)
        search = self._search if self._search is not None else make_search_backend(self.config, corpus)
        # a 135M model with an 8k context reads three results better than ten
        k = min(self.config.search_k, 3) if is_embedded(self.lms.for_agent("executor")) else self.config.search_k
        tools = build_tools(
            search=SearchTool(search, k=k),
            visit=VisitTool(self.config, corpus=corpus),
            deep_retrieval=DeepRetrievalTool(self.store, self.config.storage_dir),
            max_observation_chars=self.config.max_observation_chars,
        )
        resumed, self._resumed_tools = self._resumed_tools or {}, None
        self.tool_cache.restore(resumed.get("cache", ()))
        self.tool_journal = None
        if self.config.checkpoint_dir is not None:  # resumed: the interrupted loop's calls are replayed
            self.tool_journal = ToolJournal(self.config.checkpoint_dir, replay_after=resumed.get("journal_lines"))
            tools = [self.tool_journal.wrap(tool) for tool in tools]
        return Executor([self.tool_cache.wrap(tool) for tool in tools], max_iters=self.config.react_max_iters)

    # --- the run -----------------------------------------------------------------------------
    def run(self, task: str, context: str = "", images: list[str | Path] = (),
            bank: str | Path | MemoryStore | None = None) -> RunResult:
        """Answer ``task`` with ``context`` (long text, may be empty) and optional image files.

        ``bank``: a bank file (or a store) to start from, e.g. one written by :meth:`ingest`: the run works
        on a copy of its Query Graph and Interaction Tree under a new Insight Doc; the file is not changed.
        """
        started = time.monotonic()
        task = (task or "").strip()
        if not task:
            raise InputError("the task is empty: say what the agent should do")
        context = self._checked_context(context)
        doc = InsightDoc(task_goal=task)
        store, load_notices = self._start_store(bank, doc)
        staged = self.images.stage_images(doc.doc_id, [Path(p) for p in images])  # checks every image first
        # Input is valid: from here on this run owns the bank's memory.
        state = self._begin(store)
        for notice in load_notices:
            state.notices.append(notice)
            self._emit("notice", state, notice)
        self._recall_across_tasks(state, task)
        with self.meter.counting():
            if staged and reads_images(self.lms.for_agent("executor")) is False:
                self._keep_unrecognised(state)
            termination = self._loop(state, context)
        result = self._result(state, termination, started)
        self._remember_across_tasks(result)
        return result

    def _recall_across_tasks(self, state: RunState, task: str) -> None:
        """Earlier tasks' items for ``task`` into <memory> (``config.recall``; by default when a store exists)."""
        for notice in self.session.recall(task):
            self._emit("notice", state, notice)

    def _remember_across_tasks(self, result: RunResult) -> None:
        """What the route keeps of the finished task into long-term memory (``config.remember``)."""
        if not self.config.remember:
            return
        result.notices.extend(self.session.remember(result.answer, result.citations))

    def start_session(self, goal: str, *, bank: str | Path | MemoryStore | None = None,
                      namespace: str | None = None) -> TaskSession:
        """A task for an agent outside this bank's loop (see :mod:`amb_dspy.session`), on this bank's agents,
        LMs and embedding model, which its sessions share; this bank's own run is not touched."""
        return TaskSession.start(goal, bank=bank, namespace=namespace, config=self.config, agents=self.agents,
                                 embedder=self.embedder, images=None,
                                 lms=resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms))

    def resume(self, directory: str | Path) -> RunResult:
        """Continue the run whose checkpoint is in ``directory`` from its last completed loop (see
        :mod:`amb_dspy.checkpoint`); it goes on checkpointing there."""
        started = time.monotonic()
        notices: list[str] = []
        state, usage, store = read_checkpoint(directory, self.embedder, notices)
        self.config = self.config.model_copy(update={"checkpoint_dir": Path(directory)})
        self._begin(store)
        self._run = state
        self._resumed_tools = read_tool_record(directory)
        self.meter.restore(usage)
        for notice in notices:
            self._emit("notice", state, notice)
        with self.meter.counting():
            termination = self._loop(state, "", resumed=True)
        return self._result(state, termination, started)

    def _result(self, state: RunState, termination: str, started: float) -> RunResult:
        self._emit("done", state, termination)
        return RunResult(
            answer=state.answer,
            termination=termination,
            loops=state.loops,
            insight_doc=self.store.insight_doc.model_dump(mode="json"),
            query_graph={"nodes": [n.model_dump(mode="json", exclude={"embedding"}) for n in self.store.graph.nodes_dict.values()],
                         "edges": [list(e) for e in self.store.graph.edges()]},
            interaction_tree=self.store.tree.to_dict(),
            usage=self.meter.usage(),
            errors=state.errors,
            notices=state.notices,
            fallbacks=dict(state.fallbacks),
            hops=[hop.model_dump(mode="json") for hop in self.store.hops],
            citations=[self._citation(node_id) for node_id in state.citations if node_id in self.store.graph],
            extractive=state.extractive,
            seconds=round(time.monotonic() - started, 3),
        )

    def ingest(self, context: str, name: str = "context", *, into: MemoryStore | None = None,
               date: str = "") -> IngestResult:
        """Memory conversion of ``context`` alone (classification -> structure -> nodes -> analysis): no
        planning, no executor. Export the bank afterwards and answer many tasks from it with ``run(bank=...)``.

        ``into``: a store to add the document to (``bank.store`` after an earlier ingest, or
        ``MemoryStore.load(path, embedder)``), its new nodes related to the old ones; a new store by default.
        The document is its own entry, named ``name`` and dated ``date`` when given; a document the store
        already holds (the same text) adds nothing (``added`` False)."""
        started = time.monotonic()
        context = self._checked_context(context)
        if not context.strip():
            raise InputError("nothing to ingest: the context is empty")
        state = self._begin(into if into is not None else MemoryStore(self.embedder, InsightDoc(task_goal=f"Ingest {name}")))
        added = True
        with self.meter.counting():
            try:
                added = self.memory.add_document(state, context, name, date) is not None
            except LMCallCapReached as exc:
                state.errors.append(str(exc))
        self._emit("done", state, "ingested" if added else "unchanged: already in the bank")
        return IngestResult(nodes=len(self.store.graph), edges=self.store.graph.edge_count, usage=self.meter.usage(),
                            fallbacks=dict(state.fallbacks), errors=state.errors, seconds=round(time.monotonic() - started, 3),
                            added=added)

    def _checked_context(self, context: str) -> str:
        context = context or ""
        if len(context.encode("utf-8")) > self.config.max_context_bytes:
            raise InputError(
                f"the context is {len(context.encode('utf-8')) / 1e6:.1f} MB, over the "
                f"{self.config.max_context_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)"
            )
        return context

    def _start_store(self, bank: str | Path | MemoryStore | None, doc: InsightDoc) -> tuple[MemoryStore, list[str]]:
        return start_store(self.embedder, bank, doc)

    def _begin(self, store: MemoryStore) -> RunState:
        """Make ``store`` this bank's memory for a new run, with the LMs active now and a fresh meter."""
        self.lms = resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms)
        self.notice = self.lms.notice
        self.session = TaskMemory(store, config=self.config, agents=self.agents, embedder=self.embedder,
                                   lms=self.lms, emit=self._emit, images=self.images)
        return self._run

    def _structure_threads(self) -> int:
        return self.session.structure_threads()

    def _citation(self, node_id: str) -> dict[str, str]:
        return self.session.citation(node_id)

    def _keep_unrecognised(self, state: RunState) -> None:
        """A text-only executor cannot recognise images: keep them as attachments and say so, before any LM call."""
        names = ", ".join(image.original_name for image in self.images.pending_images(state.doc_id))
        model = getattr(self.lms.for_agent("executor"), "model", "the executor's LM")
        notice = f"{model} reads text only: image(s) {names} kept as attachments, not recognised"
        attachments = self.images.store_images(state.doc_id)
        self.store.record_entry(InteractionEntry(
            text=f"Images attached to the task, not recognised: {names}",
            metadata={"source": "image", "recognised": False, "reason": notice}, attachments=tuple(attachments)))
        state.notices.append(notice)
        self._emit("notice", state, notice)

    def _loop(self, state: RunState, context: str, resumed: bool = False) -> str:
        """Initialise (unless resumed), execute until done or capped, answer; returns how the run ended."""
        termination = "running"
        try:
            executor = self._build_executor()  # a bad corpus fails before any LM call
            if not resumed:
                self._initialise(state, context)
                self._checkpoint(state)
            while True:
                stop = self._termination(state)
                if stop:
                    termination = stop
                    break
                if state.loops >= self.config.max_loops:
                    termination = "loop_cap"
                    break
                state.loops += 1
                self._step(state, executor)
                self._checkpoint(state)
            self._final_answer(state, executor)
            if self.tool_journal is not None:  # resumed in the final pass: what it did not ask again is kept
                keep_unasked(self.tool_journal, self.store, self.tool_cache)
            if state.extractive:
                termination = EXTRACTIVE_TERMINATION  # never goal_met: no LM answered
        except LMCallCapReached as exc:
            termination = "lm_call_cap"
            state.errors.append(str(exc))
        finally:
            self.images.cleanup(state.doc_id)
        if termination == "goal_met" and not state.answer:
            termination = "no_answer"  # the goal is met only by an answer
        return termination

    def _checkpoint(self, state: RunState) -> None:
        if self.config.checkpoint_dir is None:
            return
        first = not (self.config.checkpoint_dir / CHECKPOINT_FILE).exists()
        tools = None
        if self.tool_journal is not None:
            keep_unasked(self.tool_journal, self.store, self.tool_cache)
            tools = {"journal_lines": self.tool_journal.lines, "cache": self.tool_cache.state()}
        write_checkpoint(self.config.checkpoint_dir, state, self.meter.usage(), self.store, tools=tools)
        if first:
            self._emit("checkpoint", state, str(self.config.checkpoint_dir))

    def export(self, path: str | Path) -> None:
        self.store.export(path)
