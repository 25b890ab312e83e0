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

Several clusters at once (``forward(batch=[...])``, the bank's memory conversion): every cluster is cut
into the same chunks as above, the chunks that need an LM go to :class:`SummarizeClusters` packed by
the window (one call for as many as fit, a chunk alone keeps the single-cluster call), and the
retries of all off-target chunks go together the same way. Each chunk gets the summary, retry and
choice it would get on its own; a chunk the LM's batch answer leaves out is asked alone.

Predictor: ``summarize`` (:class:`SummarizeCluster`); the batch predictor is not compiled (it is held
outside the module's named predictors, so compiled state files are unchanged); a compiled
agent (its predictor holds demos) asks each item alone, as it was compiled (`amb optimize` compiles
with one item a call).
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import Borrowed, MemoryAgent, answer_tokens
from amb_dspy.agents.chunking import TokenCounter, chunk_text, pack_within
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


class ClusterText(BaseModel):
    """One cluster to compress, as the memory writer hands it over."""

    content: str
    context: str
    keywords: list[str]


class TopicText(BaseModel):
    number: int
    content: str = Field(description="the text to compress")
    context: str = Field(description="one sentence naming the topic, for reference")
    keywords: list[str] = Field(description="keywords of the topic, for reference")
    feedback: str = Field("", description="empty on a first attempt; on a retry, how to fix the previous summary's length")


class TopicSummary(BaseModel):
    number: int = Field(description="the topic's number")
    summary: str = Field(description="the structured summary of that topic alone")


class SummarizeClusters(dspy.Signature):
    """Compress each numbered topic text, on its own, into a structured summary of 30-50% of its length.

    Summarise every topic separately and never move a fact from one topic to another. For each, keep
    every fact, name, number and date, the evidence behind each claim, and how the facts relate (cause,
    comparison, sequence); write short bullet points grouped by sub-topic; drop repetition, filler and
    formatting noise, and add nothing that is not in its content. A topic with feedback had a summary
    of the wrong length before: follow its feedback. Return one summary for every topic number.
    """

    topics: list[TopicText] = dspy.InputField(desc="numbered topic texts, each with its context, keywords and feedback")
    summaries: list[TopicSummary] = dspy.OutputField(desc="one summary per topic, by its number")
    # Written last: an answer cut short by max_tokens lacks it and does not parse, rather than being read
    # (DSPy's JSON repair) as one whose last summary is cut.
    complete: bool = dspy.OutputField(desc="true, written after the summary of every topic")


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
        self._batch = Borrowed(dspy.Predict(SummarizeClusters))

    def check_window(self) -> None:
        longest_feedback = length_feedback(9.99, 999_999, 999_999, self.target)
        self.content_budget(self.summarize, content="", context="", keywords=[], feedback=longest_feedback)

    def forward(self, content: str = "", context: str = "", keywords: list[str] = (),
                batch: list[ClusterText] | None = None) -> StructureOutput | list[StructureOutput]:
        """One cluster's summary, or with ``batch`` each cluster's, in order (see module docstring)."""
        if batch is not None:
            return self._forward_batch(batch)
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

    # --- several clusters at once --------------------------------------------------------------
    def _chunks(self, cluster: ClusterText) -> list[str]:
        """The chunks :meth:`forward` would summarise one by one (verbatim ones included)."""
        longest_feedback = length_feedback(9.99, 999_999, 999_999, self.target)
        budget = self.content_budget(self.summarize, content="", context=cluster.context,
                                     keywords=list(cluster.keywords), feedback=longest_feedback)
        return chunk_text(cluster.content.strip(), budget, self.count_tokens)

    def _forward_batch(self, batch: list[ClusterText]) -> list[StructureOutput]:
        texts = [cluster.content.strip() for cluster in batch]
        if not all(texts):
            raise ValueError("structure agent: content is empty")
        totals = [self.count_tokens(text) for text in texts]
        chunks = [[text] if total < self.verbatim_below else self._chunks(cluster)
                  for cluster, text, total in zip(batch, texts, totals)]
        # (cluster index, chunk, its tokens) of every chunk that needs the LM
        work = [(c, chunk, self.count_tokens(chunk)) for c, parts in enumerate(chunks) for chunk in parts
                if totals[c] >= self.verbatim_below and self.count_tokens(chunk) >= self.verbatim_below]
        first = self._summarize_many([TopicText(number=0, content=chunk, context=batch[c].context,
                                                keywords=list(batch[c].keywords)) for c, chunk, _ in work])
        retry_items, retry_at = [], []
        for n, ((c, chunk, tokens), summary) in enumerate(zip(work, first)):
            ratio = self.count_tokens(summary) / tokens
            if not summary or self._distance(ratio) > 0:
                retry_at.append(n)
                retry_items.append(TopicText(number=0, content=chunk, context=batch[c].context,
                                             keywords=list(batch[c].keywords),
                                             feedback=length_feedback(ratio, self.count_tokens(summary), tokens, self.target)))
        done = {n: (summary, False) for n, summary in enumerate(first)}
        for n, retry in zip(retry_at, self._summarize_many(retry_items)):
            summary, tokens = first[n], work[n][2]
            if not retry and not summary:
                raise self.fail("the LM returned an empty summary twice")
            keep_first = not retry or (summary and self._distance(self.count_tokens(summary) / tokens)
                                       < self._distance(self.count_tokens(retry) / tokens))
            done[n] = (summary if keep_first else retry, True)
        by_chunk = {(c, chunk): done[n] for n, (c, chunk, _) in enumerate(work)}
        outputs = []
        for c, parts in enumerate(chunks):
            if totals[c] < self.verbatim_below:
                outputs.append(StructureOutput(summary=texts[c], ratio=1.0, retried=False))
                continue
            made = [by_chunk.get((c, part), (part, False)) for part in parts]
            summary = "\n\n".join(part for part, _ in made)
            outputs.append(StructureOutput(summary=summary, ratio=self.count_tokens(summary) / totals[c],
                                           retried=any(r for _, r in made)))
        return outputs

    def _summarize_many(self, items: list[TopicText]) -> list[str]:
        """Each item's summary (stripped), asked in as few calls as fit the window; an item alone, or one the
        batch answer leaves out, is asked with the single-cluster predictor exactly as :meth:`forward` asks it."""
        if not items:
            return []
        batch = self._batch.value
        budget = int(self.window * self.settings.chunk_ratio) - self.prompt_tokens(batch, topics=[])
        room = answer_tokens(self.active_lm())
        separator = self.count_tokens(", ")
        # per item: its tokens in the prompt, one item, and its summary's most (half its content) in the answer
        costs = [(self.count_tokens(TopicText(**{**item.model_dump(), "number": 99_999}).model_dump_json()) + separator,
                  1, self.count_tokens(item.content) / 2) for item in items]
        # A compiled agent asks each item alone: its demos belong to the single-cluster predictor.
        size = 1 if self.summarize.demos else self.ingest_batch()
        groups = pack_within(costs, (budget, size, room))
        answers = map_in_context(lambda group: self._ask(batch, [items[i] for i in group]), groups, self.lm_threads())
        out: list[str] = [""] * len(items)
        for group, answer in zip(groups, answers):
            for i, summary in zip(group, answer):
                out[i] = summary
        return out

    def _ask(self, batch: dspy.Predict, items: list[TopicText]) -> list[str]:
        def alone(item: TopicText) -> str:
            prediction = self.call(self.summarize, content=item.content, context=item.context,
                                   keywords=list(item.keywords), feedback=item.feedback)
            return str(prediction.summary or "").strip()

        if len(items) == 1:
            return [alone(items[0])]
        numbered = [TopicText(**{**item.model_dump(), "number": n}) for n, item in enumerate(items, 1)]
        prediction = self.call(batch, topics=numbered)
        by_number = {s.number: str(s.summary or "").strip() for s in prediction.summaries or []}
        return [by_number[n] if n in by_number else alone(item) for n, item in enumerate(items, 1)]

