"""A task on a bank that is already open starts warm (issue 40): a bank version is read and laid out once per
process, its store and the evidence view's layout shared by every task on it until that task's first change, and
a task's additions stay its own.

Real embedding model, real FAISS, real bank files (a bank database and a JSON file), real sessions."""

from __future__ import annotations

import itertools
import re

import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft
from amb_dspy.memory.view import EvidenceView, Ranking, SummaryView
from amb_dspy.storage.bank_file import BankFileError
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionEntry
from tests.test_first_question import QUESTIONS, small_bank

FINDING = "Zephyrine Okonkwo built the first brass velocipede in Corvex Cycles' old rolling mill in 1871."


def _amb(tmp_path, embedder, **settings) -> MemoryBank:
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", recall=False,
                       **settings)
    return MemoryBank(config, embedder=embedder)


def _line_index(session):
    return session.memory.adapter.view.ranking.line_index


def test_two_tasks_on_one_bank_share_its_store_and_layout(embedder, tmp_path):
    path = small_bank(embedder).save(tmp_path / "storage" / "bank.sqlite")
    amb = _amb(tmp_path, embedder)
    first, second = amb.start_session(QUESTIONS[0], bank=path), amb.start_session(QUESTIONS[1], bank=path)
    first.context(200), second.context(200)
    shared, own = _line_index(first), _line_index(second)
    assert first.store.graph is second.store.graph and first.store.index is second.store.index
    assert first.store.lender is second.store.lender is not None  # one store read from the file, lent to both
    assert own.index is shared.index and own.lines is shared.lines and own.tables()[1] is shared.tables()[1]
    assert first.store.insight_doc.task_goal == QUESTIONS[0] and second.store.insight_doc.task_goal == QUESTIONS[1]


def test_a_tasks_addition_is_its_own_and_the_shared_bank_stays_as_it_was(embedder, tmp_path):
    path = small_bank(embedder).save(tmp_path / "storage" / "bank.sqlite")
    amb = _amb(tmp_path, embedder)
    adding, other = amb.start_session(QUESTIONS[0], bank=path), amb.start_session(QUESTIONS[1], bank=path)
    other.context(200)
    assert adding.store.graph is other.store.graph  # shared until the change below
    bank, lines = other.store.lender, list(_line_index(other).lines)
    nodes, vectors = len(bank.graph), len(bank.line_vectors)
    observed = adding.observe("search", {"q": "velocipede"}, FINDING)
    assert observed.node_ids and adding.store.lender is None and adding.store.graph is not bank.graph
    assert "Zephyrine" in adding.context(300) and "Zephyrine" not in other.context(300)
    assert not set(observed.node_ids) & set(other.store.graph.nodes_dict) and len(other.store.graph) == nodes
    assert _line_index(other).lines == lines and len(_line_index(adding).lines) > len(lines)
    assert observed.entry_id not in bank.tree.entries and (len(bank.graph), len(bank.line_vectors)) == (nodes, vectors)
    later = amb.start_session(QUESTIONS[2], bank=path)
    assert later.store.lender is bank and "Zephyrine" not in later.context(300)


def _shown(block) -> tuple:
    """What a block shows, but the ids a new node draws at random."""
    return (re.sub(r"node [0-9a-f]+", "node ?", block.text), [(line.entry_id, line.start, line.end, line.score)
            for line in block.lines], [node.summary for node in block.nodes])


def _add_finding(store: MemoryStore, number: int) -> None:
    node = store.add_node(NodeDraft(summary=FINDING, context="velocipede", keywords=["Zephyrine"]))
    store.record_entry(InteractionEntry(entry_id=f"finding {number}", text=FINDING), [node.id])


def test_a_lent_task_shows_what_a_task_that_read_the_bank_alone_shows(embedder, tmp_path):
    """The shared layout changes nothing a task sees, before its first change and after, in both views; a JSON bank
    (no line vectors stored) gives the task the vectors the shared layout embedded."""
    for name in ("bank.sqlite", "bank.json"):
        path = small_bank(embedder).save(tmp_path / "storage" / name)
        amb = _amb(tmp_path, embedder)
        amb.start_session(QUESTIONS[0], bank=path).context(200)  # the layout made by another task
        task = amb.start_session(QUESTIONS[0], bank=path)
        assert task.store.lender is not None
        alone = MemoryStore.load_for_task(path, embedder, InsightDoc(task_goal=QUESTIONS[0]))
        views = [(kind(Ranking(task.store)), kind(Ranking(alone))) for kind in (EvidenceView, SummaryView)]
        for number in range(2):  # the views of the bank as it was, then of the task's addition besides
            for ours, reference in views:
                for question, budget in itertools.product([*QUESTIONS, FINDING], (60, 200)):
                    assert _shown(ours.block(question, budget)) == _shown(reference.block(question, budget))
            assert len(task.store.line_vectors) == len(alone.line_vectors) > 0
            _add_finding(task.store, number)
            _add_finding(alone, number)
        assert task.store.lender is None and "Zephyrine" in views[0][0].block(FINDING, 200).text


def test_a_new_version_of_a_bank_gets_its_own_entry(embedder, tmp_path):
    for name in ("bank.sqlite", "bank.json"):
        path = small_bank(embedder).save(tmp_path / "storage" / name)
        amb = _amb(tmp_path, embedder)
        before = amb.start_session(QUESTIONS[0], bank=path).store
        path.touch()  # a newer time, the same content: the same version
        assert amb.start_session(QUESTIONS[0], bank=path).store.lender is before.lender
        grown = MemoryStore.load(path, embedder)
        grown.add_node(NodeDraft(summary=FINDING, context="velocipede", keywords=["Zephyrine"]))
        grown.save(path)  # a bank database's new save id; a JSON file's new content
        after = amb.start_session(QUESTIONS[0], bank=path).store
        assert after.lender is not before.lender and len(after.graph) == len(before.graph) + 1
        assert amb.start_session(QUESTIONS[1], bank=path).store.lender is after.lender


def test_the_cache_keeps_the_most_recently_used_banks_it_is_sized_for(embedder, tmp_path):
    from amb_dspy.memory.bank_cache import BankCache  # here: the module is new (its test runs on the old code)

    paths = [small_bank(embedder).save(tmp_path / f"bank{i}.sqlite") for i in range(2)]
    cache = BankCache(size=1)
    first = cache.store_for_task(paths[0], embedder, None, [])
    assert cache.store_for_task(paths[0], embedder, None, []).lender is first.lender and len(cache) == 1
    cache.store_for_task(paths[1], embedder, None, [])
    assert len(cache) == 1 and cache.store_for_task(paths[0], embedder, None, []).lender is not first.lender
    amb = _amb(tmp_path, embedder, bank_cache=0)  # none kept: every task reads its bank alone
    assert amb.config.view.bank_cache == 0 and amb.start_session(QUESTIONS[0], bank=paths[0]).store.lender is None


def test_a_bank_that_cannot_be_read_keeps_no_place(embedder, tmp_path):
    from amb_dspy.memory.bank_cache import BankCache

    cache, bad = BankCache(size=2), tmp_path / "bad.sqlite"
    bad.write_bytes(b"SQLite format 3\x00 but nothing after")
    for path in (bad, tmp_path / "missing.json"):
        with pytest.raises(BankFileError):
            cache.store_for_task(path, embedder, None, [])
    assert len(cache) == 0
