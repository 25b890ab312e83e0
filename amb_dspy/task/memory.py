"""A task's memory: one object made of named parts, and what is done with them, whoever drives the task (the
loop, :class:`~amb_dspy.task.loop.TaskLoop`, or an outside agent through
:class:`~amb_dspy.task.session.TaskSession`; both hold it as ``memory``).

:class:`TaskMemory` builds its parts in one place: the ``store`` (graph, tree, indexes), the run ``state``,
the agent ``runner``, the ``writer`` (memory conversion and merges), the ``adapter`` (``<task>`` and
``<memory>``), the ``tool_cache``. Its operations: tool responses into memory (``convert_calls``), what the
writer did taken into the run state (``take``), prompts, planning, the conflict queue, citations, and
long-term memory across tasks (``recall``, ``remember_longterm``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dspy

from amb_dspy.agents import AgentError, ConflictNotification
from amb_dspy.agents.fallback.planning import failed_plan
from amb_dspy.agents.runner import AgentRunner
from amb_dspy.config import AmbConfig
from amb_dspy.lm import AgentLMs
from amb_dspy.longterm.run_memory import recall_for_task, remember_run
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.writer import MemoryWriter, node_info
from amb_dspy.memory.written import Conversion, ToolResponse, Written, knowledge_text
from amb_dspy.storage import InsightDoc, QueryGraphNode
from amb_dspy.task.adapter import MemoryAdapter, PromptBlocks, image_task, validation_text
from amb_dspy.task.executor import ExecutionResult, ToolCall
from amb_dspy.task.grounding import content_terms
from amb_dspy.task.images import ImageStager
from amb_dspy.task.state import Conflict, RunState, revised
from amb_dspy.task.tool_cache import ToolCache
from amb_dspy.tools.search import without_echo

__all__ = ["TaskMemory", "tool_responses"]


def tool_responses(calls: Sequence[ToolCall]) -> list[ToolResponse]:
    """The executor's tool calls as the writer reads them (its own plain type)."""
    return [ToolResponse(call.name, call.observation) for call in calls]


class TaskMemory:
    """One task's memory (see the module docstring). ``emit(phase, message)`` reports progress (the session's);
    ``images``: the task's staged images (None where none can be attached); ``state``: the run state to go on
    from (a checkpoint's); ``namespace``: where long-term memory is read and written."""

    def __init__(self, store: MemoryStore, *, config: AmbConfig, agents: dict[str, dspy.Module], embedder: Any,
                 lms: AgentLMs, emit: Callable[..., None], images: ImageStager | None = None,
                 namespace: str | None = None, state: RunState | None = None):
        self.store, self.config, self.embedder, self.lms, self.emit = store, config, embedder, lms, emit
        self.images = images
        self.namespace = namespace or config.longterm.namespace
        self.state = state or RunState(doc_id=store.insight_doc.doc_id)
        # read at each call: a resumed task swaps its state
        self.runner = AgentRunner(agents, lms, embedder, policy=config.models.policy, record=lambda: self.state,
                                  task_goal=lambda: self.store.insight_doc.task_goal)
        self.adapter = MemoryAdapter(store, k=config.retrieval.retrieval_k, alpha=config.retrieval.retrieval_alpha,
                                     view=config.view.memory_view, budget=config.view.memory_tokens,
                                     weights=config.view.rank_weights)
        self.writer = MemoryWriter(store, config, self.runner, emit)
        self.tool_cache = ToolCache(store, enabled=config.tools.tool_cache,
                                    max_observation_chars=config.tools.max_observation_chars)

    # --- writing: the writer's results taken into the run state ----------------------------------
    def take(self, written: Written) -> Written:
        """What the writer did, into the run state: its errors, the conflicts it queued and its notices, in the
        order they came; then the LM call cap, when it stopped the write part way."""
        self.state.errors.extend(written.errors)
        self.state.conflicts.extend(written.conflicts)
        self.state.notices.extend(written.notices)
        if written.stopped is not None:
            raise written.stopped
        return written

    def convert(self, text: str, metadata: dict[str, Any], attachments: list = ()) -> Conversion:
        """Memory conversion of ``text`` (the writer's :meth:`~amb_dspy.memory.writer.MemoryWriter.convert`)."""
        return self.take(self.writer.convert(text, metadata, attachments)).conversion

    def add_documents(self, documents: Sequence[tuple[str, str, str]]) -> list[Conversion | None]:
        """Documents ``(text, name, date)`` added in order (the writer's ``add_documents``): a conversion each,
        None for one the store already held."""
        return self.take(self.writer.add_documents(documents)).conversions

    def convert_calls(self, calls: list[ToolCall], metadata: dict[str, Any]) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of tool responses as one text; a later repeat of any of them is answered from
        the entry that records them (see :mod:`amb_dspy.task.tool_cache`)."""
        converted = self.take(self.writer.convert_calls(tool_responses(calls), metadata)).conversion  # within max_convert_chars
        if converted.remembered is not None:
            self.tool_cache.recorded(calls, converted.remembered.entry_id)  # a repeat reads its response back here
        else:
            self.tool_cache.forget(calls)  # not memory yet: a repeat fetches and converts it again
        return converted.nodes, converted.failure

    def keep_raw_calls(self, calls: list[ToolCall], reason: str) -> None:
        """Tool responses kept as an entry that became no node, saying why (a run stopped before converting them)."""
        self.writer.keep_raw(knowledge_text(tool_responses(calls)), self.tool_metadata(calls), reason)

    def resolve_conflict(self, result: ExecutionResult) -> Conversion:
        """The active conflict, checked by ``result`` (its answer and tool responses), merged by the writer; no
        conflict is active afterwards."""
        conflict, self.state.active = self.state.active, None
        return self.take(self.writer.resolve_conflict(conflict, validation_text(result))).conversion

    def tool_metadata(self, calls: list[ToolCall], source: str = "executor", doc: InsightDoc | None = None
                      ) -> dict[str, Any]:
        """How an entry of tool responses records where they came from: ``source``, the task, the calls."""
        doc = doc or self.store.insight_doc
        return {"source": source, "task": doc.current_task or doc.task_goal,
                "tool_calls": [{"name": c.name, "args": c.args} for c in calls]}

    # --- reading and planning ------------------------------------------------------------------
    def prompt(self, doc: InsightDoc, budget: int | None = None) -> str:
        """``<task>`` (with what this task already fetched) and ``<memory>`` for ``doc``'s pending task."""
        return self.prompt_blocks(doc, budget).text

    def prompt_blocks(self, doc: InsightDoc, budget: int | None = None) -> PromptBlocks:
        """The two blocks of :meth:`prompt`, apart."""
        return self.adapter.blocks(doc, already_fetched=self.tool_cache.already_fetched(), budget=budget)

    def plan_step(self, new_nodes: list[QueryGraphNode], report: str, failure: str) -> bool:
        """Let planning revise the Insight Doc; False when the planning agent failed (its failure rule,
        :func:`~amb_dspy.agents.fallback.planning.failed_plan`, is recorded instead)."""
        state, doc = self.state, self.store.insight_doc
        state.active = self.next_conflict()
        notification = None
        if state.active is not None:
            notification = ConflictNotification(conflicting_node_ids=state.active.node_ids,
                                                 conflict_description=state.active.description)
        self.emit("plan")
        planned = True
        try:
            plan = self.runner.call("planning", insight_doc=doc, new_memory_nodes=[
                node_info(n) for n in new_nodes if n.id in self.store.graph],
                conflict=notification, execution_report=report, failure_reason=failure)
        except AgentError as exc:
            planned = False
            state.errors.append(str(exc))
            plan = failed_plan(doc, notification, str(exc))
        new_doc = revised(doc, completed=plan.completed_tasks, pending=plan.pending_tasks[:1])
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
        if conflict.round + 1 > self.config.loops.max_merge_rounds:
            self.state.errors.append(f"conflict between {conflict.node_ids} left unresolved: round cap reached")
            return
        self.state.conflicts.insert(0, Conflict(conflict.node_ids, conflict.description, conflict.round + 1))

    def citation(self, node_id: str) -> dict[str, str]:
        """A cited node as a user checks it: its topic and, of the raw passages it was built from, the line that
        shares the most words with the task's answer, from there on (the first passage when none does; a
        search response's first line, which repeats the query, left out)."""
        lines = [line for *_, text in self.store.source_texts(node_id) for line in without_echo(text).splitlines()
                 if line.strip()]
        said = content_terms(self.state.answer or "")
        best = max(range(len(lines)), key=lambda i: (len(content_terms(lines[i]) & said), -i), default=0)
        return {"node_id": node_id, "topic": without_echo(self.store.graph.node(node_id).context),
                "source": " ".join(" ".join(lines[best:best + 3]).split())[:300] if lines else ""}

    # --- long-term memory ----------------------------------------------------------------------
    def recall(self, query: str) -> list[str]:
        """Earlier tasks' items for ``query``, condensed, into <memory>, when the route reads (see
        :mod:`amb_dspy.longterm.run_memory`); returns the notices it added to the run state."""
        recalled, notices = recall_for_task(self._long_term_config(), self.embedder, query,
                                            lm=self.lms.for_agent("planning"))
        self.adapter.recalled = recalled
        self.state.notices.extend(notices)
        return notices

    def remember_longterm(self, answer: str, cited: list[dict[str, str]]) -> list[str]:
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
        """The task's settings with its namespace (a session may name its own)."""
        return self.config.model_copy(update={"namespace": self.namespace, **update})
