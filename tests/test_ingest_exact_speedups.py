"""Ingest speed-ups that must change no figure: each new path gives exactly what the one it replaces gave."""

from __future__ import annotations

import json
import random
from pathlib import Path

from amb_dspy.retrieval.keyword import BM25Index, bm25_scores, tokenize
from amb_dspy.text import split_sentences

HOTPOTQA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa" / "dev_distractor_300.jsonl"


def _sentences() -> list[tuple[str, ...]]:
    """Tokenised sentences of real paragraphs (the shared HotpotQA file when present), with repeats and an empty one."""
    if HOTPOTQA.is_file():
        with open(HOTPOTQA, encoding="utf-8") as lines:
            text = " ".join("".join(s) for line, _ in zip(lines, range(3)) for _, s in json.loads(line)["context"])
    else:
        text = ("The Seine flows through Paris. Paris is the capital of France. The river Calder flows into the bay. "
                "A violin concerto in D major. The festival is held in Port Merrow every July. ") * 4
    return [tuple(tokenize(s)) for s in split_sentences(text)] + [()]


def test_bm25_scores_equal_an_index_of_the_same_documents_float_for_float():
    sentences = _sentences()
    draw = random.Random(41)
    for _ in range(30):
        documents = draw.sample(sentences, draw.randint(1, min(60, len(sentences))))
        vocabulary = sorted({t for d in documents for t in d}) or ["paris"]
        query = [draw.choice(vocabulary) for _ in range(draw.randint(1, 6))] + ["absent-term"]
        index = BM25Index()
        for key, tokens in enumerate(documents):
            index.add(key, list(tokens))
        assert bm25_scores(documents, query) == index.scores(query)[: len(documents)].tolist()


def test_bm25_scores_of_no_documents_is_empty():
    assert bm25_scores([], ["paris"]) == []
