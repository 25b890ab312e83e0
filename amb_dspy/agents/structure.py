"""The structure agent: compress one cluster into a structured summary (spec §7.2).

The summary keeps facts, evidence and their relations, at 30-50% of the input's tokens. The ratio
(summary tokens / input tokens, same counter) is measured in code; when it falls outside the target,
the agent calls the same predictor once more with a ``feedback`` input saying how far off it was and
which way to go, then keeps whichever of the two summaries is closer to the target (the retry on a tie).
The final ratio and whether a retry happened are returned with the summary.

Why an explicit second call rather than ``dspy.Refine``: Refine asks the LM itself for advice (an
extra call), reruns at a different temperature and needs a reward threshold, so the number of calls
and the hint vary from run to run. Here the feedback is computed exactly, the retry costs at most one
call, and because ``feedback`` is an ordinary input field, optimizers and compiled demos see it too.

Inputs under ``verbatim_below`` tokens (40 by default: a sentence or two) come back verbatim with
ratio 1.0 and no LM call; there is nothing left to compress. Content longer than the window is cut at
paragraph boundaries, each chunk is summarised on its own (with its own retry), and the summaries are
joined; the ratio is then measured over the whole.

Predictor: ``summarize`` (:class:`SummarizeCluster`).
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import MemoryAgent
from amb_dspy.agents.chunking import TokenCounter, chunk_text
from amb_dspy.config import AmbConfig
from amb_dspy.parallel import map_in_context


class StructureOutput(BaseModel):
    summary: str
    ratio: float = Field(description="tokens of summary / tokens of input")
    retried: bool = Field(description="whether a length-feedback retry was made")


class SummarizeCluster(dspy.Signature):
    """Compress the text of one topic into a structured summary of 30-50% of its length.

    Keep every fact, name, number and date, the evidence behind each claim, and how the facts relate
    (cause, comparison, sequence). Write short bullet points grouped by sub-topic. Drop repetition,
    filler and formatting noise, and add nothing that is not in the content. When feedback is given,
    the previous summary had the wrong length: follow the feedback.
    """

    content: str = dspy.InputField(desc="the text to compress")
    context: str = dspy.InputField(desc="one sentence naming the topic, for reference")
    keywords: list[str] = dspy.InputField(desc="keywords of the topic, for reference")
    feedback: str = dspy.InputField(desc="empty on a first attempt; on a retry, how to fix the previous summary's length")
    summary: str = dspy.OutputField(desc="the structured summary")


def length_feedback(ratio: float, summary_tokens: int, input_tokens: int, target: tuple[float, float]) -> str:
    low, high = target
    direction = (
        "Shorten it: merge points and drop repetition and minor detail, keeping facts and evidence."
        if ratio > high
        else "Lengthen it: restore the facts, evidence and relations that were left out."
    )
    return (
        f"The previous summary was {ratio:.0%} of the content ({summary_tokens} of {input_tokens} tokens); "
        f"it must be {low:.0%}-{high:.0%}, about {int(input_tokens * low)}-{int(input_tokens * high)} tokens. "
        f"{direction}"
    )


class StructureAgent(MemoryAgent):
    """Structured compression of one cluster with a measured ratio (see module docstring)."""

    name = "structure"

    def __init__(
        self,
        config: AmbConfig | None = None,
        token_counter: TokenCounter | None = None,
        lm=None,
        target: tuple[float, float] = (0.3, 0.5),
        verbatim_below: int = 40,
    ):
        super().__init__(config, token_counter, lm)
        self.target = target
        self.verbatim_below = verbatim_below
        self.summarize = dspy.Predict(SummarizeCluster)

    def check_window(self) -> None:
        longest_feedback = length_feedback(9.99, 999_999, 999_999, self.target)
        self.content_budget(self.summarize, content="", context="", keywords=[], feedback=longest_feedback)

    def forward(self, content: str, context: str, keywords: list[str]) -> StructureOutput:
        text = content.strip()
        if not text:
            raise ValueError("structure agent: content is empty")
        input_tokens = self.count_tokens(text)
        if input_tokens < self.verbatim_below:
            return StructureOutput(summary=text, ratio=1.0, retried=False)

        longest_feedback = length_feedback(9.99, 999_999, 999_999, self.target)
        budget = self.content_budget(
            self.summarize, content="", context=context, keywords=list(keywords), feedback=longest_feedback
        )
        chunks = chunk_text(text, budget, self.count_tokens)
        done = map_in_context(lambda chunk: self._summarize_chunk(chunk, context, list(keywords)), chunks,
                              self.lm_threads())
        retried = any(chunk_retried for _, chunk_retried in done)
        summary = "\n\n".join(part for part, _ in done)
        return StructureOutput(summary=summary, ratio=self.count_tokens(summary) / input_tokens, retried=retried)

    def _distance(self, ratio: float) -> float:
        low, high = self.target
        return max(low - ratio, ratio - high, 0.0)

    def _summarize_chunk(self, chunk: str, context: str, keywords: list[str]) -> tuple[str, bool]:
        input_tokens = self.count_tokens(chunk)
        if input_tokens < self.verbatim_below:
            return chunk, False
        first = self.call(self.summarize, content=chunk, context=context, keywords=keywords, feedback="")
        summary = str(first.summary or "").strip()
        tokens = self.count_tokens(summary)
        ratio = tokens / input_tokens
        if summary and self._distance(ratio) == 0:
            return summary, False

        feedback = length_feedback(ratio, tokens, input_tokens, self.target)
        second = self.call(self.summarize, content=chunk, context=context, keywords=keywords, feedback=feedback)
        retry = str(second.summary or "").strip()
        if not retry and not summary:
            raise self.fail("the LM returned an empty summary twice", second)
        retry_ratio = self.count_tokens(retry) / input_tokens
        if not retry or (summary and self._distance(ratio) < self._distance(retry_ratio)):
            return summary, True
        return retry, True
