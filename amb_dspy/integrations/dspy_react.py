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
from amb_dspy.task.tools import AGENT_TOOLS, TOOLS


def observe_tools(tools: Sequence[Callable | dspy.Tool], session: TaskSession) -> list[dspy.Tool]:
    """``tools`` as ``dspy.Tool`` objects whose every result ``session`` observes (tool cache + conversion)."""
    wrapped = []
    for tool in tools:
        tool = tool if isinstance(tool, dspy.Tool) else dspy.Tool(tool)
        tool.func = observed(tool.func, session, name=tool.name)  # after dspy.Tool read the signature
        wrapped.append(tool)
    return wrapped


def memory_tools(session: TaskSession, names: Sequence[str] = AGENT_TOOLS) -> list[dspy.Tool]:
    """The table's tools ``names`` (default ``memory_context``, ``memory_deep_retrieval``, ``memory_plan``,
    ``memory_complete``) on ``session``, as ``dspy.Tool`` objects; each returns text, a failure as one
    ``Error:`` line (see :mod:`amb_dspy.task.tools`)."""
    return [dspy.Tool(TOOLS[name].bound(lambda: session, on_failure=error_line), name=name,
                      desc=TOOLS[name].description) for name in names]
