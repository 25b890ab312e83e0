"""One JSON file holds a whole bank: Insight Doc, Query Graph (embeddings included) and Interaction Tree.

Embeddings are stored, not recomputed: float32 values survive JSON exactly, so an imported bank is
equal to the exported one and importing needs no embedding model run. A file is validated in full
(schema version, types, graph and tree invariants) before anything uses it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionEntry, InteractionTree, MergeEvent
from amb_dspy.storage.query_graph import GraphError, QueryGraph, QueryGraphNode

SCHEMA_VERSION = 1
FORMAT_NAME = "amb-dspy-bank"


class BankFileError(ValueError):
    """A bank file cannot be read; the message is one line saying why."""


class _TreeData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entries: list[InteractionEntry]
    node_to_entries: dict[str, list[str]]
    merge_events: list[MergeEvent]


class _GraphData(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    embedding_dim: int
    nodes: list[QueryGraphNode]


class BankFile(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    format: Literal["amb-dspy-bank"] = FORMAT_NAME
    schema_version: Literal[1] = SCHEMA_VERSION
    insight_doc: InsightDoc | None
    query_graph: _GraphData
    interaction_tree: _TreeData


def dump_bank(path: str | Path, insight_doc: InsightDoc | None, graph: QueryGraph, tree: InteractionTree,
              embedding_dim: int) -> Path:
    """Write the bank atomically (a temporary file renamed into place)."""
    path = Path(path)
    payload: dict[str, Any] = {
        "format": FORMAT_NAME,
        "schema_version": SCHEMA_VERSION,
        "insight_doc": insight_doc.model_dump(mode="json") if insight_doc else None,
        "query_graph": {
            "embedding_dim": embedding_dim,
            "nodes": [n.model_dump(mode="json") for n in graph.nodes_dict.values()],
        },
        "interaction_tree": tree.to_dict(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(payload, handle, ensure_ascii=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "top level"
    return f"{where}: {err['msg']}"


def load_bank(path: str | Path, embedding_dim: int) -> tuple[InsightDoc | None, QueryGraph, InteractionTree]:
    """Read and fully validate a bank file; raise BankFileError (one line) if it is not a valid bank."""
    path = Path(path)
    raw = _read_json(path)
    try:
        return _validated(path, raw, embedding_dim)
    except RecursionError:  # metadata nested deeper than Python's stack, though the JSON parser coped
        raise BankFileError(f"{path}: invalid bank file: data nested too deeply") from None


def _read_json(path: Path) -> dict[str, Any]:
    """The bank file's top-level JSON object, its format name and schema version checked."""
    if not path.is_file():
        raise BankFileError(f"{path}: no such bank file")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise BankFileError(f"{path}: not a text file (binary data)") from None
    except OSError as exc:
        raise BankFileError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    except json.JSONDecodeError as exc:
        raise BankFileError(f"{path}: not valid JSON (truncated or corrupt?) at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise BankFileError(f"{path}: JSON nested too deeply to be a bank file") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BankFileError(f"{path}: not a valid bank file ({' '.join(str(exc).split())[:150]})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise BankFileError(f"{path}: not an amb-dspy bank file (missing format '{FORMAT_NAME}')")
    version = raw.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # `true` == 1, but it is no version number
        raise BankFileError(
            f"{path}: bank schema version {repr(version)[:50]} is not supported (this amb-dspy reads {SCHEMA_VERSION})"
        )
    return raw


def _validated(path: Path, raw: dict[str, Any], embedding_dim: int
               ) -> tuple[InsightDoc | None, QueryGraph, InteractionTree]:
    try:
        data = BankFile.model_validate(raw)
    except ValidationError as exc:
        raise BankFileError(f"{path}: invalid bank file: {_first_error(exc)}") from None
    if data.query_graph.embedding_dim != embedding_dim:
        raise BankFileError(
            f"{path}: embeddings have dimension {data.query_graph.embedding_dim}, the embedder gives {embedding_dim}"
        )
    graph = QueryGraph()
    try:
        for node in data.query_graph.nodes:
            if node.embedding.shape != (embedding_dim,):
                raise GraphError(f"node {node.id!r} has an embedding of shape {node.embedding.shape}")
            if node.id in graph.nodes_dict:
                raise GraphError(f"node {node.id!r} appears twice")
            graph.nodes_dict[node.id] = node
        graph.check()
        tree = InteractionTree.from_dict(data.interaction_tree.model_dump())
        for node_id in tree.node_to_entries:
            if node_id not in graph.nodes_dict:
                raise GraphError(f"interaction entries are linked to unknown node {node_id!r}")
    except (GraphError, ValueError) as exc:
        raise BankFileError(f"{path}: inconsistent bank: {exc}") from None
    return data.insight_doc, graph, tree
