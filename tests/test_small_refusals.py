"""Small hostile inputs refused with one line naming what was refused: an unreadable context file, a bank
file whose attachment path climbs out of the storage folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amb_dspy.errors import InputError
from amb_dspy.storage.bank_file import BankFileError, load_bank
from amb_dspy.task.state import read_context_file


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc")
def test_an_unreadable_context_file_is_named():
    with pytest.raises(InputError) as raised:
        read_context_file("/proc/self/mem", 1_000_000)
    assert "/proc/self/mem" in str(raised.value) and "\n" not in str(raised.value)


def test_a_bank_file_with_an_attachment_outside_the_storage_folder_is_refused(tmp_path, embedder):
    from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
    from amb_dspy.storage import Attachment, AttachmentType, InteractionEntry

    store = MemoryStore(embedder)
    [node] = store.add_nodes([NodeContent("A photo of the pier.", "pier photo", ["pier"])])
    store.record_entry(InteractionEntry(text="a photo", attachments=(
        Attachment(type=AttachmentType.IMAGE, content="attachments/pier.png"),)), [node.id])
    path = store.export(tmp_path / "bank.json")
    assert load_bank(path, embedder.dim)  # a path inside loads
    data = json.loads(path.read_text())
    data["interaction_tree"]["entries"][0]["attachments"][0]["content"] = "../../etc/passwd"
    path.write_text(json.dumps(data))
    with pytest.raises(BankFileError, match=r"climbs out of the storage directory") as raised:
        load_bank(path, embedder.dim)
    assert "\n" not in str(raised.value)
