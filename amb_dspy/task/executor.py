"""The executor: ``dspy.ReAct`` from the adapter's enhanced prompt to an answer, with the bank's tools.

The executor records every tool call as it returns (:class:`ToolCall`), so tool responses can become
memory without the tools knowing about the bank, even when the execution fails after them. A record holds a
response's whole text, also where the LM was shown it cut (:mod:`amb_dspy.tools.observation`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import dspy

from amb_dspy.errors import one_line
from amb_dspy.tools.observation import full_text

# Tools whose responses are not new knowledge: reading memory back, and ReAct's own finish call.
NOT_KNOWLEDGE = frozenset({"deep_retrieval", "finish"})


class ExecuteTask(dspy.Signature):
    """You are the executor of an agent with a structured memory bank.

    The prompt holds a <task> section (the overall goal, subtasks already completed and the one
    pending task) and a <memory> section (compressed notes retrieved for the pending task, each with
    a node id). Do the pending task, or answer the goal when nothing is pending. Use `search` to
    find sources, `visit` to read one with a goal in mind, and `deep_retrieval` with a memory node id
    when a note's summary is not detailed enough. Base the answer on evidence; give it concisely, and
    cite the memory notes it rests on as [node ID] after the claim.
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
    cached: bool = False  # answered from memory: a repeat of an earlier call of this task

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
        return [c for c in self.tool_calls if c.name not in NOT_KNOWLEDGE and not c.is_error and not c.cached]

    def report(self, limit: int = 1500) -> str:
        """A short account of the execution for the planning agent."""
        lines = [f"answer: {self.answer}"]
        for call in self.tool_calls:
            if call.name == "finish":
                continue
            lines.append(f"{call.name}({json.dumps(call.args, ensure_ascii=False)[:200]}) -> {call.observation[:200]}")
        return "\n".join(lines)[:limit]


def _recorded(tool: dspy.Tool, calls: list[ToolCall]) -> dspy.Tool:
    """``tool``, recording each call and its whole response in ``calls`` the moment it returns."""
    func = tool.func

    def call(**kwargs: Any) -> Any:
        try:
            observation = func(**kwargs)
        except Exception as exc:  # ReAct shows the LM the error; the run counts it (amb_dspy.task.tool_failures)
            calls.append(ToolCall(name=tool.name, args=dict(kwargs),
                                  observation=f"Execution error in {tool.name}: {type(exc).__name__}: {one_line(exc)}"))
            raise
        calls.append(ToolCall(name=tool.name, args=dict(kwargs), observation=full_text(observation),
                              cached=bool(getattr(observation, "cached", False))))
        return observation

    tool.func = call
    return tool


_CITATION = re.compile(r"\s*\[node[:\s]+([0-9a-f]{6,32})\]", re.IGNORECASE)


def resolve_node_id(fragment: str, known_ids: Collection[str]) -> str | None:
    """The known node id that ``fragment`` (an id or a unique prefix of six or more characters) names."""
    fragment = fragment.strip().strip("[]").removeprefix("node").strip(" :").lower()
    if len(fragment) < 6:
        return None
    matches = [node_id for node_id in known_ids if node_id.startswith(fragment)]
    return matches[0] if len(matches) == 1 else None


def citations(result: ExecutionResult, known_ids: Collection[str]) -> tuple[str, list[str]]:
    """The answer without its ``[node ID]`` markers, and the ids of the known nodes it rests on: those
    it cites (a unique prefix of six or more characters is enough) and those read with deep_retrieval."""
    cited: list[str] = []

    def resolve(fragment: str) -> str | None:
        return resolve_node_id(fragment, known_ids)

    for match in _CITATION.finditer(result.answer):
        node_id = resolve(match.group(1))
        if node_id and node_id not in cited:
            cited.append(node_id)
    for call in result.tool_calls:
        node_id = resolve(str(call.args.get("node_id", ""))) if call.name == "deep_retrieval" and not call.is_error else None
        if node_id and node_id not in cited:
            cited.append(node_id)
    return _CITATION.sub("", result.answer).strip(), cited


class Executor(dspy.Module):
    """ReAct over the enhanced prompt. Predictors: ``react`` (text tasks) and ``react_images``.

    Every tool call is recorded as it returns (``calls``, the current execution's, oldest first), so
    what the tools found survives an execution that fails or is stopped after them.
    """

    def __init__(self, tools: list[dspy.Tool], max_iters: int = 6):
        super().__init__()
        self.calls: list[ToolCall] = []
        self.tools = [_recorded(tool, self.calls) for tool in tools]
        self.react = dspy.ReAct(ExecuteTask, tools=self.tools, max_iters=max_iters)
        self.react_images = dspy.ReAct(ExecuteTaskWithImages, tools=self.tools, max_iters=max_iters)

    def forward(self, enhanced_prompt: str, images: list[dspy.Image] | None = None) -> ExecutionResult:
        self.calls.clear()
        if images:
            prediction = self.react_images(enhanced_prompt=enhanced_prompt, images=images)
        else:
            prediction = self.react(enhanced_prompt=enhanced_prompt)
        return ExecutionResult(answer=str(prediction.answer or "").strip(), tool_calls=list(self.calls))
