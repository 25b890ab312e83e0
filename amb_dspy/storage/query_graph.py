"""Layer 2, the Query Graph: compressed topic nodes joined by undirected ``related`` edges.

Adjacency lists, no NetworkX. The graph checks its own invariants (symmetric edges, no self-loops,
no dangling links); only :mod:`amb_dspy.memory.graph_ops` calls its mutating methods, so that the graph,
the tree and the retrieval indexes always change together.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, PrivateAttr

from amb_dspy.errors import AmbError
from amb_dspy.storage.clock import Timestamp, now


def _as_vector(value: Any) -> np.ndarray:
    vector = np.asarray(value, dtype=np.float32)
    if vector.ndim != 1:
        raise ValueError(f"an embedding must be a 1-d vector, got shape {vector.shape}")
    if not np.all(np.isfinite(vector)):
        raise ValueError("an embedding must hold finite numbers")
    return vector


# float32 -> JSON float -> float32 is exact, so exported embeddings import bit for bit.
Vector = Annotated[
    np.ndarray,
    BeforeValidator(_as_vector),
    PlainSerializer(lambda v: [float(x) for x in v], return_type=list[float]),
]


Span = tuple[int, int]


class Source(BaseModel):
    """Where a node came from: an interaction entry, and the ``[start, end)`` character spans of that
    entry's text that the node was built from."""

    model_config = ConfigDict(frozen=True)

    entry_id: str
    spans: tuple[Span, ...]


def merge_sources(*groups: list[Source]) -> list[Source]:
    """The union of several nodes' sources: one record per entry, its spans sorted and joined where they meet."""
    by_entry: dict[str, list[Span]] = {}
    for sources in groups:
        for source in sources:
            by_entry.setdefault(source.entry_id, []).extend(source.spans)
    merged = []
    for entry_id, spans in by_entry.items():
        joined: list[list[int]] = []
        for start, end in sorted(spans):
            if joined and start <= joined[-1][1]:
                joined[-1][1] = max(joined[-1][1], end)
            else:
                joined.append([start, end])
        merged.append(Source(entry_id=entry_id, spans=tuple((a, b) for a, b in joined)))
    return merged


class QueryGraphNode(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    summary: str
    context: str
    keywords: list[str] = Field(default_factory=list)
    embedding: Vector
    timestamp: Timestamp = Field(default_factory=now)
    links: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    # the entry of the newer version of the document this node came from (MemoryStore.supersede); None: current
    superseded_by: str | None = None

    @property
    def embedding_text(self) -> str:
        return node_text(self.summary, self.context, self.keywords)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueryGraphNode):
            return NotImplemented
        mine, theirs = self.model_dump(exclude={"embedding"}), other.model_dump(exclude={"embedding"})
        return mine == theirs and np.array_equal(self.embedding, other.embedding)

    __hash__ = None  # mutable model


def node_text(summary: str, context: str, keywords: list[str]) -> str:
    """The text a node is embedded and keyword-indexed from (spec §4.1, step 4.2)."""
    return f"{summary} {context} {' '.join(keywords)}".strip()


class GraphError(AmbError, ValueError):
    """An operation would break the graph's invariants."""


class QueryGraph(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    nodes_dict: dict[str, QueryGraphNode] = Field(default_factory=dict)
    # Kept up to date by the methods below, so that an ingest's every document does not read the whole graph:
    # (nodes, edges) when the edges were last counted (a progress event shows the count; counting the links of
    # 50,000 nodes takes tens of milliseconds), and each node's place in the graph's order (a save writes its few
    # changed nodes in that order: :meth:`in_order`). A node put into nodes_dict directly (a bank being read)
    # changes the number of nodes, and both are worked out again.
    _counted: tuple[int, int] | None = PrivateAttr(default=None)
    _places: dict[str, int] | None = PrivateAttr(default=None)

    def __len__(self) -> int:
        return len(self.nodes_dict)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes_dict

    def node(self, node_id: str) -> QueryGraphNode:
        try:
            return self.nodes_dict[node_id]
        except KeyError:
            raise GraphError(f"no node {node_id!r} in the query graph") from None

    def get_neighbors(self, node_id: str) -> list[QueryGraphNode]:
        return [self.nodes_dict[n] for n in self.node(node_id).links]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueryGraph):
            return NotImplemented
        return self.nodes_dict == other.nodes_dict  # the edge count kept aside is no part of what a graph is

    __hash__ = None

    @property
    def edge_count(self) -> int:
        if self._counted is None or self._counted[0] != len(self.nodes_dict):
            self._counted = (len(self.nodes_dict), sum(len(n.links) for n in self.nodes_dict.values()) // 2)
        return self._counted[1]

    def in_order(self, node_ids: Collection[str]) -> list[str]:
        """Those of ``node_ids`` that are in the graph, in the graph's order: a sort of the few, not a scan of all."""
        if 8 * len(node_ids) >= len(self.nodes_dict):
            return list(filter(node_ids.__contains__, self.nodes_dict))
        places = self._places
        if places is None or len(places) != len(self.nodes_dict):
            places = self._places = {node_id: place for place, node_id in enumerate(self.nodes_dict)}
        return sorted((node_id for node_id in node_ids if node_id in places), key=places.__getitem__)

    def _count(self, nodes: int, edges: int) -> None:
        """A change of ``nodes`` nodes and ``edges`` edges made by a method of this class."""
        if self._counted is not None:
            self._counted = (self._counted[0] + nodes, self._counted[1] + edges)

    def edges(self) -> list[tuple[str, str]]:
        return sorted({tuple(sorted((a, b))) for a, n in self.nodes_dict.items() for b in n.links})

    # --- mutations: called only by graph_ops -------------------------------------------------
    def add_node(self, node: QueryGraphNode) -> None:
        if node.id in self.nodes_dict:
            raise GraphError(f"node {node.id!r} is already in the query graph")
        if node.links:
            raise GraphError("a new node joins the graph without links; add edges afterwards")
        self.nodes_dict[node.id] = node
        self._count(1, 0)
        if self._places is not None:  # after the last place given (dicts keep their order: the last key holds it)
            last = next(reversed(self._places), None)
            self._places[node.id] = 0 if last is None else self._places[last] + 1

    def add_edge(self, a: str, b: str) -> bool:
        """Link two nodes both ways. Returns False if they were already linked."""
        if a == b:
            raise GraphError(f"a node cannot be related to itself ({a!r})")
        node_a, node_b = self.node(a), self.node(b)
        if b in node_a.links:
            return False
        node_a.links.append(b)
        node_b.links.append(a)
        self._count(0, 1)
        return True

    def remove_edge(self, a: str, b: str) -> bool:
        node_a, node_b = self.node(a), self.node(b)
        if b not in node_a.links:
            return False
        node_a.links.remove(b)
        node_b.links.remove(a)
        self._count(0, -1)
        return True

    def restore_edge(self, a: str, b: str, index_in_a: int, index_in_b: int) -> None:
        """Put back a removed edge at the places it had in both link lists (for a rollback)."""
        self.node(a).links.insert(index_in_a, b)
        self.node(b).links.insert(index_in_b, a)
        self._count(0, 1)

    def order(self) -> list[str]:
        """The node ids in the graph's order (insertion order)."""
        return list(self.nodes_dict)

    def reorder(self, order: list[str]) -> None:
        """Put the nodes back in ``order`` (ids not in the graph are skipped; for a rollback)."""
        items = [(node_id, self.nodes_dict[node_id]) for node_id in order if node_id in self.nodes_dict]
        self.nodes_dict.clear()
        self.nodes_dict.update(items)
        self._places = None

    def delete_node(self, node_id: str) -> QueryGraphNode:
        node = self.node(node_id)
        for other in list(node.links):
            self.remove_edge(node_id, other)
        self._count(-1, 0)
        if self._places is not None:
            self._places.pop(node_id, None)
        return self.nodes_dict.pop(node_id)

    def check(self) -> None:
        """Raise GraphError if any invariant is broken (used on import and in tests)."""
        for node_id, node in self.nodes_dict.items():
            if node.id != node_id:
                raise GraphError(f"node stored under {node_id!r} says its id is {node.id!r}")
            if len(set(node.links)) != len(node.links):
                raise GraphError(f"node {node_id!r} lists a neighbour twice")
            for other in node.links:
                if other == node_id:
                    raise GraphError(f"node {node_id!r} is linked to itself")
                if other not in self.nodes_dict:
                    raise GraphError(f"node {node_id!r} links to missing node {other!r}")
                if node_id not in self.nodes_dict[other].links:
                    raise GraphError(f"edge {node_id!r} -> {other!r} is not symmetric")
