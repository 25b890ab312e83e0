"""What a task's memory does, whoever drives it: the bank's loop (:mod:`amb_dspy.phases`) or an outside
agent through :class:`~amb_dspy.session.TaskSession`, which adds the step-by-step interface.

:class:`TaskMemory` holds one task's store, memory writer, adapter, tool cache, run state and usage
meter, and owns the operations both share: calling a memory agent as the policy says, turning tool
responses into memory, writing ``<task>``/``<memory>``, planning, recall and remember across tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.adapter import MemoryAdapter, image_task
from amb_dspy.agents import AgentError, ConflictNotification, cross_validation_task, is_cross_validation_task
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.config import AmbConfig
from amb_dspy.errors import one_line
from amb_dspy.executor import ToolCall
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.lm import AgentLMs, UsageMeter
from amb_dspy.longterm.run_memory import recall_for_task, remember_run
from amb_dspy.memory_writer import MemoryWriter, node_info
from amb_dspy.run_state import Conflict, RunState, revised
from amb_dspy.storage import CompletedTask, InsightDoc, QueryGraphNode, TaskStatus, TaskType
from amb_dspy.tool_cache import ToolCache

__all__ = ["SessionAttribute", "TaskMemory", "start_store"]


def start_store(embedder, bank: str | Path | MemoryStore | None, doc: InsightDoc) -> tuple[MemoryStore, list[str]]:
    """A new task's store, empty or a copy of a bank's graph and tree (BankFileError if the file is bad),
    and notices about the loading (a bank embedded with another model is embedded again)."""
    notices: list[str] = []
    if bank is None:
        return MemoryStore(embedder, doc), notices
    if not isinstance(bank, MemoryStore):
        bank = MemoryStore.load(bank, embedder, notices=notices)
    return bank.copy(doc), notices



class TaskMemory:
    """One task's memory and the operations the loop and outside agents share (see the module docstring)."""

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
        self._count_lock = threading.Lock()
        self._new_nodes: list[QueryGraphNode] = []  # observed since the last plan

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
        converted = self.memory.convert_calls(self.state, calls, metadata)  # within max_convert_chars
        if converted.remembered is not None:
            self.tool_cache.recorded(calls, converted.remembered.entry_id)  # a repeat reads its response back here
        else:
            self.tool_cache.forget(calls)  # not memory yet: a repeat fetches and converts it again
        return converted.nodes, converted.failure

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
        """Earlier tasks' items for ``query``, condensed, into <memory>, when the route reads (see
        :mod:`amb_dspy.longterm.run_memory`); returns the notices it added to the run state."""
        recalled, notices = recall_for_task(self._long_term_config(), self.embedder, query,
                                            lm=self.lms.for_agent("planning"))
        self.memory_adapter.recalled = recalled
        self.state.notices.extend(notices)
        return notices

    def remember(self, answer: str, cited: list[dict[str, str]]) -> list[str]:
        """What the route keeps of the finished task (goal, ``answer``, citations, completed tasks, hops, tool
        effects) into long-term memory; the notices saying what went wrong (none when all was written)."""
        doc = self.store.insight_doc
        _, notices = remember_run(self._long_term_config(remember=True), self.embedder, task_id=doc.doc_id,
                                  goal=doc.task_goal, answer=answer, citations=cited,
                                  completed_tasks=[t.model_dump(mode="json") for t in doc.completed_tasks],
                                  hops=[hop.model_dump(mode="json") for hop in self.store.hops],
                                  lm=self.lms.for_agent("planning"))
        return notices

    def _long_term_config(self, **update: Any) -> AmbConfig:
        """The run's settings with this task's namespace (a session may name its own)."""
        return self.config.model_copy(update={"namespace": self.namespace, **update})


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
