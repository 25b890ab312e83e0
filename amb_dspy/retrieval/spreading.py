"""The graph as a ranking signal: a query's matches spread over the terms that lines share (HippoRAG-style).

One undirected graph is derived from what the memory already holds -- no stored state:

* a vertex per source line, per memory node and per *term*: a word of the lines that is neither a stop word
  nor common (in at most ``max_df`` of the lines), so names, places and rare nouns -- the entities a
  multi-hop question bridges through -- tie the lines that mention them;
* line -- term edges weighted by the term's idf (a rare shared name ties two lines more than a common word);
* line -- node edges (a line belongs to the topic it was classified into), node -- node edges for the
  analysis agent's ``related`` links, and node -- term edges for each node's keywords.

A query seeds a personalized PageRank (Haveliwala 2002, as HippoRAG uses it over its knowledge graph) on
term vertices only, as HippoRAG seeds its phrase nodes: the query's own terms, by idf, and the terms of the
lines that match it best, by line score x idf. A line's share is then what the walk brings it, never a
restart at the line itself, so a line that shares a bridge name with a matching line, but none of the
query's words, gets a share like the matching line's own. :meth:`SpreadingGraph.spread` returns each
line's visit probability, scaled to a maximum of 1, as its square root: visit probabilities are
heavy-tailed (the seeded lines take most), and the root keeps a bridge line's share from vanishing beside them. Power iteration over a ``scipy.sparse`` matrix; the
same inputs give the same scores (no randomness, fixed iteration count).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

ITERATIONS = 30


class SpreadingGraph:
    """Lines, memory nodes and shared terms as one graph; see the module docstring."""

    def __init__(self, line_terms: Sequence[Sequence[str]], line_nodes: Sequence[Sequence[int]],
                 node_terms: Sequence[Sequence[str]], node_links: Sequence[tuple[int, int]], *,
                 max_df: float = 0.05, node_weight: float = 1.0):
        """``line_terms[i]``: line i's words; ``line_nodes[i]``: the nodes (indices into ``node_terms``) that
        hold it; ``node_terms[j]``: node j's keyword words; ``node_links``: related node pairs."""
        from scipy import sparse

        self.n_lines, self.n_nodes = len(line_terms), len(node_terms)
        self.line_terms = [sorted(set(terms)) for terms in line_terms]
        df = Counter(term for terms in line_terms for term in set(terms))
        limit = max(2, int(max_df * self.n_lines))
        vocabulary = sorted(t for t, count in df.items() if count <= limit)  # sorted: the same matrix every run
        self.term_index = {t: i for i, t in enumerate(vocabulary)}
        self.idf = {t: math.log(1 + self.n_lines / df[t]) for t in vocabulary}
        offset_nodes, offset_terms = self.n_lines, self.n_lines + self.n_nodes
        rows, cols, weights = [], [], []

        def edge(a: int, b: int, weight: float) -> None:
            rows.extend((a, b))
            cols.extend((b, a))
            weights.extend((weight, weight))

        for line, terms in enumerate(line_terms):
            for term in sorted(set(terms)):
                if term in self.term_index:
                    edge(line, offset_terms + self.term_index[term], self.idf[term])
            for node in line_nodes[line]:
                edge(line, offset_nodes + node, node_weight)
        for a, b in node_links:
            edge(offset_nodes + a, offset_nodes + b, node_weight)
        for node, terms in enumerate(node_terms):
            for term in sorted(set(terms)):
                if term in self.term_index:
                    edge(offset_nodes + node, offset_terms + self.term_index[term], self.idf[term])
        size = offset_terms + len(vocabulary)
        adjacency = sparse.csr_matrix((weights, (rows, cols)), shape=(size, size), dtype=np.float64)
        degree = np.asarray(adjacency.sum(axis=0)).ravel()
        degree[degree == 0] = 1.0
        self.walk = (adjacency @ sparse.diags(1.0 / degree)).tocsr()  # column-stochastic
        self.size, self.offset_terms = size, offset_terms

    def spread(self, query_terms: Sequence[str], line_seeds: dict[int, float], damping: float = 0.5) -> np.ndarray:
        """Each line's personalized PageRank from the query's terms (by idf) and the terms of ``line_seeds``
        (line -> weight; each line's terms share its weight by idf), scaled to a maximum of 1, square-rooted;
        zeros when nothing seeds the walk."""
        seed = np.zeros(self.size)
        for term in query_terms:
            if term in self.term_index:
                seed[self.offset_terms + self.term_index[term]] += self.idf[term]
        for line, weight in line_seeds.items():
            terms = [t for t in self.line_terms[line] if t in self.term_index]
            total = sum(self.idf[t] for t in terms)
            for term in terms:
                seed[self.offset_terms + self.term_index[term]] += max(weight, 0.0) * self.idf[term] / total
        total = seed.sum()
        if total <= 0:
            return np.zeros(self.n_lines)
        seed /= total
        scores = seed.copy()
        for _ in range(ITERATIONS):
            scores = (1 - damping) * seed + damping * (self.walk @ scores)
        lines = scores[: self.n_lines]
        top = lines.max()
        return np.sqrt(lines / top) if top > 0 else lines
