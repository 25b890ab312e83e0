"""The deterministic fallback policies, each on known inputs, with the real all-MiniLM-L6-v2 embedder.

No LM is involved anywhere: that is the point of these policies.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amb_dspy.agents import (
    AGENT_CLASSES,
    AnalysisAgent,
    ClassificationAgent,
    ClassificationOutput,
    ConflictNotification,
    IntegrationAgent,
    NeighborInfo,
    NodeInfo,
    NodeWithNeighbors,
    PlanningAgent,
    StructureAgent,
    estimate_tokens,
)
from amb_dspy.agents.chunking import segment, split_sentences
from amb_dspy.agents.fallback import (
    POLICIES,
    RELATED_THRESHOLD,
    answer_from_memory_task,
    classify_by_similarity,
    compress_extractively,
    hybrid_scores,
    keep_both,
    plan_by_rules,
    relate_by_hybrid_score,
)
from amb_dspy.config import AGENT_NAMES, AmbConfig
from amb_dspy.storage import CompletedTask, InsightDoc, TaskKind, TaskStatus

DEMO = Path(__file__).resolve().parent.parent / "datasets" / "demo"


def demo_text(name: str) -> str:
    return (DEMO / name).read_text(encoding="utf-8")


def test_there_is_a_policy_for_every_agent():
    assert set(POLICIES) == set(AGENT_NAMES) == set(AGENT_CLASSES)


# --- classification -----------------------------------------------------------------------------------

TWO_TOPICS = (
    "The Eiffel Tower stands on the Champ de Mars in Paris.\n\n"
    "Paris, the capital of France, lies on the river Seine.\n\n"
    "Photosynthesis lets plants turn sunlight into chemical energy.\n\n"
    "Chlorophyll in the leaves of plants absorbs the light that photosynthesis needs."
)


def test_classification_keeps_adjacent_segments_on_one_topic_together(embedder):
    out = classify_by_similarity(ClassificationAgent(), embedder, context=TWO_TOPICS)
    assert isinstance(out, ClassificationOutput) and out.should_cluster
    paragraphs = TWO_TOPICS.split("\n\n")
    assert [c.content for c in out.clusters] == ["\n\n".join(paragraphs[:2]), "\n\n".join(paragraphs[2:])]
    assert [c.cluster_id for c in out.clusters] == ["c1", "c2"]
    assert "Paris" in out.clusters[0].keywords
    assert "Photosynthesis" in out.clusters[1].keywords


def test_classification_puts_every_segment_in_exactly_one_cluster(embedder):
    text = "\n\n".join(demo_text(name) for name in ("marrowick.md", "river-sennet.md", "gull-coast-climate.txt"))
    agent = ClassificationAgent(max_segment_tokens=60)  # long paragraphs become several sentence runs
    out = classify_by_similarity(agent, embedder, context=text)
    expected = segment(text, 60, agent.count_tokens)
    assert len(expected) > len(re.split(r"\n\s*\n", text.strip()))  # some paragraph was cut
    landed = [piece for cluster in out.clusters for piece in cluster.content.split("\n\n")]
    assert landed == expected
    assert len(out.clusters) > 3


def test_classification_describes_a_cluster_by_its_most_central_sentence_and_its_own_terms(embedder):
    text = demo_text("river-sennet.md")
    out = classify_by_similarity(ClassificationAgent(), embedder, context=text)
    for cluster in out.clusters:
        sentences = [" ".join(s.split()) for seg in cluster.content.split("\n\n") for s in split_sentences(seg)]
        context = cluster.context.removesuffix(" ...")
        assert any(s.startswith(context) for s in sentences), cluster.context
        assert not cluster.context.startswith("#")  # a heading names a section, it does not describe it
        assert 1 <= len(cluster.keywords) <= 5
        assert all(k.lower() in cluster.content.lower() for k in cluster.keywords)
    # the section headings open their clusters and stay with their sections
    assert all(c.content.startswith("#") for c in out.clusters if "##" in c.content)


def test_classification_caps_a_cluster_at_the_window(embedder):
    agent = ClassificationAgent(AmbConfig(classification_window=80))
    text = demo_text("tidewater-lantern-festival.md")
    out = classify_by_similarity(agent, embedder, context=text)
    assert estimate_tokens(text) > 80
    assert len(out.clusters) >= 2
    assert all(agent.count_tokens(c.content) <= 80 for c in out.clusters)


def test_classification_of_empty_text_has_no_cluster(embedder):
    out = classify_by_similarity(ClassificationAgent(), embedder, context=" \n\n ")
    assert out.clusters == [] and not out.should_cluster


# --- structure ----------------------------------------------------------------------------------------

BRIDGE = (
    "The Hallow Bridge crosses the Sennet estuary between Saltgate and the Old Town. "
    "Its designer, the engineer Mara Quell, had earlier built two railway viaducts in the north. "
    "The bridge was opened on 14 March 1932 and is 1,284 metres long. "
    "Local people call it the Long Step because of its many low arches. "
    "It carried trams until the tram network closed after the Second World War. "
    "Today it is used by pedestrians, cyclists and a single bus route. "
    "Painters have often shown it at dusk, when the lamps along the parapet are lit. "
    "A small museum at the Saltgate end tells the story of its construction."
)


@pytest.mark.parametrize("name", ["marrowick.md", "river-sennet.md", "kestrel-bay.md", "gull-coast-climate.txt",
                                  "marrowick-harbour-history.md", "making-a-festival-lantern.md"])
def test_structure_compresses_real_paragraphs_to_30_50_percent_with_verbatim_sentences_in_order(embedder, name):
    agent = StructureAgent()
    text = demo_text(name)
    out = compress_extractively(agent, embedder, content=text, context="", keywords=[])
    assert 0.3 <= out.ratio <= 0.5
    assert out.ratio == agent.count_tokens(out.summary) / agent.count_tokens(text.strip())
    flat = " ".join(text.split())
    positions = [flat.find(" ".join(s.split())) for s in split_sentences(out.summary)]
    assert -1 not in positions  # every sentence of the summary is one of the input's, word for word
    assert positions == sorted(positions)  # in their original order


def test_structure_keeps_the_number_and_the_date_the_task_asks_about(embedder):
    out = compress_extractively(StructureAgent(), embedder, content=BRIDGE, context="The Hallow Bridge.",
                                keywords=["Hallow Bridge"], task_goal="When was the Hallow Bridge opened and how long is it?")
    assert "14 March 1932" in out.summary
    assert "1,284 metres" in out.summary
    assert 0.3 <= out.ratio <= 0.5


def test_structure_swaps_a_short_pick_for_a_longer_sentence_to_reach_30_percent(embedder):
    asked = "The lighthouse keeper logged " + " ".join(["every ship that passed the point"] * 4) + " during the storm of 1899."
    others = ["The harbour wall was rebuilt " + " ".join(["with stone carried from the quarry at Gull Head"] * 6)
              + " and finished in 1911.",
              "Fishing boats moored " + " ".join(["along the eastern quay beside the net lofts"] * 5) + " each winter."]
    text = " ".join([others[0], asked, others[1]])
    total = estimate_tokens(text)
    # the sentence the goal asks about is under 30% alone, and no two sentences fit under 50%
    shortest, second, _ = sorted(map(estimate_tokens, [asked, *others]))
    assert estimate_tokens(asked) < 0.3 * total and shortest + second > 0.5 * total
    out = compress_extractively(StructureAgent(), embedder, content=text, context="", keywords=[],
                                task_goal="What did the lighthouse keeper log?")
    assert 0.3 <= out.ratio <= 0.5
    assert out.summary in others


def test_structure_slices_a_sentence_too_long_to_keep_whole(embedder):
    words = "the tide tables for the harbour list the height of every high and low water".split()
    text = " ".join(words[i % len(words)] for i in range(240))  # no full stop anywhere
    out = compress_extractively(StructureAgent(), embedder, content=text, context="", keywords=[])
    assert 0.3 <= out.ratio <= 0.5
    assert " ".join(out.summary.split()) != " ".join(text.split())


def test_structure_leaves_short_content_verbatim_and_refuses_empty_content(embedder):
    short = "Marrowick has about 182,000 people."
    out = compress_extractively(StructureAgent(), embedder, content=short, context="", keywords=[])
    assert (out.summary, out.ratio, out.retried) == (short, 1.0, False)
    with pytest.raises(ValueError, match="content is empty"):
        compress_extractively(StructureAgent(), embedder, content="  ", context="", keywords=[])


# --- analysis -----------------------------------------------------------------------------------------

NEW = NodeInfo(
    summary="Scott Derrickson (born July 16, 1966) is an American director, screenwriter and producer. "
            "He directed the 2016 Marvel film Doctor Strange.",
    context="Scott Derrickson is an American film director.",
    keywords=["Scott Derrickson", "director", "Doctor Strange"],
)
RELATED = NodeInfo(
    id="m1",
    summary="Doctor Strange is a 2016 American superhero film based on the Marvel Comics character. "
            "It was directed by Scott Derrickson, who wrote it with Jon Spaihts and C. Robert Cargill.",
    context="Doctor Strange is a 2016 Marvel superhero film.",
    keywords=["Doctor Strange", "Marvel", "superhero film"],
)
UNRELATED = NodeInfo(
    id="m2",
    summary="The Kestrel Bay lighthouse was built of local granite and first lit in 1871. "
            "Its keepers' cottages now house a small maritime museum.",
    context="The Kestrel Bay lighthouse and its museum.",
    keywords=["lighthouse", "Kestrel Bay", "granite"],
)
ALTERED = RELATED.model_copy(update={"id": "m3", "summary": RELATED.summary.replace("2016", "2011")})


def test_the_threshold_separates_a_related_pair_from_an_unrelated_one(embedder):
    related, unrelated = hybrid_scores(NEW, [RELATED, UNRELATED], embedder)
    assert related >= RELATED_THRESHOLD > unrelated
    out = relate_by_hybrid_score(AnalysisAgent(), embedder, new_node=NEW, candidates=[RELATED, UNRELATED])
    assert [(r.existing_node_id, r.relationship) for r in out.relationships] == [("m1", "related"), ("m2", "unrelated")]


def test_a_related_candidate_keeps_both_nodes_context_and_keywords(embedder):
    out = relate_by_hybrid_score(AnalysisAgent(), embedder, new_node=NEW, candidates=[RELATED])
    (rel,) = out.of_kind("related")
    assert (rel.context_update_new, rel.keywords_update_new) == (NEW.context, NEW.keywords)
    assert (rel.context_update_existing, rel.keywords_update_existing) == (RELATED.context, RELATED.keywords)


def test_analysis_never_says_conflict_even_for_a_contradicting_copy(embedder):
    out = relate_by_hybrid_score(AnalysisAgent(), embedder, new_node=RELATED.model_copy(update={"id": None}),
                                 candidates=[ALTERED, UNRELATED, ALTERED])
    assert out.of_kind("conflict") == []
    assert [(r.existing_node_id, r.relationship) for r in out.relationships] == [("m3", "related"), ("m2", "unrelated")]


def test_analysis_without_candidates_or_with_an_anonymous_one(embedder):
    assert relate_by_hybrid_score(AnalysisAgent(), embedder, new_node=NEW, candidates=[]).relationships == []
    with pytest.raises(ValueError, match="needs an id"):
        relate_by_hybrid_score(AnalysisAgent(), embedder, new_node=NEW, candidates=[NEW])


# --- integration --------------------------------------------------------------------------------------


def test_integration_merges_nothing_and_says_the_conflict_is_unresolved():
    nodes = [
        NodeWithNeighbors(id="n1", summary="Opened in 1932.", context="c", neighbors=[NeighborInfo(id="n3", context="x")]),
        NodeWithNeighbors(id="n2", summary="Opened in 1936.", context="c"),
    ]
    out = keep_both(IntegrationAgent(), None, nodes_to_merge=nodes, validation_result="It opened in 1932.")
    assert out.merged_node is None and out.neighbor_updates == {}
    assert "n1, n2" in out.interaction_tree_description and "unresolved" in out.interaction_tree_description
    with pytest.raises(ValueError, match="no nodes to merge"):
        keep_both(IntegrationAgent(), None, nodes_to_merge=[], validation_result="")


# --- planning -----------------------------------------------------------------------------------------

GOAL = "Which river flows through Marrowick?"
CONFLICT = ConflictNotification(conflicting_node_ids=["n1", "n2"], conflict_description="1932 or 1936?")


def plan(doc: InsightDoc, **inputs):
    out = plan_by_rules(PlanningAgent(), None, insight_doc=doc, **inputs)
    assert out.task_goal == doc.task_goal and len(out.pending_tasks) <= 1
    return out


def test_planning_first_asks_the_executor_to_answer_the_goal_from_memory():
    out = plan(InsightDoc(task_goal=GOAL))
    assert out.completed_tasks == []
    assert out.pending_tasks == [answer_from_memory_task(GOAL)] and GOAL in out.pending_tasks[0].description


def test_planning_checks_a_conflict_first():
    out = plan(InsightDoc(task_goal=GOAL), conflict=CONFLICT)
    assert out.pending_tasks[0].kind is TaskKind.CROSS_VALIDATE
    assert out.pending_tasks[0].node_ids == ["n1", "n2"]


def test_planning_after_a_conflict_check_still_asks_for_the_answer():
    check = plan(InsightDoc(task_goal=GOAL), conflict=CONFLICT).pending_tasks[0]
    out = plan(InsightDoc(task_goal=GOAL, pending_tasks=[check]), execution_report="1932 is right. More text.")
    assert out.completed_tasks == [CompletedTask(type=TaskKind.CROSS_VALIDATE, description=check.description,
                                                 status=TaskStatus.SUCCESS, context="1932 is right.")]
    assert out.pending_tasks == [answer_from_memory_task(GOAL)]


def test_planning_finishes_once_the_answer_task_ran():
    task = answer_from_memory_task(GOAL)
    out = plan(InsightDoc(task_goal=GOAL, pending_tasks=[task]), execution_report="The River Sennet.")
    assert out.completed_tasks == [CompletedTask(description=task.description, status=TaskStatus.SUCCESS,
                                                 context="The River Sennet.")]
    assert out.pending_tasks == []


def test_planning_records_a_failed_task_as_a_failure_with_its_reason():
    task = answer_from_memory_task(GOAL)
    out = plan(InsightDoc(task_goal=GOAL, pending_tasks=[task]), execution_report="partial",
               failure_reason="executor failed: timeout")
    assert out.completed_tasks[-1].status is TaskStatus.FAILURE
    assert out.completed_tasks[-1].context == "executor failed: timeout"
    assert out.pending_tasks == []
