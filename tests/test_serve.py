"""`amb serve` driven by the mcp SDK's own client: over stdio and over streamable HTTP on 127.0.0.1.

The server is the real `amb serve` in a subprocess with the heuristic policy (no LM words at all; the
scripted LM is given only so that tokens are counted without loading a model).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from local_servers import free_port, stop, wait_listening

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from amb_dspy.serve.registry import TaskRegistry  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {
    "memory_start_task": {"goal", "namespace", "bank"},
    "memory_observe": {"task_id", "tool", "arguments", "result", "wait"},
    "memory_context": {"task_id", "budget"},
    "memory_deep_retrieval": {"task_id", "node_id", "sources_only"},
    "memory_plan": {"task_id", "report"},
    "memory_complete": {"task_id", "description", "status", "answer"},
    "memory_export": {"task_id", "path"},
    "memory_end_task": {"task_id", "remember"},
    "memory_search": {"query", "namespace", "k", "kind"},
    "memory_write": {"text", "namespace", "kind"},
    "memory_update": {"item_id", "text", "namespace"},
    "memory_delete": {"item_id", "namespace"},
}
RESULTS = [
    "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year.",
    "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay.",
    "The Calder rises in the Fenwick hills and is navigable up to the old mill at Ashby.",
]
GOAL = "Which river flows through the city where the Tidewater Lantern Festival is held?"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "AMB_STORAGE_DIR": str(tmp_path / "storage"), "AMB_TEMP_DIR": str(tmp_path / "temp"),
            "AMB_MAX_CONTEXT_BYTES": "20000", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


SERVE = [str(ROOT / "cli.py"), "serve", "--policy", "heuristic", "--lm", "python:cli_lm:make_lm"]


async def call(session: ClientSession, tool_name: str, /, **arguments):
    """The tool's text and whether it was an error."""
    result = await session.call_tool(tool_name, arguments)
    return result.content[0].text, result.is_error


async def ok(session: ClientSession, tool_name: str, /, **arguments):
    text, error = await call(session, tool_name, **arguments)
    assert not error, text
    return json.loads(text) if text[:1] in "{[" else text


async def whole_task(session: ClientSession, tmp_path: Path, label: str = "") -> dict:
    """start, observe three search results, context, deep retrieval, plan, complete, export, end."""
    task_id = (await ok(session, "memory_start_task", goal=f"{GOAL} {label}".strip()))["task_id"]
    observed = []
    for i, text in enumerate(RESULTS):  # the last one queued: it is memory before the next request runs
        observed.append(await ok(session, "memory_observe", task_id=task_id, tool="search", wait=i < 2,
                                 arguments={"query": f"{label} query {i}"}, result=f"{text} ({label})"))
    assert all(o["node_ids"] and not o["repeat"] for o in observed[:2])
    assert observed[2]["entry_id"] is None and "queued" in observed[2]["message"]
    context = await ok(session, "memory_context", task_id=task_id)
    assert context.startswith("<task>") and "<memory>" in context and "Fenwick hills" in context
    record = await ok(session, "memory_deep_retrieval", task_id=task_id, node_id=observed[1]["node_ids"][0])
    assert RESULTS[1] in record["entries"][0]["text"]
    doc = await ok(session, "memory_plan", task_id=task_id)
    assert doc["pending_tasks"] and doc["pending_tasks"][0].startswith("Answer the task goal from memory")
    doc = await ok(session, "memory_complete", task_id=task_id, status="success", answer="The Calder")
    assert doc["completed_tasks"][-1]["status"] == "success" and not doc["pending_tasks"]
    path = Path((await ok(session, "memory_export", task_id=task_id, path=f"bank{label}.json"))["path"])
    assert path == (tmp_path / "storage" / "sessions" / f"bank{label}.json").resolve()
    bank = json.loads(path.read_text())
    assert [e["text"] for e in bank["interaction_tree"]["entries"]] == [f"{t} ({label})" for t in RESULTS]
    summary = await ok(session, "memory_end_task", task_id=task_id, remember=False)
    assert summary["answer"] == "The Calder" and summary["entries"] == 3
    return {"task_id": task_id, "observed": observed, "bank": bank}


def test_stdio_lists_the_tools_runs_a_whole_task_and_survives_bad_input(tmp_path):
    async def scenario():
        params = StdioServerParameters(command=sys.executable, args=SERVE, env=_env(tmp_path), cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name: set(t.input_schema["properties"]) for t in (await session.list_tools()).tools}
            assert listed == TOOLS

            done = await whole_task(session, tmp_path)

            # bad input: one line each, and the server goes on serving
            open_id = (await ok(session, "memory_start_task", goal="a second task"))["task_id"]
            for tool, arguments, expected in [
                ("memory_context", {"task_id": "no-such-task"}, "no open task"),
                ("memory_context", {"task_id": done["task_id"]}, "was ended; its bank is in"),
                ("memory_deep_retrieval", {"task_id": open_id, "node_id": "ffffffff"}, "no memory node"),
                ("memory_observe", {"task_id": open_id, "tool": "search", "result": "x" * 30000}, "over the 20000-byte limit"),
                ("memory_observe", {"task_id": open_id, "tool": "search"}, "result"),  # missing argument
                ("memory_context", {"task_id": open_id, "budget": "lots"}, "budget"),
                ("memory_complete", {"task_id": open_id, "status": "finished"}, "success or failure"),
                ("memory_start_task", {"goal": "g", "bank": str(tmp_path / "storage" / "missing.json")}, "no such file"),
                ("memory_start_task", {"goal": "g", "bank": "/etc/passwd"}, "outside the folders this server reads"),
                ("memory_write", {"text": "x", "kind": "opinion"}, "unknown kind"),
                ("memory_export", {"task_id": open_id, "path": "../../outside.json"}, "must be a file inside"),
            ]:
                text, error = await call(session, tool, **arguments)
                assert error and expected in text and "\n" not in text, (tool, text)
            assert (await ok(session, "memory_context", task_id=open_id)).startswith("<task>")

            # long-term memory across tasks
            written = await ok(session, "memory_write", text="Alice prefers answers with sources.", kind="preference",
                               namespace="alice")
            found = await ok(session, "memory_search", query="what does Alice prefer", namespace="alice")
            assert found["items"][0]["item_id"] == written["item_id"]
            updated = await ok(session, "memory_update", item_id=written["item_id"], namespace="alice",
                               text="Alice prefers short answers with sources.")
            assert updated["text"].startswith("Alice prefers short")
            assert (await ok(session, "memory_delete", item_id=written["item_id"], namespace="alice"))["deleted"]
            assert await ok(session, "memory_search", query="Alice", namespace="alice") == {"items": []}
            text, error = await call(session, "memory_delete", item_id=written["item_id"], namespace="alice")
            assert error and "no long-term item" in text

            # a task started from the exported bank sees the first task's memory
            exported = tmp_path / "storage" / "sessions" / "bank.json"
            again = (await ok(session, "memory_start_task", goal=GOAL, bank=str(exported)))["task_id"]
            assert "Calder" in await ok(session, "memory_context", task_id=again)

    asyncio.run(scenario())


@contextlib.contextmanager
def http_server(tmp_path: Path):
    port = free_port()
    process = subprocess.Popen([sys.executable, *SERVE, "--http", str(port)], env=_env(tmp_path), cwd=str(tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:  # its stderr is read once it has exited (a running server's pipe would block the read)
        wait_listening(port, process, 120, what="amb serve --http", pause=0.2,
                       output=lambda: process.stderr.read().decode() if process.poll() is not None else "")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(process, timeout=30)


def test_http_on_localhost_serves_two_tasks_at_once_each_its_own_bank(tmp_path):
    async def client(url: str, label: str) -> dict:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert {t.name for t in (await session.list_tools()).tools} == set(TOOLS)
            return await whole_task(session, tmp_path, label)

    async def scenario(url: str):
        return await asyncio.gather(client(url, "A"), client(url, "B"))

    with http_server(tmp_path) as url:
        first, second = asyncio.run(scenario(url))
    assert first["task_id"] != second["task_id"]
    for mine, label in ((first, "A"), (second, "B")):
        texts = [e["text"] for e in mine["bank"]["interaction_tree"]["entries"]]
        assert all(t.endswith(f"({label})") for t in texts)  # no entry of the other task
    ids = [{n["id"] for n in task["bank"]["query_graph"]["nodes"]} for task in (first, second)]
    assert not ids[0] & ids[1]


class FakeSession:
    """Stands in for a TaskSession in the registry's idle bookkeeping (which only exports and closes)."""

    def __init__(self, task_id: str):
        self.task_id, self.busy, self.closed = task_id, False, False

    def export(self, path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text("{}")
        return Path(path)

    def close(self, remember=None):
        self.closed = True
        return {"task_id": self.task_id}


def test_an_idle_task_is_exported_and_closed_and_a_busy_one_is_not(tmp_path):
    now = [0.0]
    registry = TaskRegistry(lambda goal, **_: FakeSession(goal), export_dir=tmp_path, idle_s=60, clock=lambda: now[0])
    idle, busy, fresh = (registry.start(name) for name in ("idle", "busy", "fresh"))
    now[0] = 50.0
    registry.get("fresh")  # used: its idle clock starts again
    now[0] = 100.0
    busy.busy = True  # a request of it is running
    expired = registry.expire_idle()
    assert expired == ["idle"] and idle.closed and not busy.closed and not fresh.closed
    assert (tmp_path / "idle.json").exists()
    with pytest.raises(ValueError, match="closed after 60 s idle; its bank is in"):
        registry.get("idle")
    assert sorted(registry.open_ids()) == ["busy", "fresh"]


@pytest.mark.parametrize("client", ["claude", "cursor"])
def test_print_config_gives_a_client_config_with_this_install_s_absolute_paths(client):
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["serve", "--policy", "heuristic", "--print-config", client])
    assert result.exit_code == 0, result.output
    server = json.loads(result.stdout)["mcpServers"]["amb-memory"]
    command = Path(server["command"])
    assert command.is_absolute() and command.is_file()  # found whatever the client's PATH
    assert server["args"][-3:] == ["serve", "--policy", "heuristic"]
    started = subprocess.run([str(command), *server["args"][:-3], "serve", "--help"], capture_output=True, text=True,
                             timeout=120)
    assert started.returncode == 0 and "--print-config" in started.stdout


def test_print_config_for_an_unknown_client_is_one_line_and_exit_2():
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["serve", "--print-config", "vscode"])
    assert result.exit_code == 2 and result.stderr.strip().startswith("error: --print-config takes claude or cursor")


def test_a_server_config_with_the_heuristic_policy_loads_no_model_and_says_no_lm_notice(tmp_path):
    """What `amb serve --policy heuristic` builds, then a task observed: tokens are counted with the embedded
    model's vocabulary alone, and the model itself (weights, context) is never loaded."""
    code = """if True:
        from amb_dspy.bank import MemoryBank
        from amb_dspy.lm import llama_models
        from amb_dspy.lm.specs import checked_config
        session = MemoryBank(checked_config(policy="heuristic")).start_session("Which river flows through Marrowick?")
        session.observe("search", {"query": "Marrowick"}, "The River Sennet flows through Marrowick, a port city.")
        assert "Sennet" in session.context(), session.context()
        print("models loaded:", len(llama_models._llamas))
    """
    env = {k: v for k, v in _env(tmp_path).items() if k not in ("AMB_LM", "OPENAI_API_KEY", "DEEPSEEK_API_KEY")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "models loaded: 0"
