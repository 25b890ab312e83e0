"""`amb keys`: a key printed once and kept only hashed, listed without it, revoked; many `amb keys create` at
once lose none; and the server's task registry gives a task to the key that started it alone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from amb_dspy.serve.registry import TaskRegistry

ROOT = Path(__file__).resolve().parent.parent


def amb(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The real `amb` (this checkout's cli.py) in a process of its own, on ``tmp_path``'s storage folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(tmp_path / "storage"),
           "AMB_TEMP_DIR": str(tmp_path / "temp")}
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_key_is_printed_once_kept_hashed_listed_without_it_and_revoked(tmp_path):
    made = amb(tmp_path, "keys", "create", "--namespace", "alice", "--namespace", "team", "--name", "alice laptop")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("amb_") and len(key) > 40 and "\n" not in key
    key_id = made.stderr.split()[1]

    listed = amb(tmp_path, "keys", "list")
    assert listed.returncode == 0 and key not in listed.stdout + listed.stderr
    assert listed.stdout.split()[:4] == [key_id, "alice", "laptop", "alice,team"]
    stored = (tmp_path / "storage" / "keys.sqlite").read_bytes()
    assert key.encode() not in stored and key[4:].encode() not in stored  # only its SHA-256 is kept
    assert (tmp_path / "storage" / "keys.sqlite").stat().st_mode & 0o077 == 0

    revoked = amb(tmp_path, "keys", "revoke", key_id)
    assert revoked.returncode == 0 and key_id in revoked.stdout
    assert key_id not in amb(tmp_path, "keys", "list").stdout
    again = amb(tmp_path, "keys", "revoke", key_id)
    assert again.returncode == 1 and again.stderr.strip() == f"error: no key {key_id!r} (amb keys list shows the keys)"


@pytest.mark.parametrize("args, expected", [
    (["keys", "create"], "Missing option '--namespace'"),
    (["keys", "create", "--namespace", " "], "a namespace is empty"),
    (["keys", "create", "--namespace", "a\x1b[2Jb"], "no control characters"),
])
def test_a_bad_key_request_is_one_line_and_stores_nothing(tmp_path, args, expected):
    done = amb(tmp_path, *args)
    assert done.returncode in (1, 2) and expected in done.stderr
    if done.returncode == 1:
        assert len(done.stderr.strip().splitlines()) == 1
    assert amb(tmp_path, "keys", "list").stdout == ""


def test_keys_created_at_once_by_many_processes_are_all_kept(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda i: amb(tmp_path, "keys", "create", "--namespace", f"ns{i}"), range(8)))
    assert all(m.returncode == 0 for m in made), [m.stderr for m in made]
    listed = amb(tmp_path, "keys", "list").stdout.splitlines()
    assert sorted(line.split()[2] for line in listed) == sorted(f"ns{i}" for i in range(8))
    with sqlite3.connect(tmp_path / "storage" / "keys.sqlite") as db:
        assert db.execute("SELECT count(DISTINCT hash) FROM keys").fetchone()[0] == 8


class FakeSession:
    def __init__(self, task_id: str):
        self.task_id, self.busy, self.closed = task_id, False, False


def test_a_task_is_reached_only_by_the_owner_that_started_it(tmp_path):
    registry = TaskRegistry(lambda goal, **_: FakeSession(goal), export_dir=tmp_path)
    mine = registry.start("mine", owner="key-a")
    assert registry.get("mine", owner="key-a") is mine
    for other in ("key-b", None):
        with pytest.raises(ValueError, match=r"^no open task 'mine': start one with memory_start_task$"):
            registry.get("mine", owner=other)
    shared = registry.start("shared")  # without keys: no owner, as before
    assert registry.get("shared") is shared
    with pytest.raises(ValueError, match="no open task 'shared'"):
        registry.get("shared", owner="key-a")


def test_each_key_s_exports_go_to_a_folder_of_its_own(tmp_path, embedder):
    """Two keys exporting under one name never replace each other's bank; without keys, exports go where they
    always went (STORAGE_DIR/sessions)."""
    import json

    from amb_dspy.bank import MemoryBank
    from amb_dspy.config import AmbConfig
    from amb_dspy.task.tools import TOOLS

    storage = tmp_path / "storage"
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=storage, temp_dir=tmp_path / "t"), embedder=embedder)
    registry = TaskRegistry(bank.start_session, export_dir=storage / "sessions")
    export, observe = TOOLS["memory_export"], TOOLS["memory_observe"]
    written = {}
    for owner, text in (("key-a", "Alice's bank card PIN is 4921."), ("key-b", "Bob likes tea."), (None, "Plain.")):
        session = registry.start(f"notes of {owner}", owner=owner)
        observe.run(session, tool="note", result=text, wait=True)
        written[owner] = Path(json.loads(export.run(session, path="shared.json"))["path"])
    assert written["key-a"] == (storage / "sessions" / "key-a" / "shared.json").resolve()
    assert written["key-b"] == (storage / "sessions" / "key-b" / "shared.json").resolve()
    assert written[None] == (storage / "sessions" / "shared.json").resolve()
    assert "4921" in written["key-a"].read_text() and "4921" not in written["key-b"].read_text()


def test_a_key_starts_tasks_from_the_shared_banks_and_allowed_folders_only(tmp_path):
    """Another key's task file (tasks/) or export (sessions/) is no bank a keyed task may start from; banks/ and
    an --allow-dir folder are; without a key the whole storage folder is, as before."""
    from amb_dspy.config import AmbConfig
    from amb_dspy.serve.access import KeyedHost
    from amb_dspy.task.tools import ToolHost

    storage, allowed = tmp_path / "storage", tmp_path / "allowed"
    for folder, name in (("tasks", "0123abcd.sqlite"), ("sessions", "x.json"), ("banks", "notes.sqlite")):
        (storage / folder).mkdir(parents=True)
        (storage / folder / name).write_bytes(b"")
    allowed.mkdir()
    (allowed / "team.json").write_bytes(b"")
    keyed = KeyedHost(AmbConfig(storage_dir=storage), None, lambda *a, **k: None, (allowed,), namespaces=("bob",))
    for bank in ("tasks/0123abcd.sqlite", "sessions/x.json"):
        with pytest.raises(ValueError, match="not shared between keys"):
            keyed.bank_file(bank)
    assert keyed.bank_file("notes") == (storage / "banks" / "notes.sqlite").resolve()
    assert keyed.bank_file(str(allowed / "team.json")) == (allowed / "team.json").resolve()
    keyless = ToolHost(AmbConfig(storage_dir=storage), None, lambda *a, **k: None)
    assert keyless.bank_file("tasks/0123abcd.sqlite") == (storage / "tasks" / "0123abcd.sqlite").resolve()
