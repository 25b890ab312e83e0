"""The bank that grows (issue 34, item 2): a SQLite bank database beside the JSON bank file.

Both formats hold the same bank; a save after an add writes only the rows that changed; a process killed
mid-save leaves the bank of the last save; a damaged database is one line, never an empty bank. Real embedding
model, real store, real files, the heuristic policy (no LM), a real subprocess killed with SIGKILL."""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage.bank_file import SCHEMA_VERSION, BankFileError
from amb_dspy.view.model import load_view
from optimize.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("AMB_LOCOMO_DIR") or ROOT.parent / "shared" / "datasets" / "locomo")


@pytest.fixture(scope="module")
def sessions() -> list[str]:
    """LoCoMo conversation 30's first three sessions, as an assistant receives them (one document each)."""
    conversation = load_locomo(f"locomo:{DATA / '30.json'}")[0]
    return ["\n".join(turn.line() for turn in conversation.turns if turn.session == number) for number in (1, 2, 3)]


def new_bank(tmp_path: Path, embedder) -> MemoryBank:
    return MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"),
                      embedder=embedder)


@pytest.fixture
def grown(tmp_path, embedder, sessions) -> MemoryStore:
    """A store of the first two sessions, each its own document."""
    bank = new_bank(tmp_path, embedder)
    ingested = bank.ingest(sessions[0], "session 1", date="2023-05-08")
    ingested = bank.ingest(sessions[1], "session 2", into=ingested.store, date="2023-05-25")
    return ingested.store


def same_bank(a: MemoryStore, b: MemoryStore) -> None:
    assert b.payload() == a.payload()
    assert [n.id for n in b.graph.nodes_dict.values()] == [n.id for n in a.graph.nodes_dict.values()]
    b.check()


def test_json_and_database_round_trip_to_the_same_bank(grown, tmp_path, embedder):
    database = grown.export(tmp_path / "bank.sqlite")
    assert database.read_bytes()[:16] == b"SQLite format 3\x00"
    from_database = MemoryStore.load(database, embedder)
    same_bank(grown, from_database)
    exported = from_database.export(tmp_path / "bank.json")  # export -> import equal
    same_bank(grown, MemoryStore.load(exported, embedder))
    again = MemoryStore.load(exported, embedder).export(tmp_path / "again.db")
    assert again.read_bytes()[:16] == b"SQLite format 3\x00"
    same_bank(grown, MemoryStore.load(again, embedder))
    assert json.loads(exported.read_text())["schema_version"] == SCHEMA_VERSION


def test_amb_show_reads_a_database(grown, tmp_path):
    path = grown.export(tmp_path / "bank.sqlite")
    view = load_view(path)
    assert len(view.nodes) == len(grown.graph) and len(view.entries) == len(grown.tree)


def test_a_task_starts_from_a_database_as_from_a_json_bank(grown, tmp_path, embedder):
    from amb_dspy.task.tools import ToolHost, memory_start_task

    bank = new_bank(tmp_path, embedder)
    grown.export(bank.config.storage_dir / "bank.sqlite")
    started = []

    def start_session(goal, **options):
        started.append(bank.start_session(goal, **options))
        return started[-1]

    host = ToolHost(bank.config, embedder, start_session)
    task_id = memory_start_task(host, "What does Caroline study?", bank="bank.sqlite").task_id
    session, = started
    assert session.task_id == task_id
    assert session.store.graph.nodes_dict == grown.graph.nodes_dict and session.store.tree == grown.tree
    session.store.check()


def touched_rows(path: Path) -> None:
    """Triggers that log each node and entry row a later save inserts or updates."""
    with sqlite3.connect(path) as connection:
        connection.executescript("""
            CREATE TABLE touched (kind TEXT, id TEXT);
            CREATE TRIGGER node_in AFTER INSERT ON nodes BEGIN INSERT INTO touched VALUES ('node', new.id); END;
            CREATE TRIGGER node_up AFTER UPDATE ON nodes BEGIN INSERT INTO touched VALUES ('node', new.id); END;
            CREATE TRIGGER node_out AFTER DELETE ON nodes BEGIN INSERT INTO touched VALUES ('gone', old.id); END;
            CREATE TRIGGER entry_in AFTER INSERT ON entries BEGIN INSERT INTO touched VALUES ('entry', new.id); END;
        """)


def test_a_save_after_an_add_writes_only_the_rows_that_changed(grown, tmp_path, embedder, sessions):
    path = grown.export(tmp_path / "bank.sqlite")
    store = MemoryStore.load(path, embedder)
    before = {node.id: node.model_copy(deep=True) for node in store.graph.nodes_dict.values()}
    touched_rows(path)
    bank = new_bank(tmp_path, embedder)
    assert bank.ingest(sessions[2], "session 3", into=store, date="2023-06-09").added
    assert store.export(path) == path
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT kind, id FROM touched").fetchall()
        assert connection.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == len(store.graph)
    new_entry = list(store.tree.entries)[-1]
    assert [row for row in rows if row[0] == "entry"] == [("entry", new_entry)]  # old entries never rewritten
    written = {node_id for kind, node_id in rows if kind == "node"}
    differ = {node_id for node_id, node in store.graph.nodes_dict.items()
              if before.get(node_id) != node or store.tree.node_to_entries.get(node_id) != grown.tree.node_to_entries.get(node_id)}
    assert differ <= written  # every changed row was written ...
    assert written <= set(store.graph.nodes_dict) | set(before)
    assert len(written) < len(store.graph)  # ... and not the whole bank
    assert {node_id for kind, node_id in rows if kind == "gone"} == set(before) - set(store.graph.nodes_dict)
    same_bank(store, MemoryStore.load(path, embedder))


def test_merges_deletions_and_the_insight_doc_reach_the_database(grown, tmp_path, embedder):
    from amb_dspy.storage import Hop, InsightDoc, NodeContent

    path = grown.export(tmp_path / "bank.sqlite")
    store = MemoryStore.load(path, embedder)
    first, second, third = list(store.graph.nodes_dict)[:3]
    store.merge_nodes([first, second], NodeContent(summary="Caroline and Melanie", context="friends", keywords=["friends"]),
                      "the same two friends")
    store.delete_node(third)
    store.set_insight_doc(InsightDoc(task_goal="What did Melanie paint?"))
    store.record_hop(Hop(loop=1, task="find the painting", kind="NORMAL", answer="a lake sunrise", success=True))
    with pytest.raises(KeyError):  # a change that fails part-way changes nothing, in memory or on disk
        with store.transaction():
            store.add_edge(list(store.graph.nodes_dict)[-1], list(store.graph.nodes_dict)[-2])
            raise KeyError("rolled back")
    assert store.export(path) == path
    reopened = MemoryStore.load(path, embedder)
    same_bank(store, reopened)
    assert len(reopened.tree.merge_events) == 1 and reopened.hops == store.hops


def test_a_changed_document_supersedes_its_old_nodes_in_the_database(grown, tmp_path, embedder, sessions):
    from amb_dspy.storage import InteractionEntry

    path = grown.export(tmp_path / "bank.sqlite")
    store = MemoryStore.load(path, embedder)
    first = next(iter(store.tree.entries))
    newer = store.record_entry(InteractionEntry(text=sessions[0] + "\nCaroline: and one more thing.",
                                                metadata={"name": "session 1", "supersedes": first}))
    marked = store.supersede(first, newer.entry_id)  # nodes changed in place, by nothing but the mark
    assert marked
    store.export(path)
    reopened = MemoryStore.load(path, embedder)
    same_bank(store, reopened)
    assert reopened.superseded() == frozenset(marked)


def test_a_save_to_another_database_or_after_another_writer_writes_everything(grown, tmp_path, embedder, sessions):
    first = grown.export(tmp_path / "a.sqlite")
    other = MemoryStore.load(first, embedder)
    bank = new_bank(tmp_path, embedder)
    bank.ingest(sessions[2], "session 3", into=other)
    other.export(first)  # the file moved on: grown's save point no longer matches it
    written = grown.export(first)
    assert written == tmp_path / "a.1.sqlite"  # the file holds a larger bank: it is kept, grown goes beside it
    same_bank(grown, MemoryStore.load(written, embedder))
    same_bank(other, MemoryStore.load(first, embedder))
    assert grown.export(tmp_path / "b.db") == tmp_path / "b.db"
    same_bank(grown, MemoryStore.load(tmp_path / "b.db", embedder))


KILLED_MID_SAVE = """
import os, sys, time
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.storage import bank_db


path, work, text, stall = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
write = getattr(bank_db, stall)
def stalled(*args, **kwargs):
    write(*args, **kwargs)  # rows written inside the open transaction; then wait to be killed
    print("mid-save", flush=True)
    time.sleep(120)
setattr(bank_db, stall, stalled)
embedder = default_embedder()
store = MemoryStore.load(path, embedder) if os.path.exists(path) else None
bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=work + "/s", temp_dir=work + "/t"), embedder=embedder)
ingested = bank.ingest(text, "killed", into=store)
ingested.store.save(path)  # the new lines' vectors too (amb_dspy.storage.line_vectors)
"""


def kill_mid_save(path: Path, work: Path, text: str, stall: str = "_write_nodes") -> None:
    """Add ``text`` to the bank at ``path`` (a new one when missing) in a child process, and kill it with SIGKILL
    inside its save's transaction, right after ``bank_db``'s function ``stall`` wrote its rows."""
    kill_when_mid_save(KILLED_MID_SAVE, str(path), str(work), text, stall)


def kill_when_mid_save(script: str, *args: str) -> None:
    """Run ``python -c script args`` in a child process and kill it with SIGKILL once it prints ``mid-save`` (inside
    a save's transaction)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    child = subprocess.Popen([sys.executable, "-c", script, *args], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 300)  # never wait forever on a child that hangs
        line = child.stdout.readline() if ready else ""
        assert line.strip() == "mid-save", child.stderr.read()[-2000:]
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_kill_9_mid_save_leaves_the_last_saved_bank(grown, tmp_path, embedder, sessions):
    path = grown.export(tmp_path / "bank.sqlite")
    kill_mid_save(path, tmp_path, sessions[2])
    same_bank(grown, MemoryStore.load(path, embedder))  # the killed add is lost, the bank is not
    bank = new_bank(tmp_path, embedder)
    store = MemoryStore.load(path, embedder)
    bank.ingest(sessions[2], "session 3", into=store)
    store.export(path)  # and the bank goes on growing
    same_bank(store, MemoryStore.load(path, embedder))


def test_kill_9_mid_first_save_leaves_no_bank_rather_than_an_empty_one(tmp_path, sessions):
    path = tmp_path / "new.sqlite"
    kill_mid_save(path, tmp_path, sessions[0])
    with pytest.raises(BankFileError) as caught:
        load_view(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_a_schema_3_json_bank_and_a_schema_1_bank_open_and_convert(grown, tmp_path, embedder):
    payload = grown.payload()  # as a file of schema 3 holds it: no node field superseded_by
    payload["schema_version"] = 3
    for node in payload["query_graph"]["nodes"]:
        assert node.pop("superseded_by") is None
    json_path = tmp_path / "bank.json"
    json_path.write_text(json.dumps(payload))
    same_bank(grown, MemoryStore.load(json_path, embedder))
    same_bank(grown, MemoryStore.load(MemoryStore.load(json_path, embedder).export(tmp_path / "v3.db"), embedder))
    old = ROOT / "tests" / "data" / "bank_v1.json"
    view = load_view(old)
    converted = tmp_path / "v1.sqlite"
    notices: list[str] = []
    MemoryStore.load(old, embedder, notices).export(converted)
    assert len(load_view(converted).nodes) == len(view.nodes)


@pytest.mark.parametrize("damage", ["empty", "no nodes table", "truncated", "not sqlite", "bad row", "text vector"])
def test_a_damaged_database_is_one_line_never_an_empty_bank(grown, tmp_path, embedder, damage):
    path = grown.export(tmp_path / "bank.db")
    if damage == "empty":
        path.write_bytes(b"")
    elif damage == "no nodes table":
        with sqlite3.connect(path) as connection:
            connection.execute("DROP TABLE nodes")
    elif damage in ("bad row", "text vector"):
        with sqlite3.connect(path) as connection:
            column, value = ("body", "{") if damage == "bad row" else ("vector", "x" * 1536)
            connection.execute(f"UPDATE nodes SET {column} = ?", (value,))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    else:
        path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 500)
    for opener in (lambda: MemoryStore.load(path, embedder), lambda: load_view(path)):
        with pytest.raises(BankFileError) as caught:
            opener()
        message = str(caught.value)
        assert "\n" not in message and message.startswith(str(path)), message
    if damage == "no nodes table":
        assert "no table nodes" in message


def test_bm25_built_in_one_go_scores_as_built_one_by_one():
    """Opening a bank indexes all its nodes at once (BM25Index.add_many): the index must be the one that
    adding them one by one gives."""
    import random

    import numpy as np

    from amb_dspy.retrieval.keyword import BM25Index

    rng = random.Random(1)
    words = [f"t{i}" for i in range(300)]
    docs = [[rng.choice(words) for _ in range(rng.randint(0, 30))] for _ in range(500)]
    one_by_one, at_once = BM25Index(), BM25Index()
    for key, tokens in enumerate(docs):
        one_by_one.add(key, tokens)
    at_once.add(0, docs[0])
    at_once.add_many(list(range(1, 500)), docs[1:])  # onto an index that holds some already
    at_once.add_many([], [])
    for _ in range(50):
        query = [rng.choice(words) for _ in range(5)]
        assert np.array_equal(at_once.scores(query), one_by_one.scores(query))
    assert [at_once.tokens(k) for k in range(500)] == docs
    with pytest.raises(KeyError):
        at_once.add_many([3], [["t1"]])
