"""The analysis agent's verdict on one candidate, as its LM writes it, below the module of a call on one new
node (:class:`~amb_dspy.agents.analysis.AnalyzeRelationships`: a :class:`Judgement` per candidate) and the
module of a call on several (:class:`~amb_dspy.agents.analysis_batch.AnalyzeRelationshipsBatch`: a
:class:`CandidateJudgement` per candidate, the new node's own rewrite given once for all its links)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from amb_dspy.agents.base import LMKeywords

RelationshipKind = Literal["conflict", "related", "unrelated"]
PRIORITY: dict[str, int] = {"conflict": 0, "related": 1, "unrelated": 2}  # spec §4.3: conflict > related > unrelated


class CandidateJudgement(BaseModel):
    """The verdict on one candidate; fill only the fields of its relationship kind."""

    candidate: int = Field(description="the candidate's number")
    relationship: RelationshipKind
    reasoning: str = Field("", description="one sentence on why")
    conflict_description: str = Field("", description="conflict only: which claims contradict each other")
    context_update_existing: str = Field("", description="related only: the candidate's context, mentioning the link")
    keywords_update_existing: LMKeywords = Field(default_factory=list, description="related only: the candidate's keywords")


class Judgement(CandidateJudgement):
    """The verdict on one candidate; fill only the fields of its relationship kind."""

    context_update_new: str = Field("", description="related only: the new node's context, mentioning the link")
    keywords_update_new: LMKeywords = Field(default_factory=list, description="related only: the new node's keywords")
