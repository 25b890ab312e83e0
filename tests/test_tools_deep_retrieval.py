"""deep_retrieval on a real MemoryStore (real embedder), real files and a real merge."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
from amb_dspy.storage import Attachment, AttachmentType, InteractionEntry
from amb_dspy.tools import DeepRetrievalTool

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    (root / "doc1" / "attachments").mkdir(parents=True)
    (root / "doc1" / "attachments" / "chart.png").write_bytes(PNG)
    (root / "doc1" / "attachments" / "notes.md").write_text("# Field notes\nThe gauge read 5.2 m at high water.")
    (root / "doc1" / "attachments" / "fit.py").write_text("def fit(xs):\n    return sum(xs) / len(xs)\n")
    (root / "doc1" / "attachments" / "scan.pdf").write_bytes(b"%PDF-1.4\x00\x01\x02 binary body")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-OUTSIDE-STORAGE")
    return root


@pytest.fixture
def store(embedder) -> MemoryStore:
    return MemoryStore(embedder)


def _node(store, summary):
    return store.add_node(NodeContent(summary=summary, context=f"context of {summary}", keywords=summary.split()[:2]))


def _entry(store, text, node_ids, attachments=(), **metadata):
    return store.record_entry(InteractionEntry(text=text, metadata=metadata, attachments=tuple(attachments)), node_ids)


def test_merged_node_returns_all_entries_in_time_order_with_file_contents(store, storage):
    a = _node(store, "tide gauge readings at the harbour")
    b = _node(store, "harbour tide levels reported by the guild")
    files = storage / "doc1" / "attachments"
    first = _entry(store, "search found the gauge table", [a.id], source="search", tool_calls=["search"])
    second = _entry(store, "visited the guild page", [b.id], [
        Attachment(type=AttachmentType.IMAGE, content=str((files / "chart.png").resolve())),
        Attachment(type=AttachmentType.DOCUMENT, content="doc1/attachments/notes.md"),
        Attachment(type=AttachmentType.CODE, content="doc1/attachments/fit.py"),
        Attachment(type=AttachmentType.DOCUMENT, content="doc1/attachments/scan.pdf"),
    ], source="visit")
    third = _entry(store, "both pages agree", [a.id, b.id])
    merged, _event = store.merge_nodes([a.id, b.id], NodeContent("tide levels", "merged context", ["tide"]), "merge")

    tool = DeepRetrievalTool(store, storage)
    data = json.loads(tool(merged.id))
    assert data["node_id"] == merged.id and data["summary"] == "tide levels"
    assert [e["entry_id"] for e in data["entries"]] == [first.entry_id, second.entry_id, third.entry_id]
    assert data["entries"][0]["metadata"] == {"source": "search", "tool_calls": ["search"]}
    assert data["entries"][0]["timestamp"].endswith("Z")
    image, notes, code, pdf = data["entries"][1]["attachments"]
    assert image["type"] == "image" and image["encoding"] == "base64" and image["mime_type"] == "image/png"
    assert base64.b64decode(image["file_content"]) == PNG
    assert notes["encoding"] == "text" and "gauge read 5.2 m" in notes["file_content"]
    assert code["file_content"] == "def fit(xs):\n    return sum(xs) / len(xs)\n"
    assert pdf["encoding"] == "base64" and base64.b64decode(pdf["file_content"]).startswith(b"%PDF-1.4")

    # an id that was merged away still leads to its entries, with a note saying where they went
    old = json.loads(tool(a.id))
    assert old["node_id"] == merged.id and f"merged into node {merged.id}" in old["note"]
    assert len(old["entries"]) == 3


def test_paths_outside_the_storage_directory_are_refused(store, storage):
    node = _node(store, "attachments that try to escape")
    outside = storage.parent / "secret.txt"
    link = storage / "doc1" / "attachments" / "innocent.txt"
    os.symlink(outside, link)
    for climbing in ("../secret.txt", "doc1/../../secret.txt"):  # refused already as a bank file is read
        with pytest.raises(ValueError, match="climbs out of the storage directory"):
            Attachment(type=AttachmentType.DOCUMENT, content=climbing)
    refs = [str(outside), str(link), "/etc/passwd"]
    _entry(store, "escape attempts", [node.id],
           [Attachment(type=AttachmentType.DOCUMENT, content=ref) for ref in refs])
    out = DeepRetrievalTool(store, storage)(node.id)
    assert "TOP-SECRET-OUTSIDE-STORAGE" not in out and "root:" not in out
    atts = json.loads(out)["entries"][0]["attachments"]
    assert [a["error"] for a in atts] == ["refused: the path is outside the bank's storage directory"] * len(refs)
    assert all("file_content" not in a for a in atts)


def test_missing_files_are_reported_per_attachment(store, storage):
    node = _node(store, "a lost file")
    _entry(store, "the file is gone", [node.id], [Attachment(type=AttachmentType.CODE, content="doc1/gone.py")])
    [att] = json.loads(DeepRetrievalTool(store, storage)(node.id))["entries"][0]["attachments"]
    assert att["error"] == "file not found in the bank's storage directory"


def test_unknown_ids_are_one_line_errors_that_say_where_ids_come_from(store, storage):
    tool = DeepRetrievalTool(store, storage)
    assert tool("abc") == "Error: no memory node 'abc': the memory is empty, so there is nothing to retrieve yet."
    node = _node(store, "one known node")
    out = tool("nonexistent-node")
    assert out.startswith("Error: no memory node 'nonexistent-node'; use a node id shown in the <memory> section")
    assert node.id in out and "\n" not in out
    assert tool("") .startswith("Error: no memory node ''")


def test_an_unambiguous_id_prefix_or_a_quoted_id_is_accepted(store, storage):
    node = _node(store, "prefix lookup")
    _entry(store, "entry for prefix lookup", [node.id])
    tool = DeepRetrievalTool(store, storage)
    assert json.loads(tool(node.id[:8]))["node_id"] == node.id
    assert json.loads(tool(f"'{node.id}'"))["node_id"] == node.id
    assert json.loads(tool(f"[{node.id}]"))["entries"][0]["text"] == "entry for prefix lookup"


def test_a_node_without_entries_says_so(store, storage):
    node = _node(store, "nothing recorded")
    data = json.loads(DeepRetrievalTool(store, storage)(node.id))
    assert data["entries"] == [] and data["note"] == "this node has no recorded interaction entries"


def test_output_size_is_capped_with_markers(store, storage):
    node = _node(store, "a very long record")
    _entry(store, "A" * 5000, [node.id])
    _entry(store, "big image", [node.id],
           [Attachment(type=AttachmentType.IMAGE, content="doc1/attachments/chart.png")])
    for i in range(30):
        _entry(store, f"later entry {i} " + "b" * 400, [node.id])
    tool = DeepRetrievalTool(store, storage, max_chars=4000, max_text_chars=1000, max_file_chars=50)
    out = tool(node.id)
    data = json.loads(out)
    assert len(data["entries"]) == 32
    assert data["entries"][0]["text"].endswith("[... truncated 4000 characters]")
    [image] = data["entries"][1]["attachments"]
    assert "file_content" not in image and "over the 50-character limit" in image["error"]
    assert "output limited to about 4000 characters" in data["note"]
    assert len(out) < 4000 + 32 * 700  # the tail entries are short previews
    assert all(len(e["text"]) <= 340 for e in data["entries"][-5:])


def test_nothing_raises_even_on_a_bad_store(storage):
    class Broken:
        graph = None
        tree = None

    out = DeepRetrievalTool(Broken(), storage)("x")
    assert out.startswith("Error: deep_retrieval failed:") and "\n" not in out


def _bytes_read() -> int:
    """Bytes this process has read so far (Linux /proc/self/io, "rchar")."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_a_huge_attachment_is_sized_up_before_it_is_read(store, storage):
    files = storage / "doc1" / "attachments"
    for name in ("huge.png", "huge.bin"):
        with (files / name).open("wb") as handle:  # 300 MB, sparse: no disk used
            handle.truncate(300_000_000)
    (files / "long.md").write_text("The gauge read 5.2 m at high water. " * 200_000)  # 7.2 MB of text
    node = _node(store, "huge attachments")
    _entry(store, "three big files", [node.id], [
        Attachment(type=AttachmentType.IMAGE, content="doc1/attachments/huge.png"),
        Attachment(type=AttachmentType.DOCUMENT, content="doc1/attachments/huge.bin"),
        Attachment(type=AttachmentType.DOCUMENT, content="doc1/attachments/long.md"),
    ])
    before = _bytes_read()
    out = DeepRetrievalTool(store, storage, max_file_chars=16_000)(node.id)
    assert _bytes_read() - before < 1_000_000  # of 607 MB, only the start of the two non-images was read
    image, binary, text = json.loads(out)["entries"][0]["attachments"]
    assert image["error"] == "image of 300000000 bytes left out: over the 16000-character limit"
    assert binary["error"] == "binary file of 300000000 bytes left out: over the 16000-character limit"
    assert text["encoding"] == "text" and text["file_content"].startswith("The gauge read 5.2 m")
    assert len(text["file_content"]) < 16_100 and text["note"] == "only the first 64004 of 7200000 bytes were read"


def test_a_file_of_control_bytes_is_binary_for_deep_retrieval_as_for_visit(store, storage):
    # No NUL byte, but no text either: the one binary check (amb_dspy.text.is_binary) says so for both tools.
    blob = bytes(range(1, 32)) * 8 + b"\x7f" * 40
    (storage / "doc1" / "attachments" / "dump.log").write_bytes(blob)
    node = _node(store, "instrument dump")
    _entry(store, "the logger's dump", [node.id], [Attachment(type=AttachmentType.DOCUMENT,
                                                             content="doc1/attachments/dump.log")])
    attachment = json.loads(DeepRetrievalTool(store, storage)(node.id))["entries"][0]["attachments"][0]
    assert attachment["encoding"] == "base64" and base64.b64decode(attachment["file_content"]) == blob
