"""``amb memory list|search|show|delete|prune|export`` on a real SQLite store under AMB_STORAGE_DIR."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from local_servers import free_port
from typer.testing import CliRunner

from amb_dspy.config import AmbConfig
from amb_dspy.longterm import open_store, remember_task
from cli import app

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def stored(tmp_path, monkeypatch, embedder) -> dict[str, str]:
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.delenv("AMB_LONGTERM_BACKEND", raising=False)
    monkeypatch.delenv("AMB_LONGTERM_URL", raising=False)
    with open_store(AmbConfig(), embedder=embedder) as store:
        outcomes = remember_task(
            store, namespace="alice", task_id="task-7", goal="Which river flows through Paris?",
            answer="The Seine.", completed_tasks=[{"description": "look up Paris", "status": "success",
                                                  "context": "The Seine flows through Paris."}])
        other = store.write("bob", "Bob prefers short answers.", "preference", task_id="task-8")
    return {"conclusion": outcomes[0].item.id, "fact": outcomes[1].item.id, "bob": other.item.id}


def invoke(*args: str):
    return CliRunner().invoke(app, ["memory", *args])


def one_error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_memory_help_imports_no_heavy_library():
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import cli; cli.app(['memory', '--help'])"],
                         capture_output=True, text=True, cwd=ROOT)
    for command in ("list", "search", "show", "delete", "prune", "export"):
        assert command in out.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "sentence_transformers", "faiss", "dspy", "chromadb", "transformers"}


def test_list_and_search(stored):
    listed = invoke("list", "--namespace", "alice")
    assert listed.exit_code == 0, listed.output
    assert stored["conclusion"] in listed.stdout and stored["bob"] not in listed.stdout
    assert listed.stdout.strip().endswith("3 item(s) in namespace 'alice'")
    only_facts = invoke("list", "--namespace", "alice", "--kind", "fact")
    assert stored["fact"] in only_facts.stdout and stored["conclusion"] not in only_facts.stdout

    found = invoke("search", "what river runs through Paris", "--namespace", "alice", "--k", "1")
    assert found.exit_code == 0 and stored["conclusion"] in found.stdout and "task task-7" in found.stdout
    assert "nothing found in namespace 'carol'" in invoke("search", "Paris", "--namespace", "carol").stdout


def test_show_delete_and_audit(stored):
    shown = json.loads(invoke("show", stored["fact"], "--namespace", "alice").stdout)
    assert shown["content"] == "The Seine flows through Paris." and [r["action"] for r in shown["audit"]] == ["write"]

    deleted = invoke("delete", stored["fact"], "--namespace", "alice", "--reason", "outdated")
    assert deleted.exit_code == 0 and deleted.stdout.startswith(f"deleted {stored['fact']} (fact)")
    assert stored["fact"] not in invoke("search", "Seine Paris", "--namespace", "alice").stdout
    assert "no long-term item" in one_error_line(invoke("show", stored["fact"], "--namespace", "alice"))

    exported = json.loads(invoke("export", "--namespace", "alice").stdout)
    assert [(r["action"], r["reason"]) for r in exported["audit"] if r["item_id"] == stored["fact"]] == [
        ("write", "finding of a completed subtask"), ("delete", "outdated")]
    assert stored["fact"] not in {item["id"] for item in exported["items"]}


def test_export_to_a_file_and_prune(stored, tmp_path):
    target = tmp_path / "out" / "alice.json"
    result = invoke("export", "--namespace", "alice", "--out", str(target))
    assert result.exit_code == 0 and "exported 3 item(s) and 3 audit row(s)" in result.stdout
    assert len(json.loads(target.read_text())["items"]) == 3 and not list(target.parent.glob(".*partial"))

    kept = invoke("prune", "--namespace", "alice", "--older-than", "30")
    assert kept.exit_code == 0 and "pruned 0 item(s)" in kept.stdout
    pruned = invoke("prune", "--namespace", "alice", "--older-than", "0", "--kind", "trajectory")
    assert "pruned 1 item(s)" in pruned.stdout
    assert "2 item(s)" in invoke("list", "--namespace", "alice").stdout


@pytest.mark.parametrize("args, expected", [
    (["delete", "nope", "--namespace", "alice"], "no long-term item 'nope' in namespace 'alice'"),
    (["delete", "{bob}", "--namespace", "alice"], "no long-term item"),  # another namespace's item
    (["list", "--namespace", "alice", "--kind", "opinion"], "unknown kind 'opinion'"),
    (["search", "  ", "--namespace", "alice"], "the search query is empty"),
    (["list", "--namespace", " "], "the namespace is empty"),
    (["export", "--namespace", "alice", "--out", "{folder}"], "is a folder, not a file"),
    (["route", " "], "the message is empty"),
])
def test_bad_input_is_one_line(stored, tmp_path, args, expected):
    args = [a.format(bob=stored["bob"], folder=tmp_path) for a in args]
    assert expected in one_error_line(invoke(*args))
    assert stored["bob"] in invoke("list", "--namespace", "bob").stdout  # nothing was lost


def test_unreachable_store_is_one_line(tmp_path, monkeypatch):
    port = free_port()
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path))
    monkeypatch.setenv("AMB_LONGTERM_BACKEND", "chroma")
    monkeypatch.setenv("AMB_LONGTERM_URL", f"http://127.0.0.1:{port}")
    assert f"long-term store http://127.0.0.1:{port}" in one_error_line(invoke("list"))


def test_route_says_what_a_message_would_read_and_write(tmp_path, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path))
    told = invoke("route", "From now on, answer in British English.", "--namespace", "alice")
    assert told.exit_code == 0 and told.stdout.splitlines()[:4] == [
        "should_read: false", "should_write: true", "namespaces: alice", "kinds: preference (profile)"]
    asked = invoke("route", "Who directed Ed Wood?", "--answer", "Tim Burton")
    assert asked.stdout.splitlines()[:2] == ["should_read: true", "should_write: true"]
    assert "kinds: conclusion (trace)" in asked.stdout
    assert not (tmp_path / "longterm.sqlite3").exists()  # routing opens no store


def test_a_bad_setting_is_one_line_and_exit_2_before_the_store_opens(tmp_path, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_LONGTERM_MAX_TOKENS", "many")
    result = invoke("list", "--namespace", "alice")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: bad setting longterm_max_tokens='many'")
    assert not (tmp_path / "storage").exists()  # nothing opened, nothing written
