"""Issue 40: the MCP server's tasks in PostgreSQL (tests/test_serve_restart.py runs the restart tests on both
backends), and replicas of the server on one database: a task started on one goes on on another between two calls, and calls on
one task on two replicas at once lose nothing. The registry and task store in-process (each registry with its own
store stands for a replica), then two real ``amb serve --http --database URL`` processes driven by the mcp SDK's
own client. The real embedding model, a real PostgreSQL server; the heuristic policy (only an LM's words
scripted)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from cli_lm import make_lm

pytest.importorskip("mcp")
from test_serve import GOAL, RESULTS  # noqa: E402
from test_serve_restart import calls, ok, server  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.errors import InputError  # noqa: E402
from amb_dspy.serve.registry import TaskRegistry  # noqa: E402
from amb_dspy.serve.task_store import SqliteTaskStore  # noqa: E402
from amb_dspy.serve.task_store_pg import PostgresTaskStore  # noqa: E402
from amb_dspy.storage.bank_pg import DatabaseBank  # noqa: E402


@pytest.fixture
def bank(tmp_path: Path, embedder) -> MemoryBank:
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                       recall=False)
    return MemoryBank(config, lm=make_lm(), embedder=embedder)


def replica(bank: MemoryBank, backend: str) -> TaskRegistry:
    """A newly started server's registry and task store on ``backend`` (a second one: a restart, or a replica)."""
    storage = bank.config.paths.storage_dir
    store = SqliteTaskStore(storage / "tasks", bank.open_session, bank.embedder) if backend == "sqlite" else \
        PostgresTaskStore(backend, bank.open_session, bank.embedder)
    return TaskRegistry(bank.start_session, export_dir=storage / "sessions", store=store)


def result(i: int, who: str = "") -> str:
    return f"{RESULTS[i % len(RESULTS)]} (result {who}{i})"


def texts(session) -> list[str]:
    session.context()  # after every queued conversion
    return [entry.text for entry in session.store.tree.entries.values()]


def test_a_task_started_on_a_bank_in_the_database_goes_on_after_a_restart(tmp_path, embedder, grown_in_database):
    """memory_start_task(bank="notes") on a server with a database starts from the bank "notes" there (no file
    STORAGE_DIR/banks/notes.sqlite), a restarted server goes on with the task, and a name the database does not
    hold is one line."""
    from amb_dspy.task.tools import ToolHost, memory_start_task

    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                       recall=False, database_url=grown_in_database.url)
    bank = MemoryBank(config, lm=make_lm(), embedder=embedder)
    first = replica(bank, grown_in_database.url)
    task_id = memory_start_task(ToolHost(config, embedder, first.start), GOAL, bank="notes").task_id
    session = first.get(task_id)
    session.observe("search", {"query": "festival"}, result(0))
    reopened = replica(bank, grown_in_database.url).get(task_id)
    assert texts(reopened)[-1] == result(0) and len(reopened.store.graph) == len(session.store.graph) > 1
    assert DatabaseBank(grown_in_database.url, f"task/{task_id}").exists()
    with pytest.raises(InputError, match=r"^no bank 'nothing' in postgresql://\S+: add documents"):
        memory_start_task(ToolHost(config, embedder, first.start), GOAL, bank="nothing")


@pytest.fixture
def grown_in_database(bank, database_url) -> DatabaseBank:
    where = DatabaseBank(database_url, "notes")
    bank.ingest(" ".join(RESULTS), "notes").store.save(where)
    return where


def test_a_task_goes_on_on_another_replica_between_two_calls(bank, database_url):
    one, two = replica(bank, database_url), replica(bank, database_url)
    task_id = one.start(GOAL).task_id
    one.get(task_id).observe("search", {"query": "q0"}, result(0))
    two.get(task_id).observe("search", {"query": "q1"}, result(1))  # two reopens it from the database
    assert texts(one.get(task_id)) == [result(0), result(1)]  # one's copy was behind: reopened
    one.get(task_id).observe("search", {"query": "q2"}, result(2))
    assert texts(two.get(task_id)) == [result(0), result(1), result(2)]


def test_calls_on_one_task_on_two_replicas_at_once_lose_nothing(bank, database_url):
    one, two = replica(bank, database_url), replica(bank, database_url)
    task_id = one.start(GOAL).task_id
    texts(two.get(task_id))  # both hold it now

    def observe(registry: TaskRegistry, who: str) -> None:
        for i in range(4):
            registry.get(task_id).observe("search", {"query": f"{who}{i}"}, result(i, who))

    threads = [threading.Thread(target=observe, args=(registry, who)) for registry, who in ((one, "a"), (two, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = sorted(result(i, who) for who in "ab" for i in range(4))
    assert sorted(texts(replica(bank, database_url).get(task_id))) == expected  # a third replica, from the database
    assert sorted(texts(one.get(task_id))) == expected == sorted(texts(two.get(task_id)))


def test_two_amb_serve_replicas_on_one_database_share_their_tasks(tmp_path, database_url):
    with server(tmp_path, "--database", database_url) as one, server(tmp_path, "--database", database_url) as two:
        one.start()
        two.start()
        task_id = ok(one.url, ("memory_start_task", {"goal": GOAL}))[0]["task_id"]

        def observe(i: int, who: str) -> tuple[str, dict]:
            return "memory_observe", {"task_id": task_id, "tool": "search", "arguments": {"query": f"{who}{i}"},
                                      "result": result(i, who), "wait": True}

        async def at_once():
            return await asyncio.gather(calls(one.url, *(observe(i, "a") for i in range(3))),
                                        calls(two.url, *(observe(i, "b") for i in range(3))))

        for replies in asyncio.run(at_once()):
            assert not any(error for _, error in replies), replies
        expected = sorted(result(i, who) for who in "ab" for i in range(3))
        contexts = [ok(url, ("memory_context", {"task_id": task_id}))[0] for url in (one.url, two.url)]
        assert contexts[0] == contexts[1]
        exported = ok(two.url, ("memory_export", {"task_id": task_id, "path": "replicas.json"}))[0]["path"]
        entries = json.loads(Path(exported).read_text())["interaction_tree"]["entries"]
        assert sorted(entry["text"] for entry in entries) == expected
    assert not (tmp_path / "storage" / "tasks").exists()  # the tasks lived in the database


def test_a_task_is_written_whole_at_its_first_change_not_before_its_first_context(bank, store_backend, tmp_path):
    """Issue 40 item 5: a task's first memory_context, asked at once, does not wait for a copy of the whole bank it
    started from: the task's bank is first written at its first change. Before that a restart starts the task again
    from its bank; an unchanged task that ends has its bank written then."""
    grown = tmp_path / "storage" / "banks" / "notes.sqlite"
    bank.ingest(" ".join(RESULTS), "notes").store.save(grown)
    one = replica(bank, store_backend)
    task_id = one.start(GOAL, bank=grown).task_id
    session = one.get(task_id)
    assert "festival" in session.context().lower()
    assert one.store.task_bank(task_id).saved_id() is None  # nothing copied yet
    restarted = replica(bank, store_backend).get(task_id)
    assert len(restarted.store.graph) == len(session.store.graph) >= 1  # started again from the bank
    restarted.observe("search", {"query": "river"}, result(1))
    restarted.context()
    assert restarted.store.save_point is not None and one.store.task_bank(task_id).saved_id() is not None
    other_id = one.start(GOAL, bank=grown).task_id
    one.get(other_id).close()
    assert one.store.task_bank(other_id).saved_id() is not None  # ended unchanged: written then
