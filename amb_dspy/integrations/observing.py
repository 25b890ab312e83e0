"""The one intercept every integration shares: a tool whose every result the task session observes."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from amb_dspy.errors import AmbError, one_line
from amb_dspy.task.session import TaskSession


def observe_quietly(session: TaskSession, tool: str, arguments: dict[str, Any], result: Any) -> None:
    """Hand a result to the session; a result memory cannot take (empty, too large) never fails the agent's
    tool call: it is noted in the session's errors instead."""
    try:
        session.observe(tool, arguments, result if isinstance(result, str) else str(result))
    except AmbError as exc:  # e.g. InputError: the agent keeps its result, memory says why it has none
        session.state.errors.append(f"{tool} result not observed: {one_line(exc)}")


def observed(func: Callable[..., Any], session: TaskSession, name: str | None = None) -> Callable[..., Any]:
    """``func`` (sync or async, keyword arguments) with every result also handed to ``session.observe``;
    its name, docstring and signature stay, so a framework builds the same tool schema from it."""
    tool = name or func.__name__

    def arguments(args: tuple, kwargs: dict) -> dict[str, Any]:
        bound = inspect.signature(func).bind_partial(*args, **kwargs)
        return {k: v for k, v in bound.arguments.items() if k not in ("ctx", "self")}

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def call_async(*args: Any, **kwargs: Any) -> Any:
            result = await func(*args, **kwargs)
            observe_quietly(session, tool, arguments(args, kwargs), result)
            return result

        return call_async

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = func(*args, **kwargs)
        observe_quietly(session, tool, arguments(args, kwargs), result)
        return result

    return call


def error_line(exc: BaseException) -> str:
    """A memory tool's failure as the one line an agent reads (tools report, they never raise): the
    framework doors show :class:`~amb_dspy.task.tools.ToolFailure` this way."""
    return f"Error: {one_line(exc)}"
