"""Retrieval on real parts: the all-MiniLM-L6-v2 embedder, incremental BM25 against rank_bm25, and the
hybrid index (FAISS + BM25) against the spec's formula computed by brute force."""

from __future__ import annotations

import subprocess
import sys
import uuid

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from amb_dspy.config import AmbConfig
from amb_dspy.retrieval import hybrid
from amb_dspy.retrieval.embedding import MINILM_DIM, EmbeddingError, SentenceTransformerEmbedder, default_embedder
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.retrieval.keyword import BM25Index, terms, tokenize
from amb_dspy.retrieval.vector import VectorIndex


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def fresh(text: str) -> str:
    """A text no earlier test embedded, so that the embedder's cache cannot answer it."""
    return f"{text} [{uuid.uuid4().hex[:8]}]"


# --- embedder -------------------------------------------------------------------------------
def test_embedder_returns_normalised_384_float32_rows_in_order(embedder):
    texts = ["The volcano erupted and lava reached the sea.", "A violin concerto in D major.", "Lava flows from volcanoes."]
    vectors = embedder.embed(texts)
    assert embedder.dim == MINILM_DIM == 384
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 2] > sims[0, 1] + 0.3  # the two volcano sentences are far closer than volcano/violin


def test_embedder_batches_give_the_same_vectors_as_single_calls():
    small_batches = SentenceTransformerEmbedder(batch_size=2)
    texts = [fresh(t) for t in ("red apples", "a quiet harbour at night", "tax law of 1990", "penguins", "jazz")]
    batched = small_batches.embed(texts)
    assert small_batches.encoded_texts == 5
    same_vectors = default_embedder(config=AmbConfig(embedding_precision="float32"))  # int8's are close, not equal
    singles = np.stack([same_vectors.embed([t])[0] for t in texts])
    assert np.allclose(batched, singles, atol=1e-5)


def test_identical_text_is_embedded_once(embedder):
    a, b = fresh("glaciers retreat"), fresh("coral reefs bleach")
    before = embedder.encoded_texts
    first = embedder.embed([a, a, b, a])
    assert embedder.encoded_texts - before == 2  # duplicates inside one call are embedded once
    assert np.array_equal(first[0], first[1]) and np.array_equal(first[0], first[3])
    again = embedder.embed([b, a])
    assert embedder.encoded_texts - before == 2  # and across calls the cache answers
    assert np.array_equal(again[0], first[2]) and np.array_equal(again[1], first[0])


def test_missing_model_directory_is_one_clear_error(tmp_path):
    with pytest.raises(EmbeddingError) as info:
        SentenceTransformerEmbedder(tmp_path / "no-model").embed(["x"])
    assert "\n" not in str(info.value) and "no-model" in str(info.value)


@pytest.mark.parametrize("module", ["amb_dspy.retrieval.embedding", "amb_dspy.retrieval.hybrid", "amb_dspy.memory.graph_ops"])
def test_importing_retrieval_does_not_load_torch_sentence_transformers_or_faiss(module):
    code = (
        f"import sys, {module}\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sentence_transformers', 'transformers', 'faiss')]\n"
        "print(heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# --- incremental BM25 == rank_bm25 ------------------------------------------------------------
def zipf_texts(rng: np.random.Generator, count: int, vocabulary: int = 120, low: int = 0, high: int = 25) -> list[str]:
    words = [f"term{i}" for i in range(vocabulary)] + ["the", "of", "and"]  # stop words are dropped
    weights = 1.0 / (np.arange(len(words)) + 2.0)
    weights /= weights.sum()
    return [" ".join(rng.choice(words, size=int(rng.integers(low, high + 1)), p=weights)) for _ in range(count)]


def test_tokenizer_lowercases_splits_and_drops_stop_words():
    assert tokenize("What is the Capital of FRANCE? Paris_2024, naïve-café") == [
        "capital", "france", "paris", "2024", "naïve", "café",
    ]


def test_terms_are_the_stems_of_the_tokens():
    assert terms("Where has Melanie camped? We went camping; the camps, Activities") == [
        "melani", "camp", "went", "camp", "camp", "activ",
    ]


def test_hybrid_matches_a_query_word_in_another_form():
    # "camped" finds "camping": without stems the speaker's name is the one word the two lines share with the
    # question, and the shorter line wins on it.
    index, vector = HybridIndex(8), unit(np.ones(8))
    index.add("short", "Melanie: Absolutely!", vector)
    index.add("camping", "Melanie: we went camping at the beach with the kids last week", vector)
    for i, said in enumerate(["Caroline: How was your weekend?", "Caroline: I painted a sunset.", "Caroline: Bye!"]):
        index.add(f"other{i}", said, vector)
    assert [d for d, _ in index.rank(vector, "Where has Melanie camped?", k=2, alpha=1.0)] == ["camping", "short"]


def test_bm25_scores_equal_rank_bm25_after_adds_removes_and_updates():
    rng = np.random.default_rng(7)
    index, docs = BM25Index(), {}
    texts = iter(zipf_texts(rng, 2000))
    checked = 0
    for step in range(600):
        action = rng.random()
        if action < 0.55 or len(docs) < 3:
            key = int(rng.integers(0, 400))
            if key in docs:
                continue
            docs[key] = tokenize(next(texts))
            index.add(key, docs[key])
        elif action < 0.8:
            key = int(rng.choice(list(docs)))
            index.remove(key)
            del docs[key]
        else:  # an update is a remove and an add under the same key
            key = int(rng.choice(list(docs)))
            index.remove(key)
            docs[key] = tokenize(next(texts))
            index.add(key, docs[key])
        if step % 50 == 49:
            keys = sorted(docs)
            reference = BM25Okapi([docs[k] for k in keys])
            for query in zipf_texts(rng, 5, low=1, high=8) + ["term0 term0 term119", "absent words only"]:
                tokens = tokenize(query)
                ours = index.scores(tokens)
                assert np.allclose(ours[keys], reference.get_scores(tokens), rtol=1e-9, atol=1e-12)
                free = np.setdiff1d(np.arange(len(ours)), keys)
                assert not ours[free].any()  # empty key slots score nothing
                checked += 1
    assert len(index) == len(docs) and checked >= 60


def test_bm25_negative_idf_uses_rank_bm25_epsilon_rule():
    # "common" is in every document: its idf is negative and rank_bm25 replaces it by eps * mean idf.
    corpus = [["common", "alpha"], ["common", "beta"], ["common", "alpha", "gamma"], ["common"]]
    index = BM25Index()
    for key, tokens in enumerate(corpus):
        index.add(key, tokens)
    reference = BM25Okapi(corpus)
    for query in (["common"], ["alpha", "common"], ["gamma"], ["delta"]):
        assert np.allclose(index.scores(query)[:4], reference.get_scores(query))


# --- vector index ---------------------------------------------------------------------------
def test_vector_index_reuses_rows_and_never_returns_removed_keys():
    rng = np.random.default_rng(1)
    vectors = unit(rng.standard_normal((6, 16)))
    index = VectorIndex(16)
    index.add(np.arange(6), vectors)
    index.remove(np.array([2, 4]))
    assert len(index) == 4 and 2 not in index and 3 in index
    keys, sims = index.search(vectors[2], 6)
    assert sorted(keys.tolist()) == [0, 1, 3, 5]  # removed rows are never found
    assert np.all(np.abs(sims - vectors[keys] @ vectors[2]) <= index.search_error(vectors[2]))
    index.add(np.array([4]), vectors[2][None, :])  # a freed row takes a new vector
    assert index.search(vectors[2], 1)[0].tolist() == [4]
    assert np.array_equal(index.vectors(np.array([4])), vectors[2][None, :])  # exact copy kept
    with pytest.raises(KeyError):
        index.add(np.array([4]), vectors[:1])
    with pytest.raises(KeyError):
        index.remove(np.array([2]))
    with pytest.raises(ValueError):
        index.add(np.array([9]), np.ones((1, 15), dtype=np.float32))
    assert len(index) == 5


# --- hybrid index == the spec's formula -----------------------------------------------------
def naive_rank(texts: dict[str, str], vectors: dict[str, np.ndarray], query_vector, query_text, alpha, exclude):
    """Spec §6.1 over every document: alpha * BM25/max(BM25) + (1 - alpha) * cosine, best first."""
    ids = list(texts)
    bm25 = BM25Okapi([terms(texts[i]) for i in ids]).get_scores(terms(query_text))
    top = bm25.max()
    bm25n = bm25 / top if top > 0 else np.zeros_like(bm25)
    cosine = np.stack([vectors[i] for i in ids]).astype(np.float64) @ query_vector.astype(np.float64)
    scores = alpha * bm25n + (1 - alpha) * cosine
    ranked = sorted(((s, i) for s, i in zip(scores.tolist(), ids) if i not in exclude), key=lambda si: -si[0])
    return [(i, s) for s, i in ranked]


def assert_same_ranking(ours: list[tuple[str, float]], reference: list[tuple[str, float]], k: int) -> None:
    """Equal to the brute-force ranking; where scores tie (to float rounding) either order is right."""
    expected = reference[:k]
    assert len(ours) == len(expected)
    assert np.allclose([s for _, s in ours], [s for _, s in expected], atol=1e-6)
    truth = dict(reference)
    for doc_id, score in ours:
        assert abs(truth[doc_id] - score) <= 1e-6  # each returned document carries its true score
    assert len({d for d, _ in ours}) == len(ours)
    cut = expected[-1][1] if expected else None
    unambiguous = [d for d, s in expected if cut is None or s > cut + 1e-5]
    assert set(unambiguous) <= {d for d, _ in ours}


@pytest.mark.parametrize("min_pool, prefetch_from", [(4, 10**9), (4, 0), (hybrid._MIN_POOL, hybrid._PREFETCH_FROM)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hybrid_rank_equals_spec_formula_on_random_corpora(monkeypatch, min_pool, prefetch_from, seed):
    # A small first pool forces several rounds of the threshold algorithm on a few hundred documents,
    # with one FAISS scan per round or (as on large indexes) one scan fetching ahead for the next.
    monkeypatch.setattr(hybrid, "_MIN_POOL", min_pool)
    monkeypatch.setattr(hybrid, "_PREFETCH_FROM", prefetch_from)
    rng = np.random.default_rng(seed)
    dim = 384
    # Documents belong to topics: a query near a topic finds dozens of documents with similar
    # cosines, so the hybrid winner is often in neither the BM25 nor the cosine top few.
    topics = unit(rng.standard_normal((8, dim)))

    def vector() -> np.ndarray:
        return unit(0.6 * topics[rng.integers(8)] + 0.8 * unit(rng.standard_normal(dim)))

    index, texts, vectors = HybridIndex(dim), {}, {}
    corpus = iter(zipf_texts(rng, 2000, vocabulary=300, low=3, high=30))
    for i in range(450):
        doc_id = f"d{i}"
        texts[doc_id], vectors[doc_id] = next(corpus), vector()
        index.add(doc_id, texts[doc_id], vectors[doc_id])
    for doc_id in rng.choice(list(texts), size=80, replace=False).tolist():  # removals free keys...
        index.remove(doc_id)
        del texts[doc_id], vectors[doc_id]
    for doc_id in rng.choice(list(texts), size=60, replace=False).tolist():  # ...updates keep them
        texts[doc_id], vectors[doc_id] = next(corpus), vector()
        index.update(doc_id, texts[doc_id], vectors[doc_id])
    for i in range(40):  # new documents reuse the freed keys
        doc_id = f"n{i}"
        texts[doc_id], vectors[doc_id] = next(corpus), vector()
        index.add(doc_id, texts[doc_id], vectors[doc_id])
    assert index.ids() == set(texts) and len(index) == 410

    # Each round of the threshold algorithm rescores its candidates once: count rounds and sizes.
    pools: list[int] = []
    inner = index.vector.inner
    monkeypatch.setattr(index.vector, "inner", lambda keys, q: pools.append(len(keys)) or inner(keys, q))
    rounds: list[int] = []
    ids = list(texts)
    for q in range(8):
        if q % 2:  # near a topic
            query_vector = unit(topics[q % 8] + 0.3 * unit(rng.standard_normal(dim)))
        else:  # near one stored document
            source = ids[int(rng.integers(len(ids)))]
            query_vector = unit(vectors[source] + 0.05 * rng.standard_normal(dim))
        query_text = zipf_texts(rng, 1, vocabulary=300, low=5, high=10)[0]
        exclude = set(rng.choice(ids, size=int(rng.integers(0, 12)), replace=False).tolist())
        exclude.add("not-an-id")  # unknown ids in exclude are ignored
        for alpha in (0.0, 0.3, 0.5, 1.0):
            reference = naive_rank(texts, vectors, query_vector, query_text, alpha, exclude)
            for k in (1, 5, 20):
                pools.clear()
                ours = index.rank(query_vector, query_text, k=k, alpha=alpha, exclude=exclude)
                rounds.append(len(pools) if pools[-1] < len(ids) else -len(pools))
                assert not {d for d, _ in ours} & exclude
                assert_same_ranking(ours, reference, k)
    if min_pool == 4:  # the shortcut really was taken, and really had to widen its pool at times
        assert sum(r == 1 for r in rounds) >= 10 and sum(abs(r) > 1 for r in rounds) >= 2


def test_hybrid_finds_a_winner_that_is_in_neither_top_list(monkeypatch):
    # Ten documents lead on cosine, ten on BM25; the best hybrid score belongs to a document that is
    # in neither list's top four. Stopping early on the first pool would miss it.
    monkeypatch.setattr(hybrid, "_MIN_POOL", 4)
    dim = 32
    axis = np.zeros(dim, dtype=np.float32)
    axis[0] = 1.0
    other = np.zeros(dim, dtype=np.float32)
    other[1] = 1.0
    index = HybridIndex(dim)
    for i in range(10):
        index.add(f"dense{i}", f"filler{i}", unit(0.8 * axis + 0.6 * other + 0.001 * i))  # cos ~0.8, BM25 0
        index.add(f"words{i}", f"apple pear plum extra{i}", unit(-0.5 * axis + 0.87 * other))  # BM25 high, cos -0.5
    for i in range(30):
        index.add(f"noise{i}", f"noise{i}", unit(-axis + 0.01 * i * other))
    index.add("winner", "apple pear", unit(0.7 * axis + 0.71 * other))
    ranked = index.rank(axis, "apple pear plum", k=1, alpha=0.5)
    assert ranked[0][0] == "winner"


def test_hybrid_is_exact_when_cosines_differ_by_less_than_half_precision(monkeypatch):
    # The FAISS scan is float16; vectors whose cosines differ by less than its rounding error must
    # still come back in exact order (the candidates are rescored in float32, the bound widened).
    monkeypatch.setattr(hybrid, "_MIN_POOL", 4)
    rng = np.random.default_rng(3)
    dim = 384
    base = unit(rng.standard_normal(dim))
    matrix = unit(base + 1e-3 * rng.standard_normal((300, dim)))
    index = HybridIndex(dim)
    for i, row in enumerate(matrix):
        index.add(f"d{i}", "same words", row)
    exact = np.einsum("ij,j->i", matrix, base)  # the float32 products the index rescores with
    half = matrix.astype(np.float16).astype(np.float32) @ base
    assert np.argsort(-half)[:5].tolist() != np.argsort(-exact)[:5].tolist()  # float16 alone gets it wrong
    for k in (1, 5, 10):
        ours = index.rank(base, "", k=k, alpha=0.0)
        best = np.argsort(-exact, kind="stable")[:k]
        assert [d for d, _ in ours] == [f"d{i}" for i in best]


def test_hybrid_rank_edge_cases():
    index = HybridIndex(8)
    assert index.rank(np.ones(8), "x", k=5) == []
    v = unit(np.eye(8)[:3])
    for i in range(3):
        index.add(f"d{i}", f"word{i}", v[i])
    assert index.rank(v[0], "word0", k=0) == []
    assert index.rank(v[0], "word0", k=5, exclude={"d0", "d1", "d2"}) == []
    assert [d for d, _ in index.rank(v[1], "nothing matches", k=10)] [0] == "d1"  # no BM25 hit: cosine only
    assert [d for d, _ in index.rank(v[0], ["word2"], k=1, alpha=1.0)] == ["d2"]  # keywords as a list
    with pytest.raises(ValueError):
        index.rank(np.ones(7), "x")
    with pytest.raises(KeyError):
        index.add("d0", "again", v[0])
    with pytest.raises(ValueError):
        index.update("d0", "new", np.ones(7))
    assert [d for d, _ in index.rank(v[0], "word0", k=1)] == ["d0"]  # the failed update changed nothing
