"""Task memory for a LangGraph agent (``pip install 'amb-dspy[langgraph]'``): a node that observes tool
results, the context as a system message, and the memory as LangChain tools.

    session = MemoryBank(config).start_session(question)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke([context_message(session), *state["messages"]])]})
    graph.add_node("tools", ToolNode([search, *memory_tools(session)]))
    graph.add_node("memory", observe_node(session))       # tools -> memory -> agent
    ...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool

from amb_dspy.integrations.observing import error_line, observe_quietly
from amb_dspy.task.session import TaskSession
from amb_dspy.tools import DEEP_RETRIEVAL_DESC

MEMORY_TOOLS = frozenset({"memory_context", "memory_deep_retrieval", "memory_plan", "memory_complete"})


def context_message(session: TaskSession, budget: int | None = None) -> SystemMessage:
    """The session's ``<task>`` and ``<memory>`` as a system message for the next model call."""
    return SystemMessage(content=session.context(budget))


def observe_node(session: TaskSession) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A graph node for after the tool node: every tool result of the last model turn goes to
    ``session.observe`` with the call's name and arguments (the memory tools' own results excepted)."""
    def node(state: dict[str, Any]) -> dict[str, Any]:
        messages: Sequence[BaseMessage] = state["messages"]
        turn = next((i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)), None)
        if turn is None:
            return {}
        calls = {call["id"]: call for call in messages[turn].tool_calls}
        for message in messages[turn + 1:]:
            call = calls.get(getattr(message, "tool_call_id", None)) if isinstance(message, ToolMessage) else None
            if call is not None and call["name"] not in MEMORY_TOOLS and message.status != "error":
                observe_quietly(session, call["name"], dict(call["args"]), message.text)
        return {}

    return node


def memory_tools(session: TaskSession) -> list[BaseTool]:
    """``memory_context``, ``memory_deep_retrieval``, ``memory_plan`` and ``memory_complete`` as LangChain tools."""
    def guarded(action: Callable[[], str]) -> str:
        try:
            return action()
        except ValueError as exc:
            return error_line(exc)

    def memory_context() -> str:
        """The task's <task> (goal, subtasks, what was already fetched) and <memory> (notes with node ids)."""
        return guarded(session.context)

    def memory_deep_retrieval(node_id: str) -> str:
        return guarded(lambda: session.deep_retrieval(node_id))

    def memory_plan(report: str = "") -> str:
        """Ask for the next subtask, given what you found (report); empty when the goal is met."""
        return guarded(lambda: session.plan(report).current_task or "Nothing left to do: answer the goal.")

    def memory_complete(description: str, status: str, answer: str) -> str:
        """Record a subtask as done: its description, status (success or failure) and what it found."""
        return guarded(lambda: session.complete(description, status, answer).current_task or "Recorded.")

    return [StructuredTool.from_function(memory_context),
            StructuredTool.from_function(memory_deep_retrieval, description=DEEP_RETRIEVAL_DESC),
            StructuredTool.from_function(memory_plan), StructuredTool.from_function(memory_complete)]
