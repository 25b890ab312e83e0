"""A PydanticAI agent on a task session (``pip install 'amb-dspy[pydantic-ai]'``).

Its instructions are the session's ``<task>`` and ``<memory>``, read again before every model request, so
the model always sees what its tools found so far; every tool result goes to ``session.observe`` (tool
cache, memory conversion, raw text in the Interaction Tree); ``memory_deep_retrieval`` reads a node's
raw record::

    session = MemoryBank(AmbConfig(policy="heuristic")).start_session(question)
    agent = memory_agent("openai:gpt-4o-mini", session, tools=[search, visit])
    answer = agent.run_sync(question).output
    session.complete(question, "success", answer); session.close(remember=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic_ai import Agent, Tool

from amb_dspy.integrations.observing import error_line, observed
from amb_dspy.task.session import TaskSession
from amb_dspy.task.tools import TOOLS


def memory_instructions(session: TaskSession, instructions: str = "", budget: int | None = None) -> Callable[[], str]:
    """The agent's instructions: ``instructions``, then the session's context as it is at each request."""
    def read() -> str:
        return "\n\n".join(part for part in (instructions, session.context(budget)) if part)

    return read


def memory_agent(model: Any, session: TaskSession, *, tools: Sequence[Callable | Tool] = (), instructions: str = "",
                 budget: int | None = None, memory_tools: Sequence[str] = ("memory_deep_retrieval",),
                 **agent_kwargs: Any) -> Agent:
    """A PydanticAI ``Agent`` with ``model`` whose instructions come from ``session`` and whose ``tools``
    (plain functions or ``Tool`` objects) are observed, with the tool table's ``memory_tools`` (see
    :mod:`amb_dspy.task.tools`); ``agent_kwargs`` go to ``Agent`` as they are."""
    observed_tools = []
    for tool in tools:
        if isinstance(tool, Tool):
            observed_tools.append(Tool(observed(tool.function, session, name=tool.name), name=tool.name,
                                       description=tool.description, takes_ctx=tool.takes_ctx))
        else:
            observed_tools.append(Tool(observed(tool, session)))

    for name in memory_tools:  # the table's tools (the context is already in the instructions)
        observed_tools.append(Tool(TOOLS[name].bound(lambda: session, on_failure=error_line), name=name,
                                   description=TOOLS[name].description))
    return Agent(model, instructions=memory_instructions(session, instructions, budget), tools=observed_tools,
                 **agent_kwargs)
