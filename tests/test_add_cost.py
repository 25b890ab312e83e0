"""Adding a document to a big bank costs what the document costs (issue 34: one session added to a 1M-token bank in
2 s at most): the model embeds the new text only, never the old nodes analysis compares it with. Real embedding
model, real store and bank database, heuristic policy (no LM)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_bank_grows import heuristic_bank, session_text

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder
from amb_dspy.storage import ContextUpdate, InteractionEntry, NodeContent


class SpiedEmbedder(OnnxEmbedder):
    """The real model, in a new process's state (nothing embedded yet), noting every text it runs the model on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.encoded: list[str] = []

    def _encode(self, texts):
        self.encoded.extend(texts)
        return super()._encode(texts)


@pytest.fixture(scope="module")
def saved_bank(conversation, embedder, tmp_path_factory) -> Path:
    """Conversation 30's first four sessions, added one by one and saved to a bank database."""
    work = tmp_path_factory.mktemp("saved")
    bank = heuristic_bank(work, embedder)
    store = None
    for number in range(1, 5):
        ingested = bank.ingest(session_text(conversation, number), f"session {number}", into=store)
        store = ingested.store
    return ingested.export(work / "bank.sqlite")


def test_adding_to_an_opened_bank_runs_the_model_on_the_new_document_only(saved_bank, conversation, embedder, tmp_path):
    fresh = SpiedEmbedder(cache_dir=embedder.cache_dir, batch_size=embedder.batch_size, precision=embedder.precision)
    store = MemoryStore.load(saved_bank, fresh)
    old = {node.id: node.embedding_text for node in store.graph.nodes_dict.values()}
    assert fresh.encoded == []  # opening reads the stored vectors
    heuristic_bank(tmp_path, fresh).ingest(session_text(conversation, 5), "session 5", into=store)
    new = [node for node in store.graph.nodes_dict.values() if node.id not in old]
    assert new and any(link in old for node in new for link in node.links)  # analysis compared them with old nodes
    assert fresh.encoded  # the new session was embedded...
    assert not set(fresh.encoded) & set(old.values())  # ...and no old node's text was embedded again


def test_a_related_verdict_that_keeps_the_nodes_as_they_are_embeds_nothing_again(saved_bank, embedder):
    fresh = SpiedEmbedder(cache_dir=embedder.cache_dir, batch_size=embedder.batch_size, precision=embedder.precision)
    store = MemoryStore.load(saved_bank, fresh)
    a, *others = store.graph.nodes_dict.values()
    b = next(node for node in others if node.id not in a.links)  # two nodes not linked yet
    kept = {a.id: ContextUpdate(a.context, list(a.keywords)), b.id: ContextUpdate(b.context, list(b.keywords))}
    vector = a.embedding
    store.relate(a.id, b.id, kept)
    assert b.id in a.links and fresh.encoded == []  # linked; neither text embedded again
    assert a.embedding is vector and np.array_equal(store.index.vector_of(a.id), vector)
    store.relate(a.id, b.id, {**kept, b.id: ContextUpdate("A new topic for b", ["topic"])})
    assert fresh.encoded == [b.embedding_text] and b.context == "A new topic for b"  # a change is embedded


@pytest.mark.parametrize("merge", [False, True])
def test_a_failed_add_leaves_every_node_linked_to_its_entries_as_before(saved_bank, embedder, merge):
    """The tree takes back an add's links node by node (not from a copy of the whole index); a merge in the same
    change still puts everything back, in the same order."""
    store = MemoryStore.load(saved_bank, embedder)
    a, b, c = list(store.graph.nodes_dict)[:3]
    before, entries = list(store.tree.node_to_entries.items()), list(store.tree.entries)
    with pytest.raises(RuntimeError), store.transaction():
        new = store.add_nodes([NodeContent("Jon opens a dance studio.", "dance studio", ["studio"])])[0]
        store.record_entry(InteractionEntry(text="Jon opens a dance studio."), [a, new.id])
        if merge:
            store.merge_nodes([a, b], NodeContent("merged", "merged topic", ["merged"]))
        store.record_entry(InteractionEntry(text="and Gina her store"), [c])
        raise RuntimeError("the add fails after its links")
    assert list(store.tree.node_to_entries.items()) == before and list(store.tree.entries) == entries
    store.check()


def test_the_superseded_nodes_follow_each_change_that_marks_or_removes_one(saved_bank, embedder):
    store = MemoryStore.load(saved_bank, embedder)
    first, second = (next(e.entry_id for e in store.tree.entries.values() if e.metadata.get("name") == name)
                     for name in ("session 1", "session 2"))
    newer = store.record_entry(InteractionEntry(text="session 1, corrected")).entry_id
    assert store.superseded() == frozenset()
    marked = store.supersede(first, newer)
    assert marked and store.superseded() == frozenset(marked)
    with pytest.raises(RuntimeError), store.transaction():
        store.delete_node(marked[0])
        assert store.superseded() == frozenset(marked[1:])
        raise RuntimeError("rolled back")
    assert store.superseded() == frozenset(marked)
    with pytest.raises(RuntimeError), store.transaction():
        store.supersede(second, newer)
        raise RuntimeError("rolled back")
    assert store.superseded() == frozenset(marked)
    store.delete_node(marked[0])
    assert store.superseded() == frozenset(marked[1:])


def test_documents_are_found_by_content_hash_and_by_name_without_reading_every_entry(saved_bank, embedder):
    """The tree indexes its documents as entries are added: the first entry of a text, the newest of a name; an
    entry taken back by a rollback is found no more, and a reopened bank finds the same."""
    store = MemoryStore.load(saved_bank, embedder)
    first = next(e for e in store.tree.entries.values() if e.metadata.get("name") == "session 1")
    assert store.entry_with_hash(first.metadata["sha256"]) == first == store.tree.document_named("session 1")
    newer = store.record_entry(InteractionEntry(text="v2", metadata={"name": "session 1", "sha256": "v2-hash"}))
    again = store.record_entry(InteractionEntry(text=first.text, metadata=dict(first.metadata)))  # v1 brought back
    assert store.tree.document_named("session 1") == again and store.entry_with_hash(first.metadata["sha256"]) == first
    with pytest.raises(RuntimeError), store.transaction():
        store.record_entry(InteractionEntry(text="v3", metadata={"name": "session 1", "sha256": "v3-hash"}))
        raise RuntimeError("rolled back")
    assert store.entry_with_hash("v3-hash") is None and store.tree.document_named("session 1") == again
    assert store.entry_with_hash("v2-hash") == newer and store.tree.document_named("no such document") is None
    reopened = MemoryStore.load(store.export(saved_bank.parent / "again.sqlite"), embedder)
    assert reopened.tree.document_named("session 1") == again and reopened.entry_with_hash("v2-hash") == newer
