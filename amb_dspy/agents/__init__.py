"""The five memory agents and the answer agent, each a small ``dspy.Module`` around one typed ``dspy.Predict``.

Agents take and return pydantic models, never touch storage, and call whatever LM is configured with
``dspy.configure`` / ``dspy.context`` (or the ``lm=`` they were built with). Each is built as
``XAgent(config: AmbConfig | None = None, token_counter=None, lm=None)``. LM trouble (unparseable
output after DSPy's ChatAdapter -> JSONAdapter fallback, incoherent output, a failed call) is raised as
:class:`AgentError`; results are never half filled.

Compiled state (instructions and demos) is saved and loaded by predictor name, so these names are
stable:

=====================  ==============  ======================  ======================================
agent                  predictor       signature               LM calls per forward()
=====================  ==============  ======================  ======================================
ClassificationAgent    ``classify``    ClassifySegments        one per chunk (0 for empty input)
StructureAgent         ``summarize``   SummarizeCluster        1-2 per chunk (0 under 40 tokens)
AnalysisAgent          ``analyze``     AnalyzeRelationships    one per candidate group (0 without)
IntegrationAgent       ``merge``       MergeConflictingNodes   one
PlanningAgent          ``plan``        PlanNextTask            0 or 1
AnswerAgent            ``respond``     AnswerFromMemory        one (judge=False: ShortAnswer, not compiled)
=====================  ==============  ======================  ======================================

Structure and analysis also take a ``batch=`` (several clusters; several new nodes with their
candidates): as few calls as the window allows (``SummarizeClusters``,
``analysis_batch.AnalyzeRelationshipsBatch``), each item getting what a call of its own would give it.
Their batch predictors are not compiled: they are held outside the named predictors below.

``agent.save("x.json")`` writes ``{"<predictor>": {"demos": ..., "signature": {"instructions": ...}}}``;
``XAgent().load("x.json")`` restores it.

Prompt sizing and chunking: see :mod:`amb_dspy.agents.base` and :mod:`amb_dspy.agents.chunking`.
"""

from amb_dspy.agents.analysis import AnalysisAgent, AnalysisOutput, NodeInfo, Relationship, RelationshipKind
from amb_dspy.agents.answer import AnswerAgent, AnswerOutput
from amb_dspy.agents.base import AgentError, MemoryAgent
from amb_dspy.agents.chunking import TokenCounter, estimate_tokens, token_counter_for
from amb_dspy.agents.classification import ClassificationAgent, ClassificationOutput, Cluster
from amb_dspy.agents.integration import (
    IntegrationAgent,
    IntegrationOutput,
    NeighborInfo,
    NodeWithNeighbors,
)
from amb_dspy.agents.planning import (
    MEMORY_CHECK_TASK,
    ConflictNotification,
    PlanningAgent,
    PlanningOutput,
    answer_from_memory_task,
    cross_validation_task,
)
from amb_dspy.agents.structure import StructureAgent, StructureOutput

AGENT_CLASSES: dict[str, type[MemoryAgent]] = {
    "classification": ClassificationAgent,
    "structure": StructureAgent,
    "analysis": AnalysisAgent,
    "integration": IntegrationAgent,
    "planning": PlanningAgent,
    "answer": AnswerAgent,
}

# The predictor attribute of each agent, by agent name (see the table above).
PREDICTOR_NAMES: dict[str, str] = {
    "classification": "classify",
    "structure": "summarize",
    "analysis": "analyze",
    "integration": "merge",
    "planning": "plan",
    "answer": "respond",
}

__all__ = [
    "AGENT_CLASSES", "MEMORY_CHECK_TASK", "AgentError", "AnalysisAgent", "AnswerAgent", "AnswerOutput", "AnalysisOutput", "ClassificationAgent", "ClassificationOutput",
    "Cluster", "ConflictNotification", "IntegrationAgent", "IntegrationOutput", "MemoryAgent",
    "NeighborInfo", "NodeInfo", "NodeWithNeighbors", "PREDICTOR_NAMES", "PlanningAgent",
    "PlanningOutput", "Relationship", "RelationshipKind", "StructureAgent", "StructureOutput", "TokenCounter",
    "answer_from_memory_task", "cross_validation_task", "estimate_tokens", 
    "token_counter_for",
]
