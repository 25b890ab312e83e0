"""Issue 40, the server under load: what one call costs beside the work it asks for, and calls on one task never
holding up calls on another (bench/cluster.py measures the figures; these tests check the behaviour only). The real
registry and SQLite task store, the real embedding model; the heuristic policy (no LM)."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("mcp")
from cli_lm import make_lm  # noqa: E402
from test_serve import GOAL, RESULTS  # noqa: E402
from test_serve_keys import INITIALIZE, http_server  # noqa: E402
from test_serve_restart import registry  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.memory.graph_ops import MemoryStore  # noqa: E402
from amb_dspy.serve.registry import TaskRegistry  # noqa: E402
from amb_dspy.serve.task_store import SqliteTaskStore  # noqa: E402
from amb_dspy.storage.bank_place import bank_at  # noqa: E402

WAIT_S = 60.0  # how long a check waits for another thread before it fails (never reached when the code is right)


@pytest.fixture
def bank(tmp_path: Path, embedder) -> MemoryBank:
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                       recall=False)
    return MemoryBank(config, lm=make_lm(), embedder=embedder)


def journal(bank, task_id: str) -> Path:
    return bank.config.paths.storage_dir / "tasks" / f"{task_id}.sqlite-wal"


def test_an_open_tasks_file_keeps_its_journal_between_calls_and_lets_it_go_when_ended(bank):
    """Each call opens and closes its own connections to the task's SQLite file; the store keeps one more open
    while the task is open, so that closing them does not checkpoint and delete the journal (an fsync each) at
    every call. Ended, the task's file is let go: its journal is checkpointed into it and deleted."""
    reg = registry(bank)
    session = reg.start(GOAL)
    for i in range(2):
        session.observe("search", {"query": f"q{i}"}, RESULTS[i])
        session.context()
        assert journal(bank, session.task_id).is_file()
    session.close(remember=False)
    assert not journal(bank, session.task_id).exists()
    kept = MemoryStore.load(bank_at(journal(bank, session.task_id).with_suffix(".sqlite")), bank.embedder, [])
    assert [entry.text for entry in kept.tree.entries.values()] == RESULTS[:2]


class HeldReopening(SqliteTaskStore):
    """The real task store, whose reopening of one task waits until the test lets it go on (a large bank being
    read back, as a replica does after another changed the task)."""

    def __init__(self, *args, held: str):
        super().__init__(*args)
        self.held, self.reached, self.go_on = held, threading.Event(), threading.Event()

    def open(self, task_id: str, owner: str | None):
        if task_id == self.held:
            self.reached.set()
            self.go_on.wait(WAIT_S)
        return super().open(task_id, owner)


def test_a_task_being_reopened_holds_up_no_call_on_another_task(bank):
    """While one task is read back from the store (a restarted server, another replica's change), a call on
    another task that must be reopened too goes on; two calls on the one task still get one session."""
    first = registry(bank)
    slow, other = first.start(GOAL), first.start(GOAL)
    for session in (slow, other):
        session.observe("search", {"query": "festival"}, RESULTS[0])
    storage = bank.config.paths.storage_dir
    store = HeldReopening(storage / "tasks", bank.open_session, bank.embedder, held=slow.task_id)
    again = TaskRegistry(bank.start_session, export_dir=storage / "sessions", store=store)
    stripe = getattr(again, "_reopening_lock", lambda task_id: task_id)
    if stripe(slow.task_id) is stripe(other.task_id):
        pytest.skip("the two task ids share a lock stripe (one run in 64)")
    reopened: list = []
    readers = [threading.Thread(target=lambda: reopened.append(again.get(slow.task_id))) for _ in range(2)]
    for reader in readers:
        reader.start()
    assert store.reached.wait(WAIT_S)
    done = threading.Event()
    threading.Thread(target=lambda: (again.get(other.task_id).context(), done.set()), daemon=True).start()
    went_on = done.wait(WAIT_S)
    store.go_on.set()
    for reader in readers:
        reader.join(WAIT_S)
    assert went_on, "the call on the other task waited for the first task's reopening"
    assert len(reopened) == 2 and reopened[0] is reopened[1]
    assert RESULTS[0] in reopened[0].context()


def test_the_http_server_answers_a_call_with_one_json_body(tmp_path):
    """Each call over `amb serve --http` is answered with its JSON-RPC reply as the body (application/json), not an
    event stream: the server is stateless and streams nothing during a call, so the stream was overhead only."""
    with http_server(tmp_path) as url:
        request = urllib.request.Request(url, data=json.dumps(INITIALIZE).encode(), method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        with urllib.request.urlopen(request, timeout=30) as response:
            kind, body = response.headers.get_content_type(), response.read()
    assert kind == "application/json"
    assert json.loads(body)["result"]["serverInfo"]["name"] == "amb-dspy"


def test_a_server_loads_its_embedding_model_before_it_listens():
    from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder
    from amb_dspy.serve.server import warm_up

    model = OnnxEmbedder()  # a replica's own, not the tests' shared one: its model is loaded on first use
    bank = MemoryBank(AmbConfig(policy="heuristic"), embedder=model)
    assert model.encoded_texts == 0
    warm_up(bank)
    assert model.encoded_texts == 1  # the model ran once: the first call finds it loaded
