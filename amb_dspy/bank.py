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

from amb_dspy.adapter import MemoryAdapter, TaskKind, image_task, knowledge_text, recognition_text
from amb_dspy.agents import (
    AGENT_CLASSES,
    AgentError,
    ConflictNotification,
    answer_goal_task,
    cross_validation_task,
    is_cross_validation_task,
)
from amb_dspy.compiled import apply_compiled
from amb_dspy.config import AmbConfig
from amb_dspy.errors import InputError, one_line
from amb_dspy.executor import ExecutionResult, Executor
from amb_dspy.graph_ops import MemoryStore
from amb_dspy.images import ImageStager
from amb_dspy.lm import AgentLMs, LMCallCapReached, UsageMeter, is_embedded, reads_images, resolve_lms
from amb_dspy.memory_writer import MemoryWriter, node_info
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.run_state import (
    Conflict,
    ProgressEvent,
    RunResult,
    RunState,
    read_context_file,
    revised,
)
from amb_dspy.storage import (
    CompletedTask,
    InsightDoc,
    InteractionEntry,
    QueryGraphNode,
    TaskStatus,
    TaskType,
)
from amb_dspy.tools import DeepRetrievalTool, SearchTool, VisitTool, build_tools, load_corpus, make_search_backend

__all__ = ["MemoryBank", "ProgressEvent", "RunResult", "read_context_file"]


class MemoryBank:
    """An agent with a task-scoped, structured memory. ``run(task, context, images)`` answers a task."""

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
        self.memory_adapter: MemoryAdapter | None = None
        self.memory: MemoryWriter | None = None
        self.images = ImageStager(self.config.temp_dir, self.config.storage_dir)

    @property
    def lm(self) -> dspy.BaseLM:
        """The main LM a run started now would use."""
        return resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms).main

    # --- agent calls -------------------------------------------------------------------------
    def _agent(self, name: str, **inputs):
        """Call an agent with its LM; anything it raises but the LM-call cap becomes its AgentError."""
        with self.lms.use(name):
            try:
                return self.agents[name](**inputs)
            except AgentError:
                raise
            except Exception as exc:  # noqa: BLE001 - an agent's failure fails the task, never the run
                raise AgentError(name, f"{type(exc).__name__}: {one_line(exc)}") from exc

    def _emit(self, phase: str, state: RunState, message: str = "") -> None:
        if self.progress is None or self.meter is None:
            return
        totals = self.meter.total()
        self.progress(ProgressEvent(
            phase=phase, loop=state.loops, nodes=len(self.store.graph), edges=self.store.graph.edge_count,
            conflicts=len(state.conflicts) + (state.active is not None), lm_calls=totals["calls"],
            tokens=totals["prompt_tokens"] + totals["completion_tokens"], message=message,
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
        return Executor(tools, max_iters=self.config.react_max_iters)

    # --- the run -----------------------------------------------------------------------------
    def run(self, task: str, context: str = "", images: list[str | Path] = ()) -> RunResult:
        """Answer ``task`` with ``context`` (long text, may be empty) and optional image files."""
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
        memory_adapter = MemoryAdapter(store, k=self.config.retrieval_k, alpha=self.config.retrieval_alpha)
        staged = self.images.stage_images(doc.doc_id, [Path(p) for p in images])  # checks every image first
        # Input is valid: from here on this run owns the bank's memory.
        self.lms = resolve_lms(self.config, lm=self._lm, agent_lms=self._agent_lms)
        self.notice = self.lms.notice
        self.store, self.memory_adapter = store, memory_adapter
        self.memory = MemoryWriter(store, self.config, self._agent, self._emit)
        # The meter belongs to this run, not to its LMs, which other banks may share.
        self.meter = UsageMeter(max_calls=self.config.max_lm_calls)
        state = RunState(doc_id=doc.doc_id)
        with self.meter.counting():
            if staged and reads_images(self.lms.for_agent("executor")) is False:
                self._keep_unrecognised(state)
            termination = self._loop(state, context)
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
            seconds=round(time.monotonic() - started, 3),
        )

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

    def _loop(self, state: RunState, context: str) -> str:
        """Initialise, execute until done or capped, answer; returns how the run ended."""
        termination = "running"
        try:
            executor = self._build_executor()  # a bad corpus fails before any LM call
            self._initialise(state, context)
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
            self.images.cleanup(state.doc_id)
        if termination == "goal_met" and not state.answer:
            termination = "no_answer"  # the goal is met only by an answer
        return termination

    def export(self, path: str | Path) -> None:
        self.store.export(path)

    # --- phases ------------------------------------------------------------------------------
    def _initialise(self, state: RunState, context: str) -> None:
        self._emit("initialise", state)
        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if context.strip():
            new_nodes, failure = self.memory.convert(state, context, {"source": "user_context"})
        planned = self._plan(state, new_nodes, report="", failure=failure)
        if (failure or not planned) and not self.store.insight_doc.pending_tasks:
            # Nothing was planned because something failed: the executor still tries, rather than the
            # run ending as if the goal were met.
            self.store.set_insight_doc(revised(self.store.insight_doc, pending=[answer_goal_task()]))

    def _step(self, state: RunState, executor) -> None:
        doc = self.store.insight_doc
        kind = self.memory_adapter.intercept_context(doc, cross_validation=state.active is not None,
                                                     images_staged=bool(self.images.pending_images(state.doc_id)))
        self._emit("execute", state, f"{kind.value}: {doc.current_task or doc.task_goal}")
        images = None
        if kind is TaskKind.IMAGE:
            images = [dspy.Image.from_path(str(i.temp_path)) for i in self.images.pending_images(state.doc_id)]
        try:
            result = self._execute(executor, self.memory_adapter.enhance_prompt(doc), images)
        except Exception as exc:  # noqa: BLE001 - fails the task, not the run (the LM-call cap is a BaseException)
            message = f"executor failed: {type(exc).__name__}: {one_line(exc)}"
            state.errors.append(message)
            if state.active is not None:  # the conflict is still there: check it again later
                self._requeue(state, state.active)
                state.active = None
            new_nodes, _ = self._remember(state, ExecutionResult("", list(executor.calls)), doc)
            self._plan(state, new_nodes, report="", failure=message)
            return

        new_nodes: list[QueryGraphNode] = []
        failure = ""
        if kind is TaskKind.CROSS_VALIDATE:
            new_nodes, failure = self.memory.resolve_conflict(state, result)
        elif kind is TaskKind.IMAGE:
            attachments = self.images.store_images(state.doc_id)
            new_nodes, failure = self.memory.convert(state, recognition_text(doc.task_goal, result.answer), {"source": "image_recognition"}, attachments)
        else:
            state.answer = result.answer
            new_nodes, failure = self._remember(state, result, doc)
        self._plan(state, new_nodes, report=result.report(), failure=failure)

    def _execute(self, executor: Executor, prompt: str, images: list | None = None) -> ExecutionResult:
        """Run the executor; if the LM-call cap stops it, what its tools returned is kept before the run ends."""
        try:
            with self.lms.use("executor", tools=executor.tools):
                return executor(enhanced_prompt=prompt, images=images)
        except LMCallCapReached as exc:
            calls = ExecutionResult("", list(executor.calls)).knowledge
            if calls:
                self.memory.keep_raw(knowledge_text(calls), _tool_metadata(calls, self.store.insight_doc), str(exc))
            raise

    def _remember(self, state: RunState, result: ExecutionResult, doc: InsightDoc) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of what an execution's tools returned (nothing when they returned nothing new)."""
        knowledge = result.knowledge
        if not knowledge:
            return [], ""
        metadata = {**_tool_metadata(knowledge, doc), "answer": result.answer}
        return self.memory.convert(state, knowledge_text(knowledge), metadata)

    def _final_answer(self, state: RunState, executor) -> None:
        """One last execution with nothing pending: the executor answers the goal from memory."""
        doc = self.store.insight_doc
        final_doc = revised(doc)
        self._emit("answer", state)
        try:
            result = self._execute(executor, self.memory_adapter.enhance_prompt(final_doc))
        except Exception as exc:  # noqa: BLE001 - the LM-call cap is a BaseException and passes through
            state.errors.append(f"final answer failed: {type(exc).__name__}: {one_line(exc)}")
            self._remember(state, ExecutionResult("", list(executor.calls)), final_doc)
            return
        state.answer = result.answer or state.answer
        self._remember(state, result, final_doc)  # what the last pass looked up stays in memory too

    def _termination(self, state: RunState) -> str | None:
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
        self.store.set_insight_doc(revised(doc, pending=[retry]))
        return None

    # --- planning ----------------------------------------------------------------------------
    def _next_conflict(self, state: RunState) -> Conflict | None:
        while state.conflicts:
            conflict = state.conflicts.pop(0)
            alive = [i for i in conflict.node_ids if i in self.store.graph]
            if len(alive) >= 2:
                conflict.node_ids = alive
                return conflict
        return None

    def _requeue(self, state: RunState, conflict: Conflict) -> None:
        if conflict.round + 1 > self.config.max_merge_rounds:
            state.errors.append(f"conflict between {conflict.node_ids} left unresolved: round cap reached")
            return
        state.conflicts.insert(0, Conflict(conflict.node_ids, conflict.description, conflict.round + 1))

    def _plan(self, state: RunState, new_nodes: list[QueryGraphNode], report: str, failure: str) -> bool:
        """Let planning revise the Insight Doc; False when the planning agent failed (a fallback was used)."""
        doc = self.store.insight_doc
        state.active = self._next_conflict(state)
        notification = None
        if state.active is not None:
            notification = ConflictNotification(conflicting_node_ids=state.active.node_ids,
                                                 conflict_description=state.active.description)
        self._emit("plan", state)
        try:
            plan = self._agent("planning", insight_doc=doc, new_memory_nodes=[node_info(n) for n in new_nodes
                                                                              if n.id in self.store.graph],
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
        if state.active is None:
            recognition = image_task([image.original_name for image in self.images.pending_images(state.doc_id)])
            if recognition:
                new_doc = revised(new_doc, pending=[recognition])
        self.store.set_insight_doc(new_doc)
        return planned


def _tool_metadata(calls: list, doc: InsightDoc) -> dict[str, Any]:
    return {"source": "executor", "task": doc.current_task or doc.task_goal,
            "tool_calls": [{"name": c.name, "args": c.args} for c in calls]}
