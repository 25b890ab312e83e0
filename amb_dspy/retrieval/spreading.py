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
heavy-tailed (the seeded lines take most), and the root keeps a bridge line's share from vanishing beside them.

The walk stays in the question's neighbourhood: the PageRank is worked out by *pushing* (Andersen, Chung and
Lang 2006, all vertices over the threshold at once): a vertex keeps ``1 - damping`` of the mass that reaches it
and passes the rest to its neighbours, and only a vertex holding more than ``tolerance`` x its degree passes
anything on. The work follows the mass, not the bank; what is never passed on is at most ``tolerance`` x a
line's degree of that line's visit probability (the bound of Andersen et al. for an undirected graph), far
below any share that moves a ranking. The same inputs give the same scores (no randomness).

Lines arrive one by one (:class:`TermLines` numbers their terms once, as they come); the weights do not: a
term's idf and whether it is common depend on every line, so :meth:`SpreadingGraph.from_lines` assembles the
weighted matrix from the kept numbers as array arithmetic, without reading a line's words again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse  # here, not on a bank's first question: half a second (issue 40's first context)

from amb_dspy.retrieval.keyword import Numbering

TOLERANCE = 1e-9  # mass a vertex may keep unpassed, per unit of its degree


class TermLines:
    """Each line's terms as numbers (a term is numbered where it first appears), kept as lines are added."""

    def __init__(self, line_terms: Sequence[Sequence[str]] = ()):
        self.term_index: dict[str, int] = Numbering()  # read with .get: a lookup by [] numbers a new term
        self._numbers: list[int] = []  # the term numbers of the lines added since the last :meth:`arrays`, in order
        self._sizes: list[int] = []  # per line added since, how many of them are its
        self._ids, self._ends = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        for terms in line_terms:
            self.add(terms)

    def __len__(self) -> int:
        return len(self._ends) + len(self._sizes)

    def copy(self) -> TermLines:
        """The same lines, numbered alike, that later lines change apart from this one (the arrays are shared:
        :meth:`arrays` replaces them, never writes into them)."""
        other = TermLines.__new__(TermLines)
        other.term_index = Numbering(self.term_index)
        other._numbers, other._sizes, other._ids, other._ends = list(self._numbers), list(self._sizes), self._ids, self._ends
        return other

    def add(self, terms: Sequence[str]) -> None:
        """One more line, of the words ``terms`` (repeats count once)."""
        self._numbers.extend(map(self.term_index.__getitem__, terms))
        self._sizes.append(len(terms))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The term numbers of every line, one after another (each line's sorted, once each), and where each
        line's end (CSR without its 0)."""
        if self._sizes:
            lines = np.repeat(np.arange(len(self._sizes), dtype=np.int64), self._sizes)
            pairs = np.sort(lines * max(len(self.term_index), 1) + np.array(self._numbers, dtype=np.int64))
            pairs = pairs[np.diff(pairs, prepend=-1) != 0]  # once each (np.unique hashes: 50 times slower)
            line_of, ids = np.divmod(pairs, max(len(self.term_index), 1))
            ends = self._ends[-1] if len(self._ends) else 0
            counts = np.bincount(line_of, minlength=len(self._sizes))
            self._ends = np.concatenate([self._ends, ends + np.cumsum(counts)])
            self._ids = np.concatenate([self._ids, ids])
            self._numbers, self._sizes = [], []
        return self._ids, self._ends


class SpreadingGraph:
    """Lines, memory nodes and shared terms as one graph; see the module docstring."""

    def __init__(self, line_terms: Sequence[Sequence[str]], line_nodes: Sequence[Sequence[int]],
                 node_terms: Sequence[Sequence[str]], node_links: Sequence[tuple[int, int]], *,
                 max_df: float = 0.05, node_weight: float = 1.0):
        """``line_terms[i]``: line i's words; ``line_nodes[i]``: the nodes (indices into ``node_terms``) that
        hold it; ``node_terms[j]``: node j's keyword words; ``node_links``: related node pairs."""
        sizes = np.array([len(held) for held in line_nodes], dtype=np.int64)
        holders = np.array([n for held in line_nodes for n in held], dtype=np.int64)
        self._assemble(TermLines(line_terms), holders, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                       node_terms, node_links, max_df, node_weight)

    @classmethod
    def from_lines(cls, lines: TermLines, holders: np.ndarray, starts: np.ndarray, node_terms: Sequence[Sequence[str]],
                   node_links: Sequence[tuple[int, int]], *, max_df: float = 0.05,
                   node_weight: float = 1.0) -> SpreadingGraph:
        """The graph of the lines kept in ``lines``; line i is held by the nodes ``holders[starts[i]:starts[i + 1]]``
        (as :class:`~amb_dspy.retrieval.line_ranking.LineTable` keeps them)."""
        graph = cls.__new__(cls)
        graph._assemble(lines, holders, starts, node_terms, node_links, max_df, node_weight)
        return graph

    def _assemble(self, lines: TermLines, holders: np.ndarray, starts: np.ndarray, node_terms, node_links,
                  max_df: float, node_weight: float) -> None:
        ids, ends = lines.arrays()
        self.n_lines, self.n_nodes = len(ends), len(node_terms)
        self.term_index, self._ids, self._ends = lines.term_index, ids, ends
        df = np.bincount(ids, minlength=len(lines.term_index)).astype(np.float64)
        common = df > max(2, int(max_df * self.n_lines))
        self.column = np.where(common, -1, np.cumsum(~common) - 1)  # term number -> its vertex among the terms
        self.idf = np.where(common, 0.0, np.log1p(self.n_lines / np.maximum(df, 1.0)))
        self.offset_terms = self.n_lines + self.n_nodes
        line_of = np.repeat(np.arange(self.n_lines), np.diff(np.concatenate([[0], ends])))
        kept = ~common[ids]
        node_of = np.repeat(np.arange(self.n_nodes), [len(set(t)) for t in node_terms]).astype(np.int64)
        keyword = np.array([self.term_index.get(t, -1) for terms in node_terms for t in sorted(set(terms))],
                           dtype=np.int64)
        known = keyword >= 0
        known[known] = ~common[keyword[known]]
        links = np.array(node_links, dtype=np.int64).reshape(-1, 2)
        held_by = np.repeat(np.arange(self.n_lines), np.diff(np.concatenate([starts, [len(holders)]])))
        # each edge once, as (a, b, weight): line -- term, line -- node, node -- node, node -- keyword term
        a = np.concatenate([line_of[kept], held_by, self.n_lines + links[:, 0], self.n_lines + node_of[known]])
        b = np.concatenate([self.offset_terms + self.column[ids[kept]], self.n_lines + holders,
                            self.n_lines + links[:, 1], self.offset_terms + self.column[keyword[known]]])
        weights = np.concatenate([self.idf[ids[kept]], np.full(len(held_by) + len(links), node_weight),
                                  self.idf[keyword[known]]])
        self.size = self.offset_terms + int((~common).sum())
        adjacency = sparse.csc_matrix((np.concatenate([weights, weights]), (np.concatenate([a, b]), np.concatenate([b, a]))),
                                      shape=(self.size, self.size), dtype=np.float64)
        degree = np.asarray(adjacency.sum(axis=0)).ravel()
        self.degree = np.where(degree == 0, 1.0, degree)
        self.walk = (adjacency @ sparse.diags(1.0 / self.degree)).tocsc()  # column-stochastic
        self._edges = np.diff(self.walk.indptr)  # per vertex, its edges: what passing its mass on costs

    def _passed(self, active: np.ndarray, mass: np.ndarray) -> np.ndarray:
        """What the ``active`` vertices pass on of ``mass``: through their own columns of the walk while they are
        few (the work follows them), through the whole walk once their edges are a good share of all."""
        if self._edges[active].sum() < self.walk.nnz // 4:
            return self.walk[:, active] @ mass
        spread = np.zeros(self.size)
        spread[active] = mass
        return self.walk @ spread

    def _seed(self, query_terms: Sequence[str], line_seeds: dict[int, float]) -> np.ndarray:
        seed = np.zeros(self.size)
        for term in query_terms:
            number = self.term_index.get(term, len(self.column))  # the index is shared: later lines add terms
            if number < len(self.column) and self.column[number] >= 0:
                seed[self.offset_terms + self.column[number]] += self.idf[number]
        for line, weight in line_seeds.items():
            numbers = self._ids[(self._ends[line - 1] if line else 0):self._ends[line]]
            numbers = numbers[self.column[numbers] >= 0]
            if len(numbers):
                share = self.idf[numbers] / self.idf[numbers].sum()
                np.add.at(seed, self.offset_terms + self.column[numbers], max(weight, 0.0) * share)
        return seed

    def spread(self, query_terms: Sequence[str], line_seeds: dict[int, float], damping: float = 0.5,
               tolerance: float = TOLERANCE) -> np.ndarray:
        """Each line's personalized PageRank from the query's terms (by idf) and the terms of ``line_seeds``
        (line -> weight; each line's terms share its weight by idf), scaled to a maximum of 1, square-rooted;
        zeros when nothing seeds the walk. Pushed, not iterated over the whole graph (the module docstring)."""
        residual = self._seed(query_terms, line_seeds)
        total = residual.sum()
        if total <= 0:
            return np.zeros(self.n_lines)
        residual /= total
        visits, threshold = np.zeros(self.size), tolerance * self.degree
        while len(active := np.flatnonzero(residual > threshold)):
            mass = residual[active]
            residual[active] = 0.0
            visits[active] += (1 - damping) * mass
            residual += damping * self._passed(active, mass)
        lines = visits[: self.n_lines]
        top = lines.max()
        return np.sqrt(lines / top) if top > 0 else lines
