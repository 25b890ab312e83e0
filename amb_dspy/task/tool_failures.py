"""Tool failures are errors of the run: a task whose every search and visit failed has not met its goal.

The tools never raise into the executor: a failed call comes back as one ``Error: ...`` line that the
LM reads as an observation (:mod:`amb_dspy.tools`). So the LM may well answer anyway, from what it
already believes, and planning may judge the task done. :func:`note_tool_calls` keeps the score in the
run state (every failed call listed in the run's errors, which the CLI prints last), and
:func:`tool_termination` refuses ``goal_met`` to a run that fetched nothing: it ends ``tools_failed``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from amb_dspy.task.executor import ToolCall
from amb_dspy.task.state import RunState

# The tools that fetch sources; deep_retrieval reads memory back, finish ends a ReAct loop.
SOURCE_TOOLS = frozenset({"search", "visit"})
TOOLS_FAILED = "tools_failed"


def note_tool_calls(state: RunState, calls: Sequence[ToolCall]) -> None:
    """Count an execution's searches and visits (repeats answered from memory aside) and record each
    failure in the run's errors."""
    for call in calls:
        if call.name not in SOURCE_TOOLS or call.cached:
            continue
        state.tool_calls += 1
        if call.is_error:
            state.tool_failures += 1
            args = json.dumps(call.args, ensure_ascii=False, default=str)[:120]
            state.errors.append(f"{call.name}({args}) failed: {' '.join(call.observation.split())[:300]}")


def tool_termination(state: RunState, termination: str) -> str:
    """``termination``, except that a run whose every search and visit failed does not end ``goal_met``."""
    if termination != "goal_met" or state.tool_calls == 0 or state.tool_failures < state.tool_calls:
        return termination
    state.errors.append(f"every search and visit of this task failed ({state.tool_failures} of "
                        f"{state.tool_calls}): its answer rests on no source; termination {TOOLS_FAILED}")
    return TOOLS_FAILED
