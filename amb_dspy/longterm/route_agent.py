"""The optional LM memory router: a typed DSPy signature in a small module, optimizable like the agents.

``route(message, trace, router=MemoryRouter())`` asks it instead of the heuristic rules; its answer
goes through :func:`amb_dspy.longterm.route.route`, which falls back to the rules when the LM fails,
and never writes a secret whatever the LM says. It can be compiled like any DSPy module (a labelled
set of messages such as ``bench/data/route_messages.jsonl`` is its training set).
"""

from __future__ import annotations

from typing import Literal

import dspy

MemoryKindName = Literal["profile", "domain", "trace", "tool"]


class RouteMemory(dspy.Signature):
    """Decide how an assistant with long-term memory (kept across tasks and sessions) handles a message.

    Read memory first when the message asks for work (a question, an instruction) that earlier tasks,
    the user's preferences or known facts could help with; not for small talk or a plain statement.
    Write only what lasts: a user's standing preference or profile ("from now on", "always", "I prefer",
    "my name is") is `profile`; a stable definition or fact told ("X stands for Y") is `domain`; after a
    task, its conclusion and how it went are `trace` and its tool calls (queries run, pages read, files
    written) are `tool`. Never write passing remarks ("today", "just this once"), questions alone,
    small talk, or secrets (passwords, keys).
    """

    message: str = dspy.InputField(desc="the user's message or the task")
    trace: str = dspy.InputField(desc="what the finished task did (answer, hops, tool calls); empty before the task")
    should_read: bool = dspy.OutputField(desc="search long-term memory before working on the message")
    should_write: bool = dspy.OutputField(desc="keep something from this message or task in long-term memory")
    kinds: list[MemoryKindName] = dspy.OutputField(desc="what to keep; empty when nothing")


class MemoryRouter(dspy.Module):
    """``router(message, trace) -> {"should_read", "should_write", "kinds"}`` for :func:`~amb_dspy.longterm.route.route`."""

    def __init__(self):
        super().__init__()
        self.decide = dspy.Predict(RouteMemory)

    def forward(self, message: str, trace: str = "") -> dspy.Prediction:
        return self.decide(message=message, trace=trace)

    def __call__(self, message: str, trace: str = "") -> dict:  # the Router protocol of route()
        prediction = super().__call__(message=message, trace=trace)
        return {"should_read": prediction.should_read, "should_write": prediction.should_write,
                "kinds": list(prediction.kinds or [])}
