"""The answer agent: the task goal answered from ``<memory>``, with a verdict on whether memory suffices.

Two signatures over the same inputs (the goal and the ``<memory>`` block the adapter writes):

* :class:`AnswerFromMemory`, the agent's predictor ``respond`` (compiled and optimised like the other
  agents') -- the answer, the memory groups it rests on, why, and whether the notes suffice. The bank asks
  it once when a run starts with memory (the fast path): sufficient ends the run with that answer;
  otherwise the verdict and the draft go into the Insight Doc and the loop runs.
* :class:`ShortAnswer` (``forward(..., judge=False)``, a plain ``dspy.Predict`` made for the call) -- the
  answer alone, one output field: the last LM answer when the executor's final pass gave none. A reply
  that does not parse is read leniently: with one output field, the completion's text (markers
  stripped) is the answer.

Rules kept in code: an empty answer is never sufficient; cited ids are de-duplicated. LM trouble is an
:class:`~amb_dspy.agents.base.AgentError`; the deterministic policy (``agents/fallback/answer.py``) then
gives the extractive answer, marked as such.
"""

from __future__ import annotations

import json
import re

import dspy
from pydantic import BaseModel

from amb_dspy.agents.base import AgentError, MemoryAgent, dedupe
from amb_dspy.agents.chunking import hard_split
from amb_dspy.text import split_paragraphs

_MARKER = re.compile(r"\[\[\s*##\s*\w+\s*##\s*\]\]")
_FIELD_LABEL = re.compile(r"^\s*(?:answer|short answer|final answer)\s*:\s*", re.IGNORECASE)
LENIENT_MAX_CHARS = 300  # a lenient answer is a short span, not a page of rambling


class AnswerFromMemory(dspy.Signature):
    """Answer the task goal from the memory notes, and judge whether the notes suffice.

    The notes are grouped under headers "Memory N (node ID):". Give a short answer: a span from the notes
    (a name, a date, a number, a place), or yes/no for a yes/no question. Cite the node ids of the groups
    the answer rests on. Set sufficient to true only when the notes state everything the answer needs;
    when something is missing, still give your best draft answer, set sufficient to false and say in
    reason what is missing, so that it can be searched for.
    """

    task_goal: str = dspy.InputField(desc="the user's question")
    memory: str = dspy.InputField(desc="notes retrieved from memory for the goal, grouped by memory node")
    answer: str = dspy.OutputField(desc="the short answer, or the best draft when the notes do not suffice")
    cited_node_ids: list[str] = dspy.OutputField(desc="ids of the memory groups the answer rests on")
    reason: str = dspy.OutputField(desc="one sentence: why the notes suffice, or what is missing")
    sufficient: bool = dspy.OutputField(desc="true only when the notes alone answer the goal")


class ShortAnswer(dspy.Signature):
    """Answer the task goal from the memory notes alone. Reply with the answer only: a short span from
    the notes (a name, a date, a number, a place), or yes/no for a yes/no question."""

    task_goal: str = dspy.InputField()
    memory: str = dspy.InputField(desc="notes retrieved from memory for the goal")
    answer: str = dspy.OutputField(desc="the short answer")


class AnswerOutput(BaseModel):
    answer: str
    sufficient: bool = False
    cited_node_ids: list[str] = []
    reason: str = ""
    extractive: bool = False  # the deterministic policy's best evidence line, not an LM's answer
    lenient: bool = False  # read from a reply that did not parse


def lenient_answer(raw: str) -> str:
    """The answer in a single-field reply that did not parse: a JSON object's ``answer``, else the text
    without DSPy's field markers and an "Answer:" label, its first non-empty paragraph, cut short."""
    text = (raw or "").strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("answer"), (str, int, float)):
        text = str(value["answer"])
    text = _MARKER.sub("\n", text)
    paragraphs = split_paragraphs(text, any_whitespace=True)
    text = _FIELD_LABEL.sub("", " ".join(paragraphs[0].split())) if paragraphs else ""
    return text[:LENIENT_MAX_CHARS].strip()


class AnswerAgent(MemoryAgent):
    """Answers the goal from <memory> (see module docstring). Predictor: ``respond``."""

    name = "answer"

    def __init__(self, config=None, token_counter=None, lm=None):
        super().__init__(config, token_counter, lm)
        self.respond = dspy.Predict(AnswerFromMemory)

    def forward(self, task_goal: str, memory: str, judge: bool = True) -> AnswerOutput:
        """``judge``: the answer with its verdict (``respond``); else the answer alone (read leniently)."""
        predictor = self.respond if judge else dspy.Predict(ShortAnswer)
        memory = self._fitted(predictor, task_goal, memory)
        if not judge:
            return self._short_answer(predictor, task_goal, memory)
        prediction = self.call(predictor, task_goal=task_goal, memory=memory)
        answer = str(prediction.answer or "").strip()
        return AnswerOutput(
            answer=answer, sufficient=bool(prediction.sufficient) and bool(answer),
            cited_node_ids=dedupe([str(i) for i in prediction.cited_node_ids or []]),
            reason=" ".join(str(prediction.reason or "").split()),
        )

    def _short_answer(self, predictor: dspy.Predict, task_goal: str, memory: str) -> AnswerOutput:
        try:
            prediction = self.call(predictor, task_goal=task_goal, memory=memory)
        except AgentError as exc:
            answer = lenient_answer(exc.raw)
            if not answer:
                raise
            return AnswerOutput(answer=answer, reason=f"read leniently: {exc.message}", lenient=True)
        answer = str(prediction.answer or "").strip()
        if not answer:
            raise AgentError(self.name, "the LM gave an empty answer")
        return AnswerOutput(answer=answer)

    def _fitted(self, predictor: dspy.Predict, task_goal: str, memory: str) -> str:
        """``memory``, cut to what the window leaves once the rest of the prompt is counted."""
        budget = self.content_budget(predictor, task_goal=task_goal, memory="")
        if self.count_tokens(memory) <= budget:
            return memory
        return hard_split(memory, budget, self.count_tokens)[0]

    def check_window(self) -> None:
        self.content_budget(self.respond, task_goal="", memory="")
