"""``AMB_EMBEDDING_NODE_VECTORS`` (issue 41): a node's text of several sentences gets the token-weighted mean of its
sentences' vectors, and only the sentences the embedder has not seen run through the model; ``whole`` embeds it
whole. Real model (the ``embedder`` fixture's, and embedders made from real settings), real bank databases, the
heuristic policy (no LM)."""

from __future__ import annotations

import numpy as np
import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.retrieval.sentence_pooling import sentences_of
from amb_dspy.storage.query_graph import node_text
from amb_dspy.text import estimate_tokens
from tests.test_ingest_pipeline import folder  # noqa: F401  (a fixture)

SUMMARY = ("# Port Merrow\n\nPort Merrow is a harbour city on the Gull Coast. The river Calder flows through it into "
           "the bay.")
CONTEXT = "Port Merrow is a harbour city on the Gull Coast."
KEYWORDS = ["harbour", "Calder", "Gull Coast"]


@pytest.fixture
def pooling():
    """An embedder of the bundled model that pools node texts, its cache empty."""
    embedder = default_embedder(config=AmbConfig(embedding_node_vectors="sentences"))
    embedder._cache.clear()
    return embedder


def expected_pooled(embedder, text: str) -> np.ndarray:
    parts = sentences_of(text)
    weights = np.array([estimate_tokens(part) for part in parts], dtype=np.float32)
    mean = (embedder.embed(parts) * weights[:, None]).sum(axis=0)
    return mean / np.linalg.norm(mean)


def test_a_node_text_is_the_weighted_mean_of_its_sentences_and_only_unseen_ones_are_embedded(pooling):
    text = node_text(SUMMARY, CONTEXT, KEYWORDS)
    assert sentences_of(text) == ["# Port Merrow", "Port Merrow is a harbour city on the Gull Coast.",
                                  "The river Calder flows through it into the bay.", CONTEXT, "harbour Calder Gull Coast"]
    pooling.embed(sentences_of(SUMMARY))  # what an ingest's policies embed first
    before = pooling.encoded_texts
    vector = pooling.embed_nodes([text])[0]
    assert pooling.encoded_texts == before + 1  # the keywords alone ran through the model (the context is a sentence)
    assert np.allclose(vector, expected_pooled(pooling, text), atol=1e-6)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    whole = pooling.embed([text])[0]  # the pooled vector is what the cache now holds for the text
    assert np.array_equal(whole, vector)
    assert pooling.encoded_texts == before + 1


def test_one_sentence_is_embedded_whole_and_a_remembered_vector_is_kept(pooling):
    sentence = "The Tidewater Lantern Festival is held in Port Merrow every July."
    assert np.array_equal(pooling.embed_nodes([sentence]), pooling.embed([sentence]))
    stored = np.zeros(pooling.dim, dtype=np.float32)
    stored[0] = 1.0
    pooling.remember([SUMMARY], [stored])  # a node's vector read back from its bank
    assert np.array_equal(pooling.embed_nodes([SUMMARY, sentence])[0], stored)
    assert pooling.embed_nodes([]).shape == (0, pooling.dim)


def test_whole_embeds_each_node_text_whole(monkeypatch):
    monkeypatch.setenv("AMB_EMBEDDING_NODE_VECTORS", "whole")
    whole = default_embedder(config=AmbConfig())
    assert whole.node_vectors == "whole" and whole is not default_embedder(config=AmbConfig(embedding_node_vectors="sentences"))
    text = node_text(SUMMARY, CONTEXT, KEYWORDS)
    whole._cache.clear()
    got = whole.embed_nodes([text])
    whole._cache.clear()
    assert np.array_equal(got, whole.embed([text]))
    assert float(got[0] @ expected_pooled(whole, text)) < 0.999  # the two readings differ


def test_a_heuristic_banks_nodes_hold_their_pooled_vectors(tmp_path, folder):  # noqa: F811
    """The nodes' vectors are the pooled ones of their texts, whether the analysis or the node's creation pooled
    them first; the vectors the bank saved are those read back."""
    config = AmbConfig(policy="heuristic", embedding_node_vectors="sentences", storage_dir=tmp_path / "s",
                       temp_dir=tmp_path / "t")
    bank = MemoryBank(config)
    bank.embedder._cache.clear()
    bank.add_documents([folder], into=tmp_path / "b.sqlite")
    reference = default_embedder(config=config.model_copy(update={"embedding_node_vectors": "whole"}))
    store = MemoryStore.load(tmp_path / "b.sqlite", bank.embedder)
    several = [node for node in store.graph.nodes_dict.values() if len(sentences_of(node.embedding_text)) > 1]
    assert len(several) >= 10
    for node in several:
        assert np.allclose(node.embedding, expected_pooled(reference, node.embedding_text), atol=1e-5)
