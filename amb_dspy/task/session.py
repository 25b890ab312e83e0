"""TaskSession: everything about one task, worked by the bank's loop or step by step by any other agent.

:meth:`MemoryBank.run <amb_dspy.bank.MemoryBank.run>` starts a session and runs the spec's loop on it
(:class:`~amb_dspy.task.loop.TaskLoop`); an agent that already exists (a coding agent, a LangGraph
supervisor, an MCP client) drives a session itself and hands it its tool results::

    session = MemoryBank(config).start_session("Which river flows through the festival's city?")
    session.observe("search", {"query": "Tidewater Lantern Festival"}, result_text)  # tool cache + conversion
    prompt = session.context()          # the <task> and <memory> blocks the adapter writes
    session.deep_retrieval(node_id)     # the raw record behind a node
    session.plan()                      # the planning agent revises the Insight Doc: the next subtask
    session.complete(task, "success", answer)
    session.export(path); session.close(remember=True)

A session holds its task's memory (:class:`~amb_dspy.task.memory.TaskMemory`, ``session.memory``: the
store, run state, agent runner, writer, adapter and tool cache, built there) and owns what is the session's
own: the tool journal, usage meter, progress reports, keeper and thread, and the checkpoint (:meth:`save`,
:meth:`load`). The agents, their LMs and the embedding model are shared with the bank that started it and
with its other sessions, so one bank runs many tasks at once. Public methods run on the task's own thread, one at a time and in order
(:mod:`amb_dspy.task.worker`); ``observe(..., wait=False)`` returns before its conversion is done.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

import dspy

from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError, one_line
from amb_dspy.lm import AgentLMs, UsageMeter
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc, TaskKind, TaskStatus
from amb_dspy.task import checkpoint
from amb_dspy.task.adapter import PromptBlocks
from amb_dspy.task.executor import ExecutionResult, ToolCall, citations
from amb_dspy.task.images import ImageStager
from amb_dspy.task.inputs import MAX_NAME_CHARS, Observed, checked_text, start_store
from amb_dspy.task.journal import ToolJournal, keep_unasked
from amb_dspy.task.memory import TaskMemory
from amb_dspy.task.state import ProgressEvent, RunState, revised
from amb_dspy.task.worker import TaskWorker, serial
from amb_dspy.tools import DeepRetrievalTool

__all__ = ["Observed", "TaskKeeper", "TaskSession", "start_store"]


class TaskKeeper(Protocol):
    """Where a session's changes are committed as they happen (the MCP server's task store,
    :mod:`amb_dspy.serve.task_store`), so that its task outlives the process."""

    def observing(self, session: TaskSession, tool: str, arguments: dict[str, Any], text: str) -> int:
        """Keep a result handed to :meth:`TaskSession.observe` before its call returns; a ticket for :meth:`changed`."""

    def changed(self, session: TaskSession, observed: int | None = None) -> None:
        """Commit the task as it is now (on its thread, after a change); ``observed``: the ticket of the result
        now in memory, no longer to be kept apart."""

    def closed(self, session: TaskSession) -> None:
        """The task was ended: record it, and where its bank is."""


class TaskSession:
    """One task: its memory, its own parts and its outside interface (see the module docstring).

    ``progress``: called with a :class:`~amb_dspy.task.state.ProgressEvent` at each phase; ``images``: the
    task's :class:`~amb_dspy.task.images.ImageStager` (None where no image can be attached); ``state``: the
    run state to go on from (a checkpoint's).
    """

    def __init__(self, store: MemoryStore, *, config: AmbConfig, agents: dict[str, dspy.Module], embedder: Any,
                 lms: AgentLMs, progress: Callable[[ProgressEvent], None] | None = None,
                 images: ImageStager | None = None, namespace: str | None = None, state: RunState | None = None):
        self.config, self.agents, self.embedder, self.lms = config, agents, embedder, lms
        self.owner: str | None = None  # the key that started it on a server with keys: its exports are its own
        self.progress = progress
        self.memory = TaskMemory(store, config=config, agents=agents, embedder=embedder, lms=lms, emit=self.emit,
                                 images=images, namespace=namespace, state=state)
        self.tool_journal: ToolJournal | None = None  # with a checkpoint: every tool response as it returns
        self._resumed_tools: dict[str, Any] = {}  # a resumed task's checkpoint record of its tools
        # The meter belongs to this task, not to its LMs, which other tasks may share.
        self.meter = UsageMeter(max_calls=config.loops.max_lm_calls)
        self.worker = TaskWorker(self.task_id)
        self._new_nodes: list = []  # observed since the last plan
        self.keeper: TaskKeeper | None = None  # with one, every change is committed before its request returns

    @property
    def store(self) -> MemoryStore:
        """The task's store (its memory's)."""
        return self.memory.store

    @property
    def state(self) -> RunState:
        """The task's run state (its memory's)."""
        return self.memory.state

    @property
    def images(self) -> ImageStager | None:
        """The task's staged images (its memory's; None where none can be attached)."""
        return self.memory.images

    @property
    def namespace(self) -> str:
        """Where the task's long-term memory is read and written (its memory's)."""
        return self.memory.namespace

    @property
    def task_id(self) -> str:
        return self.store.insight_doc.doc_id

    @property
    def closed(self) -> bool:
        return self.worker.closed

    @property
    def busy(self) -> bool:
        """Whether a request of this task is running or waiting."""
        return self.worker.busy

    def submit(self, job: Callable[[], Any]) -> Future:
        """Queue ``job`` on the task's thread (see :class:`~amb_dspy.task.worker.TaskWorker`)."""
        return self.worker.submit(job)

    # --- starting, saving and loading ------------------------------------------------------------
    @classmethod
    def start(cls, goal: str, *, bank: str | Path | MemoryStore | None = None, namespace: str | None = None,
              attach: Sequence[str | Path] = (), notice: str = "", **shared: Any) -> TaskSession:
        """The one door to a new task (``MemoryBank.run``, the MCP server and the integrations all come in here):
        a session for ``goal``, empty or on a copy of ``bank`` (a file or a store; never changed), with what
        long-term memory recalls for the goal in ``<memory>``. ``attach``: image files staged for the task by
        the ``images`` stager, every one checked before the session exists; ``notice``: a line reported before
        the loading's and the recall's (the strategy the task's LM takes). ``shared``: the keyword arguments of
        the constructor but the store (config, agents, embedder, lms...)."""
        config = shared["config"]
        goal = " ".join(checked_text("the goal", goal, config.limits.max_context_bytes).split())
        if namespace is not None:
            checked_text("the namespace", namespace, MAX_NAME_CHARS)
        store, notices = start_store(shared["embedder"], bank, InsightDoc(task_goal=goal), config.view.bank_cache)
        if attach:
            shared["images"].stage_images(store.insight_doc.doc_id, [Path(p) for p in attach])
        session = cls(store, namespace=namespace, **shared)
        if notice:
            session.emit("notice", notice)
        for line in notices:
            session.notify(line)
        for line in session.memory.recall(goal):
            session.emit("notice", line)
        if len(store.graph):  # a bank's lines laid out on the task's thread while its agent thinks, not on its first request
            session.submit(session.memory.adapter.view.warm)
        return session

    def save(self, directory: str | Path | None = None) -> Path:
        """Write the task's checkpoint (default ``config.checkpoint_dir``), the tool responses the resumed
        task did not ask for again kept first (see :mod:`amb_dspy.task.checkpoint`)."""
        if directory is None and self.config.paths.checkpoint_dir is None:
            raise InputError("no checkpoint folder: name one, or set checkpoint_dir (amb run --checkpoint DIR)")
        directory = Path(directory or self.config.paths.checkpoint_dir)
        first = not (directory / checkpoint.CHECKPOINT_FILE).exists()
        tools = None
        if self.tool_journal is not None:
            self.keep_unasked()
            tools = {"journal_lines": self.tool_journal.lines, "cache": self.memory.tool_cache.state()}
        path = checkpoint.write_checkpoint(directory, self.state, self.meter.usage(), self.store, tools=tools)
        if first:
            self.emit("checkpoint", str(directory))
        return path

    @classmethod
    def load(cls, directory: str | Path, *, config: AmbConfig, **shared: Any) -> TaskSession:
        """The task checkpointed in ``directory``, to go on from its last completed loop and on checkpointing
        there (its own config names the folder; ``config`` is not changed). BankFileError if it cannot."""
        notices: list[str] = []
        state, usage, store = checkpoint.read_checkpoint(directory, shared["embedder"], notices)
        config = config.model_copy(update={"checkpoint_dir": Path(directory)})
        images = ImageStager(config.paths.temp_dir, config.paths.storage_dir)
        session = cls(store, config=config, state=state, images=images, **shared)
        session._resumed_tools = checkpoint.read_tool_record(directory)
        session.meter.restore(usage)
        for notice in notices:
            session.emit("notice", notice)
        return session

    def snapshot(self) -> dict[str, Any]:
        """What the task holds besides its store, as JSON: its run state, usage, tool cache, the nodes observed
        since the last plan, its namespace and what long-term memory recalled (:meth:`resume` reads it back)."""
        memory = self.memory
        return {"run": checkpoint.run_record(memory.state), "usage": self.meter.usage(),
                "cache": memory.tool_cache.state(), "new_nodes": [node.id for node in self._new_nodes],
                "namespace": memory.namespace, "recalled": memory.adapter.recalled}

    def resume(self, snapshot: dict[str, Any]) -> None:
        """Go on from :meth:`snapshot` (a session just made on the same store); KeyError, TypeError or ValueError
        when it is not one."""
        memory = self.memory
        memory.state = checkpoint.run_state(snapshot["run"])
        self.meter.restore(checkpoint.usage_counts(snapshot["usage"]))
        memory.tool_cache.restore(snapshot["cache"])
        self._new_nodes = [self.store.graph.node(i) for i in snapshot["new_nodes"] if i in self.store.graph]
        memory.namespace = str(snapshot["namespace"])
        memory.adapter.recalled = str(snapshot["recalled"])

    def replay(self, pending: list[tuple[int, str, dict[str, Any], str]]) -> None:
        """Results the keeper held that had not become memory yet (``(ticket, tool, arguments, text)``, in the
        order they came), queued again on the task's thread before any later request."""
        for ticket, tool, arguments, text in pending:
            self.submit(functools.partial(self._observe_kept, tool, arguments, text, ticket)).add_done_callback(
                self._report_failure)

    def _changed(self, observed: int | None = None) -> None:
        if self.keeper is not None:
            self.keeper.changed(self, observed)

    # --- progress and tools ----------------------------------------------------------------------
    def emit(self, phase: str, message: str = "") -> None:
        """Report the task's progress at ``phase`` to the ``progress`` callback, if any."""
        if self.progress is None:
            return
        state, totals = self.state, self.meter.total()
        self.progress(ProgressEvent(
            phase=phase, loop=state.loops, nodes=len(self.store.graph), edges=self.store.graph.edge_count,
            conflicts=len(state.conflicts) + (state.active is not None), lm_calls=totals["calls"],
            tokens=totals["prompt_tokens"] + totals["completion_tokens"], message=message, usage=self.meter.usage(),
            fallbacks=dict(state.fallbacks),
        ))

    def notify(self, notice: str) -> None:
        """A notice for the user: kept in the run state and reported."""
        self.state.notices.append(notice)
        self.emit("notice", notice)

    def wrap_tools(self, tools: list[dspy.Tool]) -> list[dspy.Tool]:
        """``tools`` answered from this task's tool cache and, when it checkpoints, journaled (a resumed task
        replays the interrupted loop's calls): see :mod:`amb_dspy.task.tool_cache` and :mod:`amb_dspy.task.journal`."""
        resumed, self._resumed_tools = self._resumed_tools, {}
        self.memory.tool_cache.restore(resumed.get("cache", ()))
        self.tool_journal = None
        if self.config.paths.checkpoint_dir is not None:
            self.tool_journal = ToolJournal(self.config.paths.checkpoint_dir, replay_after=resumed.get("journal_lines"))
            tools = [self.tool_journal.wrap(tool) for tool in tools]
        return [self.memory.tool_cache.wrap(tool) for tool in tools]

    def keep_unasked(self) -> None:
        """The journaled responses a resumed task did not ask for again, kept in memory (see the journal)."""
        if self.tool_journal is not None:
            keep_unasked(self.tool_journal, self.store, self.memory.tool_cache)

    # --- the outside agent's interface ---------------------------------------------------------
    def observe(self, tool: str, arguments: dict[str, Any] | None, result: str, *, wait: bool = True) -> Observed:
        """Hand over what ``tool(**arguments)`` returned: a result this task already holds is a repeat (not
        converted again); any other goes through memory conversion, its raw text kept in the tree.

        ``wait=False`` returns once the input is checked and queued: the conversion runs on the task's
        thread while the caller goes on, and every later request of the task (context, plan, export...)
        runs after it. A failure there is kept in the task's errors."""
        tool = checked_text("the tool name", tool, MAX_NAME_CHARS).strip()
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise InputError(f"the arguments must be an object (name: value), not {type(arguments).__name__}")
        text = checked_text("the result", result, self.config.limits.max_context_bytes)
        ticket = None if self.keeper is None else self.keeper.observing(self, tool, dict(arguments), text)
        future = self.submit(functools.partial(self._observe_kept, tool, dict(arguments), text, ticket))
        if wait:
            return future.result()
        future.add_done_callback(self._report_failure)
        return Observed(None, message=f"{tool} result queued: it becomes memory before the task's next request")

    def _report_failure(self, future: Future) -> None:
        error = future.exception()
        if error is not None:
            self.state.errors.append(f"observing a result failed: {type(error).__name__}: {one_line(error)}")

    def _observe_kept(self, tool: str, arguments: dict[str, Any], text: str, ticket: int | None) -> Observed:
        """:meth:`_observe`, then the task committed (the result no longer kept apart: it is memory, or failed)."""
        try:
            return self._observe(tool, arguments, text)
        finally:
            self._changed(ticket)

    def _observe(self, tool: str, arguments: dict[str, Any], text: str) -> Observed:
        memory = self.memory
        repeat = memory.tool_cache.observed(tool, arguments, text)
        if repeat is not None:
            entry_id = memory.tool_cache.entry_of(tool, arguments)
            nodes = [n for n, entries in self.store.tree.node_to_entries.items() if entry_id in entries]
            return Observed(entry_id, nodes, repeat=True, message=repeat.full.split("\n", 1)[0])
        call = ToolCall(name=tool, args=dict(arguments), observation=text)
        noticed = len(self.state.notices)
        with self.meter.counting():
            nodes, failure = memory.convert_calls([call], memory.tool_metadata([call], source="observed"))
        said = "".join(f"; {notice}" for notice in self.state.notices[noticed:])  # e.g. what was kept raw, and why
        self._new_nodes.extend(nodes)
        entry_id = memory.tool_cache.entry_of(tool, arguments)
        if entry_id is None:  # conversion failed: the raw text is kept in an entry of its own
            entry_id = next(e.entry_id for e in reversed(self.store.tree.entries.values()) if e.text == text)
        return Observed(entry_id, [n.id for n in nodes if n.id in self.store.graph], failure=failure,
                        message=f"{len(nodes)} memory node(s) from {tool}" + (f"; {failure}" if failure else "") + said)

    def context(self, budget: int | None = None) -> str:
        """The ``<task>`` and ``<memory>`` blocks for the next step; ``budget``: tokens of ``<memory>``."""
        return self.context_blocks(budget).text

    @serial
    def context_blocks(self, budget: int | None = None) -> PromptBlocks:
        """The two blocks of :meth:`context`, apart (what the MCP tool returns as fields)."""
        if budget is not None and not (isinstance(budget, int) and 50 <= budget <= 100_000):
            raise InputError(f"the budget must be a whole number of tokens from 50 to 100000, not {budget!r}")
        return self.memory.prompt_blocks(self.store.insight_doc, budget)

    @serial
    def deep_retrieval(self, node_id: str, sources_only: bool = False) -> str:
        """The raw record behind a node, as JSON (see :mod:`amb_dspy.tools.deep_retrieval`)."""
        node_id = checked_text("the node id", node_id, MAX_NAME_CHARS)
        out = DeepRetrievalTool(self.store, self.config.paths.storage_dir)(node_id, sources_only=sources_only)
        if out.startswith("Error:"):
            raise InputError(out[len("Error:"):].strip())
        return out

    @serial
    def plan(self, report: str = "") -> InsightDoc:
        """The planning agent judges the pending subtask (by ``report`` and what was observed since the last
        plan) and sets the next one, a conflict's cross-validation first; returns the Insight Doc."""
        report = checked_text("the report", report, self.config.limits.max_context_bytes, empty_ok=True)
        new_nodes, self._new_nodes = self._new_nodes, []
        try:
            with self.meter.counting():
                self.memory.plan_step(new_nodes, report=report, failure="")
        finally:
            self._changed()
        return self.store.insight_doc

    @serial
    def complete(self, description: str = "", status: str = "success", answer: str = "") -> InsightDoc:
        """Record a finished subtask as the caller judged it (``description``: the pending one when empty).
        The goal itself, or nothing left to do, makes ``answer`` the task's answer; a cross-validation task
        merges its conflicting nodes with ``answer`` as the evidence (the integration agent)."""
        try:
            return self._complete(description, status, answer)
        finally:
            self._changed()

    def _complete(self, description: str, status: str, answer: str) -> InsightDoc:
        if str(status).strip().lower() not in ("success", "failure"):
            raise InputError(f"the status must be success or failure, not {status!r}")
        limit = self.config.limits.max_context_bytes
        description = " ".join(checked_text("the description", description, limit, empty_ok=True).split())
        answer = checked_text("the answer", answer, limit, empty_ok=True).strip()
        doc = self.store.insight_doc
        description = description or doc.current_task or doc.task_goal
        task = doc.pending_task
        validated = task is not None and task.kind is TaskKind.CROSS_VALIDATE and description == task.description
        if self.state.active is not None and validated:
            with self.meter.counting():
                self._new_nodes.extend(self.memory.resolve_conflict(ExecutionResult(answer)).nodes)
        completed = doc.with_finished(TaskStatus(str(status).strip().lower()), " ".join(answer.split())[:300],
                                      description)
        pending = [task for task in doc.pending if task.description != description]
        self.store.set_insight_doc(revised(doc, completed=completed, pending=pending))
        if description == doc.task_goal or not pending:
            self.state.answer, self.state.citations = citations(ExecutionResult(answer), self.store.graph.nodes_dict)
        return self.store.insight_doc

    @serial
    def export(self, path: str | Path | None = None) -> Path:
        """Write the task's bank file (default ``STORAGE_DIR/sessions/<task id>.json``); returns its path."""
        path = Path(path) if path else self.config.paths.storage_dir / "sessions" / f"{self.task_id}.json"
        return self.store.save(path)  # another name when a larger bank is there (storage.bank_file)

    @serial
    def close(self, remember: bool | None = None) -> dict[str, Any]:
        """End the task: its answer into long-term memory when ``remember`` (default ``config.remember``);
        every later request is refused. Returns the task's summary."""
        notices = []
        if self.config.longterm.remember if remember is None else remember:
            cited = [self.memory.citation(i) for i in self.state.citations if i in self.store.graph]
            notices.extend(self.memory.remember_longterm(self.state.answer, cited)
                           or [f"remembered in namespace {self.namespace!r}"])
        if self.keeper is not None:
            self.keeper.closed(self)
        self.worker.close()  # this request is the last one it runs
        return {"task_id": self.task_id, "answer": self.state.answer, "nodes": len(self.store.graph),
                "entries": len(self.store.tree), "errors": list(self.state.errors),
                "notices": [*self.state.notices, *notices], "fallbacks": dict(self.state.fallbacks)}
