"""A node's vector pooled from its sentences' vectors, which an ingest has mostly embedded already (issue 41).

A node's text (:func:`~amb_dspy.storage.query_graph.node_text`: summary, context, keywords) is made of sentences of
its source, and a heuristic ingest has embedded each of those sentences one by one before (the classification and
structure policies rank them). Embedding the node text whole again was about 40% of the model's work in such an
ingest (HotpotQA: 32.8k of 80.4k model tokens, for 44.7k document tokens). Under ``AMB_EMBEDDING_NODE_VECTORS=sentences``
(the bundled model's default) a text of several sentences gets instead the token-weighted mean of its sentences'
vectors, normalised: the sentences the embedder has seen are read from its cache, and only the others (the
keywords, a context cut short, a summary's pieces) run through the model. A text of one sentence is embedded whole,
as before; ``whole`` embeds every node text whole.

The pooled vector is not the whole text's (cosine to it: median 0.94 on HotpotQA nodes). The default was chosen on
the tuning halves (``bench/memory_recall.py``, evidence recall at 1,000 tokens, whole -> sentences: LoCoMo 26
0.8520 -> 0.8487, HotpotQA 0-149 0.9672 -> 0.9656); the other halves, untouched: LoCoMo 30 0.8331 -> 0.8270,
HotpotQA 150-299 0.9508 -> 0.9541 (answer recall equal or higher on all four). A bank made before keeps its
nodes' vectors: both kinds are this model's reading of a node's text and are ranked together.
"""

from __future__ import annotations

import numpy as np

from amb_dspy.text import estimate_tokens, split_paragraphs, split_sentences


def sentences_of(text: str) -> list[str]:
    """The sentences of ``text`` as the classification and structure policies cut and strip them (paragraph by
    paragraph): the texts whose vectors an ingest has made already."""
    return [s.strip() for paragraph in split_paragraphs(text) for s in split_sentences(paragraph) if s.strip()] or [text]


def pooled_vectors(embedder, texts: list[str]) -> np.ndarray:
    """Each text's vector: one the embedder holds for the whole text (a node's, remembered from its bank, or pooled
    before), else the normalised token-weighted mean of its sentences' vectors (one ``embed`` call for all the
    sentences, so only unseen ones run through the model). Pooled vectors are handed to the embedder's cache under
    their texts, so that the next call for the same node text (the analysis, then the node's creation) is a lookup."""
    known = embedder.cached(texts)
    parts = {text: sentences_of(text) for text in dict.fromkeys(texts) if text not in known}
    sentences = list(dict.fromkeys(part for pieces in parts.values() for part in pieces))
    vectors = dict(zip(sentences, np.asarray(embedder.embed(sentences), dtype=np.float32))) if sentences else {}
    tokens = {sentence: estimate_tokens(sentence) for sentence in sentences}  # once each: a context repeats a sentence
    pooled = {}
    for text, pieces in parts.items():
        weights = np.array([tokens[piece] for piece in pieces], dtype=np.float32)
        mean = (np.stack([vectors[piece] for piece in pieces]) * weights[:, None]).sum(axis=0)
        pooled[text] = mean / max(float(np.linalg.norm(mean)), 1e-12)
    embedder.remember(list(pooled), list(pooled.values()))
    known.update(pooled)
    return np.stack([known[text] for text in texts]) if texts else np.zeros((0, embedder.dim), dtype=np.float32)
