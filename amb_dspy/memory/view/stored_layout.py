"""The evidence view's layout of a bank's lines as a bank database keeps it, so that a fresh process takes it over.

Laying out a bank's lines (:class:`~amb_dspy.memory.view.line_index.LineIndex`: every node's provenance cut into
lines, each line's terms, heading, label and speaker found) takes seconds at a million tokens, and every process that
opens the bank did it again on its first question (issue 40: a replica's first ``memory_context``). The layout is a
function of the bank's content, so it is kept in the bank database beside the rows
(:mod:`amb_dspy.storage.bank_rows`: a blob per key, under the save id of the bank it describes) and read with them.

A layout is what the text work found, line by line, as numbers and strings (:func:`encode`): where each line is
(its entry, start and end), the node that laid it out first and every node that holds it, its index terms (its
heading's and label's, then its own), its heading and its speaker. Taking it over (:func:`restore`) replays the
lines into a :class:`LineIndex` as laying them out would have added them, without reading a source text but
each line's slice: the indexes and tables built from them are the same, so the blocks are too. It is arrays in
a ``numpy`` ``.npz`` read with ``allow_pickle=False`` (a bank may come from elsewhere: nothing in it runs code),
checked against the bank it is restored on (counts, ids, every index in range); anything else, a damaged or a
foreign layout, is ignored and the lines are laid out again.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.lines import Evidence
from amb_dspy.retrieval.keyword import Numbering
from amb_dspy.retrieval.line_ranking import LineLayout
from amb_dspy.retrieval.spreading import TermLines
from amb_dspy.text import estimate_tokens

FORMAT = 1  # bumped whenever what laying out finds changes (source_lines' rules, the terms): old layouts are ignored
_BROKEN = (ValueError, KeyError, IndexError, TypeError, OSError, EOFError, zipfile.BadZipFile, UnicodeDecodeError)


@dataclass
class LaidLines:
    """What laying out a store's lines found, as :class:`~amb_dspy.memory.view.line_index.LineIndex` keeps it: the
    lines, the ids of the nodes that hold each, each line's index terms (how many of them its heading's and label's)
    and what its line table reads; besides, what follows from those (each line's position by place, each node's lines,
    the lines' terms for the spreading), filled in by :func:`restore`."""

    lines: list[Evidence]
    holders: list[list[str]]
    indexed: list[list[str]]
    label_sizes: list[int]
    layout: LineLayout
    position: dict[tuple[str, int, int], int] = field(default_factory=dict)
    lines_of: dict[str, list[int]] = field(default_factory=dict)
    terms: TermLines = field(default_factory=TermLines)


def layout_key(count: Callable[[str], int], line_tokens: int) -> str | None:
    """The key a layout made with this token counter and line length is kept under; None for a counter other than
    the default :func:`~amb_dspy.text.estimate_tokens` (a layout made with another one is no one else's)."""
    if getattr(count, "__wrapped__", count) is not estimate_tokens:
        return None
    return f"evidence-lines/{FORMAT}/estimate_tokens/{line_tokens}"


def _strings(values: Sequence[str]) -> np.ndarray:
    return np.frombuffer("\n".join(values).encode("utf-8"), dtype=np.uint8)


def _unstrings(array: np.ndarray, count: int) -> list[str]:
    values = array.tobytes().decode("utf-8").split("\n") if count else []
    if len(values) != count:
        raise ValueError("a string table of another size")
    return values


def _digest(store: MemoryStore) -> str:
    """What a layout is checked against: the bank's node ids and entry ids, in order."""
    ids = "\n".join(store.graph.nodes_dict) + "\0" + "\n".join(store.tree.entries)
    return hashlib.blake2b(ids.encode("utf-8"), digest_size=16).hexdigest()


def _ragged(rows: Iterable[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of numbers as two arrays: their values end to end, and each row's size."""
    rows = list(rows)
    return (np.array([value for row in rows for value in row], dtype=np.int32),
            np.array([len(row) for row in rows], dtype=np.int32))


def _unragged(values: list, sizes: list) -> list[list]:
    """:func:`_ragged`'s rows back (``sizes`` summing to ``len(values)``: checked by the caller)."""
    return [values[end - size:end] for end, size in zip(accumulate(sizes), sizes)]


def encode(store: MemoryStore, laid: LaidLines) -> bytes:
    """The layout of ``store``'s lines (``laid``: all of them, laid out) as a bank database keeps it."""
    layout, lines = laid.layout, laid.lines
    number = {node_id: i for i, node_id in enumerate(store.graph.nodes_dict)}
    entry_number = {entry_id: i for i, entry_id in enumerate(store.tree.entries)}
    vocabulary = Numbering()
    terms, term_sizes = _ragged([vocabulary[term] for term in indexed] for indexed in laid.indexed)
    title_terms, title_sizes = _ragged([vocabulary[term] for term in sorted(words)] for words in layout._title_words)
    held, held_sizes = _ragged([number[node_id] for node_id in held] for held in laid.holders)
    mentions, mention_sizes = _ragged(layout.mentions)
    meta = {"format": FORMAT, "lines": len(lines), "nodes": len(number), "entries": len(entry_number),
            "digest": _digest(store), "terms": len(vocabulary), "titles": len(layout.titles),
            "speakers": len(layout.speaker_names)}
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8),
              "entry": np.array([entry_number[line.entry_id] for line in lines], dtype=np.int32),
              "start": np.array([line.start for line in lines], dtype=np.int64),
              "end": np.array([line.end for line in lines], dtype=np.int64),
              "first": np.array([number[line.node_id] for line in lines], dtype=np.int32),
              "held": held, "held_sizes": held_sizes, "terms": terms, "term_sizes": term_sizes,
              "label_sizes": np.array(laid.label_sizes, dtype=np.int32),
              "before": np.array(layout.before, dtype=np.int32), "after": np.array(layout.after, dtype=np.int32),
              "asks": np.array(layout.asks, dtype=np.int32), "heading": np.array(layout.headings, dtype=np.int32),
              "speaker": np.array(layout.speakers, dtype=np.int32), "mentions": mentions, "mention_sizes": mention_sizes,
              "title_terms": title_terms, "title_sizes": title_sizes, "vocabulary": _strings(list(vocabulary)),
              "titles": _strings(list(layout.titles)), "speaker_names": _strings(list(layout.speaker_names))}
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def restore(store: MemoryStore, body: bytes) -> LaidLines | None:
    """The lines of ``store`` as laying them out found them, from a stored layout; None when it is damaged or not
    this bank's."""
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        return _replayed(store, _checked(store, arrays))
    except _BROKEN:
        return None


_PER_LINE = ("entry", "start", "end", "first", "held_sizes", "term_sizes", "label_sizes", "before", "after", "asks",
             "heading", "speaker", "mention_sizes")
_RAGGED = (("held", "held_sizes"), ("terms", "term_sizes"), ("mentions", "mention_sizes"), ("title_terms", "title_sizes"))


def _checked(store: MemoryStore, arrays: dict[str, np.ndarray]) -> dict[str, list]:
    """The layout's tables as lists, each checked to be of the size and in the range ``store``'s bank allows."""
    meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
    lines, nodes, entries = meta["lines"], len(store.graph.nodes_dict), len(store.tree.entries)
    if (meta["format"], meta["nodes"], meta["entries"], meta["digest"]) != (FORMAT, nodes, entries, _digest(store)):
        raise ValueError("a layout of another bank")
    tables = {name: arrays[name].tolist() for name in (*_PER_LINE, "held", "terms", "mentions", "title_terms",
                                                       "title_sizes")}
    for name in ("vocabulary", "titles", "speaker_names"):
        tables[name] = _unstrings(arrays[name], meta[{"vocabulary": "terms", "speaker_names": "speakers"}.get(name, name)])
    bounds = [("entry", 0, entries), ("first", 0, nodes), ("held", 0, nodes), ("terms", 0, meta["terms"]),
              ("title_terms", 0, meta["terms"]), ("mentions", 0, meta["titles"]), ("heading", -1, meta["titles"]),
              ("speaker", -1, meta["speakers"]), ("before", -1, lines), ("after", -1, lines)]  # -1: none
    if (any(len(tables[name]) != lines for name in _PER_LINE) or len(tables["title_sizes"]) != meta["titles"]
            or any(sum(tables[sizes]) != len(tables[values]) for values, sizes in _RAGGED)
            or any(tables[name] and (min(tables[name]) < low or max(tables[name]) >= top) for name, low, top in bounds)
            or any(not 0 <= label <= size for label, size in zip(tables["label_sizes"], tables["term_sizes"]))):
        raise ValueError("a layout out of range")
    return tables


def _replayed(store: MemoryStore, tables: dict[str, list]) -> LaidLines:
    """The stored lines as laying them out added them (:meth:`LineIndex._add_line`)."""
    node_ids, entry_ids, entries = list(store.graph.nodes_dict), list(store.tree.entries), store.tree.entries
    vocabulary, lines, position, places = tables["vocabulary"], [], {}, []
    for i, (entry, start, end) in enumerate(zip(tables["entry"], tables["start"], tables["end"])):
        entry_id = entry_ids[entry]
        text = entries[entry_id].text
        if not 0 <= start <= end <= len(text):
            raise ValueError("a line outside its entry")
        position[(entry_id, start, end)] = i
        lines.append(Evidence(entry_id, start, end, text[start:end], node_ids[tables["first"][i]]))
        places.append((entry_id, start))
    if len(position) != len(lines):
        raise ValueError("a line laid out twice")
    indexed = [[vocabulary[term] for term in row] for row in _unragged(tables["terms"], tables["term_sizes"])]
    own = [row[label:] for row, label in zip(indexed, tables["label_sizes"])]
    titles = [[vocabulary[term] for term in row] for row in _unragged(tables["title_terms"], tables["title_sizes"])]
    layout = LineLayout.restored(places, tables["before"], tables["after"], list(map(bool, tables["asks"])),
                                 tables["speaker"], tables["speaker_names"], tables["heading"], tables["titles"], titles,
                                 _unragged(tables["mentions"], tables["mention_sizes"]), own)
    holders = [[node_ids[n] for n in held] for held in _unragged(tables["held"], tables["held_sizes"])]
    laid = LaidLines(lines, holders, indexed, tables["label_sizes"], layout, position, terms=TermLines(own))
    for line, held in enumerate(holders):
        for node_id in held:
            laid.lines_of.setdefault(node_id, []).append(line)
    return laid
