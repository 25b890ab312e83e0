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

Predictor: ``analyze`` (:class:`AnalyzeRelationships`).
"""

from __future__ import annotations

import json
from typing import Literal

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import LMKeywords, MemoryAgent, dedupe, logger
from amb_dspy.agents.chunking import pack
from amb_dspy.storage.content import NodeContent

RelationshipKind = Literal["conflict", "related", "unrelated"]
PRIORITY: dict[str, int] = {"conflict": 0, "related": 1, "unrelated": 2}


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


class Judgement(BaseModel):
    """The verdict on one candidate; fill only the fields of its relationship kind."""

    candidate: int = Field(description="the candidate's number")
    relationship: RelationshipKind
    reasoning: str = Field("", description="one sentence on why")
    conflict_description: str = Field("", description="conflict only: which claims contradict each other")
    context_update_new: str = Field("", description="related only: the new node's context, mentioning the link")
    context_update_existing: str = Field("", description="related only: the candidate's context, mentioning the link")
    keywords_update_new: LMKeywords = Field(default_factory=list, description="related only: the new node's keywords")
    keywords_update_existing: LMKeywords = Field(default_factory=list, description="related only: the candidate's keywords")


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

    def check_window(self) -> None:
        self.content_budget(self.analyze, new_node=NodeContent("", "", []), candidates=[])

    def forward(self, new_node: NodeInfo, candidates: list[NodeInfo]) -> AnalysisOutput:
        ordered = unique_candidates(candidates)
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
        by_number = {n: c.id for n, c in enumerate(group, 1)}
        shown = [_candidate_brief(n, c) for n, c in enumerate(group, 1)]
        prediction = self.call(self.analyze, new_node=brief, candidates=shown)
        verdicts: dict[str, Judgement] = {}
        unknown = [j.candidate for j in prediction.relationships or [] if j.candidate not in by_number]
        if unknown:
            logger.warning("analysis: dropped judgements on unknown candidate number(s) %s", sorted(set(unknown)))
        for judgement in prediction.relationships or []:
            node_id = by_number.get(judgement.candidate)
            if node_id is None:
                continue
            known = verdicts.get(node_id)
            if known is None or PRIORITY[judgement.relationship] < PRIORITY[known.relationship]:
                verdicts[node_id] = judgement
        return verdicts

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
