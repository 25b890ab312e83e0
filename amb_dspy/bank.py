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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel

from amb_dspy.adapter import InputError, MemoryAdapter, TaskKind
from amb_dspy.config import AmbConfig
from amb_dspy.graph_ops import ContextUpdate, MemoryStore, NodeDraft
from amb_dspy.storage import CompletedTask, InsightDoc, InteractionEntry, QueryGraphNode, TaskStatus, TaskType

# How much of a cross-validation (answer + tool responses) the integration agent is shown.
MAX_VALIDATION_CHARS = 12_000


@dataclass(frozen=True)
class ProgressEvent:
    phase: str
    loop: int
    nodes: int
    edges: int
    conflicts: int
    lm_calls: int
    tokens: int
    message: str = ""


class RunResult(BaseModel):
    answer: str
    termination: str
    loops: int
    insight_doc: dict[str, Any]
    query_graph: dict[str, Any]
    interaction_tree: dict[str, Any]
    usage: dict[str, dict[str, int]]
    errors: list[str]
    seconds: float


@dataclass
class _Conflict:
    node_ids: list[str]
    description: str
    round: int = 0


@dataclass
class _RunState:
    doc_id: str
    conflicts: list[_Conflict] = field(default_factory=list)
    active: _Conflict | None = None
    answer: str = ""
    loops: int = 0
    retried: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def read_context_file(path: str | Path, max_bytes: int) -> str:
    """The text of a context file, or InputError (one line) if it is missing, binary or too large."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"context file {path}: no such file")
    if not path.is_file():
        raise InputError(f"context file {path}: not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise InputError(f"context file {path}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)")
    data = path.read_bytes()
    if b"\x00" in data[:8192]:
        raise InputError(f"context file {path}: binary data, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"context file {path}: not UTF-8 text") from None


def _revised(doc: InsightDoc, *, completed: list[CompletedTask] | None = None, pending: list[str] = ()) -> InsightDoc:
    """The same task's Insight Doc with new task lists, built anew so its rules (<= 1 pending) are checked."""
    return InsightDoc(doc_id=doc.doc_id, task_goal=doc.task_goal,
                      completed_tasks=doc.completed_tasks if completed is None else completed, pending_tasks=list(pending))


def _node_info(node: QueryGraphNode, with_id: bool = True):
    from amb_dspy.agents import NodeInfo

    return NodeInfo(id=node.id if with_id else None, summary=node.summary, context=node.context, keywords=list(node.keywords))


class MemoryBank:
    """An agent with a task-scoped, structured memory. ``run(task, context, images)`` answers a task."""

    def __init__(
        self,
        config: AmbConfig | None = None,
        *,
        lm: Any = None,
        agents: dict[str, dspy.Module] | None = None,
        compiled: str | Path | None = None,
        embedder: Any = None,
        search: Any = None,
        corpus: Any = None,
        progress: Callable[[ProgressEvent], None] | None = None,
    ):
        from amb_dspy.agents import AGENT_CLASSES
        from amb_dspy.lm import AgentLMs, build_lm

        self.config = config or AmbConfig()
        if self.config.corpus is not None and not Path(self.config.corpus).exists():
            raise InputError(f"corpus {self.config.corpus}: no such file or folder")
        if lm is None:
            self.lms = AgentLMs.from_config(self.config)
        else:
            per_agent = {agent: build_lm(spec, self.config) for agent, spec in self.config.agent_lms.items()}
            self.lms = AgentLMs(lm, per_agent)
        self.notice: str | None = self.lms.notice
        self.lm = self.lms.main
        self.meter = None
        self.progress = progress

        if embedder is None:
            from amb_dspy.retrieval.embedding import default_embedder

            embedder = default_embedder()
        self.embedder = embedder

        # Agents count tokens with the active LM's tokenizer (exact for the embedded model).
        self.agents: dict[str, dspy.Module] = {name: cls(self.config) for name, cls in AGENT_CLASSES.items()}
        if compiled is not None:
            from amb_dspy.compiled import apply_compiled

            self.agents = apply_compiled(self.agents, compiled)  # keeps this bank's config
        self.agents.update(agents or {})

        self._search, self._corpus = search, corpus
        self.store = MemoryStore(embedder)
        self.memory_adapter: MemoryAdapter | None = None

    # --- agent calls -------------------------------------------------------------------------
    def _start_meter(self):
        """A fresh usage meter for one run, attached to the run's LMs until the run ends."""
        from amb_dspy.lm import UsageMeter

        meter = UsageMeter(max_calls=self.config.max_lm_calls)
        self.lms.meter = meter
        meter.attach(*self.lms.all())
        return meter

    def _stop_meter(self) -> None:
        """Detach the run's meter: LMs may be shared with other banks, whose calls it must not count or cap."""
        for lm in self.lms.all():
            lm.callbacks[:] = [c for c in lm.callbacks if c is not self.meter]
        self.lms.meter = None

    def _agent(self, name: str, **inputs):
        with self.lms.use(name):
            return self.agents[name](**inputs)

    def _emit(self, phase: str, state: _RunState, message: str = "") -> None:
        if self.progress is None or self.meter is None:
            return
        totals = self.meter.total()
        self.progress(ProgressEvent(
            phase=phase, loop=state.loops, nodes=len(self.store.graph), edges=self.store.graph.edge_count,
            conflicts=len(state.conflicts) + (state.active is not None), lm_calls=totals["calls"],
            tokens=totals["prompt_tokens"] + totals["completion_tokens"], message=message,
        ))

    # --- tools and executor ------------------------------------------------------------------
    def _build_executor(self):
        from amb_dspy.executor import Executor
        from amb_dspy.tools import build_tools
        from amb_dspy.tools.corpus import LocalCorpus
        from amb_dspy.tools.deep_retrieval import DeepRetrievalTool
        from amb_dspy.tools.search import SearchTool, make_search_backend
        from amb_dspy.tools.visit import VisitTool

        corpus = self._corpus
        if corpus is None and self.config.corpus is not None:
            corpus = LocalCorpus.from_config(self.config, self.embedder)
        search = self._search
        if search is None:
            search = corpus if corpus is not None and not self.config.serper_api_key else make_search_backend(self.config, self.embedder)
        from amb_dspy.lm import is_embedded

        # a 135M model with an 8k context reads three results better than ten
        k = min(self.config.search_k, 3) if is_embedded(self.lms.for_agent("executor")) else self.config.search_k
        tools = build_tools(
            search=SearchTool(search, k=k),
            visit=VisitTool(self.config, corpus=corpus),
            deep_retrieval=DeepRetrievalTool(self.store, self.config.storage_dir),
        )
        return Executor(tools, max_iters=self.config.react_max_iters)

    # --- the run -----------------------------------------------------------------------------
    def run(self, task: str, context: str = "", images: list[str | Path] = ()) -> RunResult:
        """Answer ``task`` with ``context`` (long text, may be empty) and optional image files."""
        from amb_dspy.lm import LMCallCapReached

        started = time.monotonic()
        task = (task or "").strip()
        if not task:
            raise InputError("the task is empty: say what the agent should do")
        context = context or ""
        if len(context.encode("utf-8")) > self.config.max_context_bytes:
            raise InputError(
                f"the context is {len(context.encode('utf-8')) / 1e6:.1f} MB, over the "
                f"{self.config.max_context_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)"
            )
        doc = InsightDoc(task_goal=task)
        store = MemoryStore(self.embedder, doc)
        memory_adapter = MemoryAdapter(store, k=self.config.retrieval_k, alpha=self.config.retrieval_alpha,
                                       temp_dir=self.config.temp_dir, storage_dir=self.config.storage_dir)
        memory_adapter.stage_images(doc.doc_id, [Path(p) for p in images])  # checks every image first
        # Input is valid: from here on this run owns the bank's memory.
        self.store, self.memory_adapter = store, memory_adapter
        self.meter = self._start_meter()
        state = _RunState(doc_id=doc.doc_id)
        termination = "running"
        try:
            self._initialise(state, context)
            executor = self._build_executor()
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
            self._final_answer(state, executor)
        except LMCallCapReached as exc:
            termination = "lm_call_cap"
            state.errors.append(str(exc))
        finally:
            memory_adapter.cleanup(state.doc_id)
            self._stop_meter()
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
            seconds=round(time.monotonic() - started, 3),
        )

    def export(self, path: str | Path) -> None:
        self.store.export(path)

    # --- phases ------------------------------------------------------------------------------
    def _initialise(self, state: _RunState, context: str) -> None:
        self._emit("initialise", state)
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if context.strip():
            new_nodes, failure = self._convert(state, context, {"source": "user_context"})
        self._plan(state, new_nodes, report="", failure=failure)

    def _step(self, state: _RunState, executor) -> None:
        doc = self.store.insight_doc
        kind = self.memory_adapter.intercept_context(doc, cross_validation=state.active is not None)
        self._emit("execute", state, f"{kind.value}: {doc.current_task or doc.task_goal}")
        images = None
        if kind is TaskKind.IMAGE:
            images = [dspy.Image.from_path(str(i.temp_path)) for i in self.memory_adapter.pending_images(state.doc_id)]
        prompt = self.memory_adapter.enhance_prompt(doc)
        try:
            with self.lms.use("executor", tools=executor.tools):
                result = executor(enhanced_prompt=prompt, images=images)
        except Exception as exc:  # noqa: BLE001 - fails the task, not the run (the LM-call cap is a BaseException)
            message = f"executor failed: {type(exc).__name__}: {exc}".splitlines()[0]
            state.errors.append(message)
            if state.active is not None:  # the conflict is still there: check it again later
                self._requeue(state, state.active)
                state.active = None
            self._plan(state, [], report="", failure=message)
            return

        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if kind is TaskKind.CROSS_VALIDATE:
            new_nodes, failure = self._resolve_conflict(state, result)
        elif kind is TaskKind.IMAGE:
            attachments = self.memory_adapter.store_images(state.doc_id)
            text = f"Image recognition for: {doc.task_goal}\n\n{result.answer}"
            new_nodes, failure = self._convert(state, text, {"source": "image_recognition"}, attachments)
        else:
            state.answer = result.answer
            knowledge = result.knowledge
            if knowledge:
                text = "\n\n".join(c.observation for c in knowledge)
                meta = {"source": "executor", "task": doc.current_task or doc.task_goal,
                        "tool_calls": [{"name": c.name, "args": c.args} for c in knowledge], "answer": result.answer}
                new_nodes, failure = self._convert(state, text, meta)
        self._plan(state, new_nodes, report=result.report(), failure=failure)

    def _final_answer(self, state: _RunState, executor) -> None:
        """One last execution with nothing pending: the executor answers the goal from memory."""
        doc = self.store.insight_doc
        final_doc = _revised(doc)
        self._emit("answer", state)
        try:
            with self.lms.use("executor", tools=executor.tools):
                result = executor(enhanced_prompt=self.memory_adapter.enhance_prompt(final_doc))
        except Exception as exc:  # noqa: BLE001 - the LM-call cap is a BaseException and passes through
            state.errors.append(f"final answer failed: {type(exc).__name__}: {exc}".splitlines()[0])
            return
        state.answer = result.answer or state.answer

    def _termination(self, state: _RunState) -> str | None:
        doc = self.store.insight_doc
        if doc.pending_tasks:
            return None
        if doc.all_succeeded:
            return "goal_met"
        failed = [t for t in doc.completed_tasks if t.status is TaskStatus.FAILURE and t.description not in state.retried]
        if not failed:
            return "finished_with_failures"
        retry = failed[-1].description
        state.retried.add(retry)
        self.store.set_insight_doc(_revised(doc, pending=[retry]))
        return None

    # --- planning ----------------------------------------------------------------------------
    def _next_conflict(self, state: _RunState) -> _Conflict | None:
        while state.conflicts:
            conflict = state.conflicts.pop(0)
            alive = [i for i in conflict.node_ids if i in self.store.graph]
            if len(alive) >= 2:
                conflict.node_ids = alive
                return conflict
        return None

    def _requeue(self, state: _RunState, conflict: _Conflict) -> None:
        if conflict.round + 1 > self.config.max_merge_rounds:
            state.errors.append(f"conflict between {conflict.node_ids} left unresolved: round cap reached")
            return
        state.conflicts.insert(0, _Conflict(conflict.node_ids, conflict.description, conflict.round + 1))

    def _plan(self, state: _RunState, new_nodes: list[QueryGraphNode], report: str, failure: str) -> None:
        from amb_dspy.agents import AgentError, ConflictNotification, cross_validation_task, is_cross_validation_task

        doc = self.store.insight_doc
        state.active = self._next_conflict(state)
        notification = None
        if state.active is not None:
            notification = ConflictNotification(conflicting_node_ids=state.active.node_ids,
                                                 conflict_description=state.active.description)
        self._emit("plan", state)
        try:
            plan = self._agent("planning", insight_doc=doc, new_memory_nodes=[_node_info(n) for n in new_nodes
                                                                              if n.id in self.store.graph],
                               conflict=notification, execution_report=report, failure_reason=failure)
            new_doc = _revised(doc, completed=plan.completed_tasks, pending=plan.pending_tasks[:1])
        except AgentError as exc:
            state.errors.append(str(exc))
            completed = list(doc.completed_tasks)
            if doc.current_task:
                completed.append(CompletedTask(
                    type=TaskType.CROSS_VALIDATE if is_cross_validation_task(doc.current_task) else TaskType.NORMAL,
                    description=doc.current_task, status=TaskStatus.FAILURE, context=f"planning failed: {exc}"[:300],
                ))
            pending = [cross_validation_task(notification)] if notification else []
            new_doc = _revised(doc, completed=completed, pending=pending)
        if state.active is None:
            image_task = self.memory_adapter.image_task(state.doc_id)
            if image_task:
                new_doc = _revised(new_doc, pending=[image_task])
        self.store.set_insight_doc(new_doc)

    # --- memory conversion (§4.3) ------------------------------------------------------------
    def _convert(self, state: _RunState, text: str, metadata: dict[str, Any],
                 attachments: list = ()) -> tuple[list[QueryGraphNode], str]:
        """Turn text into nodes (classification -> structure -> add -> retrieve -> analysis) and an entry.

        Returns the new nodes and a failure reason ("" on success). If classification or structure
        fails, no node is added, but the text is still kept as an interaction entry.
        """
        from amb_dspy.agents import AgentError

        goal = self.store.insight_doc.task_goal
        self._emit("memorise", state)
        try:
            clusters = self._agent("classification", context=text, task_goal=goal).clusters
            drafts = []
            for cluster in clusters:
                structured = self._agent("structure", content=cluster.content, context=cluster.context,
                                         keywords=cluster.keywords)
                drafts.append(NodeDraft(summary=structured.summary, context=cluster.context, keywords=list(cluster.keywords)))
        except AgentError as exc:
            state.errors.append(str(exc))
            self.store.record_entry(InteractionEntry(text=text, metadata={**metadata, "conversion_failed": str(exc)},
                                                     attachments=tuple(attachments)))
            return [], str(exc)
        with self.store.transaction():
            nodes = self.store.add_nodes(drafts)
            self.store.record_entry(InteractionEntry(text=text, metadata=metadata, attachments=tuple(attachments)),
                                    [n.id for n in nodes])
        failure = ""
        for i, node in enumerate(nodes):
            later = {n.id for n in nodes[i + 1:]}  # clusters are analysed in order, as if added one by one
            failure = self._analyse(state, node, exclude=later) or failure
        return nodes, failure

    def _analyse(self, state: _RunState, node: QueryGraphNode, exclude: set[str], round: int = 0) -> str:
        """Relate a node to what retrieval finds for it; returns a failure reason or ""."""
        from amb_dspy.agents import AgentError

        candidates = self.store.retrieve_for_node(node.id, k=self.config.retrieval_k,
                                                  alpha=self.config.retrieval_alpha, exclude=exclude)
        if not candidates:
            return ""
        try:
            verdict = self._agent("analysis", new_node=_node_info(node, with_id=False),
                                  candidates=[_node_info(c) for c in candidates])
        except AgentError as exc:
            state.errors.append(str(exc))
            return str(exc)
        for rel in verdict.relationships:
            other = rel.existing_node_id
            if other not in self.store.graph or other == node.id:
                continue
            if rel.relationship == "conflict":
                if round >= self.config.max_merge_rounds:
                    state.errors.append(f"conflict between {node.id} and {other} left unresolved: merge round cap reached")
                    continue
                state.conflicts.append(_Conflict([node.id, other], rel.conflict_description or rel.reasoning, round))
            elif rel.relationship == "related":
                current = self.store.graph.node(node.id)
                existing = self.store.graph.node(other)
                self.store.relate(node.id, other, {
                    node.id: ContextUpdate(rel.context_update_new or current.context,
                                           list(rel.keywords_update_new or current.keywords)),
                    other: ContextUpdate(rel.context_update_existing or existing.context,
                                         list(rel.keywords_update_existing or existing.keywords)),
                })
        return ""

    # --- conflict resolution (§4.4) ----------------------------------------------------------
    def _resolve_conflict(self, state: _RunState, result) -> tuple[list[QueryGraphNode], str]:
        from amb_dspy.agents import AgentError, NeighborInfo, NodeWithNeighbors

        conflict, state.active = state.active, None
        ids = [i for i in conflict.node_ids if i in self.store.graph]
        if len(ids) < 2:
            return [], ""
        validation = "\n\n".join([f"Validation answer: {result.answer}", *(c.observation for c in result.knowledge)])
        validation = validation[:MAX_VALIDATION_CHARS]
        nodes_to_merge = []
        for node_id in ids:
            node = self.store.graph.node(node_id)
            neighbours = [NeighborInfo(id=n.id, context=n.context, keywords=list(n.keywords))
                          for n in self.store.graph.get_neighbors(node_id) if n.id not in ids]
            nodes_to_merge.append(NodeWithNeighbors(id=node.id, summary=node.summary, context=node.context,
                                                    keywords=list(node.keywords), neighbors=neighbours))
        self._emit("merge", state)
        try:
            merged = self._agent("integration", nodes_to_merge=nodes_to_merge, validation_result=validation)
        except AgentError as exc:
            state.errors.append(str(exc))
            return [], str(exc)
        with self.store.transaction():
            new, _event = self.store.merge_nodes(
                ids,
                NodeDraft(merged.merged_node.summary, merged.merged_node.context, list(merged.merged_node.keywords)),
                description=merged.interaction_tree_description,
                neighbour_updates={k: ContextUpdate(v.context, list(v.keywords)) for k, v in merged.neighbor_updates.items()},
            )
            self.store.record_entry(InteractionEntry(
                text=validation, metadata={"source": "cross_validation", "merged_node_ids": ids, "conflict": conflict.description},
            ), [new.id])
        # The merged node goes back through retrieval and analysis, its inherited neighbours excluded.
        failure = self._analyse(state, new, exclude=set(new.links), round=conflict.round + 1)
        return [new], failure
