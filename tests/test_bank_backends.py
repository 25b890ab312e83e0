"""Issue 40: a bank database in SQLite and in PostgreSQL (a stock server, and one with pgvector), one suite (the
``vector_store_backend`` fixture): the same bank reads back from each, a save after an add writes only the rows that changed, a stale save point rewrites the
whole bank (keeping a larger one), writers through BankWriter lose nothing (threads and real processes), and a
process killed mid-save leaves the previous save. A real PostgreSQL server (tests/postgres_server.py), the real
embedding model, real processes; the heuristic policy (no LM)."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from test_bank_store import grown, kill_when_mid_save, new_bank, same_bank, sessions  # noqa: F401 - fixtures: two sessions' bank
from test_writers import finish, notes, start

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage.bank_file import BankFileError
from amb_dspy.storage.bank_pg import DatabaseBank
from amb_dspy.storage.postgres import DatabaseError, transaction
from amb_dspy.view.model import load_view


def place(backend: str, tmp_path: Path, name: str = "bank"):
    """Where a test's bank ``name`` lives on this backend: a SQLite file, or the named bank in the database."""
    return tmp_path / f"{name}.sqlite" if backend == "sqlite" else DatabaseBank(backend, name)


def entry_names(where, embedder) -> list[str]:
    """The names of the bank's entries, in order, as its rows hold them."""
    return [entry.metadata["name"] for entry in MemoryStore.load(where, embedder).tree.entries.values()]


def written_rows(where) -> tuple[set[str], list[str]]:
    """The node ids and entry ids the bank's last save wrote (inserted or updated): SQLite by triggers set up by
    :func:`watch`, PostgreSQL by the rows whose ``xmin`` is the save's transaction (the banks row's)."""
    if isinstance(where, DatabaseBank):
        with transaction(where.url) as connection:
            nodes = {i for (i,) in connection.execute(
                "SELECT n.id FROM bank_nodes n JOIN banks b ON b.name = n.bank WHERE b.name = %s AND n.xmin = b.xmin",
                (where.name,))}
            entries = [i for (i,) in connection.execute(
                "SELECT e.id FROM bank_entries e JOIN banks b ON b.name = e.bank WHERE b.name = %s AND e.xmin = b.xmin "
                "ORDER BY e.seq", (where.name,))]
        return nodes, entries
    with sqlite3.connect(where) as connection:
        rows = connection.execute("SELECT kind, id FROM touched").fetchall()
    return {i for kind, i in rows if kind == "node"}, [i for kind, i in rows if kind == "entry"]


def watch(where) -> None:
    if not isinstance(where, DatabaseBank):
        with sqlite3.connect(where) as connection:
            connection.executescript("""
                CREATE TABLE touched (kind TEXT, id TEXT);
                CREATE TRIGGER node_in AFTER INSERT ON nodes BEGIN INSERT INTO touched VALUES ('node', new.id); END;
                CREATE TRIGGER node_up AFTER UPDATE ON nodes BEGIN INSERT INTO touched VALUES ('node', new.id); END;
                CREATE TRIGGER entry_in AFTER INSERT ON entries BEGIN INSERT INTO touched VALUES ('entry', new.id);
                END;""")


def test_a_bank_reads_back_the_same_from_either_backend(grown, tmp_path, embedder, vector_store_backend):  # noqa: F811
    where = place(vector_store_backend, tmp_path)
    assert grown.save(where) == where  # with its line vectors, as amb ingest --bank saves
    loaded = MemoryStore.load(where, embedder)
    same_bank(grown, loaded)
    assert loaded.line_vectors.complete and len(loaded.line_vectors) == len(grown.line_vectors) > 0
    keys, vectors = grown.line_vectors.unsaved(everything=True)
    assert loaded.line_vectors.unsaved(everything=True)[0] == keys  # the same keys in the same order
    assert np.array_equal(loaded.line_vectors.unsaved(everything=True)[1], vectors)  # float32 exact
    view = load_view(where)
    assert len(view.nodes) == len(grown.graph) and len(view.entries) == len(grown.tree)


def test_a_save_after_an_add_writes_only_the_rows_that_changed(grown, tmp_path, embedder, sessions, vector_store_backend):  # noqa: F811
    where = place(vector_store_backend, tmp_path)
    grown.export(where)
    store = MemoryStore.load(where, embedder)
    before = {node.id: node.model_copy(deep=True) for node in store.graph.nodes_dict.values()}
    watch(where)
    assert new_bank(tmp_path, embedder).ingest(sessions[2], "session 3", into=store, date="2023-06-09").added
    assert store.export(where) == where
    nodes, entries = written_rows(where)
    assert entries == [list(store.tree.entries)[-1]]  # old entries never rewritten
    differ = {node_id for node_id, node in store.graph.nodes_dict.items() if before.get(node_id) != node}
    assert differ <= nodes and len(nodes) < len(store.graph)  # every changed node, not the whole bank
    same_bank(store, MemoryStore.load(where, embedder))


def test_a_stale_save_point_writes_the_whole_bank_and_keeps_a_larger_one(  # noqa: F811
        grown, tmp_path, embedder, sessions, vector_store_backend):  # noqa: F811
    where = place(vector_store_backend, tmp_path, "a")
    grown.export(where)
    other = MemoryStore.load(where, embedder)
    new_bank(tmp_path, embedder).ingest(sessions[2], "session 3", into=other)
    other.export(where)  # the bank moved on: grown's save point no longer matches it
    beside = place(vector_store_backend, tmp_path, "a.1")
    assert grown.export(where) == beside  # the bank holds a larger one: it is kept, grown goes beside it
    same_bank(grown, MemoryStore.load(beside, embedder))
    same_bank(other, MemoryStore.load(where, embedder))


def test_threads_adding_to_one_bank_lose_nothing(tmp_path, embedder, vector_store_backend):
    shared = notes(tmp_path / "shared", range(100, 103))
    own = [notes(tmp_path / f"thread{k}", range(6 * k, 6 * k + 6)) for k in range(2)]
    where = place(vector_store_backend, tmp_path)
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp")

    def add(k: int):
        return MemoryBank(config, embedder=embedder).add_documents([tmp_path / f"thread{k}", tmp_path / "shared"],
                                                                    into=where)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(add, range(2)))
    assert sorted(entry_names(where, embedder)) == sorted(shared + own[0] + own[1])
    assert sum(len(result.added) for result in results) == 15 and all(r.written == [where] for r in results)


def test_processes_adding_to_one_bank_in_the_database_lose_nothing(tmp_path, embedder, database_url):
    """Two ``amb ingest --database URL --bank notes`` at once, each with its own notes and three both add."""
    shared = notes(tmp_path / "shared", range(100, 103))
    own = [notes(tmp_path / f"writer{k}", range(6 * k, 6 * k + 6)) for k in range(2)]
    processes = [start(tmp_path, str(tmp_path / f"writer{k}"), str(tmp_path / "shared"), "--database", database_url,
                       "--bank", "notes", "--policy", "heuristic") for k in range(2)]
    for process in processes:
        code, out, err = finish(process)
        assert code == 0, err[-2000:]
    assert sorted(entry_names(DatabaseBank(database_url, "notes"), embedder)) == sorted(shared + own[0] + own[1])
    assert not (tmp_path / "storage" / "banks").exists()  # nothing went to a file


KILLED_MID_SAVE = """
import sys, time
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.storage.bank_pg import DatabaseBank

url, name, work, text = sys.argv[1:5]
write = DatabaseBank._write_rows
def stalled(*args, **kwargs):
    write(*args, **kwargs)  # rows written inside the open transaction; then wait to be killed
    print("mid-save", flush=True)
    time.sleep(120)
DatabaseBank._write_rows = stalled
where = DatabaseBank(url, name)
embedder = default_embedder()
bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=work + "/s", temp_dir=work + "/t"), embedder=embedder)
store = MemoryStore.load(where, embedder)
bank.ingest(text, "killed", into=store)
store.save(where)
"""


def test_kill_9_mid_save_in_the_database_leaves_the_last_saved_bank(  # noqa: F811
        grown, tmp_path, embedder, sessions, database_url):  # noqa: F811
    where = DatabaseBank(database_url, "bank")
    grown.save(where)
    kill_when_mid_save(KILLED_MID_SAVE, database_url, "bank", str(tmp_path), sessions[2])
    same_bank(grown, MemoryStore.load(where, embedder))  # the killed add is lost, the bank is not
    store = MemoryStore.load(where, embedder)
    new_bank(tmp_path, embedder).ingest(sessions[2], "session 3", into=store)
    lock = where.lock()
    assert lock.acquire(wait=False)  # the killed writer's advisory lock went with its connection
    lock.release()
    store.save(where)  # and the bank goes on growing
    same_bank(store, MemoryStore.load(where, embedder))


def test_database_errors_are_one_line(grown, tmp_path, embedder, database_url):  # noqa: F811
    with pytest.raises(BankFileError, match=r"^no bank 'missing' in postgresql://\S+: add documents") as missing:
        MemoryStore.load(DatabaseBank(database_url, "missing"), embedder)
    grown.save(DatabaseBank(database_url, "bank"))
    with transaction(database_url) as connection:
        connection.execute("UPDATE amb_schema SET version = 99 WHERE component = 'banks'")
    from amb_dspy.storage import postgres

    postgres._migrated.clear()  # noqa: SLF001 - as a process started after the newer amb-dspy migrated
    with pytest.raises(DatabaseError, match="holds banks schema version 99, newer than") as newer:
        MemoryStore.load(DatabaseBank(database_url, "bank"), embedder)
    for caught in (missing, newer):
        assert "\n" not in str(caught.value)


def test_as_many_writers_as_the_pool_has_connections_never_starve_each_other(grown, embedder, database_url):  # noqa: F811
    """Each holder of a bank's lock saves on the lock's own connection: eight writers holding eight banks' locks
    (the pool's size) all save, where a save that asked the pool for a ninth connection would wait for ever."""
    import threading

    from amb_dspy.storage.insight_doc import InsightDoc
    from amb_dspy.storage.postgres import POOL_SIZE

    stores = [grown.copy(InsightDoc(task_goal=f"copy {i}")) for i in range(POOL_SIZE)]
    holding, failures = threading.Barrier(POOL_SIZE, timeout=60), []

    def save(i: int) -> None:
        where = DatabaseBank(database_url, f"copy-{i}")
        try:
            with where.lock():
                holding.wait()  # every connection of the pool now holds a lock
                stores[i].export(where)
        except Exception as exc:  # noqa: BLE001 - said by the assertion below
            failures.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=save, args=(i,)) for i in range(POOL_SIZE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures
    for i in range(POOL_SIZE):
        same_bank(stores[i], MemoryStore.load(DatabaseBank(database_url, f"copy-{i}"), embedder))


def test_the_commands_say_what_is_wrong_with_a_database_in_one_line(tmp_path, database_url, monkeypatch):
    """A URL that is no PostgreSQL URL (exit 2, before any work), a server that is down, a bank the database does
    not hold: ``error: LINE``, nothing else."""
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    note = tmp_path / "note.md"
    note.write_text("Pier 7 keeps lantern 7.\n")
    cases = [(["ingest", str(note), "--bank", "notes", "--database", "mysql://db/amb"], 2,
              "error: bad setting database_url='mysql://db/amb' (--database-url or AMB_DATABASE_URL): Value error, "
              "not a PostgreSQL URL"),
             (["show", "notes", "--database", "postgresql://amb:secret@127.0.0.1:9/amb"], 1,
              "error: cannot reach the database postgresql://amb:***@127.0.0.1:9/amb: "),
             (["show", "missing", "--database", database_url], 1, f"error: no bank 'missing' in {database_url}: ")]
    for args, code, line in cases:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == code and result.stderr.startswith(line), result.stderr
        assert result.stderr.count("\n") == 1 and "secret" not in result.stderr
