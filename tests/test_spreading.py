"""The spreading's PageRank, pushed from the question's seeds (amb_dspy.retrieval.spreading), against the exact
personalized PageRank of the same graph, solved as a linear system."""

from __future__ import annotations

import numpy as np

from amb_dspy.retrieval.keyword import terms
from amb_dspy.retrieval.spreading import SpreadingGraph, TermLines

LINES = ["Corvex Cycles builds the Zephyr in Gothenburg.", "The Zephyr won the Gothenburg race in 1998.",
         "Ada Lindqvist founded Corvex Cycles.", "Ada Lindqvist was born in Uppsala.",
         "Uppsala has a cathedral and a university.", "The cathedral bells ring at noon.",
         "Gravel roads are rough on a racing bike.", "A racing bike weighs seven kilograms.",
         "The university library opens at noon.", "Bells and whistles are sold in Gothenburg."]


def exact(graph: SpreadingGraph, query_terms: list[str], seeds: dict[int, float], damping: float = 0.5) -> np.ndarray:
    """The spreading's definition: p = (1 - damping) seed + damping W p, solved; scaled to 1, square-rooted."""
    seed = graph._seed(query_terms, seeds)
    seed /= seed.sum()
    walk = graph.walk.toarray()
    visits = np.linalg.solve(np.eye(graph.size) - damping * walk, (1 - damping) * seed)[: graph.n_lines]
    return np.sqrt(visits / visits.max())


def graph_of(lines: list[str]) -> SpreadingGraph:
    return SpreadingGraph([terms(line) for line in lines], [[i % 3] for i in range(len(lines))],
                          [["corvex"], ["uppsala"], []], [(0, 1)], max_df=0.3)


def test_the_pushed_spreading_is_the_pagerank_within_its_tolerance():
    graph = graph_of(LINES)
    question, seeds = terms("Where was the founder of the Zephyr's maker born?"), {0: 1.0, 2: 0.5}
    truth = exact(graph, question, seeds)
    assert np.abs(graph.spread(question, seeds) - truth).max() < 1e-3
    assert np.abs(graph.spread(question, seeds, tolerance=1e-14) - truth).max() < 1e-6
    coarse = np.abs(graph.spread(question, seeds, tolerance=1e-2) - truth).max()
    assert coarse > 1e-6  # a tolerance that lets mass stay unpassed is seen: the check above can fail
    assert truth[3] > 0  # Ada Lindqvist's birthplace, reached through "Ada Lindqvist" from the seed line


def test_lines_kept_one_by_one_give_the_graph_of_all_lines():
    kept = TermLines()
    for line in LINES[:4]:
        kept.add(terms(line))
    kept.arrays()  # assembled once, then more lines arrive
    for line in LINES[4:]:
        kept.add(terms(line))
    holders = np.array([i % 3 for i in range(len(LINES))], dtype=np.int64)
    grown = SpreadingGraph.from_lines(kept, holders, np.arange(len(LINES)), [["corvex"], ["uppsala"], []], [(0, 1)],
                                      max_df=0.3)
    whole = graph_of(LINES)
    question = terms("Which cathedral rings bells at noon?")
    assert np.allclose(grown.spread(question, {5: 1.0}), whole.spread(question, {5: 1.0}))
    assert np.allclose(grown.walk.toarray(), whole.walk.toarray())


def test_lines_without_terms_arriving_alone_keep_their_place():
    kept = TermLines([terms(LINES[0])])
    kept.arrays()
    kept.add(terms("I did."))  # stop words only: a line with no terms, alone since the last assembly
    ids, ends = kept.arrays()
    kept.add(terms(LINES[1]))
    kept.add([])
    ids, ends = kept.arrays()
    whole = TermLines([terms(LINES[0]), [], terms(LINES[1]), []])
    assert len(ends) == len(kept) == 4 and ends[1] == ends[0] and ends[3] == ends[2]
    assert np.array_equal(ids, whole.arrays()[0]) and np.array_equal(ends, whole.arrays()[1])
    assert np.array_equal(ids[:ends[0]], np.unique([kept.term_index[t] for t in terms(LINES[0])]))
