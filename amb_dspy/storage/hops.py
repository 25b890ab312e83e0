"""The run's hop record: each executed subtask, what the executor did for it, and what it cost."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class HopCall(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    cached: bool = False  # answered from memory as a repeat; the backend was not called


class Hop(BaseModel):
    """One executed subtask (or the final answer pass): its task, tool calls, answer and cost."""

    model_config = ConfigDict(frozen=True)

    loop: int
    task: str
    kind: str  # NORMAL, CROSS_VALIDATE, IMAGE, ANSWER for the final pass, MEMORY for the answer from memory first
    tool_calls: list[HopCall] = Field(default_factory=list)
    answer: str = ""
    success: bool = False
    lm_calls: int = 0
    tokens: int = 0


def hop_summary(hops: list[Hop]) -> dict[str, int]:
    """Counts over a run's hops: searches, unique searches, repeats avoided, visits, hops."""
    calls = [call for hop in hops for call in hop.tool_calls]
    searches = [c for c in calls if c.name == "search"]
    return {"searches": len(searches), "unique_searches": sum(not c.cached for c in searches),
            "repeats_avoided": sum(c.cached for c in calls), "visits": sum(c.name == "visit" for c in calls),
            "hops": len(hops)}
