"""Integration without an LM: no merge.

Merging two contradicting nodes means choosing which claim the validation supports and rewriting the
summary around it; done without reading, it would destroy the very fact that was right. So both nodes
stay as they are, no neighbour changes, and the output says so: ``merged_node`` is None, and the
description, for the interaction tree, records the conflict as unresolved.
"""

from __future__ import annotations

from amb_dspy.agents.integration import IntegrationAgent, IntegrationOutput, NodeWithNeighbors
from amb_dspy.retrieval.embedding import Embedder


def keep_both(
    agent: IntegrationAgent, embedder: Embedder | None = None, *, nodes_to_merge: list[NodeWithNeighbors],
    validation_result: str = "",
) -> IntegrationOutput:
    """An :class:`IntegrationOutput` that merges nothing (``merged_node`` None) and says why."""
    if not nodes_to_merge:
        raise ValueError("integration agent: no nodes to merge")
    ids = ", ".join(dict.fromkeys(node.id for node in nodes_to_merge))
    return IntegrationOutput(
        merged_node=None,
        neighbor_updates={},
        interaction_tree_description=(
            f"Not merged: the conflict between nodes {ids} is left unresolved and both nodes are kept, "
            "because no usable LM judgement of the validation result was available."
        ),
    )
