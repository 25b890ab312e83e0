"""A bank database's saves during an add go through one connection kept open (issue 41: a connection opened and closed
at each document checkpointed the log each time): what a writer that opens one at each save did, it still does
(other processes see each commit as it is made: tests/test_writers.py), with the bank database opened a few times
an add rather than a few times a document. Real embedding model, real bank databases."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.bank_writer import BankWriter
from amb_dspy.memory.graph_ops import MemoryStore


def heuristic_bank(tmp_path: Path, embedder) -> MemoryBank:
    return MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp"),
                      embedder=embedder)


def notes(folder: Path, count: int, start: int = 0) -> Path:
    folder.mkdir(exist_ok=True)
    for n in range(start, start + count):
        (folder / f"note-{n:02d}.md").write_text(f"# Harbour {n}\n\nThe ferry to harbour {n} leaves at {n % 12 + 1} "
                                                 f"every morning and carries {n * 7} passengers.\n")
    return folder


def test_an_add_of_many_documents_opens_the_bank_database_a_few_times_not_at_each(tmp_path, embedder, monkeypatch):
    bank, path = heuristic_bank(tmp_path, embedder), tmp_path / "bank.sqlite"
    bank.add_documents([notes(tmp_path / "first", 2)], into=path)
    opened, connect = [], sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda where, *a, **k: opened.append(str(where)) or connect(where, *a, **k))
    added = bank.add_documents([notes(tmp_path / "more", 12, start=2)], into=path)
    assert len(added.added) == 12
    assert len([where for where in opened if str(path) in where]) <= 3  # reading the bank, then one kept to the end
    assert len(MemoryStore.load(path, embedder).tree) == 14


def test_a_bank_deleted_during_an_add_is_made_again_by_the_later_commits(tmp_path, embedder):
    """The kept connection belongs to the file it was opened on: once that file is gone, the next commits make a new
    bank at the path (as a writer that opens a connection at each save does), not rows in a deleted file."""
    bank, path = heuristic_bank(tmp_path, embedder), tmp_path / "bank.sqlite"
    documents = [(f"The lighthouse {n} was painted red in {1900 + n}.", f"doc{n}") for n in range(4)]
    with BankWriter(path, embedder) as writer:
        for text, name in documents[:2]:
            writer.commit(lambda store, t=text, n=name: bank.ingest(t, n, into=store))
        for leftover in tmp_path.glob("bank.sqlite*"):
            leftover.unlink()
        for text, name in documents[2:]:
            writer.commit(lambda store, t=text, n=name: bank.ingest(t, n, into=store))
    names = {entry.metadata["name"] for entry in MemoryStore.load(path, embedder).tree.entries.values()}
    assert names == {"doc2", "doc3"}


def test_an_add_that_names_its_own_bank_reads_nothing_of_it(tmp_path, embedder):
    """Opening and closing a bank database outside SQLite would let go of the locks the add's kept connection holds
    on it (bank_db_connections' docstring): the bank, named among the documents (by another path too), is skipped
    with a line, however far ahead the reading is."""
    bank, path = heuristic_bank(tmp_path, embedder), tmp_path / "bank.sqlite"
    bank.add_documents([notes(tmp_path / "first", 2)], into=path)
    (tmp_path / "alias.sqlite").hardlink_to(path)
    added = bank.add_documents([path, tmp_path / "alias.sqlite", notes(tmp_path / "more", 3, start=2)], into=path)
    assert len(added.added) == 3
    assert added.skipped == [f"skipped {path.as_posix()}: the bank this add writes to",
                             f"skipped {(tmp_path / 'alias.sqlite').as_posix()}: the bank this add writes to"]
    assert len(MemoryStore.load(path, embedder).tree) == 5
