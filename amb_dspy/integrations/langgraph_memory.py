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
from amb_dspy.task.tools import AGENT_TOOLS, TOOLS

MEMORY_TOOLS = frozenset(TOOLS)  # the memory's own tools: their results are memory already, never observed


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


def memory_tools(session: TaskSession, names: Sequence[str] = AGENT_TOOLS) -> list[BaseTool]:
    """The table's tools ``names`` (default ``memory_context``, ``memory_deep_retrieval``, ``memory_plan``,
    ``memory_complete``) on ``session``, as LangChain tools; a failure is one ``Error:`` line."""
    return [StructuredTool.from_function(TOOLS[name].bound(lambda: session, on_failure=error_line), name=name,
                                         description=TOOLS[name].description, args_schema=TOOLS[name].arguments)
            for name in names]
