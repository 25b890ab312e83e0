"""What the bank keeps up to date so that one more document costs the same in a bank of 50,000 nodes as in an empty
one (issue 41's 50 MB .jsonl): the graph's edge count and order of nodes, BM25's mean idf. Each is checked against
what it replaced (a count, a scan of the graph, a sum over the vocabulary), through the changes and rollbacks that
can meet it. Real embedding model."""

from __future__ import annotations

import random

import pytest

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.keyword import BM25Index
from amb_dspy.storage import InsightDoc, NodeContent
from amb_dspy.storage.query_graph import QueryGraph


def counted(graph: QueryGraph) -> int:
    return sum(len(node.links) for node in graph.nodes_dict.values()) // 2


def scanned(graph: QueryGraph, ids: set[str]) -> list[str]:
    return [node_id for node_id in graph.nodes_dict if node_id in ids]


def agrees(graph: QueryGraph, ids: set[str]) -> bool:
    """The kept edge count and order agree with a count and a scan of the whole graph."""
    return graph.edge_count == counted(graph) and graph.in_order(ids) == scanned(graph, ids)


@pytest.fixture
def store(embedder) -> MemoryStore:
    store = MemoryStore(embedder, InsightDoc(task_goal="test"))
    store.add_nodes([NodeContent(summary=f"topic {n}", context=f"about thing {n}", keywords=[f"k{n}"]) for n in range(24)])
    return store


def test_edge_count_and_node_order_follow_every_change_and_rollback(store):
    ids = list(store.graph.nodes_dict)
    few = {ids[20], ids[3], ids[11]}  # a few of many: sorted by the places kept, not found by a scan
    assert agrees(store.graph, few) and store.graph.in_order(few) == [ids[3], ids[11], ids[20]]
    for a, b in [(0, 1), (1, 2), (3, 4), (20, 3), (11, 0)]:
        store.add_edge(ids[a], ids[b])
    store.remove_edge(ids[1], ids[2])
    assert store.graph.edge_count == 4 and agrees(store.graph, few)

    merged, _ = store.merge_nodes([ids[0], ids[1]], NodeContent(summary="merged", context="both", keywords=["m"]))
    few.add(merged.id)
    assert agrees(store.graph, few) and store.graph.in_order(few)[-1] == merged.id

    with pytest.raises(RuntimeError), store.transaction():  # a removal rolled back: its node back in its place
        store.delete_node(ids[3])
        store.add_edge(ids[11], ids[20])
        raise RuntimeError("rolled back")
    assert agrees(store.graph, few) and store.graph.in_order(few)[0] == ids[3]

    node = store.graph.node(ids[5]).model_copy(update={"id": "read-from-a-file", "links": [ids[4]]})
    store.graph.node(ids[4]).links.append(node.id)
    store.graph.nodes_dict[node.id] = node  # as a bank file's reader puts nodes in
    few.add(node.id)
    assert agrees(store.graph, few) and store.graph.in_order(few)[-1] == node.id


def test_a_graph_equals_another_of_the_same_nodes_whatever_it_kept(store):
    other = QueryGraph(nodes_dict=dict(store.graph.nodes_dict))
    assert store.graph.edge_count == 0 and store.graph.in_order({next(iter(other.nodes_dict))})
    assert store.graph == other


def test_bm25_scores_are_the_same_floats_whatever_the_index_went_through():
    """The mean idf that stands in for a negative one is a sum over the vocabulary: it comes out of an index whose
    documents were taken out and put back (their terms' postings now last) the same, float for float, as out of one
    given the same documents once."""
    rng = random.Random(3)
    vocabulary = [f"w{n}" for n in range(120)]
    documents = {key: ["common", *rng.sample(vocabulary, rng.randint(3, 25))] for key in range(50)}
    worn, fresh = BM25Index(), BM25Index()
    for key in range(50):
        worn.add(key, documents[key])
        fresh.add(key, documents[key])
    moved = rng.sample(range(50), 15)
    for key in moved:
        worn.remove(key)
    for key in moved:
        worn.add(key, documents[key])
    for query in (["common"], ["common", "w3", "w100"], ["w7", "w119"]):
        assert worn.scores(query)[:50].tolist() == fresh.scores(query)[:50].tolist()
