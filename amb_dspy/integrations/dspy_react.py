"""Memory tools for any ``dspy.ReAct``: its own tools observed, and the session's memory as tools.

    session = MemoryBank(config).start_session(question)
    react = dspy.ReAct("question -> answer", tools=[*observe_tools([search, visit], session), *memory_tools(session)])
    react(question=question)   # every search/visit result becomes memory; memory_context reads it back

A ``dspy.ReAct`` builds its prompt itself, so ``<task>``/``<memory>`` reach it as a tool's observation
(``memory_context``) rather than in the prompt; :class:`~amb_dspy.bank.MemoryBank` is the executor that
puts them in the prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dspy

from amb_dspy.integrations.observing import error_line, observed
from amb_dspy.task.session import TaskSession
from amb_dspy.tools import DEEP_RETRIEVAL_DESC


def observe_tools(tools: Sequence[Callable | dspy.Tool], session: TaskSession) -> list[dspy.Tool]:
    """``tools`` as ``dspy.Tool`` objects whose every result ``session`` observes (tool cache + conversion)."""
    wrapped = []
    for tool in tools:
        tool = tool if isinstance(tool, dspy.Tool) else dspy.Tool(tool)
        tool.func = observed(tool.func, session, name=tool.name)  # after dspy.Tool read the signature
        wrapped.append(tool)
    return wrapped


def memory_tools(session: TaskSession) -> list[dspy.Tool]:
    """``memory_context``, ``memory_deep_retrieval``, ``memory_plan`` and ``memory_complete`` on ``session``;
    each returns text, failures as one ``Error:`` line."""
    def memory_context() -> str:
        try:
            return session.context()
        except ValueError as exc:
            return error_line(exc)

    def memory_deep_retrieval(node_id: str) -> str:
        try:
            return session.deep_retrieval(node_id)
        except ValueError as exc:
            return error_line(exc)

    def memory_plan(report: str = "") -> str:
        try:
            doc = session.plan(report)
        except ValueError as exc:
            return error_line(exc)
        return f"Next subtask: {doc.current_task}" if doc.current_task else "Nothing left to do: answer the goal."

    def memory_complete(description: str, status: str, answer: str) -> str:
        try:
            doc = session.complete(description, status, answer)
        except ValueError as exc:
            return error_line(exc)
        return f"Recorded. Next subtask: {doc.current_task}" if doc.current_task else "Recorded."

    return [
        dspy.Tool(memory_context, name="memory_context", desc=(
            "Read the task's memory: <task> (goal, completed and pending subtasks, what was already fetched) and "
            "<memory> (notes for the pending subtask, each with a node id). Read it before searching again.")),
        dspy.Tool(memory_deep_retrieval, name="memory_deep_retrieval", desc=DEEP_RETRIEVAL_DESC,
                  arg_desc={"node_id": "the id of a memory node, as memory_context shows it"}),
        dspy.Tool(memory_plan, name="memory_plan", desc="Ask for the next subtask, given what you found (report)."),
        dspy.Tool(memory_complete, name="memory_complete", desc=(
            "Record a subtask as done: its description, status (success or failure) and what it found.")),
    ]
