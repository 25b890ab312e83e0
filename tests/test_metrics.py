"""Metrics against hand-computed values: official HotpotQA answer scoring and the per-agent metrics."""

from __future__ import annotations

import dspy
import pytest

from amb_dspy.agents import (
    AnalysisOutput,
    ClassificationOutput,
    Cluster,
    IntegrationOutput,
    Relationship,
    StructureOutput,
)
from amb_dspy.storage import NodeContent
from optimize.metrics import (
    adjusted_rand_index,
    analysis_metric,
    answer_em_metric,
    answer_exact_match,
    answer_f1,
    answer_metric,
    classification_metric,
    compression_score,
    integration_metric,
    mentions,
    normalize_answer,
    structure_metric,
)

# --- official answer normalisation, EM and F1 --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("The Beatles!", "beatles"),
        ("  A  Tale of\tTwo Cities. ", "tale of two cities"),
        ("an apple", "apple"),
        ("Theatre at the Anthem", "theatre at anthem"),  # "the" only as a whole word
        ("U.S.A.", "usa"),
        ("3,677 seated", "3677 seated"),
        ("Café—Noir “Paris”", "café—noir “paris”"),  # only ASCII punctuation goes, as in the official script
        ("Beyoncé", "beyoncé"),  # no unicode folding
        ("", ""),
        ("The", ""),
    ],
)
def test_normalize_answer_follows_the_official_script(text, normalised):
    assert normalize_answer(text) == normalised


@pytest.mark.parametrize(
    ("prediction", "gold", "em", "f1"),
    [
        ("The Beatles", "beatles", 1.0, 1.0),
        ("the city of New York", "New York City", 0.0, 6 / 7),  # P 3/4, R 1 -> 2*.75/(1.75)
        ("paris paris", "Paris", 0.0, 2 / 3),  # clipped counts: P 1/2, R 1
        ("Beyonce", "Beyoncé", 0.0, 0.0),
        ("yes", "Yes.", 1.0, 1.0),
        ("yes it is", "yes", 0.0, 0.0),  # gold is yes/no and differs: F1 0 despite the shared token
        ("no", "no way", 0.0, 0.0),  # prediction is yes/no and differs
        ("noanswer", "noanswer", 1.0, 1.0),
        ("", "", 1.0, 0.0),  # official: empty strings match exactly but share no token
        ("", "Paris", 0.0, 0.0),
        ("Chief of Protocol of the United States", "Chief of Protocol", 0.0, 2 * (3 / 6) * 1 / (3 / 6 + 1)),
    ],
)
def test_answer_em_and_f1_match_hand_computed_values(prediction, gold, em, f1):
    assert answer_exact_match(prediction, gold) == em
    assert answer_f1(prediction, gold) == pytest.approx(f1)


def test_answer_metrics_are_dspy_metrics():
    example = dspy.Example(question="q", answer="New York City").with_inputs("question")
    good, partial = dspy.Prediction(answer="new york city"), dspy.Prediction(answer="the city of New York")
    assert answer_metric(example, good) == 1.0
    assert answer_metric(example, partial) == pytest.approx(6 / 7)
    assert answer_metric(example, partial, trace=[]) is False  # while tracing only full marks pass
    assert answer_metric(example, good, trace=[]) is True
    assert answer_em_metric(example, good) == 1.0 and answer_em_metric(example, partial) == 0.0
    assert answer_metric(example, dspy.Prediction()) == 0.0  # a failed run gives an empty prediction
    feedback = answer_metric.feedback(example, partial, None, "plan", None)
    assert feedback.score == pytest.approx(6 / 7) and "New York City" in feedback.feedback


def test_dspy_evaluate_runs_an_answer_metric():
    devset = [dspy.Example(question=q, answer=a).with_inputs("question") for q, a in [("a", "x"), ("b", "y z")]]

    class Echo(dspy.Module):
        def forward(self, question):
            return dspy.Prediction(answer={"a": "x", "b": "y"}[question])

    result = dspy.Evaluate(devset=devset, metric=answer_metric, num_threads=1)(Echo())
    assert result.score == pytest.approx(100 * (1.0 + 2 / 3) / 2, abs=0.01)


def test_mentions_matches_whole_words_after_normalisation():
    assert mentions("Born in 1,500 BC.", "1500")
    assert mentions("They met The Beatles.", "beatles")
    assert not mentions("born 19660 years ago", "1966")
    assert not mentions("Anything", "")


# --- classification: adjusted Rand index times coverage ----------------------------------------------


def test_adjusted_rand_index_hand_values():
    assert adjusted_rand_index(list("aabb"), [0, 0, 1, 1]) == 1.0
    assert adjusted_rand_index(list("aabb"), [5, 5, 7, 7]) == 1.0  # label names do not matter
    assert adjusted_rand_index(list("aabb"), [0, 0, 0, 0]) == 0.0
    assert adjusted_rand_index(list("aabb"), [0, 1, 0, 1]) == pytest.approx(-0.5)
    # contingency a:{0:2,1:1} b:{1:3}: index 4, expected 6*7/15 = 2.8, max 6.5 -> 1.2/3.7
    assert adjusted_rand_index(list("aaabbb"), [0, 0, 1, 1, 1, 1]) == pytest.approx(1.2 / 3.7)
    assert adjusted_rand_index(["a"], [0]) == 1.0
    with pytest.raises(ValueError):
        adjusted_rand_index(["a"], [])


def _clusters(*contents: str) -> ClassificationOutput:
    return ClassificationOutput(
        should_cluster=len(contents) > 1,
        clusters=[Cluster(cluster_id=f"c{i}", context="t", content=c, keywords=[]) for i, c in enumerate(contents, 1)],
    )


TOPICS = {
    "Paris": ["Paris is the capital of France.", "It lies on the Seine."],
    "Tokyo": ["Tokyo is the capital of Japan.", "It hosted the 1964 Olympics."],
}
CLASSIFY = dspy.Example(context="...", task_goal="", topics=TOPICS).with_inputs("context", "task_goal")


def test_classification_metric_scores_partitions():
    right = _clusters("Paris is the capital of France.\n\nIt lies on the Seine.", "Tokyo is the capital of Japan.\n\nIt hosted the 1964 Olympics.")
    assert classification_metric(CLASSIFY, right) == 1.0
    assert classification_metric(CLASSIFY, right, trace=[]) is True
    lumped = _clusters(" ".join(s for sentences in TOPICS.values() for s in sentences))
    assert classification_metric(CLASSIFY, lumped) == 0.0
    # one topic's second sentence is missing: coverage 3/4; the three found are grouped right
    partial = _clusters("Paris is the capital of France. It lies on the Seine.", "Tokyo is the capital of Japan.")
    assert classification_metric(CLASSIFY, partial) == pytest.approx(0.75)
    feedback = classification_metric.feedback(CLASSIFY, lumped)
    assert feedback.score == 0.0 and "mixed" in feedback.feedback
    assert classification_metric(CLASSIFY, dspy.Prediction()) == 0.0


# --- structure: facts kept, times compression in 30-50% -----------------------------------------------


def test_compression_score_hand_values():
    assert compression_score(0.4) == 1.0
    assert compression_score(0.3) == 1.0 and compression_score(0.5) == 1.0
    assert compression_score(0.15) == pytest.approx(0.5)
    assert compression_score(0.75) == pytest.approx(0.5)
    assert compression_score(1.0) == 0.0 and compression_score(1.4) == 0.0


def test_structure_metric_wants_the_facts_in_a_summary_of_the_right_length():
    content = " ".join(["Ada Lovelace wrote the first program for the Analytical Engine in 1843."] * 5)
    example = dspy.Example(content=content, context="c", keywords=[], facts=["Ada Lovelace", "1843"]).with_inputs(
        "content", "context", "keywords"
    )
    two_sentences = "Ada Lovelace wrote the first program for the Analytical Engine in 1843. " * 2  # 40% of the content
    assert structure_metric(example, StructureOutput(summary=two_sentences, ratio=0.4, retried=False)) == 1.0
    lost_year = two_sentences.replace("1843", "a year")
    assert structure_metric(example, StructureOutput(summary=lost_year, ratio=0.4, retried=False)) == pytest.approx(0.5)
    verbatim = StructureOutput(summary=content, ratio=1.0, retried=False)
    assert structure_metric(example, verbatim) == 0.0
    assert "drops: 1843" in structure_metric.feedback(example, StructureOutput(summary=lost_year, ratio=0.4, retried=False)).feedback


# --- analysis: relation accuracy -----------------------------------------------------------------------


def test_analysis_metric_is_relation_accuracy():
    example = dspy.Example(new_node=None, candidates=[], relations={"m1": "related", "m2": "conflict", "m3": "unrelated"})

    def output(**kinds):
        return AnalysisOutput(relationships=[Relationship(existing_node_id=i, relationship=k) for i, k in kinds.items()])

    assert analysis_metric(example, output(m1="related", m2="conflict", m3="unrelated")) == 1.0
    assert analysis_metric(example, output(m1="related", m2="related", m3="unrelated")) == pytest.approx(2 / 3)
    assert analysis_metric(example, output(m1="related")) == pytest.approx(1 / 3)  # unmentioned = wrong
    assert analysis_metric(example, output(m1="related", m2="conflict", m3="related"), trace=[]) is False
    assert "m2 is conflict, not related" in analysis_metric.feedback(example, output(m1="related", m2="related", m3="unrelated")).feedback


# --- integration: validated fact kept, refuted one dropped ----------------------------------------------


@pytest.mark.parametrize(
    ("summary", "score"),
    [
        ("Nolan was born on 30 July 1970 in London.", 1.0),
        ("Nolan was born in 1970 (some sources wrongly say 1960).", 0.5),
        ("Nolan was born in 1960.", 0.0),
        ("Nolan is a director.", 0.0),
    ],
)
def test_integration_metric(summary, score):
    example = dspy.Example(nodes_to_merge=[], validation_result="", kept="1970", dropped="1960")
    output = IntegrationOutput(
        merged_node=NodeContent(summary=summary, context="c", keywords=[]), neighbor_updates={}, interaction_tree_description="d"
    )
    assert integration_metric(example, output) == score
