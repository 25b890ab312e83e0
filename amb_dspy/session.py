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
started it and with its other sessions. Public methods take the session's lock: one request at a time
per task, many tasks at once. The loop's phases (:mod:`amb_dspy.phases`) call the same code, so the bank
and an outside agent turn a tool result into memory, and plan, the same way.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.adapter import MemoryAdapter, image_task, knowledge_text
from amb_dspy.agents import AgentError, ConflictNotification, cross_validation_task, is_cross_validation_task
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError, one_line
from amb_dspy.executor import ExecutionResult, ToolCall, citations
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.lm import AgentLMs, UsageMeter
from amb_dspy.longterm import LongTermError, format_recalled, open_store_or_notice, recall, remember_task
from amb_dspy.longterm.registry import store_exists
from amb_dspy.memory_writer import MemoryWriter, node_info
from amb_dspy.run_state import Conflict, RunState, revised
from amb_dspy.storage import CompletedTask, InsightDoc, QueryGraphNode, TaskStatus, TaskType
from amb_dspy.tool_cache import ToolCache
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


def start_store(embedder, bank: str | Path | MemoryStore | None, doc: InsightDoc) -> tuple[MemoryStore, list[str]]:
    """A new task's store, empty or a copy of a bank's graph and tree (BankFileError if the file is bad),
    and notices about the loading (a bank embedded with another model is embedded again)."""
    notices: list[str] = []
    if bank is None:
        return MemoryStore(embedder, doc), notices
    if not isinstance(bank, MemoryStore):
        bank = MemoryStore.load(bank, embedder, notices=notices)
    return bank.copy(doc), notices


def _checked_text(what: str, text: Any, limit: int, *, empty_ok: bool = False) -> str:
    if not isinstance(text, str):
        raise InputError(f"{what} must be text, not {type(text).__name__}")
    if not empty_ok and not text.strip():
        raise InputError(f"{what} is empty")
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InputError(f"{what} is {size} bytes, over the {limit}-byte limit (AMB_MAX_CONTEXT_BYTES)")
    return text


def _locked(method: Callable) -> Callable:
    """One request at a time per task; a closed session refuses every request."""
    @functools.wraps(method)
    def call(self: TaskSession, *args, **kwargs):
        with self.lock:
            if self.closed:
                raise InputError(f"task {self.task_id} is closed")
            return method(self, *args, **kwargs)

    return call


class TaskSession:
    """One task's memory and the operations on it (see the module docstring)."""

    def __init__(self, store: MemoryStore, *, config: AmbConfig, agents: dict[str, dspy.Module], embedder: Any,
                 lms: AgentLMs, emit: Callable[..., None] | None = None, images: Any = None,
                 namespace: str | None = None):
        self.config, self.agents, self.embedder, self.lms = config, agents, embedder, lms
        self.images = images  # the bank's ImageStager; None where no image can be attached
        self.namespace = namespace or config.namespace
        self.emit = emit or (lambda *_args: None)
        self.store = store
        self.memory_adapter = MemoryAdapter(store, k=config.retrieval_k, alpha=config.retrieval_alpha,
                                            view=config.memory_view, budget=config.memory_tokens)
        self.memory = MemoryWriter(store, config, self.call_agent, self.emit, threads=self.structure_threads)
        self.tool_cache = ToolCache(store, enabled=config.tool_cache, max_observation_chars=config.max_observation_chars)
        # The meter belongs to this task, not to its LMs, which other tasks may share.
        self.meter = UsageMeter(max_calls=config.max_lm_calls)
        self.state = RunState(doc_id=store.insight_doc.doc_id)
        self.lock = threading.RLock()
        self.closed = False
        self._count_lock = threading.Lock()
        self._new_nodes: list[QueryGraphNode] = []  # observed since the last plan

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

    @property
    def task_id(self) -> str:
        return self.store.insight_doc.doc_id

    # --- the memory agents -------------------------------------------------------------------
    def call_agent(self, name: str, **inputs):
        """Call an agent as ``config.policy`` says: with its LM (anything it raises but the LM-call cap
        becomes its AgentError), its deterministic policy, or the LM and then the policy when the LM's
        answer is unusable. Every use of a policy is counted in the run's ``fallbacks``."""
        if self.config.policy != "heuristic":
            try:
                with self.lms.use(name):
                    try:
                        return self.agents[name](**inputs)
                    except AgentError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - an agent's failure fails the task, never the run
                        raise AgentError(name, f"{type(exc).__name__}: {one_line(exc)}") from exc
            except AgentError as exc:
                if self.config.policy == "lm":
                    raise
                self.state.errors.append(f"{exc} (its deterministic policy was used)")
        if name == "structure":  # the policy favours the sentences the task asks about
            inputs = {**inputs, "task_goal": self.store.insight_doc.task_goal}
        with self._count_lock:  # agents' calls may run in threads (amb_dspy.parallel)
            self.state.fallbacks[name] = self.state.fallbacks.get(name, 0) + 1
        with self.lms.use(name):  # token counting and window caps follow the agent's LM
            return POLICIES[name](self.agents[name], self.embedder, **inputs)

    def structure_threads(self) -> int:
        with self.lms.use("structure"):
            return self.agents["structure"].lm_threads() if hasattr(self.agents["structure"], "lm_threads") else 1

    # --- what the loop's phases share with outside agents -------------------------------------
    def remember_calls(self, calls: list[ToolCall], metadata: dict[str, Any]) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of tool responses as one text; a later repeat of any of them is answered from
        the entry that records them (see :mod:`amb_dspy.tool_cache`)."""
        text = knowledge_text(calls)
        converted = self.memory.convert(self.state, text, metadata)
        entry = next((e for e in reversed(self.store.tree.entries.values()) if e.text == text), None)
        if entry is not None and "conversion_failed" not in entry.metadata:
            self.tool_cache.recorded(calls, entry.entry_id)  # a repeat reads its response back from here
        else:
            self.tool_cache.forget(calls)  # not memory yet: a repeat fetches and converts it again
        return converted

    def prompt(self, doc: InsightDoc, budget: int | None = None) -> str:
        """``<task>`` (with what this task already fetched) and ``<memory>`` for ``doc``'s pending task."""
        return self.memory_adapter.enhance_prompt(doc, already_fetched=self.tool_cache.already_fetched(),
                                                  budget=budget)

    def plan_step(self, new_nodes: list[QueryGraphNode], report: str, failure: str) -> bool:
        """Let planning revise the Insight Doc; False when the planning agent failed (a fallback was used)."""
        state, doc = self.state, self.store.insight_doc
        state.active = self.next_conflict()
        notification = None
        if state.active is not None:
            notification = ConflictNotification(conflicting_node_ids=state.active.node_ids,
                                                 conflict_description=state.active.description)
        self.emit("plan", state)
        try:
            plan = self.call_agent("planning", insight_doc=doc, new_memory_nodes=[
                node_info(n) for n in new_nodes if n.id in self.store.graph],
                conflict=notification, execution_report=report, failure_reason=failure)
            new_doc = revised(doc, completed=plan.completed_tasks, pending=plan.pending_tasks[:1])
            planned = True
        except AgentError as exc:
            planned = False
            state.errors.append(str(exc))
            completed = list(doc.completed_tasks)
            if doc.current_task:
                completed.append(CompletedTask(
                    type=TaskType.CROSS_VALIDATE if is_cross_validation_task(doc.current_task) else TaskType.NORMAL,
                    description=doc.current_task, status=TaskStatus.FAILURE, context=f"planning failed: {exc}"[:300],
                ))
            pending = [cross_validation_task(notification)] if notification else []
            new_doc = revised(doc, completed=completed, pending=pending)
        if state.active is None and self.images is not None:
            recognition = image_task([image.original_name for image in self.images.pending_images(state.doc_id)])
            if recognition:
                new_doc = revised(new_doc, pending=[recognition])
        self.store.set_insight_doc(new_doc)
        return planned

    def next_conflict(self) -> Conflict | None:
        while self.state.conflicts:
            conflict = self.state.conflicts.pop(0)
            alive = [i for i in conflict.node_ids if i in self.store.graph]
            if len(alive) >= 2:
                conflict.node_ids = alive
                return conflict
        return None

    def requeue(self, conflict: Conflict) -> None:
        """A conflict whose check failed goes back to the front of the queue, until the round cap."""
        if conflict.round + 1 > self.config.max_merge_rounds:
            self.state.errors.append(f"conflict between {conflict.node_ids} left unresolved: round cap reached")
            return
        self.state.conflicts.insert(0, Conflict(conflict.node_ids, conflict.description, conflict.round + 1))

    def citation(self, node_id: str) -> dict[str, str]:
        """A cited node as a user checks it: its topic and the first raw passage it was built from."""
        sources = self.store.source_texts(node_id)
        return {"node_id": node_id, "topic": self.store.graph.node(node_id).context,
                "source": " ".join(sources[0][3].split())[:300] if sources else ""}

    # --- long-term memory ----------------------------------------------------------------------
    def recall(self, query: str) -> list[str]:
        """Earlier tasks' items for ``query`` into <memory> (``config.recall``; by default when a store
        exists); returns the notices it added to the run state (a store that cannot be used)."""
        wanted = self.config.recall if self.config.recall is not None else store_exists(self.config)
        if not wanted:
            return []
        store, notice = open_store_or_notice(self.config, embedder=self.embedder)
        if store is None:
            self.state.notices.append(notice)
            return [notice]
        try:
            self.memory_adapter.recalled = format_recalled(recall(store, namespace=self.namespace, query=query))
        except LongTermError as exc:  # a failing store never breaks the task
            self.state.notices.append(f"no long-term memory this run: {exc}")
            return [self.state.notices[-1]]
        finally:
            store.close()
        return []

    def remember(self, answer: str, cited: list[dict[str, str]]) -> str | None:
        """The task's goal, ``answer``, citations, completed tasks and hops into long-term memory; None, or
        the one-line notice saying why nothing was remembered."""
        store, notice = open_store_or_notice(self.config, embedder=self.embedder)
        try:
            if store is None:
                raise LongTermError(notice)
            doc = self.store.insight_doc
            remember_task(store, namespace=self.namespace, task_id=doc.doc_id, goal=doc.task_goal, answer=answer,
                          citations=cited, completed_tasks=[t.model_dump(mode="json") for t in doc.completed_tasks],
                          hops=[hop.model_dump(mode="json") for hop in self.store.hops], redact=self.config.redact)
        except LongTermError as exc:  # the answer stands; the memory write is reported
            return f"not remembered: {exc}"
        finally:
            if store is not None:
                store.close()
        return None

    # --- the outside agent's interface ---------------------------------------------------------
    @_locked
    def observe(self, tool: str, arguments: dict[str, Any] | None, result: str) -> Observed:
        """Hand over what ``tool(**arguments)`` returned: a result this task already holds is a repeat (not
        converted again); any other goes through memory conversion, its raw text kept in the tree."""
        tool = _checked_text("the tool name", tool, MAX_NAME_CHARS).strip()
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise InputError(f"the arguments must be an object (name: value), not {type(arguments).__name__}")
        text = _checked_text("the result", result, self.config.max_context_bytes)
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

    @_locked
    def context(self, budget: int | None = None) -> str:
        """The ``<task>`` and ``<memory>`` blocks for the next step; ``budget``: tokens of ``<memory>``."""
        if budget is not None and not (isinstance(budget, int) and 50 <= budget <= 100_000):
            raise InputError(f"the budget must be a whole number of tokens from 50 to 100000, not {budget!r}")
        return self.prompt(self.store.insight_doc, budget)

    @_locked
    def deep_retrieval(self, node_id: str, sources_only: bool = False) -> str:
        """The raw record behind a node, as JSON (see :mod:`amb_dspy.tools.deep_retrieval`)."""
        node_id = _checked_text("the node id", node_id, MAX_NAME_CHARS)
        out = DeepRetrievalTool(self.store, self.config.storage_dir)(node_id, sources_only=sources_only)
        if out.startswith("Error:"):
            raise InputError(out[len("Error:"):].strip())
        return out

    @_locked
    def plan(self, report: str = "") -> InsightDoc:
        """The planning agent judges the pending subtask (by ``report`` and what was observed since the last
        plan) and sets the next one, a conflict's cross-validation first; returns the Insight Doc."""
        report = _checked_text("the report", report, self.config.max_context_bytes, empty_ok=True)
        new_nodes, self._new_nodes = self._new_nodes, []
        with self.meter.counting():
            self.plan_step(new_nodes, report=report, failure="")
        return self.store.insight_doc

    @_locked
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

    @_locked
    def export(self, path: str | Path | None = None) -> Path:
        """Write the task's bank file (default ``STORAGE_DIR/sessions/<task id>.json``); returns its path."""
        path = Path(path) if path else self.config.storage_dir / "sessions" / f"{self.task_id}.json"
        self.store.export(path)
        return path

    @_locked
    def close(self, remember: bool | None = None) -> dict[str, Any]:
        """End the task: its answer into long-term memory when ``remember`` (default ``config.remember``);
        every later request is refused. Returns the task's summary."""
        notices = []
        if self.config.remember if remember is None else remember:
            cited = [self.citation(i) for i in self.state.citations if i in self.store.graph]
            notice = self.remember(self.state.answer, cited)
            notices.append(notice or f"remembered in namespace {self.namespace!r}")
        self.closed = True
        return {"task_id": self.task_id, "answer": self.state.answer, "nodes": len(self.store.graph),
                "entries": len(self.store.tree), "errors": list(self.state.errors),
                "notices": [*self.state.notices, *notices], "fallbacks": dict(self.state.fallbacks)}

    def summary(self) -> dict[str, Any]:
        """The Insight Doc as JSON, for a caller that plans or completes."""
        return self.store.insight_doc.model_dump(mode="json")


class SessionAttribute:
    """An attribute of the bank that belongs to the session of its current run (``bank.session``); before
    any run, the bank's own. So the loop's ``self.store``, ``self.memory``... are the session's."""

    def __init__(self, name: str | None = None):
        self.name = name

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute
        self.name = self.name or attribute

    def __get__(self, bank: Any, owner: type | None = None) -> Any:
        if bank is None:
            return self
        session = bank.__dict__.get("session")
        return getattr(session, self.name) if session is not None else bank.__dict__.get(self.attribute)

    def __set__(self, bank: Any, value: Any) -> None:
        session = bank.__dict__.get("session")
        if session is not None:
            setattr(session, self.name, value)
        else:
            bank.__dict__[self.attribute] = value
