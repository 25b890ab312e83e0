"""The three storage layers: pure data and their invariants, no LM and no I/O beyond (de)serialisation."""

from amb_dspy.storage.content import ContextUpdate, NodeContent
from amb_dspy.storage.hops import Hop, HopCall, hop_summary
from amb_dspy.storage.insight_doc import CompletedTask, InsightDoc, PendingTask, TaskKind, TaskStatus
from amb_dspy.storage.interaction_tree import (
    Attachment,
    AttachmentType,
    InteractionEntry,
    InteractionTree,
    MergeEvent,
    TreeError,
)
from amb_dspy.storage.query_graph import GraphError, QueryGraph, QueryGraphNode, Source, merge_sources, node_text

__all__ = [
    "Attachment", "AttachmentType", "CompletedTask", "ContextUpdate", "GraphError", "Hop", "HopCall", "InsightDoc", "InteractionEntry",
    "InteractionTree", "MergeEvent", "NodeContent", "QueryGraph", "QueryGraphNode", "PendingTask", "Source", "TaskKind", "TaskStatus", "TreeError",
    "hop_summary", "merge_sources", "node_text",
]
