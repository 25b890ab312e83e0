"""Layer 2, the Query Graph: compressed topic nodes joined by undirected ``related`` edges.

Adjacency lists, no NetworkX. The graph checks its own invariants (symmetric edges, no self-loops,
no dangling links); only :mod:`amb_dspy.memory.graph_ops` calls its mutating methods, so that the graph,
the tree and the retrieval indexes always change together.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

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

    @property
    def edge_count(self) -> int:
        return sum(len(n.links) for n in self.nodes_dict.values()) // 2

    def edges(self) -> list[tuple[str, str]]:
        return sorted({tuple(sorted((a, b))) for a, n in self.nodes_dict.items() for b in n.links})

    # --- mutations: called only by graph_ops -------------------------------------------------
    def add_node(self, node: QueryGraphNode) -> None:
        if node.id in self.nodes_dict:
            raise GraphError(f"node {node.id!r} is already in the query graph")
        if node.links:
            raise GraphError("a new node joins the graph without links; add edges afterwards")
        self.nodes_dict[node.id] = node

    def add_edge(self, a: str, b: str) -> bool:
        """Link two nodes both ways. Returns False if they were already linked."""
        if a == b:
            raise GraphError(f"a node cannot be related to itself ({a!r})")
        node_a, node_b = self.node(a), self.node(b)
        if b in node_a.links:
            return False
        node_a.links.append(b)
        node_b.links.append(a)
        return True

    def remove_edge(self, a: str, b: str) -> bool:
        node_a, node_b = self.node(a), self.node(b)
        if b not in node_a.links:
            return False
        node_a.links.remove(b)
        node_b.links.remove(a)
        return True

    def restore_edge(self, a: str, b: str, index_in_a: int, index_in_b: int) -> None:
        """Put back a removed edge at the places it had in both link lists (for a rollback)."""
        self.node(a).links.insert(index_in_a, b)
        self.node(b).links.insert(index_in_b, a)

    def order(self) -> list[str]:
        """The node ids in the graph's order (insertion order)."""
        return list(self.nodes_dict)

    def reorder(self, order: list[str]) -> None:
        """Put the nodes back in ``order`` (ids not in the graph are skipped; for a rollback)."""
        items = [(node_id, self.nodes_dict[node_id]) for node_id in order if node_id in self.nodes_dict]
        self.nodes_dict.clear()
        self.nodes_dict.update(items)

    def delete_node(self, node_id: str) -> QueryGraphNode:
        node = self.node(node_id)
        for other in list(node.links):
            self.remove_edge(node_id, other)
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
