"""Metrics for compiling and evaluating the agents, as DSPy metric functions.

Every metric is called ``metric(example, prediction, trace=None)``, as ``dspy.Evaluate`` and DSPy's
optimizers call it. It returns a score in [0, 1]; while an optimizer is tracing (``trace`` is not None)
it returns whether the score reaches the metric's ``threshold``, so that BootstrapFewShot keeps only
demos that are fully right. ``metric.feedback`` is the same score with a sentence saying what was
wrong, in the five-argument form dspy.GEPA asks for.

Answers are scored exactly as the official ``hotpot_evaluate_v1.py`` does. DSPy's own
``dspy.evaluate.answer_exact_match`` is not used: it normalises unicode and has no yes/no rule, so its
numbers would not be comparable with published HotpotQA results.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable
from math import comb
from typing import Any, NamedTuple

import dspy

from amb_dspy.agents.chunking import estimate_tokens

# --- HotpotQA answer scoring (hotpot_evaluate_v1.py) ----------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace (official order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def answer_f1(prediction: str, gold: str) -> float:
    """Token F1 after normalisation; a yes/no/noanswer on either side that differs from the other scores 0."""
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or truth in _SPECIAL) and pred != truth:
        return 0.0
    pred_tokens, truth_tokens = pred.split(), truth.split()
    same = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


# --- the metric wrapper ---------------------------------------------------------------------------


class Graded(NamedTuple):
    score: float
    feedback: str


class AgentMetric:
    """A DSPy metric built from a grading function ``grade(example, prediction) -> Graded``."""

    def __init__(self, name: str, grade: Callable[[Any, Any], Graded], threshold: float = 1.0):
        self.__name__ = name
        self.grade = grade
        self.threshold = threshold

    def __call__(self, example: Any, prediction: Any, trace: Any = None) -> float | bool:
        score = self.grade(example, prediction).score
        return score >= self.threshold if trace is not None else score

    def feedback(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None, pred_trace: Any = None):
        graded = self.grade(gold, pred)
        return dspy.Prediction(score=graded.score, feedback=graded.feedback)

    def __repr__(self) -> str:
        return f"AgentMetric({self.__name__})"


def _field(prediction: Any, name: str, default: Any = None) -> Any:
    """An output field of an agent's pydantic output or of a dspy.Prediction (a failed run gives an empty one)."""
    try:
        value = getattr(prediction, name)
    except (AttributeError, KeyError):
        return default
    return default if value is None else value


def _squash(text: str) -> str:
    return " ".join(text.split())


def mentions(text: str, value: str) -> bool:
    """Whether ``value`` occurs in ``text`` as whole words after answer normalisation (so "1,500" matches
    "1500" and "The Beatles" matches "beatles")."""
    needle = normalize_answer(value)
    if not needle:
        return False
    return re.search(rf"(?<!\w){re.escape(needle)}(?!\w)", normalize_answer(text)) is not None


# --- classification: topic clusters against paragraph titles --------------------------------------


def adjusted_rand_index(truth: list[Any], predicted: list[Any]) -> float:
    """Hubert and Arabie's adjusted Rand index of two labelings of the same items (1.0 = same partition)."""
    if len(truth) != len(predicted):
        raise ValueError("labelings differ in length")
    pairs = comb(len(truth), 2)
    if pairs == 0:
        return 1.0
    both = sum(comb(c, 2) for c in Counter(zip(truth, predicted)).values())
    rows = sum(comb(c, 2) for c in Counter(truth).values())
    cols = sum(comb(c, 2) for c in Counter(predicted).values())
    expected = rows * cols / pairs
    best = (rows + cols) / 2
    if best == expected:  # both labelings are all-one-cluster or all-singletons: identical
        return 1.0
    return (both - expected) / (best - expected)


def _cluster_of(unit: str, contents: list[str]) -> int | None:
    """The cluster whose content holds ``unit``: verbatim (whitespace aside), else by 80% word recall."""
    squashed = _squash(unit)
    for i, content in enumerate(contents):
        if squashed in content:
            return i
    words = Counter(normalize_answer(unit).split())
    if not words:
        return None
    best, best_recall = None, 0.8
    for i, content in enumerate(contents):
        recall = sum((words & Counter(normalize_answer(content).split())).values()) / sum(words.values())
        if recall >= best_recall:
            best, best_recall = i, recall
    return best


def grade_classification(example: Any, prediction: Any) -> Graded:
    """ARI between the predicted clusters and the true topics (paragraph titles) over the input sentences,
    times coverage (the share of sentences found in some cluster)."""
    topics: dict[str, list[str]] = example.topics
    contents = [_squash(_field(c, "content", "")) for c in _field(prediction, "clusters", [])]
    truth, predicted, missing = [], [], 0
    for title, sentences in topics.items():
        for sentence in sentences:
            cluster = _cluster_of(sentence, contents)
            if cluster is None:
                missing += 1
            else:
                truth.append(title)
                predicted.append(cluster)
    total = len(truth) + missing
    coverage = len(truth) / total if total else 0.0
    agreement = max(0.0, adjusted_rand_index(truth, predicted)) if truth else 0.0
    score = coverage * agreement
    problems = []
    if missing:
        problems.append(f"{missing} of {total} sentences are in no cluster")
    if agreement < 1.0:
        merged = sorted({t for t, p in zip(truth, predicted) if len({t2 for t2, p2 in zip(truth, predicted) if p2 == p}) > 1})
        split = sorted({t for t in topics if len({p for t2, p in zip(truth, predicted) if t2 == t}) > 1})
        if merged:
            problems.append(f"topics mixed in one cluster: {', '.join(merged)}")
        if split:
            problems.append(f"topics split across clusters: {', '.join(split)}")
    expected = f"Expected {len(topics)} clusters, one per topic ({'; '.join(topics)}); got {len(contents)}."
    return Graded(score, expected + (" " + "; ".join(problems) + "." if problems else " All sentences are grouped right."))


# --- structure: compression that keeps the supporting facts ----------------------------------------

COMPRESSION_TARGET = (0.3, 0.5)


def compression_score(ratio: float, target: tuple[float, float] = COMPRESSION_TARGET) -> float:
    """1 inside the target band, falling linearly to 0 at ratio 0 and at ratio 1 (a verbatim copy)."""
    low, high = target
    if ratio < low:
        return max(0.0, ratio / low)
    if ratio > high:
        return max(0.0, (1.0 - ratio) / (1.0 - high))
    return 1.0


def grade_structure(example: Any, prediction: Any) -> Graded:
    """Share of must-keep facts (answer, bridge entities) the summary mentions, times the compression score.
    The ratio is measured here, in estimated tokens, independently of what the agent reports."""
    summary = str(_field(prediction, "summary", ""))
    facts: list[str] = list(example.facts)
    kept = [f for f in facts if mentions(summary, f)]
    recall = len(kept) / len(facts) if facts else 1.0
    ratio = estimate_tokens(summary) / max(1, estimate_tokens(example.content))
    score = recall * compression_score(ratio)
    low, high = COMPRESSION_TARGET
    notes = [f"The summary is {ratio:.0%} of the content (target {low:.0%}-{high:.0%})."]
    lost = [f for f in facts if f not in kept]
    notes.append(f"It drops: {', '.join(lost)}." if lost else "It keeps every key fact.")
    return Graded(score, " ".join(notes))


# --- analysis: relation accuracy --------------------------------------------------------------------


def grade_analysis(example: Any, prediction: Any) -> Graded:
    """Share of candidates whose relationship (conflict/related/unrelated) matches the label; a candidate
    the prediction does not mention counts as wrong."""
    labels: dict[str, str] = example.relations
    said = {_field(r, "existing_node_id"): _field(r, "relationship") for r in _field(prediction, "relationships", [])}
    wrong = [f"{node} is {label}, not {said.get(node) or 'missing'}" for node, label in labels.items() if said.get(node) != label]
    score = 1.0 - len(wrong) / len(labels) if labels else 0.0
    reasons = [f"{node}: {why}" for node, why in example.get("reasons", {}).items()]
    feedback = "All relationships are right." if not wrong else "Wrong: " + "; ".join(wrong) + "."
    if wrong and reasons:
        feedback += " Why: " + " ".join(reasons)
    return Graded(score, feedback)


# --- integration: the merged node keeps the validated fact ------------------------------------------


def grade_integration(example: Any, prediction: Any) -> Graded:
    """1 when the merged summary keeps the validated value and drops the altered one, 0.5 when it keeps
    both, 0 when it loses the validated value."""
    merged = _field(prediction, "merged_node")
    summary = str(_field(merged, "summary", "")) if merged is not None else ""
    kept, dropped = mentions(summary, example.kept), not mentions(summary, example.dropped)
    if not kept:
        return Graded(0.0, f"The merged summary lost the validated fact {example.kept!r}.")
    if not dropped:
        return Graded(0.5, f"The merged summary keeps the refuted value {example.dropped!r} next to {example.kept!r}.")
    return Graded(1.0, f"The merged summary keeps {example.kept!r} and drops the refuted {example.dropped!r}.")


# --- answers (planning and the whole bank) ----------------------------------------------------------


def grade_answer(example: Any, prediction: Any) -> Graded:
    answer = str(_field(prediction, "answer", ""))
    f1 = answer_f1(answer, example.answer)
    return Graded(f1, f"Gold answer {example.answer!r}; predicted {answer!r} (F1 {f1:.2f}).")


classification_metric = AgentMetric("classification_ari", grade_classification)
structure_metric = AgentMetric("structure_facts_x_compression", grade_structure)
analysis_metric = AgentMetric("analysis_relation_accuracy", grade_analysis)
integration_metric = AgentMetric("integration_validated_fact", grade_integration)
# While tracing, only answers with F1 1 (the gold tokens, nothing else) make demos.
answer_metric = AgentMetric("answer_f1", grade_answer)


def answer_em_metric(example: Any, prediction: Any, trace: Any = None) -> float | bool:
    """Exact match of ``prediction.answer`` with ``example.answer`` (official normalisation)."""
    score = answer_exact_match(str(_field(prediction, "answer", "")), example.answer)
    return score >= 1.0 if trace is not None else score


METRICS: dict[str, AgentMetric] = {
    "classification": classification_metric,
    "structure": structure_metric,
    "analysis": analysis_metric,
    "integration": integration_metric,
    "planning": answer_metric,
    "answer": answer_metric,
    "all": answer_metric,
}
