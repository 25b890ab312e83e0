"""The classification agent: split a tool response into topic clusters without losing a word (spec §7.1).

The LM never retypes the text. The input is cut into numbered segments (paragraphs; sentence runs for
an over-long paragraph), the LM assigns segment numbers to topics and describes each topic, and the
code builds every cluster's ``content`` from the original segments:

* every segment lands in exactly one cluster (checked before returning);
* a segment claimed by two clusters stays in the first;
* segments the LM leaves out are gathered into one extra cluster, described from its own text;
* numbers the LM makes up are dropped and logged;
* ``should_cluster = false`` gives a single cluster holding every segment.

Topics are bounded in tokens (``AmbConfig.topic_min_tokens`` to ``topic_max_tokens``): a topic the LM makes
larger is cut, in order, into runs of at most the maximum, and at a paragraph break (in a dialogue, a new
session) once a run holds the minimum (:func:`~amb_dspy.agents.chunking.bounded_runs`). Topic sizes are
counted with :func:`~amb_dspy.agents.chunking.estimate_tokens`, the counter of the ``<memory>`` block's budget
(:mod:`amb_dspy.memory.view`), whatever LM is active: a node is bounded in the unit it is shown in, and the
same text gives the same topics with or without a local model's tokenizer (the LM's own counter, lower than
the estimate, let nodes reach 410 estimated tokens under a 300 bound). Windows stay in the LM's tokens.

Input longer than the window, or than what the LM may answer for (its ``max_tokens``, about
:data:`ANSWER_SHARE` a token of input), is cut into chunks of whole segments, each classified on its own call,
and the clusters of all chunks are concatenated (so the output's ``should_cluster`` is simply
"more than one cluster"). Cluster ids are ``c1, c2, ...`` in order.

Predictor: ``classify`` (:class:`ClassifySegments`).
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import (
    MIN_INPUT_BUDGET,
    LMKeywords,
    MemoryAgent,
    answer_tokens,
    dedupe,
    fallback_context,
    fallback_keywords,
    logger,
)
from amb_dspy.agents.chunking import (
    TokenCounter,
    bounded_runs,
    estimate_tokens,
    pack,
    paragraph_breaks,
    segment,
    split_long_paragraph,
)
from amb_dspy.config import AmbConfig
from amb_dspy.parallel import map_in_context
from amb_dspy.text import locate

# Answer tokens per token of segments: each topic of 80-300 tokens is answered with a sentence of context,
# keywords and its segment numbers, about 40-60 tokens (the scripted LM of bench/ingest_cost.py writes 0.13).
ANSWER_SHARE = 0.2


class Cluster(BaseModel):
    cluster_id: str
    context: str = Field(description="one sentence naming the topic")
    content: str = Field(description="the original text of the cluster's segments, in input order")
    keywords: list[str]
    spans: list[tuple[int, int]] = Field(default_factory=list,
                                         description="[start, end) of each of its segments in the classified text")


class ClassificationOutput(BaseModel):
    should_cluster: bool
    clusters: list[Cluster]


class SegmentGroup(BaseModel):
    """A topic: what it is about, and the numbers of the segments on it."""

    context: str = Field(description="one sentence naming the topic")
    keywords: LMKeywords = Field(description="three to six keywords")
    segments: list[int] = Field(description="the numbers of the segments on this topic")


class ClassifySegments(dspy.Signature):
    """Group numbered text segments by topic.

    Each segment starts with its number in brackets, like [3]. Put every segment number into exactly
    one cluster, keeping segments on the same topic together. Describe each cluster with one sentence
    of context and a few keywords; do not copy the segment text. Set should_cluster to false when all
    segments are about one topic, and then return a single cluster with every segment number. The task
    goal only helps decide what counts as a topic; do not answer it.
    """

    task_goal: str = dspy.InputField(desc="the user's question, for reference; may be empty")
    segments: str = dspy.InputField(desc="numbered text segments: [1] ..., [2] ...")
    should_cluster: bool = dspy.OutputField(desc="true when the segments cover more than one topic")
    clusters: list[SegmentGroup] = dspy.OutputField(desc="the topics, each with the numbers of its segments")


class ClassificationAgent(MemoryAgent):
    """Topic clustering of long context by segment numbers (see module docstring).

    ``max_segment_tokens`` caps a segment: a paragraph longer than that is offered to the LM as
    several sentence runs, so that one long paragraph can still be split between topics.
    """

    name = "classification"

    def __init__(
        self,
        config: AmbConfig | None = None,
        token_counter: TokenCounter | None = None,
        lm=None,
        max_segment_tokens: int = 400,
    ):
        super().__init__(config, token_counter, lm)
        self.max_segment_tokens = max_segment_tokens
        self.classify = dspy.Predict(ClassifySegments)

    @property
    def topic_tokens(self) -> tuple[int, int]:
        """(smallest, largest) size of a topic in tokens; the largest is never under the smallest."""
        low, high = self.settings.topic_min_tokens, self.settings.topic_max_tokens
        return min(low, high), high

    count_topic_tokens = staticmethod(estimate_tokens)  # a topic's size, in the <memory> budget's unit

    def topic_segments(self, context: str, window_tokens: int) -> list[str]:
        """``context`` as segments of at most ``topic_max_tokens`` (:attr:`count_topic_tokens`) and at most
        ``window_tokens`` of the active LM's (:meth:`count_tokens`)."""
        high = self.topic_tokens[1]
        pieces = segment(context, min(self.max_segment_tokens, high), self.count_topic_tokens)
        return [part for piece in pieces for part in split_long_paragraph(piece, window_tokens, self.count_tokens)]

    def check_window(self) -> None:
        self.content_budget(self.classify, task_goal="", segments="")

    def forward(self, context: str, task_goal: str = "") -> ClassificationOutput:
        if not context.strip():
            return ClassificationOutput(should_cluster=False, clusters=[])
        budget = self.content_budget(self.classify, task_goal=task_goal, segments="")
        room = answer_tokens(self.active_lm())
        if room is not None:  # a chunk's answer must fit what the LM may write too
            budget = max(MIN_INPUT_BUDGET, min(budget, int(room / ANSWER_SHARE)))
        number_cost = self.count_tokens("[99999] ")
        low, high = self.topic_tokens
        segments = self.topic_segments(context, budget - number_cost)
        # Pack with global numbers: a chunk's local numbers are never wider, so it can only shrink.
        numbered = [f"[{i}] {s}" for i, s in enumerate(segments, 1)]
        chunks = pack(numbered, budget, self.count_tokens)
        topics = map_in_context(lambda chunk: self._classify_chunk([segments[i] for i in chunk], task_goal),
                                chunks, self.lm_threads())
        groups: list[tuple[str, list[str], list[int]]] = [
            (ctx, kws, [chunk[i] for i in members]) for chunk, found in zip(chunks, topics) for ctx, kws, members in found
        ]

        assigned = sorted(i for _, _, members in groups for i in members)
        if assigned != list(range(len(segments))):
            raise RuntimeError("classification lost or duplicated a segment")  # a bug, never the LM's doing
        spans = locate(context, segments)
        sizes, breaks = [self.count_topic_tokens(s) for s in segments], paragraph_breaks(context, spans)
        sep = self.count_topic_tokens("\n\n")
        groups = [(ctx, kws, run) for ctx, kws, members in groups
                  for run in bounded_runs(members, sizes, breaks, low, high, sep)]
        clusters = [
            Cluster(
                cluster_id=f"c{n}",
                context=ctx,
                content="\n\n".join(segments[i] for i in members),
                keywords=kws,
                spans=[spans[i] for i in members],
            )
            for n, (ctx, kws, members) in enumerate(groups, 1)
        ]
        return ClassificationOutput(should_cluster=len(clusters) > 1, clusters=clusters)

    def _classify_chunk(self, segments: list[str], task_goal: str) -> list[tuple[str, list[str], list[int]]]:
        """(context, keywords, local segment indices) per topic; every index in exactly one topic."""
        rendered = "\n\n".join(f"[{i}] {s}" for i, s in enumerate(segments, 1))
        prediction = self.call(self.classify, task_goal=task_goal, segments=rendered)
        topics: list[SegmentGroup] = list(prediction.clusters or [])

        def describe(topic: SegmentGroup | None, members: list[int]) -> tuple[str, list[str], list[int]]:
            text = "\n\n".join(segments[i] for i in members)
            context = (topic.context.strip() if topic else "") or fallback_context(text)
            keywords = dedupe(topic.keywords if topic else []) or fallback_keywords(text)
            return context, keywords, members

        if not prediction.should_cluster:
            everything = list(range(len(segments)))
            keywords = dedupe([k for t in topics for k in t.keywords])
            first = topics[0] if topics else None
            context, fallback_kws, _ = describe(first, everything)
            return [(context, keywords or fallback_kws, everything)]

        owner: dict[int, int] = {}
        unknown: list[int] = []
        for t, topic in enumerate(topics):
            for number in topic.segments:
                if not 1 <= number <= len(segments):
                    unknown.append(number)
                elif number - 1 not in owner:
                    owner[number - 1] = t
        if unknown:
            logger.warning("classification: dropped %d unknown segment number(s) %s (have 1-%d)",
                           len(unknown), _shorten(unknown), len(segments))
        out = []
        for t, topic in enumerate(topics):
            members = sorted(i for i, o in owner.items() if o == t)
            if members:
                out.append(describe(topic, members))
        leftovers = [i for i in range(len(segments)) if i not in owner]
        if leftovers:
            logger.info("classification: %d segment(s) left unassigned by the LM kept in a cluster of their own", len(leftovers))
            out.append(describe(None, leftovers))
        return out


def _shorten(numbers: list[int], limit: int = 10) -> str:
    shown = ", ".join(map(str, numbers[:limit]))
    return f"[{shown}{', ...' if len(numbers) > limit else ''}]"
