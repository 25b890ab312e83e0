"""A bank that grows (issue 34): documents added to an existing store, and an evidence view whose cost follows the
question, not the bank -- it ranks candidate lines only, and lays out and indexes only the lines a new node brings.
Real embedding model, real store, heuristic policy (no LM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.view import EvidenceView, Ranking


def session_text(conversation, number: int) -> str:
    return "\n".join(turn.line() for turn in conversation.turns if turn.session == number)


def heuristic_bank(tmp_path: Path, embedder) -> MemoryBank:
    return MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"), embedder=embedder)


@pytest.fixture(scope="module")
def grown(conversation, embedder, tmp_path_factory):
    """Conversation 30's first twelve sessions, added one by one to one store."""
    bank = heuristic_bank(tmp_path_factory.mktemp("grown"), embedder)
    store = None
    for number in range(1, 13):
        date = next(turn.date for turn in conversation.turns if turn.session == number)
        store = bank.ingest(session_text(conversation, number), f"session {number}", into=store, date=date).store
    return store


def test_the_view_over_candidate_lines_is_the_view_over_every_line(grown, conversation):
    candidates = EvidenceView(Ranking(grown))
    every = EvidenceView(Ranking(grown, candidates=10**9))  # the index's top is every line: nothing pruned
    lines = len(candidates.ranking.line_index.refresh())
    assert lines > 3 * candidates.ranking.candidates  # the index gives a third of the bank at most
    questions = [q.question for q in conversation.questions[:40]]
    pruned, differing = 0, []
    for question in questions:
        ranked = candidates.ranking.ranked_evidence(question)
        pruned += len(ranked) < lines
        for budget in (500, 1000):
            mine, all_lines = candidates.block(question, budget), every.block(question, budget)
            if mine != all_lines:
                differing.append(len(set(mine.lines) ^ set(all_lines.lines)))
    assert pruned == len(questions)
    # Pruning is a bound, not a proof: with node vectors pooled from sentences (issue 41) one block of the 80 ends
    # on another line of its last turns ("When was Jon in Rome?" at 1,000 tokens: one line swapped, both chit-chat)
    assert len(differing) <= 1 and all(swapped <= 2 for swapped in differing), differing


def test_each_document_is_its_own_entry_and_its_nodes_are_related_to_the_old_ones(grown):
    entries = list(grown.tree.entries.values())
    assert [entry.metadata["name"] for entry in entries] == [f"session {n}" for n in range(1, 13)]
    assert [entry.metadata["date"] for entry in entries][:2] == ["4:04 pm on 20 January, 2023", "2:32 pm on 29 January, 2023"]
    assert all(len(entry.metadata["sha256"]) == 64 for entry in entries)
    first_nodes = {node_id for node_id, held in grown.tree.node_to_entries.items() if entries[0].entry_id in held}
    later = [node for node in grown.graph.nodes_dict.values() if node.id not in first_nodes]
    assert any(set(node.links) & first_nodes for node in later)  # analysis related later sessions to session 1


def test_adding_an_unchanged_document_again_changes_nothing(conversation, embedder, tmp_path):
    bank = heuristic_bank(tmp_path, embedder)
    ingested = bank.ingest(session_text(conversation, 1), "session 1")
    store = ingested.store
    grown = bank.ingest(session_text(conversation, 2), "session 2", into=store)
    before = store.payload()
    again = bank.ingest(session_text(conversation, 1), "session 1 (again)", into=store)
    assert grown.added and not again.added and again.nodes == grown.nodes
    assert store.payload() == before and len(store.tree) == 2


def test_a_new_document_is_laid_out_and_indexed_alone(conversation, embedder, tmp_path):
    bank = heuristic_bank(tmp_path, embedder)
    ingested = bank.ingest(session_text(conversation, 1), "session 1")
    view = EvidenceView(Ranking(ingested.store))
    question = "What did Gina do after losing her job?"
    view.block(question, 500)
    lines = view.ranking.line_index
    index, laid_out = lines.index, list(lines.lines)
    ingested = bank.ingest(session_text(conversation, 2), "session 2", into=ingested.store)
    grown = view.block(question, 500)
    assert lines.index is index and len(index) == len(lines.lines) > len(laid_out)
    assert lines.lines[:len(laid_out)] == laid_out  # the old lines kept, not laid out again
    fresh = EvidenceView(Ranking(ingested.store))
    assert set(fresh.ranking.line_index.refresh()) == set(lines.lines)
    assert fresh.block(question, 500) == grown


ZEPHYR = "Zephyr (bicycle)\nThe Zephyr racing bike is made by Corvex Cycles.\nIt weighs seven kilograms."
CORVEX = ("Corvex Cycles\nCorvex Cycles is a workshop in Gothenburg.\nIts first owner was Ada Lindqvist.\n\n"
          "Tour de France\nThe Tour de France is a bike race.\nRacing teams start in July, and the Zephyr rides it.")


def described(view: EvidenceView) -> dict:
    """Per line (by its place in the text), what the view's line table and spreading say of it, by name not number."""
    index = view.ranking.line_index
    index.refresh()
    spreading, table, number = index.tables()
    keys = [(line.entry_id, line.start, line.end) for line in index.lines]
    node_of = {n: node_id for node_id, n in number.items()}
    ends = [*table.starts[1:].tolist(), len(table.holders)]
    spread = spreading.spread(["zephyr", "lindqvist", "camp"], {})
    return {key: (keys[table.before[i]] if table.before[i] >= 0 else None,
                  keys[table.after[i]] if table.after[i] >= 0 else None, bool(table.asks[i]),
                  table.speaker_names[table.speakers[i]] if table.speakers[i] >= 0 else "",
                  table.titles[table.headings[i]] if table.headings[i] < len(table.titles) else "",
                  {table.titles[t] for t in table.mentions[i]},
                  {node_of[n] for n in table.holders[table.starts[i]:ends[i]].tolist()}, round(float(spread[i]), 9))
            for i, key in enumerate(keys)}


def test_the_tables_kept_line_by_line_are_the_tables_of_all_lines(conversation, embedder, tmp_path):
    """After adds, the line table and spreading graph brought up to date line by line (a new heading named by an old
    line, a new speaker, new lines beside old ones) read as the ones a fresh view lays out from every line."""
    bank = heuristic_bank(tmp_path, embedder)
    ingested = bank.ingest(ZEPHYR, "zephyr")
    view = EvidenceView(Ranking(ingested.store))
    view.block("Who makes the Zephyr?", 300)
    for text, name in ((session_text(conversation, 1), "session 1"), (CORVEX, "corvex")):
        ingested = bank.ingest(text, name, into=ingested.store)
        view.block("Who makes the Zephyr?", 300)
    grown, fresh = described(view), described(EvidenceView(Ranking(ingested.store)))
    assert grown == fresh
    assert {"Corvex Cycles"} in [facts[5] for facts in grown.values()]  # the old line names the new heading
