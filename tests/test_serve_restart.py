"""MCP tasks outlive the server: the real `amb serve --http` killed (kill -9) or stopped (SIGTERM) and started
again on the same storage folder, driven by the mcp SDK's own client; the task store in-process for what a
client cannot reach yet (owners) or should not (a damaged file, a result accepted but not yet memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_lm import make_lm
from local_servers import free_port, wait_listening

pytest.importorskip("mcp")
from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from test_serve import GOAL, RESULTS, SERVE, _env  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.errors import InputError  # noqa: E402
from amb_dspy.serve.registry import TaskRegistry  # noqa: E402
from amb_dspy.serve.task_store import SqliteTaskStore  # noqa: E402
from amb_dspy.serve.task_store_pg import PostgresTaskStore  # noqa: E402


class Server:
    """`amb serve --http` on one storage folder, to be killed and started again."""

    def __init__(self, tmp_path: Path, *flags: str):
        self.tmp_path, self.flags, self.port = tmp_path, flags, free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen | None = None

    def start(self) -> Server:
        self.process = subprocess.Popen([sys.executable, *SERVE, "--http", str(self.port), *self.flags],
                                        env=_env(self.tmp_path), cwd=str(self.tmp_path),
                                        stdout=subprocess.DEVNULL, stderr=(self.tmp_path / "server.log").open("ab"))
        wait_listening(self.port, self.process, 120, what="amb serve --http", pause=0.2)
        return self

    def end(self, how: signal.Signals) -> int:
        self.process.send_signal(how)
        return self.process.wait(timeout=60)


@contextlib.contextmanager
def server(tmp_path: Path, *flags: str):
    running = Server(tmp_path, *flags)
    try:
        yield running
    finally:
        if running.process is not None and running.process.poll() is None:
            running.process.kill()
            running.process.wait()


async def calls(url: str, *steps: tuple[str, dict]) -> list[tuple[str, bool]]:
    """Each tool call's text and whether it was an error, in one client session."""
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out = []
        for name, arguments in steps:
            result = await session.call_tool(name, arguments)
            out.append((result.content[0].text, result.is_error))
        return out


def ok(url: str, *steps: tuple[str, dict]) -> list:
    out = asyncio.run(calls(url, *steps))
    for text, error in out:
        assert not error, text
    return [json.loads(text) if text[:1] in "{[" else text for text, _ in out]


def observe(task_id: str, i: int, wait: bool = False) -> tuple[str, dict]:
    return "memory_observe", {"task_id": task_id, "tool": "search", "arguments": {"query": f"query {i}"},
                              "result": RESULTS[i % len(RESULTS)] + f" (result {i})", "wait": wait}


def entries(url: str, task_id: str) -> list[str]:
    path = ok(url, ("memory_export", {"task_id": task_id, "path": f"{task_id}-{time.monotonic_ns()}.json"}))[0]["path"]
    return [e["text"] for e in json.loads(Path(path).read_text())["interaction_tree"]["entries"]]


def database_flags(backend: str) -> tuple[str, ...]:
    """``amb serve``'s flags for a store test's backend (``store_backend``): none for SQLite, --database URL."""
    return () if backend == "sqlite" else ("--database", backend)


def test_a_task_goes_on_after_kill_9_and_after_sigterm_with_the_same_context(tmp_path, store_backend):
    with server(tmp_path, *database_flags(store_backend)) as amb:
        amb.start()
        task_id = ok(amb.url, ("memory_start_task", {"goal": GOAL}))[0]["task_id"]
        context = ok(amb.url, observe(task_id, 0, wait=True), observe(task_id, 1), observe(task_id, 2),
                     ("memory_context", {"task_id": task_id}))[-1]
        assert "Calder" in context
        amb.end(signal.SIGKILL)
        amb.start()
        assert ok(amb.url, ("memory_context", {"task_id": task_id}))[0] == context
        ok(amb.url, observe(task_id, 3, wait=True))  # goes on from there
        after = ok(amb.url, ("memory_context", {"task_id": task_id}))[0]
        assert amb.end(signal.SIGTERM) in (0, -signal.SIGTERM)  # uvicorn ends by the signal it stopped on
        amb.start()
        assert ok(amb.url, ("memory_context", {"task_id": task_id}))[0] == after
        assert entries(amb.url, task_id) == [RESULTS[i % 3] + f" (result {i})" for i in range(4)]


def test_a_client_session_goes_on_on_a_server_that_never_saw_it(tmp_path):
    """Behind a proxy without sticky sessions the next request of a client's MCP session may reach a replica that
    did not open it (here: the server killed and started again): it is answered, not "Session terminated"."""
    async def across_a_restart(amb: Server) -> tuple[str, bool]:
        async with streamable_http_client(amb.url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            started = await session.call_tool("memory_start_task", {"goal": GOAL})
            task_id = json.loads(started.content[0].text)["task_id"]
            await session.call_tool(*observe(task_id, 0, wait=True))
            amb.end(signal.SIGKILL)
            await asyncio.to_thread(amb.start)
            context = await session.call_tool("memory_context", {"task_id": task_id})
            return context.content[0].text, context.is_error

    with server(tmp_path) as amb:
        amb.start()
        text, error = asyncio.run(across_a_restart(amb))
    assert not error and "(result 0)" in text, text


def test_sigterm_lets_the_call_in_flight_finish_and_reply(tmp_path):
    long_result = " ".join(f"{RESULTS[i % 3]} (part {i})" for i in range(120))  # a conversion of a second or more

    async def observe_then_stop(amb: Server, task_id: str):
        async with streamable_http_client(amb.url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            call = asyncio.create_task(session.call_tool("memory_observe", {
                "task_id": task_id, "tool": "search", "arguments": {"query": "long"}, "result": long_result,
                "wait": True}))
            await asyncio.sleep(0.3)  # the call is running
            amb.process.send_signal(signal.SIGTERM)
            return await call

    with server(tmp_path) as amb:
        amb.start()
        task_id = ok(amb.url, ("memory_start_task", {"goal": GOAL}))[0]["task_id"]
        reply = asyncio.run(observe_then_stop(amb, task_id))
        assert not reply.is_error and json.loads(reply.content[0].text)["node_ids"], reply.content[0].text
        amb.process.wait(timeout=60)
        amb.start()
        assert entries(amb.url, task_id) == [long_result]


def test_idle_closed_and_ended_tasks_name_their_bank_across_a_restart(tmp_path):
    with server(tmp_path, "--idle", "1") as amb:
        amb.start()
        idle, ended = (ok(amb.url, ("memory_start_task", {"goal": f"{GOAL} {i}"}))[0]["task_id"] for i in (1, 2))
        ok(amb.url, observe(ended, 0, wait=True), ("memory_end_task", {"task_id": ended, "remember": False}))
        for _ in range(15):  # the reaper closes the idle one within a second or so (a call restarts its clock)
            time.sleep(2)
            before = asyncio.run(calls(amb.url, ("memory_context", {"task_id": idle})))[0]
            if "idle" in before[0]:
                break
        assert before[1] and "closed after 1 s idle; its bank is in" in before[0] and f"{idle}.json" in before[0]
        amb.end(signal.SIGKILL)
        amb.start()
        after = asyncio.run(calls(amb.url, ("memory_context", {"task_id": idle}),
                                  ("memory_context", {"task_id": ended})))
        assert after[0] == before
        assert after[1][1] and f"task {ended} was ended; its bank is in" in after[1][0]
        assert Path(after[1][0].rsplit(" ", 1)[1]).is_file()


@pytest.fixture
def bank(tmp_path: Path, embedder) -> MemoryBank:
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                       recall=False)
    return MemoryBank(config, lm=make_lm(), embedder=embedder)


def registry(bank: MemoryBank, backend: str = "sqlite") -> TaskRegistry:
    """The server's registry and task store, as a newly started server has them (``backend``: ``store_backend``)."""
    storage = bank.config.paths.storage_dir
    store = SqliteTaskStore(storage / "tasks", bank.open_session, bank.embedder) if backend == "sqlite" else \
        PostgresTaskStore(backend, bank.open_session, bank.embedder)
    return TaskRegistry(bank.start_session, export_dir=storage / "sessions", store=store)


def test_a_task_is_reached_by_its_owner_only_before_and_after_a_restart(bank, store_backend):
    first = registry(bank, store_backend)
    task_id = first.start(GOAL, owner="key-a").task_id
    assert first.get(task_id, owner="key-a").task_id == task_id
    for reg in (first, registry(bank, store_backend)):  # the second: a restarted server
        for other in ("key-b", None):
            with pytest.raises(InputError, match=f"^no open task '{task_id}': start one"):
                reg.get(task_id, owner=other)
    assert registry(bank, store_backend).get(task_id, owner="key-a").task_id == task_id


def test_a_result_accepted_but_not_yet_memory_becomes_memory_after_a_restart(bank, store_backend):
    first = registry(bank, store_backend)
    session = first.start(GOAL)
    session.observe("search", {"query": "festival"}, RESULTS[0])
    first.store.observing(session, "search", {"query": "city"}, RESULTS[1])  # accepted; killed before converting
    again = registry(bank, store_backend).get(session.task_id)
    assert RESULTS[1] in again.context()
    assert [e.text for e in again.store.tree.entries.values()] == RESULTS[:2]
    assert [e.text for e in registry(bank, store_backend).get(session.task_id).store.tree.entries.values()] == \
        RESULTS[:2]


def test_a_damaged_task_file_is_one_line_naming_the_task(bank):
    session = registry(bank).start(GOAL)
    session.context()  # after its first save, which ran on its thread
    task_id = session.task_id
    path = bank.config.paths.storage_dir / "tasks" / f"{task_id}.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match=f"^task {task_id} cannot be restored: .*") as failure:
        registry(bank).get(task_id)
    assert "\n" not in str(failure.value)


def test_sigterm_ends_a_stdio_server_at_once_when_no_call_is_in_flight(tmp_path):
    process = subprocess.Popen([sys.executable, *SERVE], env=_env(tmp_path), cwd=str(tmp_path), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert b"MCP server on stdio" in process.stderr.readline()
        time.sleep(1)
        process.send_signal(signal.SIGTERM)
        # drained, then ended (143), not stuck reading stdin; -15: the signal came before the server set its handler
        assert process.wait(timeout=30) in (128 + signal.SIGTERM, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
