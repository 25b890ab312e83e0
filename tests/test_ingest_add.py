"""Adding documents to a bank (issue 34, item 1): files, folders and globs into a new or existing bank, each
document its own entry; an unchanged document is a no-op, a changed one supersedes its old version; the bank
grows across two `amb ingest --bank` calls. Real embedding model, real store and bank files, heuristic policy
(no LM)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amb_dspy.bank import MemoryBank
from amb_dspy.cli import app
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import EvidenceView, Ranking
from amb_dspy.storage.bank_db import bank_db_size
from amb_dspy.storage.bank_file import BankFileError
from amb_dspy.storage.bank_names import bank_path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "datasets" / "demo"
LOCOMO = Path(os.environ.get("AMB_LOCOMO_DIR") or ROOT.parent / "shared" / "datasets" / "locomo")
FERRY = "# The Sennet ferry\n\nThe Sennet ferry to Kestrel Bay leaves Marrowick harbour at {hour} every morning.\n"


def heuristic_bank(tmp_path: Path, embedder, **settings) -> MemoryBank:
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", **settings)
    return MemoryBank(config, embedder=embedder)


@pytest.fixture
def notes(tmp_path) -> Path:
    """A folder of notes: Markdown and text from the demo world (one in a subfolder), a JSONL file of two
    passages, a binary file named like a note and a hidden file."""
    folder = tmp_path / "notes"
    (folder / "places").mkdir(parents=True)
    shutil.copy(DEMO / "marrowick.md", folder / "marrowick.md")
    shutil.copy(DEMO / "gull-coast-climate.txt", folder / "places" / "gull-coast-climate.txt")
    passages = [{"title": "River Sennet", "text": (DEMO / "river-sennet.md").read_text()},
                {"title": "Kestrel Bay", "text": (DEMO / "kestrel-bay.md").read_text()}]
    (folder / "passages.jsonl").write_text("\n".join(json.dumps(p) for p in passages) + "\n")
    (folder / "photo.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    (folder / ".draft.md").write_text("A hidden draft is not a note.")
    return folder


def document_names(store: MemoryStore) -> list[str]:
    return [e.metadata["name"] for e in store.tree.entries.values() if "sha256" in e.metadata]


def test_a_folder_is_added_each_document_its_own_entry_and_a_binary_file_is_one_line(tmp_path, embedder, notes):
    bank = heuristic_bank(tmp_path, embedder)
    result = bank.add_documents([notes])
    folder = notes.as_posix()
    assert result.added == [f"{folder}/marrowick.md", f"{folder}/passages.jsonl#river-sennet",
                            f"{folder}/passages.jsonl#kestrel-bay", f"{folder}/places/gull-coast-climate.txt"]
    assert result.skipped == [f"skipped {folder}/photo.md: binary data, not text"]
    store = result.store
    assert document_names(store) == result.added and result.nodes == len(store.graph) > 4
    assert all(store.tree.entries[s.entry_id].metadata["name"] in result.added  # every node comes from a document
               for node in store.graph.nodes_dict.values() for s in node.sources)
    store.check()


def test_a_glob_adds_what_it_matches_and_the_limit_is_per_document(tmp_path, embedder, notes):
    (notes / "long.md").write_text("The harbour wall was rebuilt in stone. " * 100)  # 3.9 KB
    bank = heuristic_bank(tmp_path, embedder, max_context_bytes=3000)
    result = bank.add_documents([str(notes / "*.md"), str(notes / "nothing-*.txt")])
    assert result.added == [f"{notes.as_posix()}/marrowick.md"]  # 2.3 KB: under the limit, as each document must be
    # every path is looked up before any file is read (the progress bar's total), so a glob matching nothing comes first
    assert [line.split(":")[0] for line in result.skipped] == [
        f"skipped {notes}/nothing-*.txt", f"skipped {notes.as_posix()}/long.md", f"skipped {notes.as_posix()}/photo.md"]
    assert "no file matches" in result.skipped[0] and "limit per document" in result.skipped[1]


def test_re_adding_an_unchanged_document_is_a_no_op(tmp_path, embedder, notes):
    bank = heuristic_bank(tmp_path, embedder)
    first = bank.add_documents([notes / "marrowick.md"])
    store = first.store
    before = (len(store.graph), len(store.tree), store.graph.edge_count)
    again = bank.add_documents([notes / "marrowick.md"], into=store)
    assert first.added and not again.changed and again.unchanged == [f"{notes.as_posix()}/marrowick.md"]
    assert (len(store.graph), len(store.tree), store.graph.edge_count) == before


def test_a_changed_document_supersedes_its_old_version_which_memory_leaves_out(tmp_path, embedder):
    note = tmp_path / "ferry.md"
    note.write_text(FERRY.format(hour="9 am"))
    bank = heuristic_bank(tmp_path, embedder)
    added = bank.add_documents([note, DEMO / "river-sennet.md"])
    store = added.store
    old = set(store.graph.nodes_dict)
    note.write_text(FERRY.format(hour="11 am"))
    result = bank.add_documents([note, DEMO / "river-sennet.md"], into=store)
    assert result.replaced == [note.as_posix()] and result.unchanged == [(DEMO / "river-sennet.md").as_posix()]
    versions = [e for e in store.tree.entries.values() if e.metadata.get("name") == note.as_posix()]
    assert len(versions) == 2 and versions[1].metadata["supersedes"] == versions[0].entry_id  # the tree keeps both
    ferry_nodes = {n.id for n in store.graph.nodes_dict.values() if versions[0].entry_id in {s.entry_id for s in n.sources}}
    assert ferry_nodes and ferry_nodes <= old and store.superseded() == ferry_nodes
    assert all(store.graph.node(n).superseded_by == versions[1].entry_id for n in ferry_nodes)
    block = EvidenceView(Ranking(store)).block("When does the ferry to Kestrel Bay leave?", 300).text
    assert "11 am" in block and "9 am" not in block
    assert not ferry_nodes & {n.id for n in store.retrieve_for_text("ferry to Kestrel Bay at 9 am", k=3)}
    assert store.current(sorted(ferry_nodes)) == sorted(ferry_nodes)  # only old versions match: they are shown
    store.check()
    note.write_text(FERRY.format(hour="9 am"))  # the note reverted: the old text is the newest version again
    reverted = bank.add_documents([note], into=store)
    assert reverted.replaced == [note.as_posix()] and ferry_nodes <= store.superseded()
    block = EvidenceView(Ranking(store)).block("When does the ferry to Kestrel Bay leave?", 300).text
    assert "9 am" in block and "11 am" not in block
    assert bank.add_documents([note], into=store).unchanged == [note.as_posix()]


def test_the_bank_grows_across_two_amb_ingest_calls_and_the_server_finds_it(tmp_path, monkeypatch):
    from amb_dspy.task.tools import ToolHost

    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    target = bank_path("demo", tmp_path / "storage")
    assert target == tmp_path / "storage" / "banks" / "demo.sqlite"  # a name is a bank database: it grows
    first = CliRunner().invoke(app, ["ingest", str(DEMO / "marrowick.md"), "--bank", "demo", "--policy", "heuristic"])
    assert first.exit_code == 0, first.output
    assert first.stdout.strip().splitlines()[-1].startswith("documents added 1, newer versions 0, unchanged 0")
    one = bank_db_size(target)
    second = CliRunner().invoke(app, ["ingest", str(DEMO / "river-sennet.md"), str(DEMO / "marrowick.md"),
                                      "--bank", "demo", "--policy", "heuristic"])
    assert second.exit_code == 0, second.output
    assert "documents added 1, newer versions 0, unchanged 1" in second.stdout
    two = bank_db_size(target)  # (nodes, entries)
    assert two[0] > one[0] and two[1] == one[1] + 1
    host = ToolHost(config=AmbConfig(storage_dir=tmp_path / "storage"), embedder=None, start_session=None)
    assert host.bank_file("banks/demo.sqlite") == target.resolve()  # memory_start_task(bank="banks/demo.sqlite")
    assert host.bank_file("demo") == target.resolve()  # the name amb ingest was given, as every door reads it
    shown = CliRunner().invoke(app, ["show", "demo"])
    assert shown.exit_code == 0 and "Marrowick" in shown.stdout, shown.output
    asked = CliRunner().invoke(app, ["run", "Which river flows through Marrowick?", "--bank", "demo", "--lm", "local",
                                     "--strategy", "direct", "--policy", "heuristic"])
    assert asked.exit_code == 0 and "Sennet" in asked.stdout.strip().splitlines()[-1], asked.output
    assert bank_db_size(target) == two  # the bank a run starts from is not changed


def test_a_bank_file_here_wins_over_a_bank_of_that_name_in_the_storage_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.json").write_text("{}")
    assert bank_path("notes.json", tmp_path / "storage") == Path("notes.json")
    assert bank_path("notes", tmp_path / "storage") == tmp_path / "storage" / "banks" / "notes.sqlite"
    (tmp_path / "storage" / "banks").mkdir(parents=True)
    (tmp_path / "storage" / "banks" / "old.json").write_text("{}")  # a bank an earlier release named
    assert bank_path("old", tmp_path / "storage") == tmp_path / "storage" / "banks" / "old.json"
    assert bank_path("sub/notes.json", tmp_path / "storage") == Path("sub/notes.json")


def test_amb_ingest_adds_the_rest_and_exits_1_when_a_file_is_skipped(tmp_path, monkeypatch, notes, embedder):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    out = tmp_path / "bank.json"
    result = CliRunner().invoke(app, ["ingest", str(notes), "--export", str(out), "--policy", "heuristic"])
    assert result.exit_code == 1, result.output
    assert "skipped" in result.stderr and "photo.md: binary data, not text" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: 1 of the documents could not be added (see the lines above)"
    assert "documents added 4" in result.stdout and len(MemoryStore.load(out, embedder).tree) == 4


def test_a_schema_3_bank_file_loads_and_takes_a_newer_version(tmp_path, embedder):
    note = tmp_path / "ferry.md"
    note.write_text(FERRY.format(hour="9 am"))
    bank = heuristic_bank(tmp_path, embedder)
    added = bank.add_documents([note])
    path = tmp_path / "old.json"
    added.store.export(path)
    data = json.loads(path.read_text())
    data["schema_version"] = 3  # as schema 3 wrote it: no superseded_by on the nodes
    for node in data["query_graph"]["nodes"]:
        del node["superseded_by"]
    path.write_text(json.dumps(data))
    store = MemoryStore.load(path, embedder)
    assert len(store.graph) and not store.superseded()
    note.write_text(FERRY.format(hour="11 am"))
    result = bank.add_documents([note], into=path)
    assert result.replaced == [note.as_posix()] and len(result.store.superseded()) == len(store.graph)
    data["schema_version"] = 4
    data["query_graph"]["nodes"][0]["superseded_by"] = "ghost"
    path.write_text(json.dumps(data))
    with pytest.raises(BankFileError, match="superseded by a missing entry 'ghost'"):
        MemoryStore.load(path, embedder)


def test_locomo_sessions_arrive_one_file_at_a_time_each_session_its_own_dated_entry(tmp_path, embedder):
    conversation = json.loads((LOCOMO / "30.json").read_text())
    keep = {"speaker_a", "speaker_b", "qa"}

    def first_sessions(n: int) -> Path:
        sessions = {k: v for k, v in conversation.items() if k in keep or any(
            k in (f"session_{i}", f"session_{i}_date_time") for i in range(1, n + 1))}
        path = tmp_path / "30.json"
        path.write_text(json.dumps(sessions))
        return path

    bank = heuristic_bank(tmp_path, embedder)
    first = bank.add_documents([first_sessions(2)])
    store = first.store
    later = bank.add_documents([first_sessions(3)], into=store)  # the conversation so far, one session more
    name = (tmp_path / "30.json").as_posix()
    assert first.added == [f"{name}#session_1", f"{name}#session_2"]
    assert later.added == [f"{name}#session_3"] and later.unchanged == first.added
    entries = [e for e in store.tree.entries.values() if "sha256" in e.metadata]
    assert [e.metadata["date"] for e in entries] == [conversation[f"session_{i}_date_time"] for i in (1, 2, 3)]
    turn = conversation["session_3"][0]
    assert entries[2].text.splitlines()[0] == f"[{conversation['session_3_date_time']}] {turn['speaker']}: {turn['text']}" + (
        f" [shares a photo: {turn['blip_caption']}]" if turn.get("blip_caption") else "")


def test_a_bank_that_is_no_bank_file_is_one_line_and_stays_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "amb-dspy-bank", "schema_version": 3')
    result = CliRunner().invoke(app, ["ingest", str(DEMO / "marrowick.md"), "--bank", str(broken),
                                      "--policy", "heuristic"])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {broken}: not valid JSON (truncated or corrupt?) at line 1 column 48"]
    assert broken.read_text() == '{"format": "amb-dspy-bank", "schema_version": 3'
