"""The one place that mutates memory: the Query Graph, the Interaction Tree and both retrieval indexes.

Every public method is a transaction. Work that can fail (embedding, validation) runs before the
first change; every change registers its inverse, and if anything raises part-way the inverses run
in reverse order, so the four structures change together or not at all. Every change also names the nodes
whose stored row it alters (``unsaved_nodes``): all a bank database's next save writes besides new entries.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import contextmanager

import numpy as np

from amb_dspy.memory.bank_io import StoreFiles, embedding_model_name
from amb_dspy.retrieval.embedding import Embedder, embed_node_texts
from amb_dspy.retrieval.hybrid import HybridIndex, retrieve
from amb_dspy.storage.bank_file import check_sources
from amb_dspy.storage.bank_rows import SavePoint
from amb_dspy.storage.clock import now
from amb_dspy.storage.content import ContextUpdate, NodeContent
from amb_dspy.storage.hops import Hop
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionEntry, InteractionTree, MergeEvent
from amb_dspy.storage.line_vectors import LineVectors
from amb_dspy.storage.query_graph import GraphError, QueryGraph, QueryGraphNode, Source, Span, merge_sources, node_text

# The name this module's callers knew a node's content by before it moved to storage.
NodeDraft = NodeContent


class MemoryStore(StoreFiles):
    """The three layers of one task's memory plus the indexes over the graph."""

    def __init__(self, embedder: Embedder, insight_doc: InsightDoc | None = None):
        self.embedder = embedder
        self.insight_doc = insight_doc
        self.graph = QueryGraph()
        self.tree = InteractionTree()
        self.index = HybridIndex(embedder.dim)
        self.hops: list[Hop] = []  # the task's executed subtasks (amb_dspy.storage.hops)
        self._undo: list[Callable[[], None]] | None = None
        self._order_saved = False
        self.revision = 0  # counts the changes (transactions, rolled back or not): what a reader's cache checks
        # superseded()'s answer, worked out again only when the graph may hold other superseded nodes: a step
        # that marks or removes nodes, or a rollback, counts in _marks (a new graph object counts too)
        self._marks = 0
        self._superseded: tuple[QueryGraph | None, int, frozenset[str]] = (None, -1, frozenset())
        # Node ids whose rows the next save to a bank database rewrites (or deletes), and where that database
        # was last saved or loaded (amb_dspy.storage.bank_db). A rolled-back change leaves its ids here: a
        # row written again unchanged costs little, a row missed would be lost.
        self.unsaved_nodes: set[str] = set()
        self.save_point: SavePoint | None = None
        # The evidence view's line vectors (amb_dspy.memory.view): the store keeps them so a bank database saves them.
        self.line_vectors = LineVectors(embedding_model_name(embedder), embedder.dim)
        self.lender: MemoryStore | None = None  # whose graph, tree and node index it reads till it changes (lent)

    # --- transactions ------------------------------------------------------------------------
    @contextmanager
    def transaction(self):
        """Group several operations into one change: all of them happen, or none."""
        if self._undo is not None:  # nested call: the outer transaction owns the undo log
            yield
            return
        self._own()
        self._undo = []
        self._order_saved = False
        try:
            with self.tree.atomic():  # the tree takes back its own appends
                yield
        except BaseException:
            for undo in reversed(self._undo):
                undo()
            self._marks += 1
            raise
        finally:
            self._undo = None
            self.revision += 1

    def _did(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def _embed(self, texts: list[str], nodes: bool = True) -> np.ndarray:  # nodes: node texts (embed_node_texts)
        vectors = np.asarray(embed_node_texts(self.embedder, texts) if nodes else self.embedder.embed(texts), dtype=np.float32)
        if vectors.shape != (len(texts), self.index.dim):
            raise ValueError(f"embedder returned shape {vectors.shape}, expected {(len(texts), self.index.dim)}")
        return vectors

    # --- primitive steps (each registers its inverse) -----------------------------------------
    def _insert(self, node: QueryGraphNode) -> None:
        self.unsaved_nodes.add(node.id)
        self.graph.add_node(node)
        self._did(lambda: self.graph.delete_node(node.id))
        self.index.add(node.id, node.embedding_text, node.embedding)
        self._did(lambda: self.index.remove(node.id))

    def _link(self, a: str, b: str) -> bool:
        added = self.graph.add_edge(a, b)
        if added:
            self.unsaved_nodes.update((a, b))
            self._did(lambda: self.graph.remove_edge(a, b))
        return added

    def _unlink(self, a: str, b: str) -> None:
        node_a, node_b = self.graph.node(a), self.graph.node(b)
        if b not in node_a.links:
            return
        # The undo puts each id back where it was, so a rolled-back node compares equal to before.
        i, j = node_a.links.index(b), node_b.links.index(a)
        self.unsaved_nodes.update((a, b))
        self.graph.remove_edge(a, b)
        self._did(lambda: self.graph.restore_edge(a, b, i, j))

    def _add_source(self, node_id: str, source: Source) -> None:
        node = self.graph.node(node_id)
        before = list(node.sources)
        self.unsaved_nodes.add(node_id)
        node.sources = merge_sources(before, [source])
        self._did(lambda: setattr(node, "sources", before))

    def _remove(self, node_id: str) -> None:
        for other in list(self.graph.node(node_id).links):
            self._unlink(node_id, other)
        if not self._order_saved:  # re-added nodes must also get their old place in the graph's order
            order = self.graph.order()
            self._did(lambda: self.graph.reorder(order))
            self._order_saved = True
        self.unsaved_nodes.add(node_id)
        self._marks += 1
        node = self.graph.delete_node(node_id)
        self._did(lambda: self.graph.add_node(node))
        self.index.remove(node_id)
        self._did(lambda: self.index.add(node.id, node.embedding_text, node.embedding))

    def _set_context(self, node_id: str, update: ContextUpdate, vector: np.ndarray) -> None:
        node = self.graph.node(node_id)
        before = (node.context, list(node.keywords), node.embedding)

        def restore() -> None:
            node.context, node.keywords, node.embedding = before[0], before[1], before[2]
            self.index.update(node.id, node.embedding_text, node.embedding)

        self.unsaved_nodes.add(node_id)
        node.context, node.keywords, node.embedding = update.context, list(update.keywords), vector
        self._did(restore)
        self.index.update(node.id, node.embedding_text, vector)

    # --- public operations -------------------------------------------------------------------
    def add_nodes(self, drafts: list[NodeContent]) -> list[QueryGraphNode]:
        """Create nodes from drafts (embedded in one batch) and index them."""
        vectors = self._embed([node_text(d.summary, d.context, d.keywords) for d in drafts]) if drafts else []
        nodes = [
            QueryGraphNode(
                id=uuid.uuid4().hex, summary=d.summary, context=d.context, keywords=list(d.keywords),
                embedding=vector, timestamp=now(),
            )
            for d, vector in zip(drafts, vectors)
        ]
        with self.transaction():
            for node in nodes:
                self._insert(node)
        return nodes

    def add_node(self, draft: NodeContent) -> QueryGraphNode:
        return self.add_nodes([draft])[0]

    def delete_node(self, node_id: str) -> None:
        """Remove a node, its edges and its index entries. Its interaction entries stay in the tree."""
        with self.transaction():
            self.graph.node(node_id)
            self._remove(node_id)
            self.tree.unlink_node(node_id)

    def add_edge(self, a: str, b: str) -> bool:
        with self.transaction():
            return self._link(a, b)

    def remove_edge(self, a: str, b: str) -> None:
        with self.transaction():
            self._unlink(a, b)

    def neighbours(self, node_id: str) -> list[QueryGraphNode]:
        return self.graph.get_neighbors(node_id)

    def _updated_texts(self, updates: dict[str, ContextUpdate]) -> list[str]:
        """The embedding text of each node after its update (summary kept); raises for an unknown node."""
        return [node_text(self.graph.node(i).summary, u.context, u.keywords) for i, u in updates.items()]

    def _changing(self, updates: Mapping[str, ContextUpdate]) -> dict[str, ContextUpdate]:
        """The updates that change their node (raises for an unknown one): an update to the context and keywords
        the node has is nothing to embed, index or save again (the heuristic analysis relates nodes unchanged)."""
        return {i: u for i, u in updates.items()
                if (self.graph.node(i).context, self.graph.node(i).keywords) != (u.context, list(u.keywords))}

    def update_contexts(self, updates: dict[str, ContextUpdate]) -> None:
        """Set context and keywords of several nodes and re-embed them from summary + context + keywords."""
        updates = self._changing(updates)
        texts = self._updated_texts(updates)
        vectors = self._embed(texts) if texts else []
        with self.transaction():
            for (node_id, update), vector in zip(updates.items(), vectors):
                self._set_context(node_id, update, vector)

    def update_context(self, node_id: str, context: str, keywords: list[str]) -> None:
        self.update_contexts({node_id: ContextUpdate(context, keywords)})

    def relate(self, node_id: str, other_id: str, updates: dict[str, ContextUpdate]) -> None:
        """A ``related`` verdict: link the two nodes and apply both context updates, as one change."""
        self.graph.node(node_id), self.graph.node(other_id)
        updates = self._changing(updates)
        texts = self._updated_texts(updates)
        vectors = self._embed(texts) if texts else []
        with self.transaction():
            self._link(node_id, other_id)
            for (nid, update), vector in zip(updates.items(), vectors):
                self._set_context(nid, update, vector)

    def record_entry(self, entry: InteractionEntry, node_ids: Iterable[str] = (),
                     spans: Mapping[str, Iterable[Span]] | None = None) -> InteractionEntry:
        """Append an interaction entry and attach it to nodes (which must exist). Each node records the
        entry as a source: the character spans of its text given in ``spans`` (the whole text otherwise)."""
        node_ids = list(node_ids)
        spans = spans or {}
        for node_id in node_ids:
            self.graph.node(node_id)
        with self.transaction():
            self.tree.add_entry(entry)
            self.unsaved_nodes.update(node_ids)
            for node_id in node_ids:
                self.tree.link(node_id, entry.entry_id)
                own = tuple(spans.get(node_id) or ([(0, len(entry.text))] if entry.text else []))
                if own:
                    self._add_source(node_id, Source(entry_id=entry.entry_id, spans=own))
        return entry

    def entry_with_hash(self, digest: str) -> InteractionEntry | None:
        """The entry whose text has the content hash ``digest`` (``metadata["sha256"]``, recorded when a
        document is added: :meth:`~amb_dspy.memory.writer.MemoryWriter.add_document`), or None."""
        return self.tree.with_hash(digest)

    def supersede(self, old_entry_id: str, new_entry_id: str) -> list[str]:
        """Mark ``superseded_by`` the newer version ``new_entry_id`` the nodes built from ``old_entry_id`` and its own
        older versions alone (``metadata["supersedes"]``); both stay, readers prefer :meth:`current`. Returns them."""
        chain, entry = set(), self.tree.entries.get(old_entry_id)
        while entry is not None and entry.entry_id not in chain:
            chain.add(entry.entry_id)
            entry = self.tree.entries.get(entry.metadata.get("supersedes", ""))
        marked = [node for node in self.graph.nodes_dict.values()
                  if node.superseded_by is None and node.sources and all(s.entry_id in chain for s in node.sources)]
        with self.transaction():
            self.unsaved_nodes.update(node.id for node in marked)
            self._marks += 1
            for node in marked:
                node.superseded_by = new_entry_id
                self._did(lambda node=node: setattr(node, "superseded_by", None))
        return [node.id for node in marked]

    def superseded(self) -> frozenset[str]:
        """The ids of the nodes marked superseded (:meth:`supersede`); a scan of the graph only after a change
        that may have marked or removed one, not after every change (an add makes dozens)."""
        graph, marks, ids = self._superseded
        if graph is not self.graph or marks != self._marks:
            ids = frozenset(n.id for n in self.graph.nodes_dict.values() if n.superseded_by)
            self._superseded = (self.graph, self._marks, ids)
        return ids

    def current(self, items: list, node_of: Callable[[object], str] = lambda node_id: node_id) -> list:
        """``items`` (``node_of`` gives an item's node id) but those of superseded nodes, unless none is left."""
        superseded = self.superseded()
        kept = [item for item in items if node_of(item) not in superseded] if superseded else items
        return kept or items

    def link_entry(self, entry_id: str, node_ids: Iterable[str]) -> None:
        """Attach an existing entry to more nodes (entries themselves never change)."""
        node_ids = list(node_ids)
        for node_id in node_ids:
            self.graph.node(node_id)
        with self.transaction():
            self.unsaved_nodes.update(node_ids)
            for node_id in node_ids:
                self.tree.link(node_id, entry_id)

    def merge_nodes(
        self,
        old_ids: Collection[str],
        draft: NodeContent,
        description: str = "",
        neighbour_updates: dict[str, ContextUpdate] | None = None,
    ) -> tuple[QueryGraphNode, MergeEvent]:
        """Replace ``old_ids`` by one new node (spec §4.4, steps 4-6), as a single change.

        The new node inherits the union of the old nodes' edges (deduplicated, none to a merged
        node), the old nodes leave the graph and both indexes, their entries are re-linked to the
        new node, ``neighbour_updates`` re-describe inherited neighbours (others are ignored), and a
        MergeEvent is recorded.
        """
        old_ids = list(dict.fromkeys(old_ids))
        if len(old_ids) < 2:
            raise GraphError("a merge needs at least two distinct nodes")
        olds = [self.graph.node(i) for i in old_ids]
        inherited = list(dict.fromkeys(n for old in olds for n in old.links if n not in old_ids))
        updates = self._changing({k: v for k, v in (neighbour_updates or {}).items() if k in inherited})
        vectors = self._embed([node_text(draft.summary, draft.context, draft.keywords), *self._updated_texts(updates)])
        new = QueryGraphNode(
            id=uuid.uuid4().hex, summary=draft.summary, context=draft.context, keywords=list(draft.keywords),
            embedding=vectors[0], timestamp=now(), sources=merge_sources(*(old.sources for old in olds)),
        )
        event = MergeEvent(merged_node_ids=tuple(old_ids), new_node_id=new.id, description=description)
        with self.transaction():
            self._insert(new)
            for neighbour in inherited:
                self._link(new.id, neighbour)
            for old_id in old_ids:
                self._remove(old_id)
            for neighbour, vector in zip(updates, vectors[1:]):
                self._set_context(neighbour, updates[neighbour], vector)
            self.tree.relink_merged(event)
        return new, event

    def record_hop(self, hop: Hop) -> None:
        self.hops.append(hop)
        if self._undo is not None:
            self._did(self.hops.pop)

    def set_insight_doc(self, doc: InsightDoc) -> None:
        self.insight_doc = doc

    # --- copies ------------------------------------------------------------------------------
    def copy(self, insight_doc: InsightDoc | None = None) -> MemoryStore:
        """A deep copy of the graph and the tree (with their indexes) under a new Insight Doc: what a new
        task starts from when it reuses a bank; this store is left as it is."""
        return self.lent(insight_doc)._own()

    def lent(self, insight_doc: InsightDoc | None = None, embedder: Embedder | None = None) -> MemoryStore:
        """A store under a new Insight Doc (and ``embedder``, of the same model) reading this one's graph, tree and
        node index until its first change copies them (copy-on-write, :mod:`amb_dspy.memory.bank_cache`); this store
        must not change while it lends. Its line vectors are copied now (its first question embeds no line again)."""
        other = type(self)(embedder or self.embedder, insight_doc)
        other.graph, other.tree, other.index, other.lender = self.graph, self.tree, self.index, self
        other.line_vectors, other.revision = self.line_vectors.copy(self.lines_complete()), self.revision
        return other

    def _own(self) -> MemoryStore:
        """Before a lent store's first change: its own copies of what it read from its lender (the index's: the same
        documents under the same keys, nothing tokenised or encoded again); returns the store."""
        if self.lender is not None:  # a node's embedding is replaced on a change, never written into: shared
            nodes = {i: n.model_copy(update={"links": list(n.links), "keywords": list(n.keywords),
                                             "sources": list(n.sources)}) for i, n in self.graph.nodes_dict.items()}
            self.graph, self.tree = QueryGraph(nodes_dict=nodes), InteractionTree.from_dict(self.tree.to_dict())
            self.index, self.lender = self.index.copy(), None
        return self

    def same_content(self, other: MemoryStore) -> bool:
        return (self.insight_doc == other.insight_doc and self.graph.nodes_dict == other.graph.nodes_dict
                and self.tree == other.tree)

    # --- reads -------------------------------------------------------------------------------
    def source_texts(self, node_id: str) -> list[tuple[str, int, int, str]]:
        """``(entry id, start, end, text)`` of each source span of a node, in its entries' order."""
        node = self.graph.node(node_id)
        return [(source.entry_id, start, end, self.tree.entries[source.entry_id].text[start:end])
                for source in node.sources for start, end in source.spans]

    def retrieve(
        self,
        query_vector: np.ndarray,
        query_text: str | Iterable[str],
        k: int = 5,
        alpha: float = 0.5,
        exclude: Collection[str] = (),
    ) -> list[QueryGraphNode]:
        """Spec §6.1's retrieval over the current nodes; over the superseded ones too when none is found."""
        found = retrieve(self.graph, self.index, query_vector, query_text, k=k, alpha=alpha,
                         exclude={*exclude, *self.superseded()}) if self.superseded() else []
        return found or retrieve(self.graph, self.index, query_vector, query_text, k=k, alpha=alpha, exclude=exclude)

    def retrieve_for_text(self, text: str, k: int = 5, alpha: float = 0.5, exclude: Collection[str] = ()):
        return self.retrieve(self._embed([text], nodes=False)[0], text, k=k, alpha=alpha, exclude=exclude)

    def retrieve_for_node(self, node_id: str, k: int = 5, alpha: float = 0.5, exclude: Collection[str] = ()):
        node = self.graph.node(node_id)
        return self.retrieve(node.embedding, node.keywords, k=k, alpha=alpha, exclude={node_id, *exclude})

    def check(self) -> None:
        """Raise if the graph, the tree and the indexes disagree (invariants of ARCHITECTURE.md)."""
        self.graph.check()
        if self.index.ids() != set(self.graph.nodes_dict):
            raise GraphError("the retrieval index and the graph hold different node ids")
        if len(self.index.keyword) != len(self.graph) or len(self.index.vector) != len(self.graph):
            raise GraphError("the keyword or vector index size differs from the graph")
        check_sources(self.graph, self.tree)
        for node_id, entry_ids in self.tree.node_to_entries.items():
            if node_id not in self.graph:
                raise GraphError(f"entries are linked to node {node_id!r}, which is not in the graph")
            for entry_id in entry_ids:
                if entry_id not in self.tree.entries:
                    raise GraphError(f"node {node_id!r} links to missing entry {entry_id!r}")

