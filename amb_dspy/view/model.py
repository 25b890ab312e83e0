"""A read-only picture of a bank file, shaped for looking at: the terminal and the HTML view both read it.

A bank stores no loop numbers, so a node's creation **step** is derived from timestamps: the number of
interaction entries recorded before the node was created. The bank records one entry per memory
conversion (the user's context, then each loop's tool results, each merge's validation) right after
the nodes it made, so nodes made together share a step and steps follow the run's loops in order.
A node that carries its own ``loop`` (a later schema may store it) keeps that number instead.

Loading goes through :func:`amb_dspy.storage.bank_db.read_bank` (a JSON bank file or a bank database), so a bad file raises the one-line
``BankFileError``; no embedding model, DSPy or FAISS is loaded to look at a bank.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amb_dspy.errors import UserError
from amb_dspy.storage import (
    InsightDoc,
    InteractionEntry,
    MergeEvent,
    QueryGraph,
    QueryGraphNode,
)
from amb_dspy.storage.bank_place import bank_at


class ViewError(UserError, ValueError):
    """Something asked of a view cannot be shown (an unknown node, a bad trace file); one line."""


@dataclass(frozen=True)
class SourceSpan:
    """The characters ``[start, end)`` of an interaction entry's text that a node was drawn from."""

    entry_id: str
    start: int
    end: int


@dataclass(frozen=True)
class NodeView:
    id: str
    summary: str
    context: str
    keywords: tuple[str, ...]
    links: tuple[str, ...]
    entry_ids: tuple[str, ...]
    created: float
    step: int
    merged_from: tuple[str, ...] = ()  # the nodes this one replaced, if a merge made it
    sources: tuple[SourceSpan, ...] = ()

    @property
    def degree(self) -> int:
        return len(self.links)

    @property
    def is_merged(self) -> bool:
        return bool(self.merged_from)


@dataclass(frozen=True)
class BankView:
    path: Path
    insight_doc: InsightDoc | None
    nodes: dict[str, NodeView]  # in creation order
    entries: dict[str, InteractionEntry]  # in recording order
    merge_events: tuple[MergeEvent, ...]
    edges: list[tuple[str, str]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """How many creation steps the nodes span (the colour scale's length)."""
        return max((n.step for n in self.nodes.values()), default=0) + 1

    def node(self, node_id: str) -> NodeView:
        """A node by its id or by an unambiguous prefix of it (the tables show the first 8 characters)."""
        if node_id in self.nodes:
            return self.nodes[node_id]
        found = [n for key, n in self.nodes.items() if key.startswith(node_id)]
        if len(found) == 1:
            return found[0]
        if found:
            raise ViewError(f"{self.path}: {len(found)} nodes start with {node_id!r}; give more of the id")
        raise ViewError(f"{self.path}: no node {node_id!r} in this bank")

    def neighbours(self, node_id: str) -> list[NodeView]:
        return [self.nodes[i] for i in self.nodes[node_id].links]

    def node_entries(self, node_id: str) -> list[InteractionEntry]:
        return sorted((self.entries[e] for e in self.nodes[node_id].entry_ids), key=lambda e: e.timestamp)

    def merge_history(self, node_id: str) -> list[MergeEvent]:
        """The merges that led to this node, oldest first: its own, and those of the nodes it replaced."""
        by_new = {event.new_node_id: event for event in self.merge_events}
        history, todo, seen = [], [node_id], set()
        while todo:
            current = todo.pop()
            event = by_new.get(current)
            if event is None or event.event_id in seen:
                continue
            seen.add(event.event_id)
            history.append(event)
            todo.extend(event.merged_node_ids)
        return sorted(history, key=lambda e: e.timestamp)


def _field(item: Any, name: str, default: Any = None) -> Any:
    return item.get(name, default) if isinstance(item, Mapping) else getattr(item, name, default)


def source_spans(node: QueryGraphNode) -> tuple[SourceSpan, ...]:
    """A node's provenance, if the bank stores it: ``sources`` items with ``entry_id`` and ``start``/``end``
    or ``spans`` (a list of ``[start, end)`` pairs). Banks of schema 1 have none; this reads what is there."""
    spans: list[SourceSpan] = []
    for item in _field(node, "sources") or ():
        entry_id = _field(item, "entry_id")
        pairs = _field(item, "spans") or [(_field(item, "start"), _field(item, "end"))]
        for pair in pairs:
            start, end = (pair[0], pair[1]) if not isinstance(pair, Mapping) else (pair.get("start"), pair.get("end"))
            if isinstance(entry_id, str) and isinstance(start, int) and isinstance(end, int) and 0 <= start < end:
                spans.append(SourceSpan(entry_id, start, end))
    return tuple(spans)


def build_view(path: Path, insight_doc: InsightDoc | None, graph: QueryGraph, tree) -> BankView:
    """The view of a loaded bank (see the module docstring for how creation steps are derived)."""
    entry_times = sorted(e.timestamp for e in tree.entries.values())
    merged_from = {event.new_node_id: tuple(event.merged_node_ids) for event in tree.merge_events}
    nodes = {}
    for node in sorted(graph.nodes_dict.values(), key=lambda n: n.timestamp):
        loop = getattr(node, "loop", None)
        nodes[node.id] = NodeView(
            id=node.id, summary=node.summary, context=node.context, keywords=tuple(node.keywords),
            links=tuple(node.links), entry_ids=tuple(tree.node_to_entries.get(node.id, ())), created=node.timestamp,
            step=loop if isinstance(loop, int) else bisect_left(entry_times, node.timestamp),
            merged_from=merged_from.get(node.id, ()), sources=source_spans(node),
        )
    entries = dict(sorted(tree.entries.items(), key=lambda item: item[1].timestamp))
    return BankView(path=path, insight_doc=insight_doc, nodes=nodes, entries=entries,
                    merge_events=tuple(tree.merge_events), edges=graph.edges())


def load_view(path) -> BankView:
    """Read a bank file (or a named bank in PostgreSQL, :func:`~amb_dspy.storage.bank_place.bank_at`) for viewing;
    ``BankFileError`` (one line) if it is not a valid bank."""
    place = bank_at(path)
    loaded, _ = place.read(embedding_dim=None)
    return build_view(getattr(place, "path", place), loaded.insight_doc, loaded.graph, loaded.tree)
