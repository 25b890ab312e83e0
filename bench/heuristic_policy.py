"""How good the deterministic fallback policies are on their own, on HotpotQA (distractor setting).

No LM anywhere: the policies of ``amb_dspy.agents.fallback`` run with the real all-MiniLM-L6-v2.

* structure, on each question's two gold paragraphs (keywords: their titles), once with the question
  as task goal and once without (the bank's structure agent is not given the goal): the compression
  ratio (median, share inside 30-50%), answer-span retention (share of the answers that are a span of
  the paragraphs and that the summary still mentions, ``optimize.metrics.mentions``), supporting-
  sentence retention (share of the supporting sentences kept verbatim) and
  ``optimize.metrics.grade_structure`` (must-keep facts x compression score);
* analysis, on ``optimize.trainsets``' analysis examples (a gold paragraph as the new node; candidates:
  the other gold paragraph of a bridge question = related, an entity-disjoint distractor = unrelated,
  and an altered copy = conflict): precision and recall of "related" over the related and unrelated
  candidates, and ``grade_analysis``'s relation accuracy (the policy never says conflict, so altered
  copies count as wrong there);
* classification, on ``optimize.trainsets``' classification examples (two gold paragraphs and a
  distractor cut into sentences) and on the same three paragraphs whole: ``grade_classification``.

    python bench/heuristic_policy.py ../shared/datasets/hotpotqa/dev_distractor_300.jsonl [--n N]
    python bench/heuristic_policy.py ../shared/datasets/hotpotqa/train_100.jsonl --calibrate

``--calibrate`` also sweeps the analysis threshold and prints the one with the best F1 (ties: the
higher one); that is how ``RELATED_THRESHOLD`` was set, on the train file. Prints a table and, as its
last line, one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dspy
import numpy as np

from amb_dspy.agents import AnalysisAgent, ClassificationAgent, StructureAgent
from amb_dspy.agents.fallback import (
    RELATED_THRESHOLD,
    classify_by_similarity,
    compress_extractively,
    hybrid_scores,
    relate_by_hybrid_score,
)
from amb_dspy.retrieval.embedding import default_embedder
from optimize.hotpotqa import HotpotQAItem, load_hotpotqa
from optimize.metrics import (
    COMPRESSION_TARGET,
    grade_analysis,
    grade_classification,
    grade_structure,
    mentions,
    normalize_answer,
)
from optimize.trainsets import build_examples, structure_examples


def squash(text: str) -> str:
    return " ".join(text.split())


def bench_structure(items: list[HotpotQAItem], embedder, with_goal: bool) -> dict:
    agent = StructureAgent()
    ratios, answers, supporting, graded = [], [], [], []
    for item in items:
        examples = structure_examples([item], random.Random(0))
        if not examples:
            continue
        example = examples[0]
        out = compress_extractively(agent, embedder, content=example.content, context=example.context,
                                    keywords=example.keywords, task_goal=item.question if with_goal else "")
        ratios.append(out.ratio)
        graded.append(grade_structure(example, out).score)
        if normalize_answer(item.answer) not in ("yes", "no") and mentions(example.content, item.answer):
            answers.append(mentions(out.summary, item.answer))
        summary = squash(out.summary)
        supporting.extend(squash(s) in summary for s in item.supporting_sentences if s.strip())
    low, high = COMPRESSION_TARGET
    return {
        "n": len(ratios),
        "ratio_median": statistics.median(ratios),
        "ratio_in_band": float(np.mean([low <= r <= high for r in ratios])),
        "answer_retention": float(np.mean(answers)),
        "answers": len(answers),
        "supporting_retention": float(np.mean(supporting)),
        "supporting_sentences": len(supporting),
        "grade_structure": float(np.mean(graded)),
    }


def precision_recall(pairs: list[tuple[bool, bool]]) -> tuple[float, float]:
    """(precision, recall) of "related" over (is related, said related) pairs."""
    tp = sum(1 for truth, said in pairs if truth and said)
    said = sum(1 for _, s in pairs if s)
    truth = sum(1 for t, _ in pairs if t)
    return (tp / said if said else 0.0), (tp / truth if truth else 0.0)


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def bench_analysis(items: list[HotpotQAItem], embedder, calibrate: bool) -> dict:
    agent = AnalysisAgent()
    examples = build_examples("analysis", items)
    pairs, accuracy, scored = [], [], []  # scored: (is related, hybrid score)
    for example in examples:
        out = relate_by_hybrid_score(agent, embedder, new_node=example.new_node, candidates=example.candidates)
        accuracy.append(grade_analysis(example, out).score)
        said = {r.existing_node_id: r.relationship == "related" for r in out.relationships}
        labelled = [c for c in example.candidates if example.relations[c.id] in ("related", "unrelated")]
        pairs.extend((example.relations[c.id] == "related", said[c.id]) for c in labelled)
        if calibrate:
            scores = dict(zip([c.id for c in example.candidates],
                              hybrid_scores(example.new_node, example.candidates, embedder)))
            scored.extend((example.relations[c.id] == "related", scores[c.id]) for c in labelled)
    precision, recall = precision_recall(pairs)
    result = {
        "examples": len(examples), "related": sum(t for t, _ in pairs), "unrelated": sum(not t for t, _ in pairs),
        "threshold": RELATED_THRESHOLD, "precision": precision, "recall": recall, "f1": f1(precision, recall),
        "relation_accuracy": float(np.mean(accuracy)),
    }
    if calibrate:
        sweep = []
        for threshold in np.round(np.arange(0.10, 0.601, 0.01), 2):
            p, r = precision_recall([(truth, score >= threshold) for truth, score in scored])
            sweep.append((round(f1(p, r), 4), float(threshold), p, r))
        best = max(sweep, key=lambda row: (row[0], row[1]))
        result["sweep"] = [{"threshold": t, "precision": p, "recall": r, "f1": f} for f, t, p, r in sweep]
        result["best_threshold"], result["best_f1"] = best[1], best[0]
    return result


def bench_classification(items: list[HotpotQAItem], embedder) -> dict:
    agent = ClassificationAgent()
    by_sentence, by_paragraph = [], []
    for example in build_examples("classification", items):
        out = classify_by_similarity(agent, embedder, context=example.context, task_goal=example.task_goal)
        by_sentence.append(grade_classification(example, out).score)
        item = next(i for i in items if i.question == example.task_goal)
        paragraphs = [p for p in item.context if p.title in example.topics]
        whole = dspy.Example(context="\n\n".join(p.text for p in paragraphs),
                             topics={p.title: [s.strip() for s in p.sentences if s.strip()] for p in paragraphs})
        out = classify_by_similarity(agent, embedder, context=whole.context, task_goal=example.task_goal)
        by_paragraph.append(grade_classification(whole, out).score)
    return {"n": len(by_sentence), "sentences": float(np.mean(by_sentence)), "paragraphs": float(np.mean(by_paragraph))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="HotpotQA file (JSONL or JSON array, distractor setting)")
    parser.add_argument("--n", type=int, default=None, help="only the first N questions")
    parser.add_argument("--calibrate", action="store_true", help="also sweep the analysis threshold")
    args = parser.parse_args()

    items = load_hotpotqa(f"hotpotqa:{args.path}", n=args.n)
    embedder = default_embedder()
    started = time.perf_counter()
    with_goal = bench_structure(items, embedder, with_goal=True)
    without_goal = bench_structure(items, embedder, with_goal=False)
    analysis = bench_analysis(items, embedder, args.calibrate)
    classification = bench_classification(items, embedder)
    seconds = time.perf_counter() - started

    low, high = COMPRESSION_TARGET
    print(f"{args.path.name}: {len(items)} questions, {seconds:.0f} s, no LM\n")
    print(f"{'structure (gold paragraphs)':<34}{'with goal':>12}{'no goal':>12}")
    rows = [
        ("questions", "n", "{:.0f}"),
        ("ratio, median", "ratio_median", "{:.3f}"),
        (f"ratio inside {low:.0%}-{high:.0%}", "ratio_in_band", "{:.3f}"),
        ("answer spans kept", "answer_retention", "{:.3f}"),
        ("supporting sentences kept", "supporting_retention", "{:.3f}"),
        ("grade_structure (facts x ratio)", "grade_structure", "{:.3f}"),
    ]
    for label, key, fmt in rows:
        print(f"{label:<34}{fmt.format(with_goal[key]):>12}{fmt.format(without_goal[key]):>12}")
    print(f"  ({with_goal['answers']} answers are spans of the paragraphs; "
          f"{with_goal['supporting_sentences']} supporting sentences)\n")
    print(f"analysis, related if hybrid >= {analysis['threshold']}: {analysis['related']} related and "
          f"{analysis['unrelated']} unrelated pairs from {analysis['examples']} examples")
    print(f"  precision {analysis['precision']:.3f}  recall {analysis['recall']:.3f}  F1 {analysis['f1']:.3f}  "
          f"relation accuracy with conflicts {analysis['relation_accuracy']:.3f}")
    if args.calibrate:
        print(f"  sweep: best F1 {analysis['best_f1']:.3f} at threshold {analysis['best_threshold']:.2f}")
        for row in analysis.pop("sweep")[::5]:
            print(f"    {row['threshold']:.2f}  P {row['precision']:.3f}  R {row['recall']:.3f}  F1 {row['f1']:.3f}")
    print(f"\nclassification (grade_classification, ARI x coverage) on {classification['n']} inputs: "
          f"sentence segments {classification['sentences']:.3f}, paragraph segments {classification['paragraphs']:.3f}\n")

    summary = {
        "file": args.path.name, "questions": len(items), "seconds": round(seconds, 1),
        "structure_ratio_median": round(with_goal["ratio_median"], 4),
        "structure_ratio_in_band": round(with_goal["ratio_in_band"], 4),
        "answer_retention": round(with_goal["answer_retention"], 4),
        "supporting_retention": round(with_goal["supporting_retention"], 4),
        "answer_retention_no_goal": round(without_goal["answer_retention"], 4),
        "supporting_retention_no_goal": round(without_goal["supporting_retention"], 4),
        "grade_structure": round(with_goal["grade_structure"], 4),
        "analysis_threshold": analysis["threshold"],
        "analysis_precision": round(analysis["precision"], 4),
        "analysis_recall": round(analysis["recall"], 4),
        "analysis_f1": round(analysis["f1"], 4),
        "classification_ari_sentences": round(classification["sentences"], 4),
        "classification_ari_paragraphs": round(classification["paragraphs"], 4),
    }
    if args.calibrate:
        summary["analysis_best_threshold"] = analysis["best_threshold"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
