"""graph_ops.MemoryStore on real parts (MiniLM, FAISS, BM25): invariants after every operation,
all-or-nothing operations under injected failures, merge semantics, and retrieval on a small graph
whose right answers can be stated."""

from __future__ import annotations

import random

import numpy as np
import pytest

from amb_dspy.memory.graph_ops import ContextUpdate, MemoryStore, NodeContent
from amb_dspy.retrieval.keyword import BM25Index, terms
from amb_dspy.retrieval.vector import VectorIndex
from amb_dspy.storage import (
    Attachment,
    AttachmentType,
    GraphError,
    InsightDoc,
    InteractionEntry,
    InteractionTree,
    QueryGraph,
    TreeError,
)

TOPICS = [
    NodeContent("Kilauea's 2018 eruption sent lava flows into the Pacific.", "Kilauea lava eruption", ["kilauea", "lava", "eruption"]),
    NodeContent("Hawaii Volcanoes National Park, home of Kilauea, draws visitors.", "Kilauea park tourism", ["kilauea", "park", "hawaii"]),
    NodeContent("Hawaii's state income tax was reformed in 1990.", "Hawaii tax reform", ["hawaii", "tax", "1990"]),
    NodeContent("Mozart wrote five violin concertos in 1775.", "Mozart violin concertos", ["mozart", "violin", "concerto"]),
    NodeContent("The Vienna Philharmonic toured Japan with Mozart's works.", "orchestra tour of Mozart", ["orchestra", "vienna", "mozart"]),
    NodeContent("Emperor penguins breed during the Antarctic winter.", "penguin breeding", ["penguin", "antarctica"]),
]


class Embedder:
    """The real model behind a class of our own, so that a test can make its ``embed`` fail."""

    def __init__(self, model):
        self.model = model
        self.dim = model.dim

    def embed(self, texts):
        return self.model.embed(texts)


class InjectedFault(RuntimeError):
    pass


def check_invariants(store: MemoryStore) -> None:
    """ARCHITECTURE.md's invariants, checked independently of MemoryStore.check()."""
    nodes = store.graph.nodes_dict
    for node_id, node in nodes.items():
        assert node.id == node_id
        assert node_id not in node.links  # never a self-loop
        assert len(set(node.links)) == len(node.links)
        for other in node.links:
            assert other in nodes  # never dangling
            assert node_id in nodes[other].links  # always symmetric
    # the vector index, the keyword index and the graph hold exactly the same ids
    assert store.index.ids() == set(nodes)
    assert len(store.index) == len(store.index.keyword) == len(store.index.vector) == len(nodes)
    for node_id, node in nodes.items():
        assert np.array_equal(store.index.vector_of(node_id), node.embedding)
        assert sorted(store.index.tokens_of(node_id)) == sorted(terms(node.embedding_text))
    for node_id, entry_ids in store.tree.node_to_entries.items():
        assert node_id in nodes
        assert all(e in store.tree.entries for e in entry_ids)
    store.check()


def snapshot(store: MemoryStore) -> dict:
    """Everything observable: nodes (links order, embeddings), tree, doc, both indexes, a ranking."""
    query = store.embedder.embed(["volcano lava in Hawaii"])[0]
    return {
        "nodes": [n.model_dump() for n in store.graph.nodes_dict.values()],
        "tree": store.tree.to_dict(),
        "doc": store.insight_doc.model_dump() if store.insight_doc else None,
        "index": {i: (sorted(store.index.tokens_of(i)), store.index.vector_of(i).tobytes()) for i in store.index.ids()},
        "sizes": (len(store.index), len(store.index.keyword), len(store.index.vector)),
        "ranking": store.index.rank(query, "kilauea mozart hawaii", k=50),
    }


def build(embedder) -> tuple[MemoryStore, list[str]]:
    """Six nodes: a-b, a-c, b-c, b-d linked; e, f alone; entries on a, b and b+d."""
    store = MemoryStore(Embedder(embedder), InsightDoc(task_goal="test", pending_tasks=["look up Kilauea"]))
    ids = [n.id for n in store.add_nodes(TOPICS)]
    a, b, c, d, e, f = ids
    for x, y in [(a, b), (a, c), (b, c), (b, d)]:
        store.add_edge(x, y)
    store.record_entry(InteractionEntry(entry_id="e-a", text="found on a"), [a])
    store.record_entry(InteractionEntry(entry_id="e-b", text="found on b", metadata={"tool": "search"}), [b])
    store.record_entry(
        InteractionEntry(entry_id="e-bd", text="b and d", attachments=(Attachment(type=AttachmentType.IMAGE, content="img/1.png"),)),
        [b, d],
    )
    return store, ids


UPDATE = ContextUpdate("updated context about lava", ["lava", "updated"])
OTHER = ContextUpdate("another context about music", ["music", "updated"])

# Each operation as a function of (store, ids): every one of them embeds, indexes or re-links.
OPERATIONS = {
    "add_nodes": lambda s, ids: s.add_nodes([NodeContent("Glaciers retreat.", "glacier retreat", ["glacier"]),
                                             NodeContent("Coral reefs bleach.", "coral bleaching", ["coral"])]),
    "relate": lambda s, ids: s.relate(ids[3], ids[5], {ids[3]: OTHER, ids[5]: UPDATE}),
    "update_contexts": lambda s, ids: s.update_contexts({ids[0]: UPDATE, ids[4]: OTHER}),
    "merge_nodes": lambda s, ids: s.merge_nodes([ids[0], ids[1]], NodeContent("merged", "Kilauea merged", ["kilauea"]),
                                                "a and b disagree", {ids[2]: UPDATE, ids[4]: OTHER}),
    "delete_node": lambda s, ids: s.delete_node(ids[1]),
    "record_entry": lambda s, ids: s.record_entry(InteractionEntry(entry_id="new", text="x"), [ids[0], ids[3]]),
    "link_entry": lambda s, ids: s.link_entry("e-a", [ids[4], ids[5]]),
}

# Where a failure can strike: the model, both indexes, the graph and the tree.
FAULT_POINTS = [
    (Embedder, "embed"),
    (VectorIndex, "add"),
    (VectorIndex, "remove"),
    (BM25Index, "add"),
    (BM25Index, "remove"),
    (QueryGraph, "add_node"),
    (QueryGraph, "add_edge"),
    (QueryGraph, "remove_edge"),
    (InteractionTree, "add_entry"),
    (InteractionTree, "link"),
    (InteractionTree, "relink_merged"),
    (InteractionTree, "unlink_node"),
]


def count_calls(monkeypatch, embedder, operation) -> dict:
    counts = {point: 0 for point in FAULT_POINTS}
    for cls, name in FAULT_POINTS:
        original = getattr(cls, name)

        def counting(self, *args, __original=original, __point=(cls, name), **kwargs):
            counts[__point] += 1
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counting)
    store, ids = build(embedder)
    for point in counts:
        counts[point] = 0
    OPERATIONS[operation](store, ids)
    monkeypatch.undo()
    return counts


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_failure_at_any_step_leaves_graph_tree_and_indexes_exactly_as_before(monkeypatch, embedder, operation):
    counts = count_calls(monkeypatch, embedder, operation)
    assert sum(counts.values()) > 0
    tried = 0
    for (cls, name), total in counts.items():
        for nth in range(1, total + 1):
            store, ids = build(embedder)
            before = snapshot(store)
            calls = 0
            original = getattr(cls, name)

            def failing(self, *args, __original=original, __nth=nth, __where=f"{cls.__name__}.{name}", **kwargs):
                nonlocal calls
                calls += 1
                if calls == __nth:  # fail once; the rollback may call the same method again
                    raise InjectedFault(f"{__where} call {__nth}")
                return __original(self, *args, **kwargs)

            monkeypatch.setattr(cls, name, failing)
            with pytest.raises(InjectedFault):
                OPERATIONS[operation](store, ids)
            monkeypatch.undo()
            assert snapshot(store) == before, f"{operation}: state changed after {cls.__name__}.{name} call {nth} failed"
            check_invariants(store)
            tried += 1
    assert tried == sum(counts.values())


@pytest.mark.parametrize(
    "operation, error",
    [
        (lambda s, ids: s.relate(ids[0], ids[0], {}), GraphError),  # self-loop
        (lambda s, ids: s.add_edge(ids[0], "ghost"), GraphError),  # dangling
        (lambda s, ids: s.relate(ids[0], ids[5], {"ghost": UPDATE}), GraphError),
        (lambda s, ids: s.update_contexts({ids[0]: UPDATE, "ghost": OTHER}), GraphError),
        (lambda s, ids: s.merge_nodes([ids[0]], NodeContent("m", "m")), GraphError),
        (lambda s, ids: s.merge_nodes([ids[0], ids[0]], NodeContent("m", "m")), GraphError),
        (lambda s, ids: s.merge_nodes([ids[0], "ghost"], NodeContent("m", "m")), GraphError),
        (lambda s, ids: s.delete_node("ghost"), GraphError),
        (lambda s, ids: s.record_entry(InteractionEntry(entry_id="e-a", text="again"), [ids[0]]), TreeError),
        (lambda s, ids: s.record_entry(InteractionEntry(text="x"), [ids[0], "ghost"]), GraphError),
        (lambda s, ids: s.link_entry("no-such-entry", [ids[0]]), TreeError),
        (lambda s, ids: s.link_entry("e-a", [ids[0], "ghost"]), GraphError),
    ],
)
def test_invalid_operations_raise_and_change_nothing(embedder, operation, error):
    store, ids = build(embedder)
    before = snapshot(store)
    with pytest.raises(error):
        operation(store, ids)
    assert snapshot(store) == before
    check_invariants(store)


def test_invariants_hold_through_a_random_sequence_of_operations(embedder):
    rng = random.Random(11)
    store, _ = build(embedder)
    words = "lava river glacier violin tax penguin orchestra coral desert harbour comet".split()
    entries_seen: dict[str, dict] = {}
    for step in range(60):
        ids = list(store.graph.nodes_dict)
        op = rng.choice(["add", "add", "edge", "unedge", "relate", "update", "merge", "delete", "entry"])
        if op == "add" or len(ids) < 3:
            picked = rng.sample(words, 2)
            store.add_nodes([NodeContent(f"About {w} and more.", f"{w} facts", [w]) for w in picked])
        elif op == "edge":
            x, y = rng.sample(ids, 2)
            store.add_edge(x, y)
        elif op == "unedge":
            x = rng.choice(ids)
            if store.graph.node(x).links:
                store.remove_edge(x, rng.choice(store.graph.node(x).links))
        elif op == "relate":
            x, y = rng.sample(ids, 2)
            store.relate(x, y, {x: ContextUpdate(f"{rng.choice(words)} context", [rng.choice(words)])})
        elif op == "update":
            store.update_context(rng.choice(ids), f"now about {rng.choice(words)}", rng.sample(words, 2))
        elif op == "merge":
            olds = rng.sample(ids, rng.choice([2, 3]))
            neighbours = {n for o in olds for n in store.graph.node(o).links} - set(olds)
            new, event = store.merge_nodes(olds, NodeContent("merged summary", f"merged {rng.choice(words)}", ["merged"]),
                                           "merge", {n: ContextUpdate("re-described", ["re"]) for n in neighbours})
            assert set(new.links) == neighbours
            assert not set(olds) & set(store.graph.nodes_dict) and not set(olds) & store.index.ids()
        elif op == "delete":
            store.delete_node(rng.choice(ids))
        else:
            linked = rng.sample(ids, rng.choice([1, 2]))
            store.record_entry(InteractionEntry(text=f"step {step}", metadata={"step": step}), linked)
        check_invariants(store)
        # entries are never modified or deleted
        for entry_id, entry in store.tree.entries.items():
            entries_seen.setdefault(entry_id, entry.model_dump())
        assert all(store.tree.entries[e].model_dump() == dumped for e, dumped in entries_seen.items())
    assert len(store.graph) >= 3 and store.tree.merge_events


# --- merge semantics ------------------------------------------------------------------------
def test_merge_unions_edges_moves_entries_and_ignores_updates_for_other_nodes(embedder):
    store, (a, b, c, d, e, f) = build(embedder)
    e_before = store.graph.node(e).model_dump()
    c_vector = store.graph.node(c).embedding.copy()
    entries_before = {k: v.model_dump() for k, v in store.tree.entries.items()}

    new, event = store.merge_nodes([a, b], NodeContent("Kilauea erupted in 2018.", "Kilauea", ["kilauea"]),
                                   "a and b disagree on the year", {c: UPDATE, e: OTHER, a: OTHER})

    # edges: union of a's {b, c} and b's {a, c, d}, deduplicated, none to a merged node
    assert sorted(new.links) == sorted([c, d])
    assert a not in store.graph.node(c).links and b not in store.graph.node(c).links
    assert store.graph.node(c).links.count(new.id) == 1 and new.id in store.graph.node(d).links
    # the old nodes left the graph and both indexes
    assert a not in store.graph and b not in store.graph
    assert {a, b}.isdisjoint(store.index.ids()) and new.id in store.index
    # an inherited neighbour is re-described and re-embedded; others' updates are ignored
    assert store.graph.node(c).context == UPDATE.context and store.graph.node(c).keywords == UPDATE.keywords
    assert not np.array_equal(store.graph.node(c).embedding, c_vector)
    assert store.graph.node(e).model_dump() == e_before
    # entries stay unchanged and are reachable from the new node; the merge is recorded
    assert {k: v.model_dump() for k, v in store.tree.entries.items()} == entries_before
    assert {x.entry_id for x in store.tree.entries_for(new.id)} == {"e-a", "e-b", "e-bd"}
    assert a not in store.tree.node_to_entries and b not in store.tree.node_to_entries
    assert "e-bd" in store.tree.node_to_entries[d]
    assert store.tree.merge_events[-1] == event
    assert event.merged_node_ids == (a, b) and event.new_node_id == new.id
    assert event.description == "a and b disagree on the year"
    check_invariants(store)

    # a second merge: every entry of every node merged so far is reachable from the newest node
    newer, _ = store.merge_nodes([new.id, d], NodeContent("s", "again", ["kilauea"]), "again")
    assert {x.entry_id for x in store.tree.entries_for(newer.id)} == {"e-a", "e-b", "e-bd"}
    assert sorted(newer.links) == [c]
    assert len(store.tree.merge_events) == 2
    check_invariants(store)


def test_delete_keeps_the_nodes_entries_in_the_tree(embedder):
    store, (a, b, c, d, *_rest) = build(embedder)
    store.delete_node(b)
    assert b not in store.graph and b not in store.index and b not in store.tree.node_to_entries
    assert {"e-a", "e-b", "e-bd"} <= set(store.tree.entries)
    assert [x.entry_id for x in store.tree.entries_for(d)] == ["e-bd"]
    assert b not in store.graph.node(a).links and b not in store.graph.node(d).links
    check_invariants(store)


def test_relate_links_and_reembeds_both_nodes(embedder):
    store, (a, b, c, d, e, f) = build(embedder)
    old = store.graph.node(f).embedding.copy()
    store.relate(d, f, {d: OTHER, f: UPDATE})
    assert f in store.graph.node(d).links and d in store.graph.node(f).links
    node = store.graph.node(f)
    assert node.context == UPDATE.context and node.keywords == UPDATE.keywords
    assert np.array_equal(node.embedding, embedder.embed([node.embedding_text])[0])
    assert not np.array_equal(node.embedding, old)
    store.relate(d, f, {})  # relating twice adds no second edge
    assert store.graph.node(d).links.count(f) == 1
    check_invariants(store)


# --- retrieval on a graph whose answers are known ---------------------------------------------
def test_retrieval_returns_top_k_plus_one_hop_newest_first_without_excluded_nodes(embedder):
    store = MemoryStore(embedder)
    volcano, park, tax, mozart, orchestra, penguin = (n.id for n in store.add_nodes(TOPICS))
    store.add_edge(volcano, park)  # volcano - park - tax is a chain: tax is two hops from volcano
    store.add_edge(park, tax)
    store.add_edge(mozart, orchestra)

    def ids(nodes):
        return [n.id for n in nodes]

    query = embedder.embed(["Kilauea lava eruption"])[0]
    found = store.retrieve(query, ["kilauea", "lava", "eruption"], k=1)
    assert ids(found) == [park, volcano]  # top-1 and its neighbour, newest first; tax is two hops away
    assert [n.timestamp for n in found] == sorted((n.timestamp for n in found), reverse=True)

    assert ids(store.retrieve(query, "kilauea lava eruption", k=1, exclude={park})) == [volcano]
    assert ids(store.retrieve_for_text("Mozart violin concerto orchestra", k=2)) == [orchestra, mozart]
    # a node's own retrieval never returns it: Kilauea's closest other node is the park
    assert ids(store.retrieve_for_node(volcano, k=1)) == [tax, park]

    # updates are visible at once: the penguin node now speaks of Kilauea
    store.update_context(penguin, "penguins near Kilauea lava", ["kilauea", "lava", "eruption", "penguin"])
    assert penguin in ids(store.retrieve(query, "kilauea lava eruption", k=2, alpha=1.0))

    new, _ = store.merge_nodes([volcano, park], NodeContent("Kilauea and its park.", "Kilauea lava eruption park",
                                                          ["kilauea", "lava", "eruption"]))
    found = ids(store.retrieve(query, "kilauea lava eruption", k=1, exclude={penguin}))
    assert found == [new.id, tax]  # the merged node inherited the park's edge to tax
    store.delete_node(new.id)
    assert new.id not in ids(store.retrieve(query, "kilauea lava eruption", k=10))
    check_invariants(store)


def test_empty_store_retrieves_nothing(embedder):
    store = MemoryStore(embedder)
    assert store.retrieve_for_text("anything", k=5) == []
    assert store.add_nodes([]) == []
    check_invariants(store)


def test_a_transaction_groups_operations_and_rolls_all_of_them_back(embedder):
    store, (a, b, c, d, e, f) = build(embedder)
    before = snapshot(store)
    with pytest.raises(InjectedFault):
        with store.transaction():
            added = store.add_nodes([NodeContent("Comets have tails.", "comet tails", ["comet"])])
            store.relate(added[0].id, e, {e: UPDATE})
            store.delete_node(d)
            store.merge_nodes([a, b], NodeContent("m", "merged", ["m"]), "merge", {c: OTHER})
            store.record_entry(InteractionEntry(text="inside"), [added[0].id])
            store.delete_node(f)
            raise InjectedFault("the caller gives up after six operations")
    assert snapshot(store) == before
    check_invariants(store)

    with store.transaction():  # and without a failure every operation stays
        added = store.add_nodes([NodeContent("Comets have tails.", "comet tails", ["comet"])])
        store.relate(added[0].id, e, {})
    assert e in store.graph.node(added[0].id).links
    check_invariants(store)
