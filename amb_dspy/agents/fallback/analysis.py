"""Analysis without an LM: a candidate is ``related`` when its hybrid score passes a calibrated threshold.

Never ``conflict``: telling a contradiction from a paraphrase needs reading, which is the LM's job.

The score is the spec's hybrid formula between the new node and each candidate,

    HYBRID_ALPHA * BM25norm + (1 - HYBRID_ALPHA) * cosine

* cosine: of the embeddings of the nodes' texts (summary, context and keywords, as the store indexes
  them; see :func:`~amb_dspy.storage.query_graph.node_text`);
* BM25norm: Okapi BM25 of the new node's keywords (the query the store's retrieval uses for a node's
  candidates) against the candidate's best sentence, divided by the same score of the new node's own
  best sentence and capped at 1. BM25's documents are the sentences of the new node and all candidates,
  not whole nodes: Okapi's idf is zero or negative for any term in half of the documents, so over the
  two to six nodes analysis sees, a term shared by the new node and one candidate weighs nothing.
  Dividing by the new node's own score (not by the best candidate's, as retrieval over the whole
  graph does) keeps a set of candidates that are all unrelated from having a "best" one at 1.0.

At most :data:`MAX_RELATED` candidates are related, the best scoring: in a long conversation every topic of
the same two people passes the threshold, and a node linked to all the others says nothing of which are
close (conversation 26 of LoCoMo made 2,063 edges between 65 nodes without the cap).

A related candidate keeps its context and keywords, and so does the new node: the same values the LM
path falls back to when the LM leaves the updates out, so the bank links the two and changes nothing else.
"""

from __future__ import annotations

import functools

import numpy as np

from amb_dspy.agents.analysis import AnalysisAgent, AnalysisOutput, NodeInfo, Relationship, unique_candidates
from amb_dspy.agents.chunking import split_sentences
from amb_dspy.agents.fallback.similarity import embedder_or_default
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.embedding_base import embed_node_texts
from amb_dspy.retrieval.keyword import bm25_scores, tokenize
from amb_dspy.storage.query_graph import node_text

HYBRID_ALPHA = 0.5  # AmbConfig.retrieval_alpha's default; fixed here because the threshold is calibrated for it
# Calibrated on train_100.jsonl: `python bench/heuristic_policy.py .../train_100.jsonl --calibrate`
# sweeps 0.10-0.60 over optimize.trainsets' analysis examples (78 related gold pairs of bridge
# questions, 100 entity-disjoint distractors) and 0.17 has the best F1: P 0.920 R 0.885 F1 0.902
# (0.15: P 0.857 R 0.923; 0.20: P 0.938 R 0.782). The dev file's numbers are in the bench's output.
RELATED_THRESHOLD = 0.17
MAX_RELATED = 3


def relate_by_hybrid_score(
    agent: AnalysisAgent, embedder: Embedder | None = None, *, new_node: NodeInfo | None = None,
    candidates: list[NodeInfo] = (), batch: list[tuple[NodeInfo, list[NodeInfo]]] | None = None,
) -> AnalysisOutput | list[AnalysisOutput]:
    """``related`` for each candidate scoring at least :data:`RELATED_THRESHOLD`, else ``unrelated``;
    with ``batch``, the output of each (node, candidates) pair, in order (the agent's batch form)."""
    if batch is not None:
        return [relate_by_hybrid_score(agent, embedder, new_node=node, candidates=list(found)) for node, found in batch]
    ordered = unique_candidates(candidates)
    if not ordered:
        return AnalysisOutput(relationships=[])
    scores = hybrid_scores(new_node, ordered, embedder_or_default(embedder))
    best = set(sorted(range(len(ordered)), key=lambda i: (-scores[i], i))[:MAX_RELATED])
    relationships = []
    for i, (candidate, score) in enumerate(zip(ordered, scores)):
        reasoning = f"hybrid score {score:.2f} against the threshold {RELATED_THRESHOLD} (no LM judgement)"
        if score >= RELATED_THRESHOLD and i in best:
            relationships.append(Relationship(
                existing_node_id=candidate.id, relationship="related", reasoning=reasoning,
                context_update_new=new_node.context, context_update_existing=candidate.context,
                keywords_update_new=list(new_node.keywords), keywords_update_existing=list(candidate.keywords),
            ))
        else:
            relationships.append(Relationship(existing_node_id=candidate.id, relationship="unrelated", reasoning=reasoning))
    return AnalysisOutput(relationships=relationships)


def hybrid_scores(new_node: NodeInfo, candidates: list[NodeInfo], embedder: Embedder) -> np.ndarray:
    """The hybrid score of each candidate against ``new_node`` (see module docstring), in [-1, 1]."""
    texts = [node_text(n.summary, n.context, n.keywords) for n in [new_node, *candidates]]
    vectors = np.asarray(embed_node_texts(embedder, texts), dtype=np.float64)
    cosine = vectors[1:] @ vectors[0]

    sentences = [(number, tokens) for number, text in enumerate(texts) for tokens in _sentence_tokens(text)]
    owner = [number for number, _ in sentences]  # node number of each sentence; 0 is the new node
    query = tokenize(" ".join(new_node.keywords) or texts[0])
    per_sentence = np.array(bm25_scores([tokens for _, tokens in sentences], query), dtype=np.float64)
    best = np.full(len(texts), -np.inf)
    np.maximum.at(best, np.array(owner), per_sentence)
    bm25 = np.clip(best[1:] / best[0], 0.0, 1.0) if best[0] > 0 else np.zeros(len(candidates))
    return HYBRID_ALPHA * bm25 + (1 - HYBRID_ALPHA) * cosine


@functools.lru_cache(maxsize=8192)
def _sentence_tokens(text: str) -> tuple[tuple[str, ...], ...]:
    """The BM25 tokens of each sentence of a node's text. A node is a candidate of many new nodes in an ingest
    (and the new node of one): its sentences are split and tokenised once, not at each comparison."""
    return tuple(tuple(tokenize(sentence)) for sentence in split_sentences(text))
