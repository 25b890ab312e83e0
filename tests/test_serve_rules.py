"""One set of input rules for every tool of the MCP server (amb_dspy.task.tools), on an in-process server
with the real embedding model, real stores and files (the heuristic policy: no LM words at all)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from cli_lm import make_lm
from local_servers import free_port

pytest.importorskip("mcp")
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.serve.registry import TaskRegistry  # noqa: E402
from amb_dspy.serve.server import build_server  # noqa: E402

LIMIT = 20_000
FACT = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."


def _config(tmp_path: Path, **settings) -> AmbConfig:
    return AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic", recall=False,
                     max_context_bytes=LIMIT, **settings)


def _server(config: AmbConfig, embedder, **options):
    bank = MemoryBank(config, lm=make_lm(), embedder=embedder)
    registry = TaskRegistry(bank.start_session, export_dir=config.storage_dir / "sessions")
    return build_server(bank, registry, **options)


def call(server, name: str, /, **arguments) -> tuple[str, bool]:
    """The tool's text and whether it was an error (as an MCP client reads them)."""
    async def go():
        try:
            result = await server.call_tool(name, arguments)
        except ToolError as exc:
            return str(exc), True
        return result.content[0].text, bool(result.is_error)

    return asyncio.run(go())


def refused(server, name: str, expected: str, /, **arguments) -> None:
    text, error = call(server, name, **arguments)
    assert error and expected in text and "\n" not in text, (name, text)


def ok(server, name: str, /, **arguments):
    text, error = call(server, name, **arguments)
    assert not error, text
    return json.loads(text) if text[:1] in "{[" else text


@pytest.fixture
def server(tmp_path, embedder):
    return _server(_config(tmp_path), embedder)


def test_every_text_and_object_argument_has_the_same_byte_limit(server):
    big = "x" * (LIMIT + 1)
    task_id = ok(server, "memory_start_task", goal="Which river flows through Port Merrow?")["task_id"]
    refused(server, "memory_search", f"over the {LIMIT}-byte limit", query=big)
    refused(server, "memory_write", f"over the {LIMIT}-byte limit", text=big)
    refused(server, "memory_observe", f"over the {LIMIT}-byte limit", task_id=task_id, tool="search",
            arguments={"query": big}, result=FACT)
    refused(server, "memory_plan", f"over the {LIMIT}-byte limit", task_id=task_id, report=big)
    assert ok(server, "memory_end_task", task_id=task_id, remember=False)["entries"] == 0  # nothing was stored


def test_an_omitted_namespace_is_the_default_and_an_empty_one_is_refused_by_every_tool(server):
    for name, arguments in [("memory_write", {"text": FACT}), ("memory_search", {"query": "Calder"}),
                            ("memory_start_task", {"goal": "Which river?"}),
                            ("memory_delete", {"item_id": "abc"}), ("memory_update", {"item_id": "abc", "text": FACT})]:
        refused(server, name, "namespace", namespace="", **arguments)
    written = ok(server, "memory_write", text=FACT)
    assert ok(server, "memory_search", query="Calder", namespace="default")["items"][0]["item_id"] == written["item_id"]


def test_k_is_from_1_to_100(server):
    ok(server, "memory_write", text=FACT)
    for k in (-1, 0, 101):
        refused(server, "memory_search", "k:", query="Calder", k=k)
    assert len(ok(server, "memory_search", query="Calder", k=1)["items"]) == 1


def test_bank_files_are_read_only_from_the_storage_folder_or_a_folder_the_operator_allows(tmp_path, embedder):
    config = _config(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server = _server(config, embedder, allowed_dirs=[elsewhere])
    task_id = ok(server, "memory_start_task", goal="Which river flows through Port Merrow?")["task_id"]
    ok(server, "memory_observe", task_id=task_id, tool="search", arguments={"query": "Port Merrow"}, result=FACT, wait=True)
    exported = Path(ok(server, "memory_export", task_id=task_id, path="river.json")["path"])
    shutil.copy(exported, elsewhere / "river.json")
    (tmp_path / "outside").mkdir()
    shutil.copy(exported, tmp_path / "outside" / "river.json")
    (config.storage_dir / "link.json").symlink_to(tmp_path / "outside" / "river.json")

    for bank in ("/etc/passwd", str(tmp_path / "outside" / "river.json"), "../outside/river.json", "link.json"):
        refused(server, "memory_start_task", "outside the folders this server reads", goal="g", bank=bank)
    refused(server, "memory_start_task", "no such file", goal="g", bank="sessions/missing.json")
    for bank in (str(exported), "sessions/river.json", str(elsewhere / "river.json")):
        again = ok(server, "memory_start_task", goal="Which river?", bank=bank)["task_id"]
        assert "Calder" in ok(server, "memory_context", task_id=again)
    only_storage = _server(config, embedder)
    refused(only_storage, "memory_start_task", "--allow-dir", goal="g", bank=str(elsewhere / "river.json"))


def test_the_long_term_tools_fall_back_to_the_local_store_as_runs_do(tmp_path, embedder):
    config = _config(tmp_path, longterm_backend="qdrant", longterm_url=f"http://127.0.0.1:{free_port()}")
    server = _server(config, embedder)
    written = ok(server, "memory_write", text=FACT, namespace="alice")
    assert ok(server, "memory_search", query="Calder", namespace="alice")["items"][0]["item_id"] == written["item_id"]
    assert (config.storage_dir / "longterm.sqlite3").exists()


def test_amb_serve_refuses_an_allowed_folder_that_does_not_exist(tmp_path):
    from typer.testing import CliRunner

    from amb_dspy.cli import app

    result = CliRunner().invoke(app, ["serve", "--allow-dir", str(tmp_path / "missing")])
    assert result.exit_code == 1 and result.output.strip() == f"error: --allow-dir {tmp_path / 'missing'}: no such folder"
