"""The integration agent: merge conflicting nodes after cross-validation (spec §7.4, design §3.2.4).

Input: the nodes to merge, each with its neighbours, and the cross-validation result. Output: the
merged node (summary, context, keywords), new context and keywords for the neighbours the merged node
inherits, and a description of the merge for the interaction tree.

The LM sees the merged nodes without ids and their inherited neighbours (deduplicated, the merged nodes
themselves excluded) under short numbers; the code maps the numbers back, so ``neighbor_updates`` only
ever names real inherited neighbours. Unknown numbers are dropped and logged; a neighbour named twice
keeps its first update; a neighbour the LM skips is left out (the bank keeps it as it is). Where the LM
leaves a field empty the code falls back: a neighbour's current context/keywords, the merged nodes'
contexts joined and keywords united, a plain merge description. An empty merged summary is an
:class:`AgentError`: there is no honest fallback for it.

A merge cannot be split across calls, so an over-long prompt is sent whole and logged.

Predictor: ``merge`` (:class:`MergeConflictingNodes`).
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

from amb_dspy.agents.base import LMKeywords, MemoryAgent, dedupe, logger
from amb_dspy.storage.content import ContextUpdate, NodeContent


class NeighborInfo(BaseModel):
    id: str
    context: str
    keywords: list[str] = Field(default_factory=list)


class NodeWithNeighbors(NodeContent):
    id: str
    neighbors: list[NeighborInfo] = Field(default_factory=list)


class IntegrationOutput(BaseModel):
    # None: nothing was merged (the deterministic fallback never merges); the nodes stay as they are.
    merged_node: NodeContent | None
    neighbor_updates: dict[str, ContextUpdate]
    interaction_tree_description: str


class NeighborBrief(BaseModel):
    number: int
    context: str
    keywords: list[str]


class NeighborRewrite(BaseModel):
    neighbor: int = Field(description="the neighbour's number")
    context: str = Field(description="its new one-sentence context, relating it to the merged node")
    keywords: LMKeywords


class MergeConflictingNodes(dspy.Signature):
    """Merge memory nodes that contradicted each other into one node, trusting the validation result.

    Where the nodes disagree, keep what the validation result supports and correct or drop the rest;
    keep every other fact from all the nodes. Write the merged summary, a one-sentence context and
    deduplicated keywords. Then, for each numbered neighbour, rewrite its context and keywords so that
    they describe its relation to the merged node instead of the old ones. Finally describe the merge in
    one or two sentences for the history log: what was merged, which claim was kept and why.
    """

    nodes: list[NodeContent] = dspy.InputField(desc="the conflicting nodes to merge")
    validation_result: str = dspy.InputField(desc="what cross-validation found about the conflict")
    neighbors: list[NeighborBrief] = dspy.InputField(desc="nodes linked to the merged ones, each with a number")
    merged_summary: str = dspy.OutputField(desc="the merged structured summary")
    merged_context: str = dspy.OutputField(desc="one sentence naming the merged topic")
    merged_keywords: list[str] = dspy.OutputField()
    neighbor_updates: list[NeighborRewrite] = dspy.OutputField(desc="one per neighbour, by number")
    merge_description: str = dspy.OutputField(desc="one or two sentences for the history log")


class IntegrationAgent(MemoryAgent):
    """Merges conflicting nodes and re-describes their inherited neighbours (see module docstring)."""

    name = "integration"

    def __init__(self, config=None, token_counter=None, lm=None):
        super().__init__(config, token_counter, lm)
        self.merge = dspy.Predict(MergeConflictingNodes)

    def forward(self, nodes_to_merge: list[NodeWithNeighbors], validation_result: str) -> IntegrationOutput:
        if not nodes_to_merge:
            raise ValueError("integration agent: no nodes to merge")
        merged_ids = {node.id for node in nodes_to_merge}
        inherited: dict[str, NeighborInfo] = {}
        for node in nodes_to_merge:
            for neighbor in node.neighbors:
                if neighbor.id not in merged_ids:
                    inherited.setdefault(neighbor.id, neighbor)
        neighbors = list(inherited.values())

        inputs = dict(
            nodes=[NodeContent(summary=n.summary, context=n.context, keywords=n.keywords) for n in nodes_to_merge],
            validation_result=validation_result,
            neighbors=[NeighborBrief(number=i, context=n.context, keywords=n.keywords) for i, n in enumerate(neighbors, 1)],
        )
        limit = int(self.window * self.settings.chunk_ratio)
        if (used := self.prompt_tokens(self.merge, **inputs)) > limit:
            logger.warning("integration: prompt of %d tokens exceeds the %d-token budget; sent whole", used, limit)
        prediction = self.call(self.merge, **inputs)

        summary = str(prediction.merged_summary or "").strip()
        if not summary:
            raise self.fail("the LM returned an empty merged summary", prediction)
        merged = NodeContent(
            summary=summary,
            context=str(prediction.merged_context or "").strip() or "; ".join(dedupe([n.context for n in nodes_to_merge])),
            keywords=dedupe(prediction.merged_keywords or []) or dedupe([k for n in nodes_to_merge for k in n.keywords]),
        )

        updates: dict[str, ContextUpdate] = {}
        rewrites = prediction.neighbor_updates or []
        unknown = sorted({r.neighbor for r in rewrites if not 1 <= r.neighbor <= len(neighbors)})
        if unknown:
            logger.warning("integration: dropped updates for unknown neighbour number(s) %s", unknown)
        for rewrite in rewrites:
            if not 1 <= rewrite.neighbor <= len(neighbors):
                continue
            neighbor = neighbors[rewrite.neighbor - 1]
            updates.setdefault(neighbor.id, ContextUpdate(
                context=rewrite.context.strip() or neighbor.context,
                keywords=dedupe(rewrite.keywords) or list(neighbor.keywords),
            ))

        description = str(prediction.merge_description or "").strip() or (
            f"Merged {len(nodes_to_merge)} conflicting nodes ({', '.join(sorted(merged_ids))}) after cross-validation."
        )
        return IntegrationOutput(merged_node=merged, neighbor_updates=updates, interaction_tree_description=description)
