"""TaskSession: one task's memory, worked step by step, by the built-in loop or by any other agent.

:meth:`MemoryBank.run <amb_dspy.bank.MemoryBank.run>` owns a whole loop; an agent that already exists (a
coding agent, a LangGraph supervisor, an MCP client) drives a task itself and hands the bank its tool
results. Both work the task's memory through this one owner::

    session = MemoryBank(config).start_session("Which river flows through the festival's city?")
    session.observe("search", {"query": "Tidewater Lantern Festival"}, result_text)  # tool cache + conversion
    prompt = session.context()          # the <task> and <memory> blocks the adapter writes
    session.deep_retrieval(node_id)     # the raw record behind a node
    session.plan()                      # the planning agent revises the Insight Doc: the next subtask
    session.complete(task, "success", answer)
    session.export(path); session.close(remember=True)

A session holds the task's store (graph, tree, indexes), its memory writer, adapter, tool cache, run
state and usage meter; the agents, their LMs and the embedding model are shared with the bank that
started it and with its other sessions. Public methods run on the task's own thread, one at a time and
in order, many tasks at once; ``observe(..., wait=False)`` returns before its conversion is done. The
operations themselves are :class:`~amb_dspy.task_memory.TaskMemory`'s, which the bank's loop runs on, so
the bank and an outside agent turn a tool result into memory, and plan, the same way.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.agents import is_cross_validation_task
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError, one_line
from amb_dspy.executor import ExecutionResult, ToolCall, citations
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.lm import AgentLMs
from amb_dspy.run_state import revised
from amb_dspy.storage import CompletedTask, InsightDoc, TaskStatus, TaskType
from amb_dspy.task_memory import SessionAttribute, TaskMemory, start_store
from amb_dspy.tools import DeepRetrievalTool

__all__ = ["Observed", "SessionAttribute", "TaskSession", "start_store"]

MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Observed:
    """What became of an observed tool result: its entry and nodes, or the earlier ones it repeats."""

    entry_id: str | None
    node_ids: list[str] = field(default_factory=list)
    repeat: bool = False
    failure: str = ""  # why no node was made (the raw text is still kept in the tree)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "node_ids": self.node_ids, "repeat": self.repeat,
                "failure": self.failure, "message": self.message}


def _checked_text(what: str, text: Any, limit: int, *, empty_ok: bool = False) -> str:
    if not isinstance(text, str):
        raise InputError(f"{what} must be text, not {type(text).__name__}")
    if not empty_ok and not text.strip():
        raise InputError(f"{what} is empty")
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InputError(f"{what} is {size} bytes, over the {limit}-byte limit (AMB_MAX_CONTEXT_BYTES)")
    return text


def _serial(method: Callable) -> Callable:
    """Run on the task's own worker thread, after every request before it (see :meth:`TaskSession.submit`)."""
    @functools.wraps(method)
    def call(self: TaskSession, *args, **kwargs):
        if getattr(self._on_worker, "value", False):  # already in one of this task's requests
            return method(self, *args, **kwargs)
        return self.submit(functools.partial(method, self, *args, **kwargs)).result()

    return call


class TaskSession(TaskMemory):
    """One task's memory, worked step by step from outside the bank's loop (see the module docstring)."""

    def __init__(self, store: MemoryStore, *, config: AmbConfig, agents: dict[str, dspy.Module], embedder: Any,
                 lms: AgentLMs, emit: Callable[..., None] | None = None, images: Any = None,
                 namespace: str | None = None):
        super().__init__(store, config=config, agents=agents, embedder=embedder, lms=lms, emit=emit, images=images,
                         namespace=namespace)
        # One request at a time per task, in the order they came: each runs on the task's own thread.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amb-task")
        self._on_worker = threading.local()
        self._queued = 0
        self._queue_lock = threading.Lock()
        self.closed = False

    @classmethod
    def start(cls, goal: str, *, bank: str | Path | MemoryStore | None = None, namespace: str | None = None,
              **shared: Any) -> TaskSession:
        """A session for ``goal``, empty or on a copy of ``bank`` (a file or a store; never changed),
        with what long-term memory recalls for the goal in ``<memory>``. ``shared``: the keyword
        arguments of the constructor but the store (config, agents, embedder, lms...)."""
        config = shared["config"]
        goal = " ".join(_checked_text("the goal", goal, config.max_context_bytes).split())
        if namespace is not None:
            _checked_text("the namespace", namespace, MAX_NAME_CHARS)
        store, notices = start_store(shared["embedder"], bank, InsightDoc(task_goal=goal))
        session = cls(store, namespace=namespace, **shared)
        session.state.notices.extend(notices)
        session.recall(goal)
        return session

    # --- one request at a time -----------------------------------------------------------------
    def submit(self, job: Callable[[], Any]) -> Future:
        """Queue ``job`` on the task's worker thread (in the caller's context: its DSPy settings); a closed
        task refuses it. Requests of one task run one at a time, in order; tasks run at once."""
        if self.closed:
            raise InputError(f"task {self.task_id} is closed")
        context = contextvars.copy_context()

        def run() -> Any:
            self._on_worker.value = True
            try:
                if self.closed:
                    raise InputError(f"task {self.task_id} is closed")
                return context.run(job)
            finally:
                with self._queue_lock:
                    self._queued -= 1

        with self._queue_lock:
            self._queued += 1
        try:
            return self._worker.submit(run)
        except RuntimeError:  # closed by another request meanwhile: its thread takes no more work
            with self._queue_lock:
                self._queued -= 1
            raise InputError(f"task {self.task_id} is closed") from None

    @property
    def busy(self) -> bool:
        """Whether a request of this task is running or waiting."""
        with self._queue_lock:
            return self._queued > 0

    # --- the outside agent's interface ---------------------------------------------------------
    def observe(self, tool: str, arguments: dict[str, Any] | None, result: str, *, wait: bool = True) -> Observed:
        """Hand over what ``tool(**arguments)`` returned: a result this task already holds is a repeat (not
        converted again); any other goes through memory conversion, its raw text kept in the tree.

        ``wait=False`` returns once the input is checked and queued: the conversion runs on the task's
        thread while the caller goes on, and every later request of the task (context, plan, export...)
        runs after it. A failure there is kept in the task's errors."""
        tool = _checked_text("the tool name", tool, MAX_NAME_CHARS).strip()
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise InputError(f"the arguments must be an object (name: value), not {type(arguments).__name__}")
        text = _checked_text("the result", result, self.config.max_context_bytes)
        future = self.submit(functools.partial(self._observe, tool, dict(arguments), text))
        if wait:
            return future.result()
        future.add_done_callback(self._report_failure)
        return Observed(None, message=f"{tool} result queued: it becomes memory before the task's next request")

    def _report_failure(self, future: Future) -> None:
        error = future.exception()
        if error is not None:
            self.state.errors.append(f"observing a result failed: {type(error).__name__}: {one_line(error)}")

    def _observe(self, tool: str, arguments: dict[str, Any], text: str) -> Observed:
        repeat = self.tool_cache.observed(tool, arguments, text)
        if repeat is not None:
            entry_id = self.tool_cache.entry_of(tool, arguments)
            nodes = [n for n, entries in self.store.tree.node_to_entries.items() if entry_id in entries]
            return Observed(entry_id, nodes, repeat=True, message=repeat.full.split("\n", 1)[0])
        call = ToolCall(name=tool, args=dict(arguments), observation=text)
        doc = self.store.insight_doc
        metadata = {"source": "observed", "task": doc.current_task or doc.task_goal,
                    "tool_calls": [{"name": tool, "args": call.args}]}
        with self.meter.counting():
            nodes, failure = self.remember_calls([call], metadata)
        self._new_nodes.extend(nodes)
        entry_id = self.tool_cache.entry_of(tool, arguments)
        if entry_id is None:  # conversion failed: the raw text is kept in an entry of its own
            entry_id = next(e.entry_id for e in reversed(self.store.tree.entries.values()) if e.text == text)
        return Observed(entry_id, [n.id for n in nodes if n.id in self.store.graph], failure=failure,
                        message=f"{len(nodes)} memory node(s) from {tool}" + (f"; {failure}" if failure else ""))

    @_serial
    def context(self, budget: int | None = None) -> str:
        """The ``<task>`` and ``<memory>`` blocks for the next step; ``budget``: tokens of ``<memory>``."""
        if budget is not None and not (isinstance(budget, int) and 50 <= budget <= 100_000):
            raise InputError(f"the budget must be a whole number of tokens from 50 to 100000, not {budget!r}")
        return self.prompt(self.store.insight_doc, budget)

    @_serial
    def deep_retrieval(self, node_id: str, sources_only: bool = False) -> str:
        """The raw record behind a node, as JSON (see :mod:`amb_dspy.tools.deep_retrieval`)."""
        node_id = _checked_text("the node id", node_id, MAX_NAME_CHARS)
        out = DeepRetrievalTool(self.store, self.config.storage_dir)(node_id, sources_only=sources_only)
        if out.startswith("Error:"):
            raise InputError(out[len("Error:"):].strip())
        return out

    @_serial
    def plan(self, report: str = "") -> InsightDoc:
        """The planning agent judges the pending subtask (by ``report`` and what was observed since the last
        plan) and sets the next one, a conflict's cross-validation first; returns the Insight Doc."""
        report = _checked_text("the report", report, self.config.max_context_bytes, empty_ok=True)
        new_nodes, self._new_nodes = self._new_nodes, []
        with self.meter.counting():
            self.plan_step(new_nodes, report=report, failure="")
        return self.store.insight_doc

    @_serial
    def complete(self, description: str = "", status: str = "success", answer: str = "") -> InsightDoc:
        """Record a finished subtask as the caller judged it (``description``: the pending one when empty).
        The goal itself, or nothing left to do, makes ``answer`` the task's answer; a cross-validation task
        merges its conflicting nodes with ``answer`` as the evidence (the integration agent)."""
        if str(status).strip().lower() not in ("success", "failure"):
            raise InputError(f"the status must be success or failure, not {status!r}")
        limit = self.config.max_context_bytes
        description = " ".join(_checked_text("the description", description, limit, empty_ok=True).split())
        answer = _checked_text("the answer", answer, limit, empty_ok=True).strip()
        doc = self.store.insight_doc
        description = description or doc.current_task or doc.task_goal
        if self.state.active is not None and description == doc.current_task and is_cross_validation_task(description):
            with self.meter.counting():
                self._new_nodes.extend(self.memory.resolve_conflict(self.state, ExecutionResult(answer))[0])
        kind = TaskType.CROSS_VALIDATE if is_cross_validation_task(description) else TaskType.NORMAL
        done = CompletedTask(type=kind, description=description, status=TaskStatus(str(status).strip().lower()),
                             context=" ".join(answer.split())[:300])
        pending = [task for task in doc.pending_tasks if task != description]
        self.store.set_insight_doc(revised(doc, completed=[*doc.completed_tasks, done], pending=pending))
        if description == doc.task_goal or not pending:
            self.state.answer, self.state.citations = citations(ExecutionResult(answer), self.store.graph.nodes_dict)
        return self.store.insight_doc

    @_serial
    def export(self, path: str | Path | None = None) -> Path:
        """Write the task's bank file (default ``STORAGE_DIR/sessions/<task id>.json``); returns its path."""
        path = Path(path) if path else self.config.storage_dir / "sessions" / f"{self.task_id}.json"
        return self.store.export(path)

    @_serial
    def close(self, remember: bool | None = None) -> dict[str, Any]:
        """End the task: its answer into long-term memory when ``remember`` (default ``config.remember``);
        every later request is refused. Returns the task's summary."""
        notices = []
        if self.config.remember if remember is None else remember:
            cited = [self.citation(i) for i in self.state.citations if i in self.store.graph]
            notices.extend(self.remember(self.state.answer, cited) or [f"remembered in namespace {self.namespace!r}"])
        self.closed = True
        self._worker.shutdown(wait=False)  # this request is the last one it runs
        return {"task_id": self.task_id, "answer": self.state.answer, "nodes": len(self.store.graph),
                "entries": len(self.store.tree), "errors": list(self.state.errors),
                "notices": [*self.state.notices, *notices], "fallbacks": dict(self.state.fallbacks)}
