"""The one atomic writer (amb_dspy.files): files are replaced whole, nothing half-written is left behind,
and each kind of file keeps the mode it has always had (bank files owner-only; the HTML view and the
long-term memory export as any new file, the umask deciding)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from amb_dspy.config import AmbConfig
from amb_dspy.files import PRIVATE_MODE, write_atomically
from amb_dspy.longterm import commands
from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
from amb_dspy.storage import InsightDoc
from amb_dspy.view import load_view
from amb_dspy.view.html import write_html


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_text_and_bytes_replace_the_file_whole(tmp_path):
    target = tmp_path / "deep" / "er" / "out.json"
    write_atomically(target, "première version")
    assert target.read_text(encoding="utf-8") == "première version"
    write_atomically(target, b"\x00\x01 second")
    assert target.read_bytes() == b"\x00\x01 second" and leftovers(target.parent) == []


def test_modes_follow_the_umask_unless_owner_only(tmp_path, umask):
    default, private = tmp_path / "default.txt", tmp_path / "private.txt"
    write_atomically(default, "x")
    write_atomically(private, "x", mode=PRIVATE_MODE)
    assert mode(default) == 0o666 & ~umask
    assert mode(private) == 0o600
    private.chmod(0o640)  # the mode of a replaced file is not carried over: the writer's mode applies
    write_atomically(private, "y", mode=PRIVATE_MODE)
    assert mode(private) == 0o600


def test_a_failed_replace_keeps_the_old_target_and_leaves_no_partial_file(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside.txt").write_text("kept")
    with pytest.raises(OSError):
        write_atomically(target, "new")
    assert (target / "inside.txt").read_text() == "kept" and leftovers(tmp_path) == []


def test_bank_files_are_owner_only_and_the_view_and_memory_export_follow_the_umask(tmp_path, umask, embedder,
                                                                                   monkeypatch):
    store = MemoryStore(embedder, InsightDoc(task_goal="When did Kilauea erupt?"))
    store.add_nodes([NodeContent("Kilauea erupted in 2018.", "Kilauea 2018", ["kilauea"])])
    bank = tmp_path / "bank.json"
    store.export(bank)
    page = write_html(load_view(bank), tmp_path / "view.html")
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.delenv("AMB_LONGTERM_BACKEND", raising=False)
    exported = tmp_path / "memory.json"
    commands.export_items(AmbConfig(), "default", out=exported)

    assert mode(bank) == 0o600
    assert mode(page) == 0o666 & ~umask and mode(exported) == 0o666 & ~umask
    assert leftovers(tmp_path) == []
