"""An export never replaces a bank file with a smaller bank (a run stopped early by Ctrl-C must not turn
the last good export into an empty one): the smaller bank goes to a new name beside it, with a notice."""

from __future__ import annotations

import json

from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
from amb_dspy.storage import InteractionEntry
from amb_dspy.storage.bank_file import dump_bank


def _bank(embedder, n: int) -> MemoryStore:
    store = MemoryStore(embedder)
    if n:
        nodes = store.add_nodes([NodeContent(f"Pier {i} of Port Merrow holds lantern {i}.", f"pier {i}", ["pier"])
                                 for i in range(n)])
        store.record_entry(InteractionEntry(text="search results"), [nodes[0].id])
    return store


def _sizes(path) -> tuple[int, int]:
    data = json.loads(path.read_text())
    return len(data["query_graph"]["nodes"]), len(data["interaction_tree"]["entries"])


def test_a_smaller_bank_does_not_replace_an_export(tmp_path, embedder):
    path = tmp_path / "bank.json"
    assert _bank(embedder, 3).export(path) == path and _sizes(path) == (3, 1)
    notices: list[str] = []
    empty = _bank(embedder, 0)
    written = dump_bank(path, None, empty.graph, empty.tree, embedder.dim, notify=notices.append)
    assert written == tmp_path / "bank.1.json" and _sizes(written) == (0, 0)
    assert _sizes(path) == (3, 1)  # the larger bank stays
    assert len(notices) == 1 and "bank.1.json" in notices[0] and "3 nodes" in notices[0]
    assert _bank(embedder, 0).export(path) == tmp_path / "bank.2.json"  # every door: MemoryStore.export too
    assert _bank(embedder, 4).export(path) == path and _sizes(path) == (4, 1)  # a larger one replaces it


def test_the_cli_names_the_file_it_wrote_when_a_larger_bank_was_there(tmp_path, embedder, monkeypatch):
    """`amb ingest --export` over a larger bank: the last line names the file the smaller bank went to."""
    from typer.testing import CliRunner

    from amb_dspy.cli import app

    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    path = tmp_path / "bank.json"
    _bank(embedder, 12).export(path)
    notes = tmp_path / "notes.md"
    notes.write_text("The Sennet flows through Marrowick.\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["ingest", "--context-file", str(notes), "--export", str(path),
                                      "--policy", "heuristic"])
    assert result.exit_code == 0, result.output
    assert f"bank written to {tmp_path / 'bank.1.json'}" in " ".join(result.output.split())
    assert _sizes(path) == (12, 1)
