"""The first question after opening a big bank (issue 34): a task opened from a bank file is not copied again,
and the evidence view lays out each line's words once, reading them as it did when it read them three times.

Real embedding model, real FAISS, real bank files."""

from __future__ import annotations

from typing import get_args

import numpy as np

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft
from amb_dspy.memory.view import (
    VIEWS,
    EvidenceView,
    Ranking,
    RankWeights,
    SummaryView,
    ViewName,
    heading_of,
    label_of,
)
from amb_dspy.retrieval.keyword import stem, terms, tokenize
from amb_dspy.storage.hops import Hop
from amb_dspy.storage.insight_doc import InsightDoc
from amb_dspy.storage.interaction_tree import InteractionEntry
from amb_dspy.task.inputs import start_store

ARTICLES = """Corvex Cycles
Corvex Cycles is a bicycle maker founded in Uppsala in 1921 by Ada Lindqvist. Its frames are brazed by hand. \
The company moved its works to Gävle in 1958, where the old rolling mill still stands. It sells a dozen models \
a year, most of them to riders in Sweden and Norway, and it has never built a frame of carbon fibre.

Ada Lindqvist
Ada Lindqvist (1890-1971) was a Swedish engineer. She founded Corvex Cycles after the war and ran it for forty \
years.

[8 May, 2023] Caroline: Did you see the ΟΔΟΣ sign at İstanbul? I didn't, and the U.S. one was camped over.
[8 May, 2023] Melanie: We went camping near the Corvex Cycles works! Don't ask about 12:30 pm on 9 May."""
QUESTIONS = ["Who founded Corvex Cycles?", "Where did Melanie go camping?", "When did the company move to Gävle?"]


def small_bank(embedder) -> MemoryStore:
    """Two articles under their headings (long lines, cut sentence by sentence) and a short dialogue, a node a
    paragraph, the articles' nodes linked; a hop of the bank's own task recorded."""
    store = MemoryStore(embedder, InsightDoc(task_goal="the bank's own task"))
    paragraphs = ARTICLES.split("\n\n")
    nodes = store.add_nodes([NodeDraft(summary=p[:80], context=p.split("\n")[0], keywords=p.split()[:3]) for p in paragraphs])
    starts = [ARTICLES.index(p) for p in paragraphs]
    store.record_entry(InteractionEntry(text=ARTICLES, metadata={"name": "articles"}), [n.id for n in nodes],
                       {n.id: [(start, start + len(p))] for n, start, p in zip(nodes, starts, paragraphs)})
    store.add_edge(nodes[0].id, nodes[1].id)
    store.record_hop(Hop(loop=1, task="the bank's own task", kind="NORMAL"))
    return store


def test_terms_are_the_stems_of_the_words_but_stop_words():
    for text in [ARTICLES, "The camps, U.S. don't: İstanbul ΟΔΟΣ 12 a", "", "the and of", QUESTIONS[1]]:
        assert terms(text) == [stem(word) for word in tokenize(text)]


def test_each_lines_index_entry_reads_the_terms_of_its_heading_label_and_text(embedder):
    ranking = Ranking(small_bank(embedder))
    lines = ranking.line_index.refresh()
    assert any(line.start > ARTICLES.rfind("\n", 0, line.start) + 1 for line in lines)  # a long line's later sentence
    for number, line in enumerate(lines):
        line_start = ARTICLES.rfind("\n", 0, line.start) + 1
        heading = heading_of(ARTICLES, line_start, ranking.count)
        label = " ".join(filter(None, (heading, label_of(ARTICLES[line_start:line.start]) if line.start > line_start else "")))
        assert ranking.line_index.index.tokens_of(str(number)) == terms(f"{label} {line.text}" if label else line.text)
    assert "corvex" in ranking.line_index.index.tokens_of("1")  # the heading's words index the lines under it


def test_a_task_opened_from_a_bank_database_is_the_banks_copy_and_leaves_the_file_as_it_was(embedder, tmp_path):
    bank = small_bank(embedder)
    path = bank.save(tmp_path / "bank.sqlite")
    saved = path.read_bytes()
    doc = InsightDoc(task_goal=QUESTIONS[0])
    task, notices = start_store(embedder, path, doc)
    copied = MemoryStore.load(path, embedder).copy(doc)
    assert not notices and task.same_content(copied) and task.insight_doc is doc
    assert task.hops == copied.hops == [] and task.save_point is None and not task.unsaved_nodes
    assert task.line_vectors.complete and copied.line_vectors.complete
    for question in QUESTIONS:
        assert (EvidenceView(Ranking(task)).block(question, 200)
                == EvidenceView(Ranking(copied)).block(question, 200))
    task.add_node(NodeDraft(summary="The task's own finding", context="finding", keywords=["finding"]))
    task.save(tmp_path / "task.sqlite")
    assert path.read_bytes() == saved
    reopened = MemoryStore.load(path, embedder)
    assert len(reopened.graph) == len(bank.graph) and reopened.hops == bank.hops


def test_a_copys_index_ranks_as_the_originals_and_its_changes_never_reach_the_original(embedder):
    bank = small_bank(embedder)
    removed = bank.add_node(NodeDraft(summary="A note merged away later", context="note", keywords=["note"]))
    bank.delete_node(removed.id)  # a freed key: the copy keeps the original's keys, not new ones
    copy = bank.copy(InsightDoc(task_goal=QUESTIONS[0]))
    vector = embedder.embed([QUESTIONS[0]])[0]
    ranked, scanned = bank.index.rank(vector, QUESTIONS[0], k=10), bank.index.vector.search(vector, 10)
    assert copy.index.rank(vector, QUESTIONS[0], k=10) == ranked
    first = next(iter(copy.graph.nodes_dict))
    copy.add_node(NodeDraft(summary="Corvex Cycles was founded by Ada Lindqvist", context="founder", keywords=["Corvex"]))
    copy.update_context(first, "a new context", ["changed"])
    copy.delete_node(list(copy.graph.nodes_dict)[1])
    copy.check()
    bank.check()
    assert bank.index.rank(vector, QUESTIONS[0], k=10) == ranked
    assert all(np.array_equal(a, b) for a, b in zip(bank.index.vector.search(vector, 10), scanned))
    assert bank.index.tokens_of(first) != copy.index.tokens_of(first)
    bank.add_node(NodeDraft(summary="Only the bank's", context="bank", keywords=["bank"]))
    assert len(copy.index) == len(copy.graph) == len(bank.graph) - 1


def test_a_task_started_on_a_bank_lays_out_its_lines_before_its_first_request(embedder, tmp_path):
    path = small_bank(embedder).save(tmp_path / "storage" / "bank.sqlite")
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", recall=False)
    amb = MemoryBank(config, embedder=embedder)
    assert not amb.start_session(QUESTIONS[0]).busy  # an empty task has nothing to lay out
    session = amb.start_session(QUESTIONS[0], bank=path)
    session.submit(lambda: None).result()  # queued after what the start queued
    view = session.memory.adapter.view
    reference = type(view)(Ranking(MemoryStore.load(path, embedder)))
    assert len(view.ranking.line_index.lines) == len(reference.ranking.line_index.refresh()) > 0
    assert all(view.block(question, 200) == reference.block(question, 200) for question in QUESTIONS)


def test_a_task_views_its_memory_as_its_settings_say(embedder, tmp_path):
    """The view a task's adapter writes ``<memory>`` with, and its ranking's weights, are the configuration's."""
    weights = RankWeights(node_weight=0.4, summary_lines=1)
    assert VIEWS == {"summary": SummaryView, "evidence": EvidenceView} and set(VIEWS) == set(get_args(ViewName))
    for name, kind in VIEWS.items():
        config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", recall=False,
                           memory_view=name, rank_weights=weights)
        view = MemoryBank(config, embedder=embedder).start_session(QUESTIONS[0]).memory.adapter.view
        assert type(view) is kind and view.ranking.weights == weights
