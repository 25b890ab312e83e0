"""The executor: ``dspy.ReAct`` from the adapter's enhanced prompt to an answer, with the bank's tools.

The bank reads back what the executor did from the ReAct trajectory (:class:`ToolCall` records),
so tool responses can become memory without the tools knowing about the bank. A record holds a
response's whole text, also where the LM was shown it cut (:mod:`amb_dspy.tools.observation`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import dspy

from amb_dspy.internals import react_steps
from amb_dspy.tools.observation import full_text

# Tools whose responses are not new knowledge: reading memory back, and ReAct's own finish call.
NOT_KNOWLEDGE = frozenset({"deep_retrieval", "finish"})


class ExecuteTask(dspy.Signature):
    """You are the executor of an agent with a structured memory bank.

    The prompt holds a <task> section (the overall goal, subtasks already completed and the one
    pending task) and a <memory> section (compressed notes retrieved for the pending task, each with
    a node id). Do the pending task, or answer the goal when nothing is pending. Use `search` to
    find sources, `visit` to read one with a goal in mind, and `deep_retrieval` with a memory node id
    when a note's summary is not detailed enough. Base the answer on evidence; give it concisely.
    """

    enhanced_prompt: str = dspy.InputField(desc="the <task> and <memory> sections written by the memory adapter")
    answer: str = dspy.OutputField(desc="the result of the pending task, or the final answer to the goal")


class ExecuteTaskWithImages(ExecuteTask):
    """You are the executor of an agent with a structured memory bank.

    The prompt holds a <task> section (the overall goal, subtasks already completed and the one
    pending task) and a <memory> section. The pending task asks you to recognise the attached
    images: describe what each shows, including any text, numbers or objects that bear on the goal.
    """

    images: list[dspy.Image] = dspy.InputField(desc="the images the user attached to the task")


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: dict[str, Any]
    observation: str

    @property
    def is_error(self) -> bool:
        return self.observation.startswith(("Error:", "Execution error"))


@dataclass
class ExecutionResult:
    answer: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    @property
    def knowledge(self) -> list[ToolCall]:
        """Successful tool responses that carry new information (what memory conversion stores)."""
        return [c for c in self.tool_calls if c.name not in NOT_KNOWLEDGE and not c.is_error]

    def report(self, limit: int = 1500) -> str:
        """A short account of the execution for the planning agent."""
        lines = [f"answer: {self.answer}"]
        for call in self.tool_calls:
            if call.name == "finish":
                continue
            lines.append(f"{call.name}({json.dumps(call.args, ensure_ascii=False)[:200]}) -> {call.observation[:200]}")
        return "\n".join(lines)[:limit]


def tool_calls_from(trajectory: dict[str, Any]) -> list[ToolCall]:
    calls = []
    for name, args, observation in react_steps(trajectory):
        args = args or {}
        calls.append(ToolCall(name=name, args=args if isinstance(args, dict) else {"value": args}, observation=full_text(observation)))
    return calls


class Executor(dspy.Module):
    """ReAct over the enhanced prompt. Predictors: ``react`` (text tasks) and ``react_images``."""

    def __init__(self, tools: list[dspy.Tool], max_iters: int = 6):
        super().__init__()
        self.tools = list(tools)
        self.react = dspy.ReAct(ExecuteTask, tools=tools, max_iters=max_iters)
        self.react_images = dspy.ReAct(ExecuteTaskWithImages, tools=tools, max_iters=max_iters)

    def forward(self, enhanced_prompt: str, images: list[dspy.Image] | None = None) -> ExecutionResult:
        if images:
            prediction = self.react_images(enhanced_prompt=enhanced_prompt, images=images)
        else:
            prediction = self.react(enhanced_prompt=enhanced_prompt)
        return ExecutionResult(answer=str(prediction.answer or "").strip(), tool_calls=tool_calls_from(prediction.trajectory))
