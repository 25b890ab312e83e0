"""The evidence view's lines of a bank, laid out as nodes arrive and indexed once each.

Every node's provenance is cut into lines (:func:`~amb_dspy.storage.source_lines.node_lines`); each line is kept once,
under the first node that holds it, with every node that holds it. A :class:`LineIndex` follows its store: a
node added, or a node given more sources, lays out and embeds only its own new lines, and adds them to the lines'
hybrid index (BM25 and FAISS, both incremental), so a question costs no re-indexing whatever the bank's size.
Only a removed node (a merge) lays everything out again, from the embeddings already made. A task on a bank that
another task of the process opened takes over the layout made once for that bank version (:meth:`LineIndex._adopt`,
:mod:`amb_dspy.memory.bank_cache`) and copies it before the task's first change, which it then lays out alone.

The embeddings are the store's (:class:`~amb_dspy.storage.line_vectors.LineVectors`, by the line's text): a line
embedded once is embedded never again, in this process or, through a bank database, in the next one that opens
the bank. The store's save (:meth:`~amb_dspy.memory.bank_io.StoreFiles.save`) embeds the lines of the nodes it
writes, laid out by the same rules (:mod:`amb_dspy.storage.source_lines`), so that a bank database opens with
every line's vector.

The tables a question's ranking reads over all lines (:class:`~amb_dspy.retrieval.line_ranking.LineTable`, the
:class:`~amb_dspy.retrieval.spreading.SpreadingGraph`) are kept up to date line by line too
(:class:`~amb_dspy.retrieval.line_ranking.LineLayout`, :class:`~amb_dspy.retrieval.spreading.TermLines`): when the
graph changed, the first question after it only assembles them from what was kept, as array arithmetic (a term's
idf, and so every weight of the spreading, depends on all lines; no line's text is read again).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from amb_dspy.memory.bank_cache import collection_paused, shared_layout
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.lines import LINE_TOKENS, Evidence, heading_of, label_of, speaker_of
from amb_dspy.memory.view.stored_layout import LaidLines, encode, layout_key, restore
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.retrieval.keyword import terms
from amb_dspy.retrieval.line_ranking import LineLayout, LineTable
from amb_dspy.retrieval.spreading import SpreadingGraph, TermLines
from amb_dspy.storage import QueryGraphNode
from amb_dspy.storage.bank_place import BankPlace
from amb_dspy.storage.source_lines import node_lines
from amb_dspy.text import estimate_tokens


class LineIndex:
    """The source lines of ``store``'s nodes, their hybrid index (keys: the lines' positions, as strings) and
    the tables the ranking reads; :meth:`refresh` brings them up to the store's graph."""

    def __init__(self, store: MemoryStore, count: Callable[[str], int], line_tokens: int, *, adopt: bool = True):
        """``adopt``: on a lent store, take over the layout shared by every store its lender lends (:meth:`_adopt`)."""
        self.store, self.count, self.line_tokens, self.adopt = store, count, line_tokens, adopt
        self._start_over()

    def _start_over(self) -> None:
        self.lines: list[Evidence] = []
        self.holders: list[list[str]] = []  # per line, the ids of the nodes that hold it
        self.lines_of: dict[str, list[int]] = {}  # per node id, the lines it holds
        self.index: HybridIndex | None = None
        self._position: dict[tuple[str, int, int], int] = {}
        self._indexed: list[list[str]] = []  # per line, the terms its index entry reads (its heading and label, its text)
        self._label_sizes: list[int] = []  # per line, how many of those are its heading's and label's (stored_layout)
        self._layout = LineLayout()  # per line, what the line table reads
        self._terms = TermLines()  # per line, its words as the spreading matches them
        self._laid: dict[str, tuple] = {}  # node id -> the sources laid out for it
        self._seen: tuple = ()  # the store's (revision, node count) when last laid out
        self._tables: tuple = (None, None, None, {})  # (the store's revision, spreading graph, line table, node numbers)
        self._shared = False  # the fields above are a shared layout's (_adopt), to copy before any change
        self.embedded: list[str] = []  # the lines whose vectors this index made, in order (a shared layout's are adopted)
        self.stored = False  # laid out from the layout a bank database kept (stored_layout), not from the text

    def refresh(self) -> list[Evidence]:
        """Lay out the lines of the nodes added or given sources since the last call; the lines, in order."""
        if self.adopt and not self._laid and self.store.lender is not None and len(self.store.graph):
            self._adopt(self.store.lender)
        nodes = self.store.graph.nodes_dict
        if self._seen == (self.store.revision, len(nodes)):
            return self.lines
        if any(node_id not in nodes for node_id in self._laid):
            self._start_over()
        elif self._shared:
            self._own()
        self._seen = (self.store.revision, len(nodes))
        first_new = len(self.lines)
        for node in nodes.values():
            sources = tuple(node.sources)
            if self._laid.get(node.id) != sources:
                self._lay_out(node)
                self._laid[node.id] = sources
        if len(self.lines) > first_new:
            self._index_new(first_new)
        return self.lines

    def _adopt(self, lender: MemoryStore) -> None:
        """Take over the layout of the lender's lines (a store lent by a bank's shared store: the same graph), made
        once for every task on that bank (:func:`~amb_dspy.memory.bank_cache.shared_layout`), with the line
        vectors its making embedded, as this index would have."""
        key = ("lines", self.line_tokens, getattr(self.count, "__wrapped__", self.count))
        shared = shared_layout(lender, key, lambda: _laid_out(lender, self.count, self.line_tokens))
        for name in _LAYOUT:
            setattr(self, name, getattr(shared, name))
        self._shared = True
        if shared.embedded:
            self.store.line_vectors.add(shared.embedded, shared.store.line_vectors.matrix(shared.embedded))

    def laid(self) -> LaidLines:
        """What laying out found (:mod:`~amb_dspy.memory.view.stored_layout` keeps it in a bank database)."""
        return LaidLines(self.lines, self.holders, self._indexed, self._label_sizes, self._layout)

    def take_over(self, laid: LaidLines) -> None:
        """Lay out this index (new) from ``laid``, the lines of its store's whole graph as laying them out found them
        (a stored layout), and index them: what :meth:`refresh` would have made."""
        self.lines, self.holders, self._position, self.lines_of = laid.lines, laid.holders, laid.position, laid.lines_of
        self._indexed, self._label_sizes, self._layout, self._terms = laid.indexed, laid.label_sizes, laid.layout, laid.terms
        self._laid = {node.id: tuple(node.sources) for node in self.store.graph.nodes_dict.values()}
        self._seen, self.stored = (self.store.revision, len(self.store.graph)), True
        if self.lines:
            self._index_new(0)

    def _own(self) -> None:
        """Before the first change of an adopted layout: copies of what changes (a line's record never does)."""
        self.lines, self.holders = list(self.lines), [list(held) for held in self.holders]
        self.lines_of = {node_id: list(lines) for node_id, lines in self.lines_of.items()}
        self._position, self._indexed, self._laid = dict(self._position), list(self._indexed), dict(self._laid)
        self._label_sizes = list(self._label_sizes)
        self._layout, self._terms = self._layout.copy(), self._terms.copy()
        self.index, self._shared = self.index.copy() if self.index is not None else None, False

    def _lay_out(self, node: QueryGraphNode) -> None:
        for entry_id, text, start, end, line_start in node_lines(self.store.tree.entries, node, self.count, self.line_tokens):
            key = (entry_id, start, end)
            if key not in self._position:
                self._add_line(key, text, line_start, node.id)
            held = self.holders[self._position[key]]
            if node.id not in held:
                held.append(node.id)
                self.lines_of.setdefault(node.id, []).append(self._position[key])

    def _add_line(self, key: tuple[str, int, int], text: str, line_start: int, node_id: str) -> None:
        """A new line; a long line's later sentences are found by its stamp and speaker too, a paragraph's lines
        by its heading."""
        entry_id, start, end = key
        self._position[key] = len(self.lines)
        self.lines.append(Evidence(entry_id, start, end, text[start:end], node_id))
        heading = heading_of(text, line_start, self.count)
        label = " ".join(filter(None, (heading, label_of(text[line_start:start]) if start > line_start else "")))
        own = terms(text[start:end])  # the line's terms, found once for all three
        indexed = terms(label) + own if label else own  # the terms of f"{label} {line}"
        self._indexed.append(indexed)
        self._label_sizes.append(len(indexed) - len(own))
        self._layout.add((entry_id, start), text[start:end], speaker_of(text[line_start:end]), heading, own)
        self._terms.add(own)
        self.holders.append([])

    def _index_new(self, first: int) -> None:
        """Index the lines from ``first`` on, in one batch, embedding only those the store has no vector for."""
        texts = [line.text for line in self.lines[first:]]
        new = self.store.line_vectors.missing(texts)
        if new:
            self.store.line_vectors.add(new, self.store.embedder.embed(new))
        self.embedded.extend(new)
        if self.index is None:
            self.index = HybridIndex(self.store.embedder.dim)
        self.index.add_many([str(i) for i in range(first, len(self.lines))], None,
                            self.store.line_vectors.matrix(texts), token_lists=self._indexed[first:])

    def tables(self) -> tuple[SpreadingGraph, LineTable, dict[str, int]]:
        """The spreading graph, the lines' table and each node's number in both (its place in the graph's order),
        for the graph as it is now (built again when it changed)."""
        signature = (self.store.revision, len(self.store.graph), len(self.lines))
        if self._tables[0] != signature:
            nodes = list(self.store.graph.nodes_dict.values())
            number = {node.id: i for i, node in enumerate(nodes)}
            links = sorted({tuple(sorted((number[n.id], number[o]))) for n in nodes for o in n.links if o in number})
            table = self._layout.table([[number[n] for n in held] for held in self.holders])
            spreading = SpreadingGraph.from_lines(self._terms, table.holders, table.starts,
                                                  [terms(" ".join(node.keywords)) for node in nodes], links)
            self._tables = (signature, spreading, table, number)
        return self._tables[1:]


_LAYOUT = ("lines", "holders", "lines_of", "index", "_position", "_indexed", "_label_sizes", "_layout", "_terms", "_laid",
           "_seen", "_tables", "stored")  # what a LineIndex takes over from a shared one


def _laid_out(lender: MemoryStore, count: Callable[[str], int], line_tokens: int) -> LineIndex:
    """The lender's lines laid out, indexed and tabulated, on a store it lends (whose line vectors the embedding
    fills, not the lender's: a lender never changes), for every task on it to take over: restored from the layout
    the bank database keeps for the version read (:mod:`~amb_dspy.memory.view.stored_layout`) when it has a sound
    one, else laid out now, and then kept there for the next process (:func:`keep_layout`)."""
    key = layout_key(count, line_tokens)
    stored = lender.line_layouts.get(key) if key else None
    with collection_paused():
        index = LineIndex(lender.lent(), count, line_tokens, adopt=False)
        laid = restore(index.store, stored) if stored is not None else None
        if laid is not None:
            index.take_over(laid)
        else:
            index.refresh()
        index.tables()
    if laid is None and key and lender.layout_home is not None:
        keep_layout(index, key, *lender.layout_home)
    return index


_keeping: list[threading.Thread] = []  # the layouts being kept (wait_for_kept)


def keep_layout(index: LineIndex, key: str, place: BankPlace, save_id: str) -> None:
    """Store ``index``'s layout under ``key`` in the bank it was read from, for the save ``save_id``, on a thread of
    its own (the question that laid the lines out waits for none of it): a bank in PostgreSQL keeps it while it
    still carries that save, for the replicas that open it next; a bank file keeps none (its readers leave it as it
    was). ``index`` is a shared layout, which no one changes."""
    def keep() -> None:
        try:
            place.keep_line_layout(save_id, key, encode(index.store, index.laid()))
        except Exception:  # noqa: BLE001 -- a cache not kept (a pool closed at exit, a disk full): the next reader lays out
            pass

    thread = threading.Thread(target=keep, name="amb-keep-layout", daemon=True)
    _keeping.append(thread)
    thread.start()


def wait_for_kept(timeout: float | None = None) -> None:
    """Wait until the layouts being kept are (or ``timeout`` seconds): for a process about to end, and for tests."""
    while _keeping:
        _keeping.pop().join(timeout)


def stored_layouts(store: MemoryStore, count: Callable[[str], int] = estimate_tokens,
                   line_tokens: int = LINE_TOKENS) -> dict[str, bytes]:
    """The layouts a save of ``store`` keeps with it (``store.save(path, line_layouts=...)``), its lines laid out now
    (seconds at a million tokens: for a save that writes a bank whole, a copy): a process that opens the bank then
    takes them over. The lines it embeds are the store's (its save writes them)."""
    key = layout_key(count, line_tokens)
    if key is None or len(store.graph) == 0:
        return {}
    index = LineIndex(store, count, line_tokens, adopt=False)
    index.refresh()
    return {key: encode(store, index.laid())}
