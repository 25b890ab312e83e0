"""What a task's memory does, whoever drives it: the loop (:class:`~amb_dspy.task.loop.TaskLoop`) or an
outside agent through :class:`~amb_dspy.task.session.TaskSession`, whose base this is.

:class:`TaskMemory` holds the operations both share, on the session's own parts (``store``, ``memory``
the writer, ``memory_adapter``, ``tool_cache``, ``runner``, ``state``, ``images``): turning tool responses
into memory, writing ``<task>``/``<memory>``, planning, the conflict queue, citations, and recall and
remember across tasks.
"""

from __future__ import annotations

from typing import Any

from amb_dspy.agents import AgentError, ConflictNotification
from amb_dspy.agents.fallback.planning import failed_plan
from amb_dspy.config import AmbConfig
from amb_dspy.longterm.run_memory import recall_for_task, remember_run
from amb_dspy.memory.writer import node_info
from amb_dspy.storage import InsightDoc, QueryGraphNode
from amb_dspy.task.adapter import PromptBlocks, image_task
from amb_dspy.task.executor import ToolCall
from amb_dspy.task.grounding import content_terms
from amb_dspy.task.state import Conflict, revised
from amb_dspy.tools.search import without_echo

__all__ = ["TaskMemory"]


class TaskMemory:
    """The operations the loop and outside agents share (see the module docstring); the parts are the
    session's (:class:`~amb_dspy.task.session.TaskSession` builds them)."""

    def remember_calls(self, calls: list[ToolCall], metadata: dict[str, Any]) -> tuple[list[QueryGraphNode], str]:
        """Memory conversion of tool responses as one text; a later repeat of any of them is answered from
        the entry that records them (see :mod:`amb_dspy.task.tool_cache`)."""
        converted = self.memory.convert_calls(self.state, calls, metadata)  # within max_convert_chars
        if converted.remembered is not None:
            self.tool_cache.recorded(calls, converted.remembered.entry_id)  # a repeat reads its response back here
        else:
            self.tool_cache.forget(calls)  # not memory yet: a repeat fetches and converts it again
        return converted.nodes, converted.failure

    def tool_metadata(self, calls: list[ToolCall], source: str = "executor", doc: InsightDoc | None = None
                      ) -> dict[str, Any]:
        """How an entry of tool responses records where they came from: ``source``, the task, the calls."""
        doc = doc or self.store.insight_doc
        return {"source": source, "task": doc.current_task or doc.task_goal,
                "tool_calls": [{"name": c.name, "args": c.args} for c in calls]}

    def prompt(self, doc: InsightDoc, budget: int | None = None) -> str:
        """``<task>`` (with what this task already fetched) and ``<memory>`` for ``doc``'s pending task."""
        return self.prompt_blocks(doc, budget).text

    def prompt_blocks(self, doc: InsightDoc, budget: int | None = None) -> PromptBlocks:
        """The two blocks of :meth:`prompt`, apart."""
        return self.memory_adapter.blocks(doc, already_fetched=self.tool_cache.already_fetched(), budget=budget)

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
        """The task's settings with its namespace (a session may name its own)."""
        return self.config.model_copy(update={"namespace": self.namespace, **update})
