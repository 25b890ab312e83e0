"""The analysis agent: how a new memory node relates to the retrieved candidates (spec §7.3).

One LM call judges all candidates, each in priority order: conflict, else related, else unrelated.
The prompt names candidates by short numbers (1, 2, 3...), never by node id; the code maps the numbers
back, so the relationships it returns name only real candidates. Numbers the LM invents are dropped
and logged. A candidate the LM does not mention is "unrelated"; one it mentions twice keeps its
highest-priority judgement. No candidates means no LM call and no relationships.

The output is complete for its kind: a "related" relationship has all four update fields (the node's
current context or keywords where the LM left one out), and a "conflict" has a description.

When the new node plus all candidates would overflow the window, the candidates are split into groups
that fit, one call per group, numbered from 1 in each.

Several new nodes at once (``forward(batch=[(node, candidates), ...])``, the bank's memory conversion):
the nodes whose candidates fit one call go to
:class:`~amb_dspy.agents.analysis_batch.AnalyzeRelationshipsBatch` (every node shown once, numbered;
see that module), packed by the window; each node gets the output a call of its own would give it. A node alone in a call, one whose candidates need several calls, or one the batch answer leaves
out, is judged on its own exactly as above; an unusable batch answer is asked again in two halves. The caller decides which nodes may be judged together
(see :mod:`amb_dspy.memory.writer`: the nodes of one conversion are judged independently, on the graph
as the conversion found it).

Predictor: ``analyze`` (:class:`AnalyzeRelationships`); the batch predictor is not compiled (held
outside the module's named predictors); a compiled
agent (its predictor holds demos) judges each node of a batch alone, as it was compiled (`amb optimize`
compiles with one item a call).
"""

from __future__ import annotations

import json

import dspy
from pydantic import BaseModel

from amb_dspy.agents.analysis_batch import AnalyzeRelationshipsBatch, judge_together, pack_items
from amb_dspy.agents.base import AgentError, Borrowed, MemoryAgent, dedupe, logger
from amb_dspy.agents.chunking import pack
from amb_dspy.agents.judgement import PRIORITY, Judgement, RelationshipKind
from amb_dspy.parallel import map_in_context
from amb_dspy.storage.content import NodeContent


class NodeInfo(NodeContent):
    """A memory node as agents see it: no embedding. ``id`` is None for a node not yet in the graph."""

    id: str | None = None


class Relationship(BaseModel):
    existing_node_id: str
    relationship: RelationshipKind
    reasoning: str = ""
    conflict_description: str | None = None
    context_update_new: str | None = None
    context_update_existing: str | None = None
    keywords_update_new: list[str] | None = None
    keywords_update_existing: list[str] | None = None


class AnalysisOutput(BaseModel):
    relationships: list[Relationship]

    def of_kind(self, kind: RelationshipKind) -> list[Relationship]:
        return [r for r in self.relationships if r.relationship == kind]


class CandidateBrief(BaseModel):
    number: int
    summary: str
    context: str
    keywords: list[str]


class AnalyzeRelationships(dspy.Signature):
    """Decide how a new memory node relates to each numbered candidate node.

    Judge every candidate in this order. Conflict: the two make contradicting claims about the same
    thing (a different date, number, name or outcome); describe the contradiction. Otherwise related:
    they share an entity, topic or line of reasoning, so one helps to understand the other; rewrite the
    one-sentence context and the keywords of both nodes so that each also reflects the other. Otherwise
    unrelated. Refer to candidates only by their number.
    """

    new_node: NodeContent = dspy.InputField(desc="the node just added to memory")
    candidates: list[CandidateBrief] = dspy.InputField(desc="existing nodes, each with a number")
    relationships: list[Judgement] = dspy.OutputField(desc="one judgement per candidate")


def unique_candidates(candidates: list[NodeInfo]) -> list[NodeInfo]:
    """The candidates, each id once (its first occurrence), in order; ValueError for one without an id."""
    unique: dict[str, NodeInfo] = {}
    for candidate in candidates:
        if not candidate.id:
            raise ValueError("analysis agent: every candidate needs an id")
        unique.setdefault(candidate.id, candidate)
    return list(unique.values())


class AnalysisAgent(MemoryAgent):
    """Relationship analysis of a new node against candidates (see module docstring)."""

    name = "analysis"

    def __init__(self, config=None, token_counter=None, lm=None):
        super().__init__(config, token_counter, lm)
        self.analyze = dspy.Predict(AnalyzeRelationships)
        self._batch = Borrowed(dspy.Predict(AnalyzeRelationshipsBatch))

    def check_window(self) -> None:
        self.content_budget(self.analyze, new_node=NodeContent("", "", []), candidates=[])

    def forward(self, new_node: NodeInfo | None = None, candidates: list[NodeInfo] = (),
                batch: list[tuple[NodeInfo, list[NodeInfo]]] | None = None) -> AnalysisOutput | list[AnalysisOutput]:
        """The relationships of ``new_node`` to ``candidates``, or with ``batch`` those of each pair, in order."""
        if batch is not None:
            if self.analyze.demos:  # compiled one node a call: each is judged alone, as it was compiled
                return [self._alone(node, unique_candidates(candidates)) for node, candidates in batch]
            return self._forward_batch(batch)
        return self._alone(new_node, unique_candidates(candidates))

    def _alone(self, new_node: NodeInfo, ordered: list[NodeInfo]) -> AnalysisOutput:
        if not ordered:
            return AnalysisOutput(relationships=[])
        brief = NodeContent(summary=new_node.summary, context=new_node.context, keywords=new_node.keywords)
        budget = self.content_budget(self.analyze, new_node=brief, candidates=[])
        rendered = [json.dumps(_candidate_brief(99, c).model_dump(), ensure_ascii=False) for c in ordered]
        verdicts: dict[str, Judgement] = {}
        for group in pack(rendered, budget, self.count_tokens, sep=", "):
            verdicts.update(self._judge(brief, [ordered[i] for i in group]))

        return AnalysisOutput(
            relationships=[self._relationship(new_node, c, verdicts.get(c.id)) for c in ordered]
        )

    def _judge(self, brief: NodeContent, group: list[NodeInfo]) -> dict[str, Judgement]:
        shown = [_candidate_brief(n, c) for n, c in enumerate(group, 1)]
        prediction = self.call(self.analyze, new_node=brief, candidates=shown)
        return _by_candidate(group, prediction.relationships or [])

    # --- several new nodes at once (amb_dspy.agents.analysis_batch) --------------------------
    def _forward_batch(self, batch: list[tuple[NodeInfo, list[NodeInfo]]]) -> list[AnalysisOutput]:
        items = [(node if node.id else node.model_copy(update={"id": f"new-{i}"}), unique_candidates(candidates))
                 for i, (node, candidates) in enumerate(batch)]
        outputs: list[AnalysisOutput | None] = [None] * len(items)
        together: list[int] = []  # items whose candidates fit one call of their own
        for i, (node, ordered) in enumerate(items):
            if not ordered:
                outputs[i] = AnalysisOutput(relationships=[])
                continue
            budget = self.content_budget(self.analyze, new_node=_brief(node), candidates=[])
            rendered = [json.dumps(_candidate_brief(99, c).model_dump(), ensure_ascii=False) for c in ordered]
            if len(pack(rendered, budget, self.count_tokens, sep=", ")) == 1:
                together.append(i)
        packed = pack_items(self, self._batch.value, [items[i] for i in together])
        groups = [[together[k] for k in group] for group in packed]
        judged = map_in_context(lambda group: self._judge_many([items[i] for i in group]), groups, self.lm_threads())
        for group, verdicts in zip(groups, judged):
            for i, found in zip(group, verdicts):
                node, ordered = items[i]
                outputs[i] = AnalysisOutput(relationships=[self._relationship(node, c, found.get(c.id)) for c in ordered])
        for i, output in enumerate(outputs):
            if output is None:  # too many candidates for one call: judged on its own, group by group
                outputs[i] = self._alone(*items[i])
        return outputs

    def _judge_many(self, items: list[tuple[NodeInfo, list[NodeInfo]]]) -> list[dict[str, Judgement]]:
        """Each item's verdicts by candidate id; an item alone, or one the answer leaves out, asked on its own.
        An unusable batch answer (not the format, or cut short by the LM's ``max_tokens`` when the room
        estimate was short) is asked again in two halves, down to single items."""
        if len(items) == 1:
            return [self._judge(_brief(items[0][0]), items[0][1])]
        try:
            found = judge_together(self, self._batch.value, items)
        except AgentError as exc:
            half = len(items) // 2
            logger.warning("analysis: %s; the batch of %d nodes asked again in two halves", exc.message, len(items))
            return self._judge_many(items[:half]) + self._judge_many(items[half:])
        return [self._judge(_brief(node), candidates) if verdicts is None else _by_candidate(candidates, verdicts)
                for (node, candidates), verdicts in zip(items, found)]

    @staticmethod
    def _relationship(new_node: NodeInfo, candidate: NodeInfo, verdict: Judgement | None) -> Relationship:
        if verdict is None:
            return Relationship(
                existing_node_id=candidate.id, relationship="unrelated", reasoning="not mentioned by the analysis"
            )
        if verdict.relationship == "conflict":
            description = verdict.conflict_description.strip() or verdict.reasoning.strip() or (
                f"the new node contradicts node {candidate.id}"
            )
            return Relationship(
                existing_node_id=candidate.id, relationship="conflict",
                reasoning=verdict.reasoning, conflict_description=description,
            )
        if verdict.relationship == "related":
            return Relationship(
                existing_node_id=candidate.id, relationship="related", reasoning=verdict.reasoning,
                context_update_new=verdict.context_update_new.strip() or new_node.context,
                context_update_existing=verdict.context_update_existing.strip() or candidate.context,
                keywords_update_new=dedupe(verdict.keywords_update_new) or list(new_node.keywords),
                keywords_update_existing=dedupe(verdict.keywords_update_existing) or list(candidate.keywords),
            )
        return Relationship(existing_node_id=candidate.id, relationship="unrelated", reasoning=verdict.reasoning)


def _candidate_brief(number: int, node: NodeInfo) -> CandidateBrief:
    return CandidateBrief(number=number, summary=node.summary, context=node.context, keywords=node.keywords)


def _brief(node: NodeInfo) -> NodeContent:
    return NodeContent(summary=node.summary, context=node.context, keywords=node.keywords)


def _by_candidate(group: list[NodeInfo], judgements: list[Judgement]) -> dict[str, Judgement]:
    """Judgements by candidate id, numbers mapped back (unknown ones dropped), the highest priority kept."""
    by_number = {n: c.id for n, c in enumerate(group, 1)}
    verdicts: dict[str, Judgement] = {}
    unknown = [j.candidate for j in judgements if j.candidate not in by_number]
    if unknown:
        logger.warning("analysis: dropped judgements on unknown candidate number(s) %s", sorted(set(unknown)))
    for judgement in judgements:
        node_id = by_number.get(judgement.candidate)
        if node_id is None:
            continue
        known = verdicts.get(node_id)
        if known is None or PRIORITY[judgement.relationship] < PRIORITY[known.relationship]:
            verdicts[node_id] = judgement
    return verdicts
