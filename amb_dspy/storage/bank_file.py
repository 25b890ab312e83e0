"""One JSON file holds a whole bank: Insight Doc, Query Graph (embeddings included) and Interaction Tree.

Embeddings are stored, not recomputed: float32 values survive JSON exactly, so an imported bank is
equal to the exported one and importing needs no embedding model run. A file is validated in full
(schema version, types, graph and tree invariants) before anything uses it.

The file carries the nodes' vectors but not the evidence view's line vectors
(:mod:`amb_dspy.storage.line_vectors`): they would be most of it (a million-token bank has some 25,000 lines,
38 MB of float32 before JSON's text), the whole file is rewritten at each export, and an interchange file
should hold what cannot be made again; a line's vector is its text run through the model. A bank opened from
JSON embeds its lines at its first evidence question, or at its first save to a bank database
(:mod:`amb_dspy.storage.bank_db`), which keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from amb_dspy.errors import UserError
from amb_dspy.files import PRIVATE_MODE, write_atomically
from amb_dspy.notices import Notify, notice
from amb_dspy.storage.hops import Hop
from amb_dspy.storage.insight_doc import InsightDoc, legacy_pending
from amb_dspy.storage.interaction_tree import InteractionEntry, InteractionTree, MergeEvent
from amb_dspy.storage.line_vectors import LineVectors
from amb_dspy.storage.query_graph import GraphError, QueryGraph, QueryGraphNode

# 2: nodes carry their sources (entry id + character spans) and the file names its embedding model.
# 3: the Insight Doc's pending task is typed (``pending``: kind, description, node ids), its text kept in
# ``pending_tasks``. Files of versions 1-2 still load: nodes of version 1 without sources, and pending tasks
# of both typed from their text (storage.insight_doc.legacy_pending).
# 4: a node may be marked superseded (``superseded_by``: the entry of its document's newer version); files of
# versions 1-3 load with every node current.
SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
FORMAT_NAME = "amb-dspy-bank"


class BankFileError(UserError, ValueError):
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
    schema_version: Literal[1, 2, 3, 4] = SCHEMA_VERSION
    embedding_model: str | None = None
    hops: list[Hop] = []
    insight_doc: InsightDoc | None
    query_graph: _GraphData
    interaction_tree: _TreeData


def dump_bank(path: str | Path, insight_doc: InsightDoc | None, graph: QueryGraph, tree: InteractionTree,
              embedding_dim: int, embedding_model: str | None = None, hops: list[Hop] = (),
              notify: Notify = notice) -> Path:
    """Write the bank atomically (a temporary file renamed into place); returns the path written.

    A bank file is replaced only by a bank holding at least as many nodes and entries (a run stopped
    early by Ctrl-C must not turn the last good export into an empty one); a smaller bank goes to a new
    name beside it (:func:`export_target`), with a notice."""
    target = export_target(Path(path), len(graph.nodes_dict), len(tree.entries), notify)
    return write_json_atomically(target, bank_payload(insight_doc, graph, tree, embedding_dim, embedding_model, hops))


def _bank_size(path: Path) -> tuple[int, int] | None:
    """(nodes, entries) of the bank file at ``path``; ``None`` when there is none or it is no bank."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return len(raw["query_graph"]["nodes"]), len(raw["interaction_tree"]["entries"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def export_target(path: Path, nodes: int, entries: int, notify: Notify = notice,
                  size: Callable[[Path], tuple[int, int] | None] = _bank_size) -> Path:
    """``path``, unless the bank file there holds more nodes or entries than the bank to be written:
    then the first free ``<stem>.<n><suffix>`` beside it, and a notice saying so. ``size`` reads a file's
    (nodes, entries), ``None`` when it holds no bank."""
    old = size(path)
    if old is None or (nodes >= old[0] and entries >= old[1]):
        return path
    number = 1
    while (target := path.with_name(f"{path.stem}.{number}{path.suffix}")).exists():
        number += 1
    notify(f"{path} holds a larger bank ({old[0]} nodes, {old[1]} entries) than this one ({nodes} nodes, "
           f"{entries} entries): kept it and wrote {target}")
    return target


def bank_payload(insight_doc: InsightDoc | None, graph: QueryGraph, tree: InteractionTree, embedding_dim: int,
                 embedding_model: str | None = None, hops: list[Hop] = ()) -> dict[str, Any]:
    """The bank as the JSON object a bank file holds."""
    return {
        "hops": [hop.model_dump(mode="json") for hop in hops],
        "format": FORMAT_NAME,
        "schema_version": SCHEMA_VERSION,
        "embedding_model": embedding_model,
        "insight_doc": insight_doc.model_dump(mode="json") if insight_doc else None,
        "query_graph": {
            "embedding_dim": embedding_dim,
            "nodes": [n.model_dump(mode="json") for n in graph.nodes_dict.values()],
        },
        "interaction_tree": tree.to_dict(),
    }


def write_json_atomically(path: str | Path, payload: Any) -> Path:
    """``payload`` as JSON at ``path``, through the one atomic writer: a reader (or a process killed
    mid-write) sees the old file or the new one, never half of one. Owner-only, as bank files have always been."""
    return write_atomically(path, json.dumps(payload, ensure_ascii=False), mode=PRIVATE_MODE)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "top level"
    return f"{where}: {err['msg']}"


class LoadedBank(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    insight_doc: InsightDoc | None
    graph: QueryGraph
    tree: InteractionTree
    embedding_model: str | None
    hops: list[Hop] = []
    line_vectors: LineVectors | None = None  # a bank database's stored line vectors (a JSON file has none)
    line_layouts: dict[str, bytes] = {}  # a bank database's stored line layouts of this save (bank_rows.LineLayouts)


def load_bank(path: str | Path, embedding_dim: int | None) -> LoadedBank:
    """Read and fully validate a bank file; raise BankFileError (one line) if it is not a valid bank.

    ``embedding_dim=None`` accepts the dimension the file declares (every node must still have it):
    for readers that only look at a bank and never embed anything into it.
    """
    path = Path(path)
    return bank_from_payload(_read_json(path), embedding_dim, path)


def bank_from_payload(raw: Any, embedding_dim: int | None, where: str | Path | object) -> LoadedBank:
    """A bank from the JSON object a bank file holds, validated in full (BankFileError naming ``where``: a path, or
    a named bank in PostgreSQL)."""
    path = Path(where) if isinstance(where, str) else where
    _check_header(path, raw)
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
    return raw


def _check_header(path: Path, raw: Any) -> None:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise BankFileError(f"{path}: not an amb-dspy bank file (missing format '{FORMAT_NAME}')")
    version = raw.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:  # `true` == 1, but it is no version number
        raise BankFileError(
            f"{path}: bank schema version {repr(version)[:50]} is not supported "
            f"(this amb-dspy reads {', '.join(map(str, READABLE_VERSIONS))})"
        )


def _typed_pending(raw: dict[str, Any]) -> dict[str, Any]:
    """A file of schema 1 or 2 with its pending task typed (schema 3 stores the kind; see legacy_pending)."""
    doc = raw.get("insight_doc")
    if raw.get("schema_version", SCHEMA_VERSION) >= 3 or not isinstance(doc, dict) or "pending" in doc:
        return raw
    texts = doc.get("pending_tasks")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return raw  # validation says what is wrong
    return {**raw, "insight_doc": {**doc, "pending": [legacy_pending(t) for t in texts]}}


def _validated(path: Path, raw: dict[str, Any], embedding_dim: int) -> LoadedBank:
    try:
        data = BankFile.model_validate(_typed_pending(raw))
    except ValidationError as exc:
        raise BankFileError(f"{path}: invalid bank file: {_first_error(exc)}") from None
    if embedding_dim is None:
        embedding_dim = data.query_graph.embedding_dim
    elif data.query_graph.embedding_dim != embedding_dim:
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
        tree = InteractionTree.from_dict(dict(data.interaction_tree))  # validated entries, not dumped and read again
        for node_id in tree.node_to_entries:
            if node_id not in graph.nodes_dict:
                raise GraphError(f"interaction entries are linked to unknown node {node_id!r}")
        check_sources(graph, tree)
    except (GraphError, ValueError) as exc:
        raise BankFileError(f"{path}: inconsistent bank: {exc}") from None
    return LoadedBank(insight_doc=data.insight_doc, graph=graph, tree=tree, embedding_model=data.embedding_model,
                      hops=data.hops)


def check_sources(graph: QueryGraph, tree: InteractionTree) -> None:
    """Every node's sources name one of its entries, with spans inside that entry's text (GraphError if not)."""
    node_to_entries = tree.node_to_entries  # a copy each time it is read: read it once, not once a node
    for node in graph.nodes_dict.values():
        if node.superseded_by is not None and node.superseded_by not in tree.entries:
            raise GraphError(f"node {node.id!r} is superseded by a missing entry {node.superseded_by!r}")
        linked = set(node_to_entries.get(node.id, ()))
        for source in node.sources:
            if source.entry_id not in linked:
                raise GraphError(f"node {node.id!r} names a source entry {source.entry_id!r} it is not linked to")
            size = len(tree.entries[source.entry_id].text)
            for start, end in source.spans:
                if not 0 <= start < end <= size:
                    raise GraphError(f"node {node.id!r} has a source span [{start}, {end}) outside its entry "
                                     f"of {size} characters")
