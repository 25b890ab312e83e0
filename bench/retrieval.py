"""Hybrid retrieval speed: our incremental BM25 + FAISS index against the spec's pseudo-code (§6.1).

    python bench/retrieval.py --n 10000
    python bench/retrieval.py --n 100000 --baseline-queries 30

What is measured, on N synthetic nodes (random normalised 384-d vectors, 30-token texts drawn from a
Zipf-Mandelbrot vocabulary):

* insert: the amortised cost of ``MemoryStore.add_node`` (one node per call: graph node, BM25
  postings, FAISS vector). Embedding is excluded: the store gets an embedder stub that returns the
  precomputed random vectors; this bench measures indexing, not the model.
* query: ``MemoryStore.retrieve`` (hybrid top-k, one hop of neighbours, newest first) for a few
  hundred queries of 5-10 keywords plus a vector (the query embedding is excluded). Half the queries
  are drawn from a stored node (some of its words, its vector plus noise), half are random words
  and a random vector.
* baseline: the same queries through the spec's pseudo-code (rank_bm25 ``BM25Okapi.get_scores``,
  hoisted out of the loop, plus a Python cosine loop over all nodes, top-k, one hop, newest first).
  Both must return the same top-k and the same nodes; the bench fails loudly if they do not.
* update: ``MemoryStore.update_context`` on random nodes (a re-embedding stub, then a remove + add
  in both indexes), and the query latency right after updates (touched postings are rebuilt lazily).

The last line is JSON with n, p50_ms, p95_ms, insert_ms, baseline_p50_ms, speedup, rss_mb
(resident memory of the process after building our store, the bench's synthetic data included, before
the baseline is built) plus update_p50_ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from amb_dspy.memory.graph_ops import MemoryStore, NodeContent  # noqa: E402
from amb_dspy.retrieval.keyword import terms  # noqa: E402
from amb_dspy.storage.query_graph import node_text  # noqa: E402

DIM = 384


class PrecomputedEmbedder:
    """Bench-only stand-in for the model: known texts get their precomputed vector, new texts a
    deterministic random one (so updates can re-embed)."""

    dim = DIM

    def __init__(self, seed: int):
        self.known: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(seed)

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, text in enumerate(texts):
            vector = self.known.get(text)
            if vector is None:
                vector = self.known[text] = unit(self._rng.standard_normal(DIM))
            out[i] = vector
        return out


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def make_vocabulary(size: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters, size=int(rng.integers(4, 10)))))
    ranks = np.arange(1, size + 1)
    weights = 1.0 / (ranks + 20.0)  # Zipf-Mandelbrot: a heavy head, a long tail
    return sorted(words), weights / weights.sum()


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1e3, q))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def naive_retrieve(bm25, nodes: list, query_vector: np.ndarray, query_keywords: list[str], k: int, alpha: float,
                   by_id: dict) -> tuple[list[str], list[str]]:
    """Spec §6.1 as written, with get_scores hoisted out of the per-node loop."""
    scores = bm25.get_scores(query_keywords)
    top = max(scores)
    scored = []
    for i, node in enumerate(nodes):
        bm25_normalized = scores[i] / top if top > 0 else 0.0
        semantic = float(np.dot(query_vector, node.embedding))
        scored.append((node.id, alpha * bm25_normalized + (1 - alpha) * semantic))
    scored.sort(key=lambda x: x[1], reverse=True)
    top_k = [node_id for node_id, _ in scored[:k]]
    result = set(top_k)
    for node_id in top_k:
        result.update(by_id[node_id].links)
    ordered = sorted((by_id[i] for i in result), key=lambda n: n.timestamp, reverse=True)
    return top_k, [n.id for n in ordered]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="number of nodes")
    parser.add_argument("--queries", type=int, default=400, help="timed queries on our index")
    parser.add_argument("--baseline-queries", type=int, default=None,
                        help="how many of those queries the naive baseline runs (default: all)")
    parser.add_argument("--updates", type=int, default=200, help="timed update_context calls")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--doc-tokens", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    n = args.n

    # --- data ------------------------------------------------------------------------------
    vocabulary, weights = make_vocabulary(args.vocab, rng)
    word_ids = rng.choice(len(vocabulary), size=(n, args.doc_tokens), p=weights)
    texts = [" ".join(vocabulary[w] for w in row) for row in word_ids]
    vectors = unit(rng.standard_normal((n, DIM)))
    embedder = PrecomputedEmbedder(args.seed + 1)
    for text, vector in zip(texts, vectors):
        embedder.known[node_text(text, "", [])] = vector

    data_mb = rss_mb()  # the synthetic data alone, before the store exists

    # --- insert ----------------------------------------------------------------------------
    store = MemoryStore(embedder)
    t0 = time.perf_counter()
    nodes = [store.add_node(NodeContent(summary=text, context="")) for text in texts]
    insert_s = time.perf_counter() - t0
    ids = [node.id for node in nodes]
    for a, b in rng.integers(0, n, size=(n, 2)):  # about two neighbours per node
        if a != b:
            store.add_edge(ids[a], ids[b])
    memory_mb = rss_mb()

    # --- queries ---------------------------------------------------------------------------
    queries: list[tuple[np.ndarray, list[str], str]] = []
    for q in range(args.queries):
        size = int(rng.integers(5, 11))
        if q % 2 == 0:
            source = int(rng.integers(n))
            words = list(dict.fromkeys(texts[source].split()))
            keywords = list(rng.choice(words, size=min(size, len(words)), replace=False))
            vector = unit(vectors[source] + rng.standard_normal(DIM).astype(np.float32) * 0.06)
            queries.append((vector, keywords, "from a node"))
        else:
            keywords = [vocabulary[w] for w in rng.choice(len(vocabulary), size=size, p=weights)]
            queries.append((unit(rng.standard_normal(DIM)), keywords, "random"))

    store.retrieve(queries[0][0], queries[0][1], k=args.k, alpha=args.alpha)  # warm-up (postings arrays)
    ours: list[float] = []
    our_results = []
    for vector, keywords, _ in queries:
        t0 = time.perf_counter()
        found = store.retrieve(vector, keywords, k=args.k, alpha=args.alpha)
        ours.append(time.perf_counter() - t0)
        our_results.append([node.id for node in found])

    # --- baseline --------------------------------------------------------------------------
    from rank_bm25 import BM25Okapi

    t0 = time.perf_counter()
    node_list = list(store.graph.nodes_dict.values())
    bm25 = BM25Okapi([terms(node.embedding_text) for node in node_list])  # what the index matches
    baseline_build_s = time.perf_counter() - t0
    n_baseline = min(args.baseline_queries or len(queries), len(queries))
    baseline: list[float] = []
    picked = np.linspace(0, len(queries) - 1, n_baseline).round().astype(int)
    for qi in picked:
        vector, keywords, _ = queries[qi]
        query_tokens = terms(" ".join(keywords))
        t0 = time.perf_counter()
        top_k, expanded = naive_retrieve(bm25, node_list, vector, query_tokens, args.k, args.alpha,
                                         store.graph.nodes_dict)
        baseline.append(time.perf_counter() - t0)
        our_top = [doc_id for doc_id, _ in store.index.rank(vector, keywords, k=args.k, alpha=args.alpha)]
        if our_top != top_k or our_results[qi] != expanded:
            raise SystemExit(f"MISMATCH on query {qi}: ours {our_top} vs baseline {top_k}")
    del bm25

    # --- updates ---------------------------------------------------------------------------
    updates: list[float] = []
    after_update: list[float] = []
    for u in range(args.updates):
        node_id = ids[int(rng.integers(n))]
        words = [vocabulary[w] for w in rng.choice(len(vocabulary), size=args.doc_tokens, p=weights)]
        t0 = time.perf_counter()
        store.update_context(node_id, f"update {u}", words[:5])
        updates.append(time.perf_counter() - t0)
        vector, keywords, _ = queries[u % len(queries)]
        t0 = time.perf_counter()
        store.retrieve(vector, keywords, k=args.k, alpha=args.alpha)
        after_update.append(time.perf_counter() - t0)
    store.check()

    # --- report ----------------------------------------------------------------------------
    p50, p95 = percentile_ms(ours, 50), percentile_ms(ours, 95)
    base_p50 = percentile_ms(baseline, 50)
    insert_ms = insert_s * 1e3 / n
    kinds = {kind: [t for t, q in zip(ours, queries) if q[2] == kind] for kind in ("from a node", "random")}
    rows = [
        ("insert (MemoryStore.add_node, amortised)", f"{insert_ms:.3f}", "", f"{n} nodes"),
        ("query, ours (MemoryStore.retrieve)", f"{p50:.3f}", f"{p95:.3f}", f"{len(ours)} queries, k={args.k}, alpha={args.alpha}"),
        *((f"  queries {kind}", f"{percentile_ms(t, 50):.3f}", f"{percentile_ms(t, 95):.3f}", f"{len(t)} queries")
          for kind, t in kinds.items()),
        ("query, spec baseline (rank_bm25 + loop)", f"{base_p50:.3f}", f"{percentile_ms(baseline, 95):.3f}",
         f"{n_baseline} queries, same top-k and nodes: yes; BM25Okapi build {baseline_build_s:.1f} s"),
        ("update_context (remove + add)", f"{percentile_ms(updates, 50):.3f}", f"{percentile_ms(updates, 95):.3f}",
         f"{len(updates)} updates"),
        ("query right after an update", f"{percentile_ms(after_update, 50):.3f}", f"{percentile_ms(after_update, 95):.3f}",
         f"{len(after_update)} queries"),
    ]
    print(f"hybrid retrieval bench: n={n}, vocabulary {args.vocab}, {args.doc_tokens} tokens per node, "
          f"{store.graph.edge_count} edges, RSS after build {memory_mb:.0f} MB "
          f"(of which the bench's own data {data_mb:.0f} MB: the store adds {memory_mb - data_mb:.0f} MB)")
    print(f"{'operation':<44}{'p50 ms':>10}{'p95 ms':>10}  notes")
    for name, a, b, note in rows:
        print(f"{name:<44}{a:>10}{b:>10}  {note}")
    print(json.dumps({
        "n": n,
        "p50_ms": round(p50, 4),
        "p95_ms": round(p95, 4),
        "insert_ms": round(insert_ms, 4),
        "baseline_p50_ms": round(base_p50, 3),
        "speedup": round(base_p50 / p50, 1),
        "rss_mb": round(memory_mb, 1),
        "update_p50_ms": round(percentile_ms(updates, 50), 4),
    }))


if __name__ == "__main__":
    main()
