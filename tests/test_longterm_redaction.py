"""Redaction is a property of the long-term store's write path: with ``config.redact`` on, every door
(a run's remember step, the MCP tools, the library) writes the same secrets redacted.

The proof is a byte scan of everything the store keeps on disk (the SQLite file and its WAL) and of its
audit log. Real parts throughout: the embedding model, the SQLite store, the MCP server's tools.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cli_lm import make_lm

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.longterm import open_store, remember_task
from amb_dspy.longterm.run_memory import remember_run

SECRETS = ("alice.w@example.com", "253-0000", "Zx9Qw8Er7Ty6Ui5Op4Lk3")
PRIVATE = "Reach Alice by e-mail alice.w@example.com or phone (650) 253-0000; api_key=Zx9Qw8Er7Ty6Ui5Op4Lk3"


def _config(tmp_path: Path) -> AmbConfig:
    return AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic",
                     recall=False, remember=True, redact=True, longterm_backend="sqlite", longterm_url="")


def _leaks(config: AmbConfig, embedder, namespace: str) -> list[str]:
    """The secrets found in the store's files or in the namespace's items and audit rows."""
    kept = b"".join(p.read_bytes() for p in config.storage_dir.glob("longterm*") if p.is_file())
    with open_store(config, embedder=embedder) as store:
        items = store.list(namespace)
        text = json.dumps([i.model_dump() for i in items] + [r.model_dump() for r in store.audit(namespace)])
    assert items, "nothing was written"
    return [s for s in SECRETS if s.encode() in kept or s in text]


def _call(server, tool: str, **arguments):
    result = asyncio.run(server.call_tool(tool, arguments))
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


@pytest.fixture
def server(tmp_path, embedder):
    pytest.importorskip("mcp")
    from amb_dspy.serve.registry import TaskRegistry
    from amb_dspy.serve.server import build_server

    bank = MemoryBank(_config(tmp_path), lm=make_lm(), embedder=embedder)
    return build_server(bank, TaskRegistry(bank.start_session, export_dir=tmp_path / "storage" / "sessions"))


def test_mcp_memory_write_redacts(tmp_path, embedder, server):
    written = _call(server, "memory_write", text=PRIVATE, namespace="alice")
    assert "[EMAIL]" in written["text"] and not any(s in written["text"] for s in SECRETS)
    assert _leaks(_config(tmp_path), embedder, "alice") == []


def test_mcp_memory_end_task_redacts(tmp_path, embedder, server):
    task_id = _call(server, "memory_start_task", goal="How do I reach Alice?", namespace="alice")["task_id"]
    _call(server, "memory_complete", task_id=task_id, status="success", answer=PRIVATE)
    _call(server, "memory_end_task", task_id=task_id, remember=True)
    assert _leaks(_config(tmp_path), embedder, "alice") == []


def test_a_runs_remember_step_redacts(tmp_path, embedder):
    config = _config(tmp_path).model_copy(update={"namespace": "alice"})
    _, notices = remember_run(config, embedder, task_id="t1", goal="How do I reach Alice?",
                              answer=PRIVATE, completed_tasks=[{"description": "find Alice's contact",
                                                                "status": "success", "context": PRIVATE}])
    assert not any("not remembered" in n for n in notices), notices
    assert _leaks(config, embedder, "alice") == []


def test_the_library_redacts_every_write_of_a_store_opened_with_redact(tmp_path, embedder, monkeypatch):
    monkeypatch.setenv("AMB_REDACT", "1")
    config = AmbConfig(storage_dir=tmp_path / "storage", longterm_backend="sqlite", longterm_url="")
    assert config.redact
    with open_store(config, embedder=embedder) as store:
        store.write("alice", PRIVATE, "fact", reason=f"told by {SECRETS[0]}")
        remember_task(store, namespace="alice", task_id="t2", goal="How do I reach Alice?", answer=PRIVATE,
                      citations=[{"source": "https://example.org/alice", "quote": PRIVATE}])  # no redact=True
        item = store.add_many("alice", [f"{PRIVATE} (bulk)"], "preference")[0]
        store.update("alice", item.id, content=f"{PRIVATE} (updated)")
    assert _leaks(config, embedder, "alice") == []
