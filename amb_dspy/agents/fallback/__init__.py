"""Deterministic fallback policies: each agent's job done in plain Python over the real embedder, no LM.

A policy returns exactly the agent's own output type, so the LM path and the fallback are
interchangeable. Every policy is called the same way, with the agent (for its configuration, window
and token counter), an embedder (None: the bundled all-MiniLM-L6-v2) and the agent's own inputs:

    POLICIES[name](agent, embedder, **inputs)     # in place of agent(**inputs)

========================  ======================  ====================================================
agent                     policy                  what it does
========================  ======================  ====================================================
classification            classify_by_similarity  adjacent segments grouped by cosine to the centroid
structure                 compress_extractively   best sentences verbatim, 30-50% of the tokens
analysis                  relate_by_hybrid_score  related above a calibrated hybrid score; no conflict
integration               keep_both               no merge: ``merged_node`` None, conflict unresolved
planning                  plan_by_rules           conflict check, else answer from memory once, else stop
answer                    extract_answer          the best evidence line of <memory> for the goal, cited
========================  ======================  ====================================================

One argument is not the agent's own: ``compress_extractively(task_goal=...)``, optional, lets the
caller favour the sentences the task asks about (the structure agent is not given the goal).

How well they do on HotpotQA: ``bench/heuristic_policy.py``.
"""

from collections.abc import Callable

from amb_dspy.agents.fallback.analysis import RELATED_THRESHOLD, hybrid_scores, relate_by_hybrid_score
from amb_dspy.agents.fallback.answer import extract_answer
from amb_dspy.agents.fallback.classification import classify_by_similarity
from amb_dspy.agents.fallback.integration import keep_both
from amb_dspy.agents.fallback.planning import answer_from_memory_task, plan_by_rules
from amb_dspy.agents.fallback.structure import compress_extractively

POLICIES: dict[str, Callable] = {
    "classification": classify_by_similarity,
    "structure": compress_extractively,
    "analysis": relate_by_hybrid_score,
    "integration": keep_both,
    "planning": plan_by_rules,
    "answer": extract_answer,
}

__all__ = [
    "POLICIES", "RELATED_THRESHOLD", "answer_from_memory_task", "classify_by_similarity", "extract_answer", "compress_extractively",
    "hybrid_scores", "keep_both", "plan_by_rules", "relate_by_hybrid_score",
]
