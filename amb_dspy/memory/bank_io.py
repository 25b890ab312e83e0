"""How a store is saved and opened: a bank file in either format (the JSON interchange file, or the bank database
that grows, :mod:`amb_dspy.storage.bank_db`), or a named bank in PostgreSQL (:mod:`amb_dspy.storage.bank_pg`),
wherever :func:`~amb_dspy.storage.bank_place.bank_at` says the bank lives.
:class:`~amb_dspy.memory.graph_ops.MemoryStore` has these methods; they read and write banks and build new stores,
and change no store but by its save point."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Self

import numpy as np

from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.embedding_base import embedding_model_name
from amb_dspy.storage.bank_file import LoadedBank, bank_from_payload, bank_payload, dump_bank
from amb_dspy.storage.bank_place import BankPlace, bank_at
from amb_dspy.storage.bank_rows import BankParts
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.source_lines import LINE_TOKENS, node_lines
from amb_dspy.text import estimate_tokens


class StoreFiles:
    """The file side of :class:`~amb_dspy.memory.graph_ops.MemoryStore` (a base class of it)."""

    # A bank database's stored layouts of the evidence view's lines, of the save this store was read at (key ->
    # blob, amb_dspy.memory.view.stored_layout), and where that was: (its place, that save id), for a layout made
    # here to be kept there. A store that changes no longer matches them, but only a store that lends reads them.
    line_layouts: Mapping[str, bytes] = MappingProxyType({})
    layout_home: tuple[BankPlace, str] | None = None

    def save(self, path, line_layouts: Mapping[str, bytes] | None = None):
        """Save the bank, the way every door saves one (``result.export``, ``session.export``, ``amb ingest``):
        :meth:`export`, a bank database getting the vectors of the lines it writes first (:meth:`embed_lines`), so
        that it opens with every line's vector; a JSON file carries none (:mod:`amb_dspy.storage.bank_file`).
        ``line_layouts``: the evidence view's layouts of this bank as it is now
        (:func:`~amb_dspy.memory.view.stored_layout.stored_layouts`), stored with it in the same transaction.
        Returns the path written (another one when the file there holds a larger bank)."""
        if bank_at(path).grows:
            self.embed_lines()
        return self.export(path, line_layouts=line_layouts)

    def embed_lines(self, count: Callable[[str], int] = estimate_tokens, line_tokens: int = LINE_TOKENS) -> int:
        """Give ``line_vectors`` the lines (as the evidence view lays them out: :func:`~amb_dspy.storage.source_lines.node_lines`)
        of the nodes the next save writes, or of every node when they do not hold every saved node's lines yet;
        returns how many lines were embedded."""
        table, nodes = self.line_vectors, self.graph.nodes_dict
        wanted = [nodes[i] for i in self.graph.in_order(self.unsaved_nodes)] if table.complete else list(nodes.values())
        embedded = table.fill([text[start:end] for node in wanted
                               for _, text, start, end, _ in node_lines(self.tree.entries, node, count, line_tokens)],
                              self.embedder.embed)
        table.embedded.update(node.id for node in wanted)
        table.complete = True
        return embedded

    def export(self, path, also=None, line_layouts: Mapping[str, bytes] | None = None):
        """Write the bank as it is (:meth:`save` is the save that embeds its lines first); returns where it was written
        (another path or bank name when the one there holds a larger bank, with a notice). ``path``: a file, or a
        :class:`~amb_dspy.storage.bank_pg.DatabaseBank` (a bank database too). A path ending ``.sqlite`` or ``.db``
        (or an existing bank database) is the bank that grows (:mod:`amb_dspy.storage.bank_db`): saving again to the
        database this store last saved to or was loaded from writes only what changed since, the new line vectors
        included (the evidence view's, ``line_vectors``). Any other path gets the whole bank as one JSON file
        (:mod:`amb_dspy.storage.bank_file`), the interchange format. ``also(connection)``: more statements in a bank
        database save's transaction (:func:`~amb_dspy.storage.bank_db.write_bank_db`)."""
        place = bank_at(path)
        if not place.grows:
            return dump_bank(place.path, self.insight_doc, self.graph, self.tree, self.index.dim,
                             embedding_model_name(self.embedder), self.hops)
        parts = BankParts(self.insight_doc, self.graph, self.tree, self.index.dim, embedding_model_name(self.embedder),
                          self.hops, self.line_vectors, self.lines_complete(), dict(line_layouts or {}))
        self.save_point = place.write(parts, self.save_point, self.unsaved_nodes, also=also)
        self.unsaved_nodes = set()
        return self.save_point.where

    def has_unsaved(self) -> bool:
        """Whether the next save to the bank database this store last saved to or came from would write
        anything: changed nodes, entries or merge events after its save point, or everything (no save point)."""
        point = self.save_point
        return point is None or bool(self.unsaved_nodes) or len(self.tree.entries) != point.entries \
            or len(self.tree.merge_events) != point.merge_events

    def lines_complete(self) -> bool:
        """Whether every line of every node has a vector in ``line_vectors``, as far as its bookkeeping knows:
        it held every saved node's lines, and each node changed since got its lines' vectors."""
        lines, nodes = self.line_vectors, self.graph.nodes_dict
        return lines.complete and all(node_id in lines.embedded for node_id in self.unsaved_nodes if node_id in nodes)

    @classmethod
    def load(cls, path, embedder: Embedder, notices: list[str] | None = None) -> Self:
        """A new store from a bank file of either format (a JSON file or a bank database, decided by the file), or a
        named bank in PostgreSQL (``path`` a :class:`~amb_dspy.storage.bank_pg.DatabaseBank`); raises BankFileError
        and builds nothing if the bank is bad or missing.

        Stored embeddings are used as they are when the file names the embedder's model; a file made
        with another model (or not naming one, or of another dimension) is embedded again, its indexes built at the
        embedder's dimension, with a line added to ``notices``: vectors of two models are never mixed. A bank
        database's line vectors of the embedder's model come with it (``line_vectors``), so the evidence view
        embeds no line it already embedded.
        """
        place = bank_at(path)
        loaded, point = place.read(None, embedding_model_name(embedder), embedder.dim)
        store = cls.from_loaded(loaded, embedder, path, notices)
        store.save_point = point
        store.line_layouts, store.layout_home = loaded.line_layouts, (place, point.save_id) if point else None
        return store

    @classmethod
    def load_for_task(cls, path, embedder: Embedder, insight_doc: InsightDoc | None,
                      notices: list[str] | None = None) -> Self:
        """What ``load(path, embedder).copy(insight_doc)`` gives, without the copy (a second of a million-token
        bank's start): a store just opened is the task's alone, so it only lets go of what tied it to the file
        and to the bank's own task. No save point: the task's saves never write into the file it started from
        row by row (a save to that path writes a whole bank, which a larger one there is kept from); no
        hops of the bank's task; a line-vector table whose bookkeeping is the copy's."""
        store = cls.load(path, embedder, notices)
        store.line_vectors.complete = store.lines_complete()
        store.line_vectors.embedded = set()
        store.insight_doc, store.hops, store.save_point, store.unsaved_nodes = insight_doc, [], None, set()
        return store

    def payload(self) -> dict:
        """The bank as the JSON object a bank file holds (:meth:`from_payload` reads it back)."""
        return bank_payload(self.insight_doc, self.graph, self.tree, self.index.dim, embedding_model_name(self.embedder),
                            self.hops)

    @classmethod
    def from_payload(cls, raw, embedder: Embedder, where, notices: list[str] | None = None) -> Self:
        return cls.from_loaded(bank_from_payload(raw, None, where), embedder, where, notices)

    @classmethod
    def from_loaded(cls, loaded: LoadedBank, embedder: Embedder, path, notices: list[str] | None = None) -> Self:
        store = cls(embedder, loaded.insight_doc)
        store.graph, store.tree, store.hops = loaded.graph, loaded.tree, list(loaded.hops)
        if loaded.line_vectors is not None and loaded.line_vectors.model == store.line_vectors.model:
            store.line_vectors = loaded.line_vectors
        store._embed_again(loaded, path, notices)
        store._index_all()
        return store

    def _embed_again(self, loaded: LoadedBank, path, notices: list[str] | None) -> None:
        """Give every node of a bank just read this store's embedder's vectors when the bank's came from another
        model, or are of another dimension (a bank file records one of each), and say so in ``notices``."""
        nodes = list(self.graph.nodes_dict.values())
        model, dim = embedding_model_name(self.embedder), self.index.dim
        stored_dim = nodes[0].embedding.shape[0] if nodes else dim
        if not nodes or (loaded.embedding_model == model and stored_dim == dim):
            return
        vectors = self._embed([node.embedding_text for node in nodes])
        for node, vector in zip(nodes, vectors):
            node.embedding = vector
        self.unsaved_nodes.update(node.id for node in nodes)  # the new vectors reach a bank database's next save
        if notices is not None:
            sizes = f" ({stored_dim}-d vectors, now {dim}-d)" if stored_dim != dim else ""
            notices.append(f"{path}: embedded with {loaded.embedding_model or 'an unnamed model'}; "
                           f"{len(nodes)} nodes embedded again with {model}{sizes}")

    def _index_all(self) -> None:
        """Index every node of a store just made (one FAISS write for all the vectors)."""
        nodes = list(self.graph.nodes_dict.values())
        if nodes:
            self.index.add_many([node.id for node in nodes], [node.embedding_text for node in nodes],
                                np.stack([node.embedding for node in nodes]))
