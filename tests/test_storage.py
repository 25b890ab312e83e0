"""The three storage layers as pure data: the Insight Doc's one-pending-task rule, the append-only
Interaction Tree, and the Query Graph's edge invariants."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from amb_dspy.storage import (
    Attachment,
    AttachmentType,
    CompletedTask,
    GraphError,
    InsightDoc,
    InteractionEntry,
    InteractionTree,
    MergeEvent,
    PendingTask,
    QueryGraph,
    QueryGraphNode,
    TaskKind,
    TaskStatus,
    TreeError,
)
from amb_dspy.storage.clock import now


# --- Insight Doc ----------------------------------------------------------------------------
def test_insight_doc_holds_at_most_one_pending_task_on_creation_validation_and_assignment():
    doc = InsightDoc(task_goal="Who wrote Faust?")
    assert doc.pending_tasks == [] and doc.current_task is None
    doc.pending = [PendingTask(description="search Faust author")]
    assert doc.current_task == "search Faust author" and doc.pending_tasks == ["search Faust author"]
    with pytest.raises(ValidationError):
        doc.pending = [PendingTask(description="one"), PendingTask(description="two")]
    assert doc.pending_tasks == ["search Faust author"]  # a rejected assignment changes nothing
    with pytest.raises(ValidationError):
        InsightDoc(task_goal="x", pending_tasks=["one", "two"])
    with pytest.raises(ValidationError):
        InsightDoc.model_validate({"task_goal": "x", "pending_tasks": ["a", "b", "c"]})
    doc.pending = []
    assert doc.current_task is None


def test_completed_tasks_are_frozen_and_typed():
    task = CompletedTask(type=TaskKind.CROSS_VALIDATE, description="check dates", status="success", context="dates agree")
    assert task.status is TaskStatus.SUCCESS
    with pytest.raises(ValidationError):
        task.status = TaskStatus.FAILURE
    with pytest.raises(ValidationError):
        CompletedTask(description="x", status="maybe")
    doc = InsightDoc(task_goal="g", completed_tasks=[task, CompletedTask(description="y", status="failure")])
    assert not doc.all_succeeded
    assert InsightDoc.model_validate(doc.model_dump(mode="json")) == doc


# --- Interaction Tree -----------------------------------------------------------------------
def entry(text: str, **kwargs) -> InteractionEntry:
    return InteractionEntry(text=text, **kwargs)


def test_interaction_entries_and_attachments_are_frozen():
    e = entry("raw tool output", attachments=(Attachment(type=AttachmentType.IMAGE, content="img/a.png"),))
    with pytest.raises(ValidationError):
        e.text = "rewritten"
    with pytest.raises(ValidationError):
        e.attachments[0].content = "elsewhere.png"
    with pytest.raises(AttributeError):
        e.attachments.append(Attachment(type=AttachmentType.CODE, content="x.py"))  # a tuple
    event = MergeEvent(merged_node_ids=("a", "b"), new_node_id="c")
    with pytest.raises(ValidationError):
        event.new_node_id = "d"


def test_tree_has_no_way_to_edit_or_delete_an_entry():
    tree = InteractionTree()
    e = entry("first")
    tree.add_entry(e, ["n1"])
    with pytest.raises(TypeError):
        tree.entries[e.entry_id] = entry("replacement")  # read-only view
    with pytest.raises(TypeError):
        del tree.entries[e.entry_id]
    with pytest.raises(AttributeError):
        tree.node_to_entries["n1"].append("forged")  # tuples
    with pytest.raises(TreeError):
        tree.add_entry(InteractionEntry(entry_id=e.entry_id, text="same id, new text"))
    assert tree.entries[e.entry_id].text == "first" and len(tree) == 1
    # nothing public removes or edits an entry (atomic() only takes back what its own failed block appended)
    public = {name for name in dir(InteractionTree) if not name.startswith("_")} - set(dir(InteractionTree.__mro__[1]))
    assert public == {"entries", "node_to_entries", "merge_events", "entries_for", "add_entry", "link",
                      "relink_merged", "unlink_node", "to_dict", "from_dict", "atomic", "with_hash", "document_named",
                      "entry_ids_of"}
    assert tree.unlink_node("n1") == [e.entry_id]  # forgetting a node keeps its entries
    assert e.entry_id in tree.entries


def test_relink_after_merge_keeps_every_old_entry_reachable_from_the_new_node():
    tree = InteractionTree()
    e1, e2, e3, e4 = entry("one"), entry("two"), entry("three"), entry("four")
    tree.add_entry(e1, ["a"])
    tree.add_entry(e2, ["b"])
    tree.add_entry(e3, ["a", "b"])
    tree.add_entry(e4, ["c"])
    tree.relink_merged(MergeEvent(merged_node_ids=("a", "b"), new_node_id="ab", description="merge"))
    assert [x.entry_id for x in tree.entries_for("ab")] == [e1.entry_id, e2.entry_id, e3.entry_id]  # oldest first, once each
    assert "a" not in tree.node_to_entries and "b" not in tree.node_to_entries
    tree.relink_merged(MergeEvent(merged_node_ids=("ab", "c"), new_node_id="abc"))
    assert {x.entry_id for x in tree.entries_for("abc")} == {e1.entry_id, e2.entry_id, e3.entry_id, e4.entry_id}
    assert [m.new_node_id for m in tree.merge_events] == ["ab", "abc"]
    assert len(tree) == 4


def test_tree_round_trips_through_a_dict():
    tree = InteractionTree()
    tree.add_entry(entry("x", metadata={"source": "search", "calls": [1, 2]}), ["a"])
    tree.add_entry(entry("y", attachments=(Attachment(type=AttachmentType.DOCUMENT, content="doc.pdf"),)), ["a", "b"])
    tree.relink_merged(MergeEvent(merged_node_ids=("a", "b"), new_node_id="c"))
    copy = InteractionTree.from_dict(tree.to_dict())
    assert copy == tree and copy.to_dict() == tree.to_dict()
    with pytest.raises(TreeError):
        tree.link("c", "no-such-entry")


def test_clock_is_strictly_increasing():
    stamps = [now() for _ in range(10_000)]
    assert all(b > a for a, b in zip(stamps, stamps[1:]))


# --- Query Graph ----------------------------------------------------------------------------
def node(node_id: str, **kwargs) -> QueryGraphNode:
    return QueryGraphNode(id=node_id, summary=f"summary {node_id}", context=f"context {node_id}",
                          embedding=np.full(4, 0.5, dtype=np.float32), **kwargs)


def graph_of(*ids: str) -> QueryGraph:
    graph = QueryGraph()
    for node_id in ids:
        graph.add_node(node(node_id))
    return graph


def test_edges_are_symmetric_never_self_loops_never_dangling():
    graph = graph_of("a", "b", "c")
    assert graph.add_edge("a", "b") is True
    assert graph.add_edge("b", "a") is False  # already linked: no duplicate
    assert graph.node("a").links == ["b"] and graph.node("b").links == ["a"]
    with pytest.raises(GraphError):
        graph.add_edge("a", "a")
    with pytest.raises(GraphError):
        graph.add_edge("a", "ghost")
    assert graph.node("a").links == ["b"]  # failed edges left nothing behind
    graph.add_edge("a", "c")
    graph.delete_node("a")
    assert graph.node("b").links == [] and graph.node("c").links == []
    assert graph.edge_count == 0
    graph.check()


def test_a_node_joins_without_links_and_only_once():
    graph = graph_of("a")
    with pytest.raises(GraphError):
        graph.add_node(node("a"))
    with pytest.raises(GraphError):
        graph.add_node(node("b", links=["a"]))
    assert list(graph.nodes_dict) == ["a"]


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda g: g.node("a").links.append("a"), "itself"),
        (lambda g: g.node("a").links.append("ghost"), "missing"),
        (lambda g: g.node("a").links.append("c"), "not symmetric"),
        (lambda g: g.node("a").links.append("b"), "twice"),
        (lambda g: g.nodes_dict.__setitem__("x", node("y")), "says its id"),
    ],
)
def test_check_finds_every_broken_invariant(break_it, message):
    graph = graph_of("a", "b", "c")
    graph.add_edge("a", "b")
    graph.check()
    break_it(graph)
    with pytest.raises(GraphError, match=message):
        graph.check()


def test_nodes_compare_by_content_including_the_exact_embedding():
    a, b = node("a"), node("a", timestamp=0.0)
    b.timestamp = a.timestamp
    assert a == b
    b.embedding = b.embedding.copy()
    b.embedding[0] = np.nextafter(np.float32(0.5), np.float32(1.0))  # one ulp
    assert a != b
    with pytest.raises(ValidationError):
        QueryGraphNode.model_validate({**node("z").model_dump(), "embedding": [[1.0, 2.0]]})
    with pytest.raises(ValidationError):
        QueryGraphNode.model_validate({**node("z").model_dump(), "embedding": [float("nan")] * 4})


def test_entry_metadata_is_frozen_deeply_and_must_be_json():
    from types import MappingProxyType

    from amb_dspy.storage import InteractionEntry

    entry = InteractionEntry(text="t", metadata={"source": "executor", "tool_calls": [{"name": "search", "args": {"q": "x"}}]})
    with pytest.raises(TypeError):
        entry.metadata["source"] = "edited"
    with pytest.raises(TypeError):
        entry.metadata["tool_calls"][0]["name"] = "edited"
    assert isinstance(entry.metadata, MappingProxyType)
    assert entry.model_dump(mode="json")["metadata"] == {"source": "executor", "tool_calls": [{"name": "search", "args": {"q": "x"}}]}
    with pytest.raises(ValueError, match="JSON data"):
        InteractionEntry(text="t", metadata={"when": object()})
