"""Issue 38, part 5: names and text from outside are safe, and a bank file is never left half-made.

A file name that is not UTF-8 is read, stored (its byte as ``\\xff``) and shown like any other; control
characters in documents and names reach the terminal escaped while the bank keeps the text as it was; a first save
that fails leaves no file. The real CLI (typer's runner), the real embedding model, real files.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amb_dspy.cli import app
from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
from amb_dspy.storage import InteractionEntry
from amb_dspy.storage.bank_file import BankFileError


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))


def ingest(*args: str):
    return CliRunner().invoke(app, ["ingest", *args, "--policy", "heuristic"])


def entries(bank: Path) -> dict[str, str]:
    """Each entry's name and text, read straight from the bank database."""
    with closing(sqlite3.connect(bank)) as connection:
        bodies = [json.loads(body) for (body,) in connection.execute("SELECT body FROM entries ORDER BY seq")]
    return {body["metadata"]["name"]: body["text"] for body in bodies}


def test_a_file_name_that_is_not_utf8_is_read_stored_and_shown_escaped(cli_env, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "ok.md").write_text("The Sennet flows through Marrowick.\n")
    with open(os.path.join(os.fsencode(folder), b"\xff.md"), "w") as handle:
        handle.write("The Gull Coast lies north of Marrowick.\n")
    bank = tmp_path / "d.sqlite"
    result = ingest(str(folder), "--bank", str(bank), "--export", str(tmp_path / "d.json"))
    assert result.exit_code == 0, result.output
    assert "documents added 2" in result.stdout and f"{folder.as_posix()}/\\xff.md" in result.stderr
    assert set(entries(bank)) == {f"{folder.as_posix()}/ok.md", f"{folder.as_posix()}/\\xff.md"}
    exported = json.loads((tmp_path / "d.json").read_text(encoding="utf-8"))["interaction_tree"]["entries"]
    assert len(exported) == 2
    again = ingest(str(folder), "--bank", str(bank))  # the same name at every add: nothing added twice
    assert again.exit_code == 0 and "documents added 0, newer versions 0, unchanged 2" in again.stdout


def test_control_characters_reach_the_terminal_escaped_and_the_bank_as_they_were(cli_env, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    text = "Lantern night in Marrowick \x1b[2J starts at dusk.\x00 The \x9b31m pier lights follow."
    (folder / "passages.jsonl").write_text(json.dumps({"id": "p1", "text": text}) + "\n")
    (folder / "red\x1b[31m\nname.md").write_text("Warden Ilse keeps the harbour lantern of Marrowick.\n")
    bank = tmp_path / "bank.sqlite"
    result = ingest(str(folder), "--bank", str(bank))
    assert result.exit_code == 0, result.output
    stored = entries(bank)
    assert stored[f"{folder.as_posix()}/passages.jsonl#p1"] == text  # the bank keeps the text as it was
    assert f"{folder.as_posix()}/red\x1b[31m\nname.md" in stored
    assert "\x1b" not in result.output and "/red\\x1b[31m\\x0aname.md" in result.stderr
    shown = CliRunner().invoke(app, ["show", str(bank)])
    assert shown.exit_code == 0, shown.output
    for raw in ("\x1b", "\x00", "\x9b"):
        assert raw not in shown.output
    with closing(sqlite3.connect(bank)) as connection:
        node = next(node_id for node_id, body in connection.execute("SELECT id, body FROM nodes") if "[2J" in body)
    one = CliRunner().invoke(app, ["show", str(bank), "--node", node])
    assert one.exit_code == 0 and "\x1b" not in one.output and "\\x1b[2J" in one.output and "\\x00" in one.output


def test_printable_escapes_what_a_terminal_acts_on_and_keeps_lines_of_a_text():
    from amb_dspy.text import printable

    assert printable("a\x1b[2Jb\x00c\x7f\u202ed\nz") == "a\\x1b[2Jb\\x00c\\x7f\\u202ed\\x0az"
    assert printable("one\r\ntwo\tthree\rfour", lines=True) == "one\ntwo\tthree\\x0dfour"
    assert printable("name-\udcff.md") == "name-\\xff.md"  # a byte that is not UTF-8, from a file name


def test_a_first_save_that_fails_leaves_no_bank_file(tmp_path, embedder):
    """A row that cannot be stored (a lone surrogate no UTF-8 holds) fails the first save in one line, and the
    new bank is absent, not a file without tables that every later ingest refused (as it was)."""
    store = MemoryStore(embedder)
    node = store.add_nodes([NodeContent("Pier 4 of Port Merrow.", "pier", ["pier"])])[0]
    store.record_entry(InteractionEntry(text="Pier 4 of Port Merrow.", metadata={"name": "pier-\udcff.md"}), [node.id])
    path = tmp_path / "new.sqlite"
    with pytest.raises(BankFileError):
        store.export(path)
    assert not path.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".new.sqlite")]


def test_a_database_left_without_tables_is_taken_as_a_new_bank(cli_env, tmp_path):
    """What a failed first save used to leave (a SQLite file and no table): the next ingest makes the bank."""
    bank = tmp_path / "left.sqlite"
    with closing(sqlite3.connect(bank)) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
    note = tmp_path / "note.md"
    note.write_text("The Sennet flows through Marrowick.\n")
    result = ingest(str(note), "--bank", str(bank))
    assert result.exit_code == 0, result.output
    assert list(entries(bank)) == [note.as_posix()]
