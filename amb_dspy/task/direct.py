"""The direct strategy: retrieve, search the corpus when memory does not cover the goal, answer in one call.

A tiny LM (see :mod:`amb_dspy.lm.profile`) cannot plan or fill a ReAct trajectory, so its task skips
both. :class:`DirectAnswer` runs on the same session as :class:`~amb_dspy.task.loop.TaskLoop` and leaves
the same record (the Insight Doc, hops, usage, a :class:`~amb_dspy.task.state.RunResult` of the same
shape)::

    termination = DirectAnswer(session, executor).run(context)

1. the context becomes memory (the memory agents' policies, as the strategy set them);
2. when ``<memory>`` lacks a content word of the goal, the executor's ``search`` tool is called with the
   goal, and once more with what memory still lacks and the names memory holds about the goal; what
   they return becomes memory (one NORMAL hop each). No LM call;
3. one answer call over ``<memory>`` (:meth:`~amb_dspy.agents.runner.AgentRunner.answer`), checked like
   every answer (:func:`~amb_dspy.task.answering.accepted`) and cited with the memory nodes it shares
   the most words with; an answer that is not accepted gives way to the extractive answer. A tiny LM is
   shown only the few lines that cover the goal (:func:`focused_memory`), as it copies the first lines it
   reads; its answer must copy them faithfully, else those lines, quoted and cited, are the answer.
"""

from __future__ import annotations

from amb_dspy.agents.fallback.answer import covering_lines
from amb_dspy.lm import is_tiny
from amb_dspy.retrieval.keyword import STOPWORDS, stem
from amb_dspy.storage import TaskKind
from amb_dspy.task.answering import accepted, resolved
from amb_dspy.task.executor import ExecutionResult
from amb_dspy.task.grounding import content_terms, ordered_terms
from amb_dspy.task.loop import TaskLoop
from amb_dspy.task.state import revised
from amb_dspy.tools.search import NO_BACKEND

__all__ = ["DirectAnswer", "focused_memory"]

MAX_SEARCHES = 2
MAX_CITED = 2
MAX_NAMES = 3


class DirectAnswer(TaskLoop):
    """The direct strategy over ``session``'s task (see the module docstring); a :class:`TaskLoop` whose run
    is one pass, so resuming, checkpoints, images and hops work as they do there."""

    def work(self, context: str, resumed: bool) -> str:
        """Remember the context, search when memory falls short, answer once (the ending is
        :meth:`TaskLoop.run`'s)."""
        session = self.session
        if not resumed and context.strip():
            session.emit("initialise")
            self.memory.convert(context, {"source": "user_context"})
        self.search_when_short()
        self.checkpoint()
        self.answer()
        return "goal_met"

    def missing_terms(self, searched: list[str]) -> list[str]:
        """The goal's content words that ``<memory>`` does not hold, in the goal's order (the ``searched``
        queries, which a search response repeats, are not counted as held)."""
        doc = self.store.insight_doc
        memory = self.memory.adapter.memory_text(doc)
        for query in searched:
            memory = memory.replace(query, " ")
        held = content_terms(memory)
        return [term for term in dict.fromkeys(ordered_terms(doc.task_goal)) if stem(term) not in held]

    def search_when_short(self) -> None:
        """Search with the goal, then with what is still missing plus memory's names, while memory lacks a
        content word of the goal (at most :data:`MAX_SEARCHES` calls; none without a search backend)."""
        search = next((tool for tool in self.executor.tools if tool.name == "search"), None)
        goal = self.store.insight_doc.task_goal
        queries, searched = [goal], []
        while search is not None and queries and self.state.loops < MAX_SEARCHES:
            missing = self.missing_terms(searched)
            if not missing:
                return
            query = queries.pop(0)
            searched.append(query)
            self.state.loops += 1
            doc = revised(self.store.insight_doc)
            self.session.emit("execute", f"{TaskKind.NORMAL.value}: search {query[:50]}")
            before = self.session.meter.total()
            self.executor.calls.clear()
            if search(query=query) == NO_BACKEND:
                self.executor.calls.clear()  # nothing to search: not a failed search
                self.state.loops -= 1
                return
            result = ExecutionResult("", list(self.executor.calls))
            self.convert_observations(result, doc)
            self.record_hop(doc, TaskKind.NORMAL, result, before)
            missing = self.missing_terms(searched)
            names = self.names_about()
            if missing and names:
                queries.append(" ".join([*missing, *names]))

    def names_about(self) -> list[str]:
        """The names in ``<memory>`` (capitalised words the goal does not use): a bridge for a second search."""
        doc = self.store.insight_doc
        goal_terms = content_terms(doc.task_goal)
        memory = self.memory.adapter.memory_text(doc)
        names = [word.strip(".,;:'\"()") for word in memory.split() if word[:1].isupper()]
        return [name for name in dict.fromkeys(names) if name.isalpha() and name != "Memory" and len(name) > 2
                and name.lower() not in STOPWORDS and stem(name.lower()) not in goal_terms][:MAX_NAMES]

    def answer(self) -> None:
        """One answer call over ``<memory>``; the extractive answer when it fails or is not accepted. A tiny LM
        is shown only the lines that cover the goal, and its answer must copy them
        (:func:`~amb_dspy.task.grounding.uncopied`); else those lines, quoted, are the answer."""
        session, state = self.session, self.state
        doc = revised(self.store.insight_doc)
        memory = self.memory.adapter.memory_text(doc)
        tiny = is_tiny(session.lms.for_agent("answer"))
        covering = covering_lines(memory, doc.task_goal) if tiny else []
        session.emit("answer", "from memory")
        before = session.meter.total()
        output = self.memory.runner.answer(doc.task_goal, _grouped(covering) or memory)
        shown = [line for line, _ in covering]
        answer = output.answer if output is not None and accepted(session, output.answer, doc, "the answer", shown) else ""
        self.record_hop(doc, TaskKind.ANSWER, ExecutionResult(answer), before)
        if answer:
            state.answer, state.citations = answer, self.supporting_nodes(answer)
            return
        extract = self.memory.runner.extract(doc.task_goal, memory, cover=tiny)
        if extract.answer:
            state.answer, state.citations = extract.answer, resolved(session, extract.cited_node_ids)
            state.extractive = True

    def supporting_nodes(self, answer: str) -> list[str]:
        """The memory nodes for the goal that share the most content words with ``answer`` (at most
        :data:`MAX_CITED`, none that shares nothing)."""
        terms = content_terms(answer)
        ranked = []
        for node in self.memory.adapter.memory_for(self.store.insight_doc):
            sources = " ".join(text for *_, text in self.store.source_texts(node.id))
            shared = len(terms & content_terms(f"{node.summary} {node.context} {sources}"))
            if shared:
                ranked.append((shared, node.id))
        ranked.sort(key=lambda pair: -pair[0])
        return [node_id for _, node_id in ranked[:MAX_CITED]]


def focused_memory(memory: str, goal: str) -> str:
    """The few lines of ``memory`` that together cover the goal's terms
    (:func:`~amb_dspy.agents.fallback.answer.covering_lines`), in their groups: what a tiny LM is shown, as
    it copies the first lines it reads and what it is shown must answer every part of the goal ("which river
    ... and when ..."). "" when no line holds a term of the goal."""
    return _grouped(covering_lines(memory, goal))


def _grouped(lines: list[tuple[str, str]]) -> str:
    """``(line, node id)`` pairs as ``<memory>`` groups, consecutive lines of one node in one group."""
    groups: list[tuple[str, list[str]]] = []
    for line, node in lines:
        if groups and groups[-1][0] == node:
            groups[-1][1].append(line)
        else:
            groups.append((node, [line]))
    return "\n\n".join(f"Memory {i} (node {node}):\n" + "\n".join(group) for i, (node, group) in enumerate(groups, 1))
