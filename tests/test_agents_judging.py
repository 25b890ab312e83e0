"""The analysis and integration agents against scripted LMs: every branch (see tests/test_agents.py)."""

from __future__ import annotations

import logging

import pytest
from scripted_lm import ScriptedLM
from test_agents import ADAPTERS, CANDIDATES, NEW_NODE, prompt_tokens, run

from amb_dspy.agents import (
    AgentError,
    AnalysisAgent,
    IntegrationAgent,
    NeighborInfo,
    NodeInfo,
    NodeWithNeighbors,
)
from amb_dspy.config import AmbConfig

# --- analysis ---------------------------------------------------------------------------------------

def judgement(number, kind, **fields):
    return {"candidate": number, "relationship": kind, "reasoning": f"because {number}", **fields}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_analysis_maps_numbers_back_to_real_ids(adapter):
    lm = ScriptedLM(analysis=[{"relationships": [
        judgement(1, "conflict", conflict_description="150,000 vs 209,000 m3/s"),
        judgement(2, "related", context_update_new="Amazon flow, see basin", context_update_existing="Amazon basin, see flow",
                  keywords_update_new=["Amazon", "flow", "basin"], keywords_update_existing=["basin", "flow"]),
        judgement(3, "unrelated"),
    ]}])
    out = run(AnalysisAgent(), lm, adapter, new_node=NEW_NODE, candidates=CANDIDATES)

    conflict, related, unrelated = out.relationships
    assert (conflict.existing_node_id, conflict.relationship) == ("node-a", "conflict")
    assert conflict.conflict_description == "150,000 vs 209,000 m3/s"
    assert conflict.context_update_new is None
    assert (related.existing_node_id, related.relationship) == ("node-b", "related")
    assert related.context_update_existing == "Amazon basin, see flow"
    assert related.keywords_update_new == ["Amazon", "flow", "basin"]
    assert (unrelated.existing_node_id, unrelated.relationship) == ("node-c", "unrelated")
    shown = lm.calls[0].input_json("candidates")
    assert [c["number"] for c in shown] == [1, 2, 3]
    assert "node-a" not in lm.calls[0].prompt_text  # the LM never sees a node id


def test_analysis_drops_unknown_numbers_and_defaults_the_unmentioned_to_unrelated(caplog):
    lm = ScriptedLM(analysis=[{"relationships": [judgement(7, "conflict", conflict_description="made up"),
                                                 judgement(2, "related")]}])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        out = run(AnalysisAgent(), lm, new_node=NEW_NODE, candidates=CANDIDATES)
    assert [(r.existing_node_id, r.relationship) for r in out.relationships] == [
        ("node-a", "unrelated"), ("node-b", "related"), ("node-c", "unrelated"),
    ]
    assert any("unknown candidate number(s) [7]" in r.message for r in caplog.records)
    related = out.relationships[1]  # the LM gave no updates: current values stand in
    assert related.context_update_new == NEW_NODE.context and related.context_update_existing == "Amazon basin"
    assert related.keywords_update_new == ["Amazon", "flow"] and related.keywords_update_existing == ["basin"]


def test_analysis_keeps_the_highest_priority_judgement_and_describes_every_conflict():
    lm = ScriptedLM(analysis=[{"relationships": [
        judgement(1, "unrelated"), judgement(1, "related"), judgement(1, "conflict"), judgement(1, "related"),
    ]}])
    out = run(AnalysisAgent(), lm, new_node=NEW_NODE, candidates=CANDIDATES[:1])
    (relationship,) = out.relationships
    assert relationship.relationship == "conflict"
    assert relationship.conflict_description == "because 1"  # no description: the reasoning stands in


def test_analysis_without_candidates_makes_no_call():
    lm = ScriptedLM(analysis=[])
    assert run(AnalysisAgent(), lm, new_node=NEW_NODE, candidates=[]).relationships == []
    assert lm.calls == []


def test_analysis_rejects_candidates_without_ids():
    with pytest.raises(ValueError, match="needs an id"):
        run(AnalysisAgent(), ScriptedLM(analysis=[]), new_node=NEW_NODE, candidates=[NEW_NODE])


def test_analysis_splits_many_candidates_into_groups_that_fit():
    many = [NodeInfo(id=f"n{i}", summary=f"Fact {i}: " + "detail " * 80, context=f"topic {i}", keywords=[f"k{i}"])
            for i in range(40)]
    config = AmbConfig(analysis_window=3000)

    def first_conflicts(call):
        return {"relationships": [judgement(c["number"], "conflict" if c["number"] == 1 else "unrelated")
                                  for c in call.input_json("candidates")]}

    lm = ScriptedLM(analysis=first_conflicts)
    out = run(AnalysisAgent(config), lm, new_node=NEW_NODE, candidates=many)
    assert len(lm.calls) > 2
    for call in lm.calls:
        assert prompt_tokens(call) <= int(3000 * config.chunk_ratio)
        assert call.input_json("candidates")[0]["number"] == 1
    assert [r.existing_node_id for r in out.relationships] == [f"n{i}" for i in range(40)]
    starts = {0}
    seen = 0
    for call in lm.calls[:-1]:
        seen += len(call.input_json("candidates"))
        starts.add(seen)
    assert {i for i, r in enumerate(out.relationships) if r.relationship == "conflict"} == starts


# --- integration ------------------------------------------------------------------------------------

MERGE_NODES = [
    NodeWithNeighbors(id="A", summary="IBM quantum chip, 2023.", context="IBM quantum chip", keywords=["IBM", "chip"],
                      neighbors=[NeighborInfo(id="B", context="peer", keywords=[])]),
    NodeWithNeighbors(id="B", summary="Quantum progress in 2020.", context="2020 quantum progress", keywords=["quantum", "2020"],
                      neighbors=[NeighborInfo(id="C", context="Entanglement (see 2020 progress)", keywords=["entanglement"]),
                                 NeighborInfo(id="D", context="Algorithms (see 2020 progress)", keywords=["algorithms"]),
                                 NeighborInfo(id="A", context="peer", keywords=[])]),
]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_integration_merges_and_updates_only_real_inherited_neighbours(adapter, caplog):
    lm = ScriptedLM(integration=[{
        "merged_summary": "Quantum computing 2020-2023, including IBM's chip.",
        "merged_context": "Quantum computing report 2020-2023",
        "merged_keywords": ["quantum", "IBM", "quantum", "2020-2023"],
        "neighbor_updates": [
            {"neighbor": 1, "context": "Entanglement (see 2020-2023 report)", "keywords": ["entanglement", "2020-2023"]},
            {"neighbor": 2, "context": "", "keywords": []},
            {"neighbor": 1, "context": "second update ignored", "keywords": ["x"]},
            {"neighbor": 5, "context": "made up", "keywords": ["y"]},
        ],
        "merge_description": "Merged A and B; validation confirmed the 2023 chip date.",
    }])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        out = run(IntegrationAgent(), lm, adapter, nodes_to_merge=MERGE_NODES,
                  validation_result="The chip was announced in 2023.")

    assert out.merged_node.summary == "Quantum computing 2020-2023, including IBM's chip."
    assert out.merged_node.keywords == ["quantum", "IBM", "2020-2023"]
    assert set(out.neighbor_updates) == {"C", "D"}
    assert out.neighbor_updates["C"].context == "Entanglement (see 2020-2023 report)"
    assert out.neighbor_updates["D"].context == "Algorithms (see 2020 progress)"  # empty update: current values
    assert out.neighbor_updates["D"].keywords == ["algorithms"]
    assert out.interaction_tree_description.startswith("Merged A and B")
    assert any("unknown neighbour number(s) [5]" in r.message for r in caplog.records)
    (call,) = lm.calls
    assert call.inputs["validation_result"] == "The chip was announced in 2023."
    assert [n["number"] for n in call.input_json("neighbors")] == [1, 2]  # A and B are merged, not neighbours


def test_integration_falls_back_for_empty_context_keywords_and_description():
    lm = ScriptedLM(integration=[{"merged_summary": "merged", "merged_context": "", "merged_keywords": [],
                                  "neighbor_updates": [], "merge_description": ""}])
    out = run(IntegrationAgent(), lm, nodes_to_merge=MERGE_NODES, validation_result="")
    assert out.merged_node.context == "IBM quantum chip; 2020 quantum progress"
    assert out.merged_node.keywords == ["IBM", "chip", "quantum", "2020"]
    assert out.neighbor_updates == {}
    assert out.interaction_tree_description == "Merged 2 conflicting nodes (A, B) after cross-validation."


def test_integration_empty_merged_summary_is_an_agent_error():
    lm = ScriptedLM(integration=[{"merged_summary": " ", "merged_context": "c", "merged_keywords": [],
                                  "neighbor_updates": [], "merge_description": "d"}])
    with pytest.raises(AgentError, match="empty merged summary") as caught:
        run(IntegrationAgent(), lm, nodes_to_merge=MERGE_NODES, validation_result="v")
    assert '"merged_context": "c"' in caught.value.raw


def test_integration_needs_nodes():
    with pytest.raises(ValueError, match="no nodes to merge"):
        run(IntegrationAgent(), ScriptedLM(integration=[]), nodes_to_merge=[], validation_result="v")
