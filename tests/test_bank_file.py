"""Bank files: export then import gives an equal bank (embeddings bit for bit), and every kind of bad
file is refused with one line while the current bank stays as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from amb_dspy.agents import ConflictNotification, cross_validation_task
from amb_dspy.memory.graph_ops import ContextUpdate, MemoryStore, NodeContent
from amb_dspy.storage import (
    Attachment,
    AttachmentType,
    CompletedTask,
    InsightDoc,
    InteractionEntry,
    PendingTask,
    TaskKind,
)
from amb_dspy.storage.bank_file import BankFileError, load_bank


@pytest.fixture()
def store(embedder) -> MemoryStore:
    doc = InsightDoc(
        task_goal="When did Kilauea last erupt?",
        completed_tasks=[
            CompletedTask(description="search eruptions", status="success", context="2018 eruption found"),
            CompletedTask(type=TaskKind.CROSS_VALIDATE, description="check 2018 vs 2020", status="failure", context="unclear"),
        ],
        pending_tasks=["read the USGS page"],
    )
    store = MemoryStore(embedder, doc)
    a, b, c, d = (n.id for n in store.add_nodes([
        NodeContent("Kilauea erupted in 2018; lava reached the sea.", "Kilauea 2018 eruption", ["kilauea", "2018"]),
        NodeContent("A 2020 summit eruption formed a lava lake.", "Kilauea 2020 eruption", ["kilauea", "2020"]),
        NodeContent("USGS monitors Hawaiian volcanoes.", "volcano monitoring", ["usgs", "hawaii"]),
        NodeContent("Émile wrote «naïve» notes — 火山 🌋.", "unicode text", ["émile", "火山"]),
    ]))
    store.relate(a, c, {c: ContextUpdate("monitoring of Kilauea", ["usgs", "kilauea"])})
    store.add_edge(b, c)
    store.add_edge(c, d)
    store.record_entry(InteractionEntry(text="search results ...", metadata={"tool": "search", "n": 3, "ok": True}), [a, b])
    store.record_entry(
        InteractionEntry(text="a photo", attachments=(Attachment(type=AttachmentType.IMAGE, content="attachments/x.png"),)),
        [d],
    )
    store.merge_nodes([a, b], NodeContent("Kilauea erupted in 2018 and 2020.", "Kilauea eruptions", ["kilauea"]), "years")
    store.check()
    return store


def state(store: MemoryStore) -> dict:
    return {
        "doc": store.insight_doc.model_dump() if store.insight_doc else None,
        "nodes": [n.model_dump() for n in store.graph.nodes_dict.values()],
        "tree": store.tree.to_dict(),
        "index": sorted(store.index.ids()),
    }


def test_export_then_import_gives_an_equal_bank(tmp_path, store, embedder):
    path = store.export(tmp_path / "bank.json") or tmp_path / "bank.json"
    loaded = MemoryStore.load(path, embedder)
    assert loaded.same_content(store) and store.same_content(loaded)
    assert state(loaded) == state(store)
    assert list(loaded.graph.nodes_dict) == list(store.graph.nodes_dict)
    for node_id, node in store.graph.nodes_dict.items():
        twin = loaded.graph.node(node_id)
        assert twin.embedding.dtype == np.float32
        assert twin.embedding.tobytes() == node.embedding.tobytes()  # bit for bit
        assert twin.timestamp == node.timestamp
    assert loaded.tree.merge_events == store.tree.merge_events
    loaded.check()
    # the rebuilt indexes rank exactly as the originals
    query = embedder.embed(["Kilauea eruption year"])[0]
    assert loaded.index.rank(query, "kilauea 2018", k=10) == store.index.rank(query, "kilauea 2018", k=10)
    assert [n.id for n in loaded.retrieve(query, "kilauea", k=2)] == [n.id for n in store.retrieve(query, "kilauea", k=2)]
    # and exporting the import gives the same file, byte for byte
    loaded.export(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_an_empty_bank_round_trips(tmp_path, embedder):
    MemoryStore(embedder).export(tmp_path / "empty.json")
    loaded = MemoryStore.load(tmp_path / "empty.json", embedder)
    assert loaded.insight_doc is None and len(loaded.graph) == 0 and len(loaded.tree) == 0 and len(loaded.index) == 0


def edited(path: Path, change) -> Path:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    out = path.with_name("edited.json")
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


def first_node(data):
    return data["query_graph"]["nodes"][0]


BAD_FILES = {
    "missing file": (lambda good: good.with_name("nowhere.json"), "no such bank file"),
    "a directory": (lambda good: good.parent, "no such bank file"),
    "empty file": (lambda good: write(good, b""), "not valid JSON"),
    "truncated JSON": (lambda good: write(good, good.read_bytes()[: len(good.read_bytes()) // 2]), "not valid JSON"),
    "binary file": (lambda good: write(good, b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" + bytes(range(256))), "binary"),
    "foreign JSON object": (lambda good: write(good, b'{"name": "not a bank", "nodes": []}'), "not an amb-dspy bank"),
    "foreign JSON list": (lambda good: write(good, b"[1, 2, 3]"), "not an amb-dspy bank"),
    "JSON string": (lambda good: write(good, b'"amb-dspy-bank"'), "not an amb-dspy bank"),
    "newer schema version": (lambda good: edited(good, lambda d: d.update(schema_version=99)), "schema version 99"),
    "schema version missing": (lambda good: edited(good, lambda d: d.pop("schema_version")), "schema version None"),
    "schema version as text": (lambda good: edited(good, lambda d: d.update(schema_version="1")), "schema version '1'"),
    "dangling edge": (lambda good: edited(good, lambda d: first_node(d)["links"].append("ghost")), "missing node 'ghost'"),
    "one-way edge": (lambda good: edited(good, lambda d: d["query_graph"]["nodes"][1]["links"].append(d["query_graph"]["nodes"][-1]["id"])),
                     "not symmetric"),
    "self-loop": (lambda good: edited(good, lambda d: first_node(d)["links"].append(first_node(d)["id"])), "itself"),
    "duplicate node": (lambda good: edited(good, lambda d: d["query_graph"]["nodes"].append(first_node(d))), "twice"),
    "embedding too short": (lambda good: edited(good, lambda d: first_node(d)["embedding"].pop()), "shape (383,)"),
    # a bank of another dimension is embedded again (tests/test_chosen_embedder.py); one whose nodes disagree is not
    "declared dimension not its nodes'": (lambda good: edited(good, lambda d: d["query_graph"].update(embedding_dim=768)),
                                          "has an embedding of shape (384,)"),
    "NaN in an embedding": (lambda good: edited(good, lambda d: first_node(d)["embedding"].__setitem__(0, float("nan"))),
                            "finite"),
    "embedding as text": (lambda good: edited(good, lambda d: first_node(d).update(embedding="0.1 0.2")), "embedding"),
    "node without id": (lambda good: edited(good, lambda d: first_node(d).pop("id")), "id"),
    "unknown field": (lambda good: edited(good, lambda d: d.update(extra_layer={})), "extra_layer"),
    "two pending tasks": (lambda good: edited(good, lambda d: d["insight_doc"].update(pending_tasks=["a", "b"])),
                          "pending_tasks"),
    "entries of an unknown node": (lambda good: edited(good, lambda d: d["interaction_tree"]["node_to_entries"].update(
        ghost=[d["interaction_tree"]["entries"][0]["entry_id"]])), "unknown node 'ghost'"),
    "link to an unknown entry": (lambda good: edited(good, lambda d: d["interaction_tree"]["node_to_entries"].update(
        {first_node(d)["id"]: ["no-such-entry"]})), "no-such-entry"),
    "entry without text": (lambda good: edited(good, lambda d: d["interaction_tree"]["entries"][0].pop("text")), "text"),
    "bad attachment type": (lambda good: edited(good, lambda d: d["interaction_tree"]["entries"][1]["attachments"][0].update(
        type="video")), "type"),
    # hostile files (issue 15): each of these escaped as an exception or was accepted
    "schema version true": (lambda good: edited(good, lambda d: d.update(schema_version=True)), "schema version True"),
    "node timestamp 1e308": (lambda good: edited(good, lambda d: first_node(d).update(timestamp=1e308)), "timestamp"),
    "infinite entry timestamp": (lambda good: edited(good, lambda d: d["interaction_tree"]["entries"][0].update(
        timestamp=float("inf"))), "timestamp"),
    "negative merge timestamp": (lambda good: edited(good, lambda d: d["interaction_tree"]["merge_events"][0].update(
        timestamp=-1.0)), "timestamp"),
    "5,000-digit timestamp": (lambda good: write(good, re.sub(
        rb'"timestamp": [0-9.]+', b'"timestamp": 1' + b"0" * 5000 + b".5", good.read_bytes(), count=1)), "timestamp"),
    "5,000-digit number": (lambda good: write(good, good.read_bytes().replace(
        b'"embedding_dim": 384', b'"embedding_dim": ' + b"9" * 5000)), "digits"),
    "JSON nested 100,000 deep": (lambda good: write(good, b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    "metadata nested 600 deep": (lambda good: edited(good, lambda d: d["interaction_tree"]["entries"][0].update(
        metadata=_nested(600))), "nested too deeply"),
}


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def write(good: Path, data: bytes) -> Path:
    out = good.with_name("bad.json")
    out.write_bytes(data)
    return out


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_bank_file_is_one_clear_error_and_the_current_bank_stays(tmp_path, store, embedder, case):
    good = tmp_path / "bank.json"
    store.export(good)
    good_bytes = good.read_bytes()
    make_bad, expected = BAD_FILES[case]
    bad = make_bad(good)
    before = state(store)
    with pytest.raises(BankFileError) as info:
        MemoryStore.load(bad, embedder)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert expected in message, message
    assert str(bad) in message  # says which file
    assert state(store) == before
    assert good.read_bytes() == good_bytes
    assert MemoryStore.load(good, embedder).same_content(store)


def test_load_bank_checks_the_dimension_the_embedder_gives(tmp_path, store):
    store.export(tmp_path / "bank.json")
    with pytest.raises(BankFileError, match="dimension 384, the embedder gives 512"):
        load_bank(tmp_path / "bank.json", 512)


def test_a_failed_export_leaves_the_previous_file_and_no_temporary_file(tmp_path, store, monkeypatch):
    import amb_dspy.files as files

    path = tmp_path / "bank.json"
    store.export(path)
    good_bytes = path.read_bytes()

    def full_disk(fd):  # a file system with delayed allocation reports a full disk when the data is flushed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        store.export(path)
    assert path.read_bytes() == good_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank.json"]


def test_an_unreadable_bank_file_is_one_clear_error(tmp_path, store, embedder, monkeypatch):
    path = tmp_path / "bank.json"
    store.export(path)

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(BankFileError, match=r"cannot be read \(Permission denied\)") as info:
        MemoryStore.load(path, embedder)
    assert "\n" not in str(info.value)


def test_a_schema_2_file_loads_its_pending_task_typed_from_its_text(tmp_path, store, embedder):
    """Bank files (and checkpoints) written before kinds were stored held the pending task's text alone."""
    conflict = ConflictNotification(conflicting_node_ids=list(store.graph.nodes_dict)[:2], conflict_description="2018 or 2020?")
    store.set_insight_doc(store.insight_doc.model_copy(update={"pending": [cross_validation_task(conflict)]}))
    path = tmp_path / "bank.json"
    store.export(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] >= 3 and data["insight_doc"]["pending"][0]["kind"] == "CROSS_VALIDATE"
    data["schema_version"] = 2  # as schema 2 wrote it: the text alone
    data["insight_doc"] = {k: v for k, v in data["insight_doc"].items() if k != "pending"}
    (tmp_path / "old.json").write_text(json.dumps(data))

    loaded = MemoryStore.load(tmp_path / "old.json", embedder)
    assert loaded.insight_doc.pending == [cross_validation_task(conflict)]
    assert loaded.insight_doc.completed_tasks == store.insight_doc.completed_tasks
    data["insight_doc"]["pending_tasks"] = ["read the USGS page"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert MemoryStore.load(tmp_path / "old.json", embedder).insight_doc.pending == [PendingTask(description="read the USGS page")]
