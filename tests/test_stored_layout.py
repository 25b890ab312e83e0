"""A bank database keeps the evidence view's layout of its lines (issue 40: a replica's first question), so that a
process that opens the bank fresh takes it over rather than laying the lines out again: used when it is the
bank's current save's, never when the bank changed behind it, laid out again when damaged or missing, and the
blocks the same either way. One suite, two backends (a SQLite bank database and a bank in PostgreSQL).

Real embedding model, real FAISS, real bank databases, a real PostgreSQL server."""

from __future__ import annotations

import hashlib
import json

import pytest

from amb_dspy.memory.bank_cache import BankCache
from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft
from amb_dspy.memory.view import view_for
from amb_dspy.memory.view.line_index import LineIndex, stored_layouts, wait_for_kept
from amb_dspy.memory.view.lines import LINE_TOKENS
from amb_dspy.memory.view.stored_layout import FORMAT
from amb_dspy.storage.bank_pg import DatabaseBank
from amb_dspy.storage.bank_place import bank_at
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionEntry
from amb_dspy.text import estimate_tokens
from tests.test_bank_cache import _shown
from tests.test_first_question import QUESTIONS, small_bank

FINDING = "Zephyrine Okonkwo built the first brass velocipede in Corvex Cycles' old rolling mill in 1871."
ASKED = [*QUESTIONS, "Who built the brass velocipede?", "What did Caroline say about the river?"]


def _place(store_backend, tmp_path):
    """Where the test's bank lives: a bank database file, or the bank "bank" in the test's PostgreSQL database."""
    return bank_at(tmp_path / "bank.sqlite") if store_backend == "sqlite" else DatabaseBank(store_backend, "bank")


def _opened(place, embedder):
    """A task's view of the bank as a process that has just started opens it (a cache of its own, as a fresh
    process has), after its first block; and the layout it took over."""
    store = BankCache().store_for_task(place, embedder, InsightDoc(task_goal=QUESTIONS[0]), [])
    view = view_for(store, "evidence")
    view.block(QUESTIONS[0], 300)
    return view, view.ranking.line_index


def _blocks(view) -> list:
    return [(block.text, block.lines) for question in ASKED for budget in (80, 300, 1000)
            for block in [view.block(question, budget)]]


def _laid_out_here(place, embedder) -> list:
    """The blocks of the bank read alone, its lines laid out from the text (no stored layout can reach it)."""
    return _blocks(view_for(MemoryStore.load(place, embedder), "evidence"))


def test_a_bank_opened_from_its_stored_layout_shows_what_laying_it_out_shows(embedder, tmp_path, store_backend):
    place = _place(store_backend, tmp_path)
    bank = small_bank(embedder)
    bank.save(place, line_layouts=stored_layouts(bank))
    view, index = _opened(place, embedder)
    assert index.stored  # taken over, not laid out
    assert _blocks(view) == _laid_out_here(place, embedder)
    assert index.lines and any(line.text in view.block(QUESTIONS[0], 1000).text for line in index.lines)


def test_the_first_replica_to_lay_a_bank_out_keeps_its_layout_for_the_next(embedder, database_url):
    place = DatabaseBank(database_url, "bank")
    small_bank(embedder).save(place)  # saved with no layout (amb ingest: a save per document)
    assert not place.read(None)[0].line_layouts
    first_view, first = _opened(place, embedder)
    wait_for_kept(30)
    assert not first.stored and len(place.read(None)[0].line_layouts) == 1
    view, index = _opened(place, embedder)  # the next replica
    assert index.stored and _blocks(view) == _blocks(first_view) == _laid_out_here(place, embedder)


def test_a_bank_file_is_left_as_its_reader_found_it(embedder, tmp_path):
    path = small_bank(embedder).save(tmp_path / "bank.sqlite")
    saved = path.read_bytes()
    assert not _opened(path, embedder)[1].stored
    wait_for_kept(30)
    assert path.read_bytes() == saved and not _opened(path, embedder)[1].stored


def test_a_layout_is_never_used_once_another_writer_saved_the_bank(embedder, tmp_path, store_backend):
    place = _place(store_backend, tmp_path)
    bank = small_bank(embedder)
    bank.save(place, line_layouts=stored_layouts(bank))
    old_save, (key, old_layout) = place.saved_id(), next(iter(place.read(None)[0].line_layouts.items()))
    writer = MemoryStore.load(place, embedder)  # another writer adds a finding and saves
    node = writer.add_node(NodeDraft(summary=FINDING, context="velocipede", keywords=["Zephyrine"]))
    writer.record_entry(InteractionEntry(entry_id="finding", text=FINDING), [node.id])
    writer.save(place)
    assert not place.read(None)[0].line_layouts  # the save took the old layout with it
    assert not place.keep_line_layout(old_save, key, old_layout)  # nor can a late keeper put it back
    view, index = _opened(place, embedder)
    assert not index.stored and "Zephyrine" in view.block("Who built the brass velocipede?", 1000).text
    assert _blocks(view) == _laid_out_here(place, embedder)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another bank's"])
def test_a_damaged_or_foreign_layout_is_laid_out_again_without_a_word(embedder, tmp_path, store_backend, damage):
    place = _place(store_backend, tmp_path)
    bank, other = small_bank(embedder), small_bank(embedder)  # the same text under other node ids
    (key, layout), = stored_layouts(bank).items()
    body = {"garbage": b"not a layout", "truncated": layout[: len(layout) // 2],
            "another bank's": stored_layouts(other)[key]}[damage]
    bank.save(place, line_layouts={key: body})
    view, index = _opened(place, embedder)
    assert not index.stored and _blocks(view) == _laid_out_here(place, embedder)
    wait_for_kept(30)  # and a reader of a bank in PostgreSQL put a sound one in its place
    assert _opened(place, embedder)[1].stored == (store_backend != "sqlite")


def test_a_task_adds_to_a_layout_it_took_over_as_to_one_it_laid_out(embedder, tmp_path, store_backend):
    """A task's own additions go on from the restored layout (its lines beside the bank's, a new heading looked for
    among the bank's lines) as from one laid out from the text."""
    place = _place(store_backend, tmp_path)
    bank = small_bank(embedder)
    bank.save(place, line_layouts=stored_layouts(bank))
    taken_over, index = _opened(place, embedder)
    laid_out = view_for(MemoryStore.load(place, embedder), "evidence")
    assert index.stored and not laid_out.ranking.line_index.stored
    text = f"Corvex Cycles\n{FINDING} The mill stood where the river bends.\n\nLater the mill made Corvex Cycles famous."
    for view in (taken_over, laid_out):
        store = view.ranking.store
        with store.transaction():
            node = store.add_node(NodeDraft(summary=FINDING, context="Corvex Cycles", keywords=["Zephyrine"]))
            store.record_entry(InteractionEntry(entry_id="finding", text=text), [node.id])
    assert [_shown(block) for block in _blocks_of(taken_over)] == [_shown(block) for block in _blocks_of(laid_out)]
    assert "Zephyrine" in taken_over.block("Who built the brass velocipede?", 1000).text


def _blocks_of(view) -> list:
    return [view.block(question, budget) for question in ASKED for budget in (80, 300, 1000)]


LAYOUT_PINNED = (1, "c7638f832c1f644e")  # (stored_layout.FORMAT, the digest below) of laying out small_bank


def test_what_laying_out_finds_is_pinned_to_the_stored_layouts_format(embedder):
    """A stored layout is checked against its bank by ids and ranges, not by its content: one made by other rules
    (how lines are cut, their terms, headings, speakers) would be taken over. So a change in what laying out finds
    must bump stored_layout.FORMAT, which makes every older layout be laid out again; this digest says when."""
    index = LineIndex(small_bank(embedder), estimate_tokens, LINE_TOKENS, adopt=False)
    index.refresh()
    laid, layout = index.laid(), index.laid().layout
    found = [[(line.start, line.end, line.text) for line in laid.lines], laid.indexed, laid.label_sizes, layout.before,
             layout.after, layout.asks, layout.speakers, sorted(layout.speaker_names.items()), layout.headings,
             sorted(layout.titles.items()), layout.mentions]
    digest = hashlib.sha256(json.dumps(found).encode("utf-8")).hexdigest()[:16]
    assert (FORMAT, digest) == LAYOUT_PINNED, (
        "laying out finds something else: bump stored_layout.FORMAT and pin the new (FORMAT, digest) here")
