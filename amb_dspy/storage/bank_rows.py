"""A bank as rows: what a bank database holds, whichever engine holds it (SQLite, :mod:`amb_dspy.storage.bank_db`,
or PostgreSQL, :mod:`amb_dspy.storage.bank_pg`). One owner of the row layout, so that a bank reads back the same
from either: a node a row (its body JSON without the embedding, its entry ids JSON, its vector float32 bytes),
an entry and a merge event a row of JSON, a header of JSON values (``meta``), and the save point a store keeps of
the last save so that the next one writes only what came after.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amb_dspy.storage.bank_file import FORMAT_NAME, SCHEMA_VERSION, BankFileError
from amb_dspy.storage.hops import Hop
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionTree
from amb_dspy.storage.line_vectors import KEY_BYTES, LineVectors
from amb_dspy.storage.query_graph import QueryGraph

NodeRow = tuple[str, str, str | None, bytes]
"""``(id, body, entries, vector)``: a node without its embedding (JSON), its entry ids (JSON or None), its vector."""


@dataclass(frozen=True)
class SavePoint:
    """What a store knows of the bank database it last saved to or loaded from (``where``: its path, or its
    :class:`~amb_dspy.storage.bank_pg.DatabaseBank`): the database's save id then, and how many entries and merge
    events it held. A later save to the same bank writes only what came after, if the bank still carries that
    save id (nobody else wrote it in between)."""

    where: Any
    save_id: str
    entries: int
    merge_events: int


@dataclass(frozen=True)
class BankParts:
    """What a bank holds, as the store has it (the arguments of :func:`~amb_dspy.storage.bank_file.dump_bank`)."""

    insight_doc: InsightDoc | None
    graph: QueryGraph
    tree: InteractionTree
    embedding_dim: int
    embedding_model: str | None
    hops: list[Hop]
    line_vectors: LineVectors | None = None
    lines_complete: bool = False  # every line of every node written has a vector in line_vectors
    line_layouts: Mapping[str, bytes] = field(default_factory=dict)  # layouts of this bank as saved (layout_rows)


@dataclass(frozen=True)
class SavePlan:
    """What one save writes: ``whole`` (every row, the old ones cleared) or the rows after the save point."""

    whole: bool
    nodes: list[str]
    gone: list[str]
    entries_from: int
    events_from: int


def save_plan(bank: BankParts, since: SavePoint | None, stored_id: str | None, changed: Collection[str]) -> SavePlan:
    """The save's plan: incremental when ``since`` is the save the database still carries (``stored_id``)."""
    if since is not None and stored_id == since.save_id:
        nodes = bank.graph.in_order(changed)
        gone = [node_id for node_id in changed if node_id not in bank.graph.nodes_dict]
        return SavePlan(False, nodes, gone, since.entries, since.merge_events)
    return SavePlan(True, list(bank.graph.nodes_dict), [], 0, 0)


def node_rows(bank: BankParts, node_ids: Iterable[str]) -> list[NodeRow]:
    """The rows of these nodes."""
    rows = []
    for node_id in node_ids:
        node = bank.graph.nodes_dict[node_id]
        body = node.model_dump(mode="json", exclude={"id", "embedding"})
        entries = bank.tree.entry_ids_of(node_id)
        rows.append((node_id, json.dumps(body, ensure_ascii=False), json.dumps(list(entries)) if entries else None,
                     np.ascontiguousarray(node.embedding, dtype=np.float32).tobytes()))
    return rows


def entry_rows(bank: BankParts, start: int) -> list[tuple[int, str, str]]:
    """``(seq, id, body)`` of the entries from ``start`` on."""
    entries = list(bank.tree.entries.values())
    return [(seq, e.entry_id, json.dumps(e.model_dump(mode="json"), ensure_ascii=False))
            for seq, e in enumerate(entries[start:], start=start)]


def event_rows(bank: BankParts, start: int) -> list[tuple[int, str]]:
    """``(seq, body)`` of the merge events from ``start`` on."""
    return [(seq, json.dumps(m.model_dump(mode="json"))) for seq, m in
            enumerate(bank.tree.merge_events[start:], start=start)]


def new_save_id() -> str:
    return uuid.uuid4().hex


def bank_meta(bank: BankParts, save_id: str) -> dict[str, Any]:
    """The header a save writes (values JSON-able)."""
    return {"format": FORMAT_NAME, "schema_version": SCHEMA_VERSION, "embedding_model": bank.embedding_model,
            "embedding_dim": bank.embedding_dim, "save_id": save_id,
            "insight_doc": bank.insight_doc.model_dump(mode="json") if bank.insight_doc else None,
            "hops": [hop.model_dump(mode="json") for hop in bank.hops],
            "lines_embedded": bank.line_vectors.model if bank.line_vectors is not None and bank.lines_complete
            else None}


def bank_payload_from_rows(where: object, meta: dict[str, Any], nodes: Iterable[NodeRow], entries: Iterable[str],
                           events: Iterable[str]) -> dict[str, Any]:
    """The object a JSON bank file would hold, from a bank database's rows (embeddings as arrays; nodes, entries
    and events in order), for :func:`~amb_dspy.storage.bank_file.bank_from_payload` to validate."""
    dim = meta.get("embedding_dim")
    node_list, node_to_entries = [], {}
    for node_id, body, linked, vector in nodes:
        vector = bytes(vector)
        if not isinstance(dim, int) or len(vector) != 4 * dim:
            raise BankFileError(f"{where}: node {node_id!r} has a vector of {len(vector)} bytes, not {dim} float32s")
        node_list.append({**json.loads(body), "id": node_id, "embedding": np.frombuffer(vector, dtype=np.float32)})
        if linked is not None:
            node_to_entries[node_id] = json.loads(linked)
    return {
        **{key: meta.get(key) for key in ("format", "schema_version", "embedding_model", "insight_doc")},
        "hops": meta.get("hops", []),
        "query_graph": {"embedding_dim": dim, "nodes": node_list},
        "interaction_tree": {"entries": [json.loads(body) for body in entries], "node_to_entries": node_to_entries,
                             "merge_events": [json.loads(body) for body in events]},
    }


def line_vectors_from_rows(model_name: str, dim: int, rows: Iterable[tuple[Any, Any]],
                           embedded: str | None) -> LineVectors:
    """The stored line vectors of this model and dimension from their rows' ``(keys, vectors)`` (a row whose
    sizes do not agree is left out: those lines are embedded again); ``embedded``: the header's
    ``lines_embedded``, the model whose vectors cover every line."""
    table = LineVectors(model_name, dim)
    rows = [(bytes(keys), bytes(vectors)) for keys, vectors in rows if isinstance(keys, (bytes, memoryview))
            and isinstance(vectors, (bytes, memoryview))]
    rows = [(keys, vectors) for keys, vectors in rows
            if len(keys) % KEY_BYTES == 0 and len(vectors) == len(keys) // KEY_BYTES * 4 * dim]
    return LineVectors.from_rows(model_name, dim, b"".join(keys for keys, _ in rows), b"".join(v for _, v in rows),
                                 complete=embedded == table.model)


# --- line layouts --------------------------------------------------------------------------------
# What the evidence view builds over a bank's lines (amb_dspy.memory.view.stored_layout: seconds at a million
# tokens) is kept beside the rows, so that a process that opens the bank fresh takes it over instead of building it
# again. Each layout is one opaque blob under a key (what it was built with) and the save id of the bank it
# describes: a save deletes every layout in its own transaction (the rows changed) and writes those it was given
# for the bank it writes, under its new save id; a reader takes only the layouts of the save it read, in the same
# snapshot; a process that had to build one may keep it later in a bank in PostgreSQL (``keep_line_layout``), only
# while the bank still carries that save. A stale layout is never used; a damaged one is built again by the reader.
LAYOUT_KEY_CHARS = 200  # a key longer than this is no layout's


def layout_rows(bank: BankParts, save_id: str) -> list[tuple[str, str, bytes]]:
    """``(key, save_id, body)`` of the layouts a save writes with the bank (under its new save id)."""
    return [(key, save_id, bytes(body)) for key, body in bank.line_layouts.items() if len(key) <= LAYOUT_KEY_CHARS]


def layouts_from_rows(rows: Iterable[tuple[Any, Any]]) -> dict[str, bytes]:
    """The layouts of a bank's current save from their rows' ``(key, body)`` (a row of another shape is left out:
    the reader builds that layout again)."""
    return {key: bytes(body) for key, body in rows
            if isinstance(key, str) and isinstance(body, (bytes, memoryview))}
