"""Adding a document to a big bank costs what the document costs (issue 34: one session added to a 1M-token bank in
2 s at most): the model embeds the new text only, never the old nodes analysis compares it with. Real embedding
model, real store and bank database, heuristic policy (no LM)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder
from optimize.locomo import load_locomo

DATA = Path(os.environ.get("AMB_LOCOMO_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo")


@pytest.fixture(scope="module")
def conversation():
    return load_locomo(f"locomo:{DATA / '30.json'}")[0]


def session_text(conversation, number: int) -> str:
    return "\n".join(turn.line() for turn in conversation.turns if turn.session == number)


def heuristic_bank(tmp_path: Path, embedder) -> MemoryBank:
    return MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"), embedder=embedder)


class SpiedEmbedder(OnnxEmbedder):
    """The real model, in a new process's state (nothing embedded yet), noting every text it runs the model on."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.encoded: list[str] = []

    def _encode(self, texts):
        self.encoded.extend(texts)
        return super()._encode(texts)


@pytest.fixture(scope="module")
def saved_bank(conversation, embedder, tmp_path_factory) -> Path:
    """Conversation 30's first four sessions, added one by one and saved to a bank database."""
    work = tmp_path_factory.mktemp("saved")
    bank = heuristic_bank(work, embedder)
    for number in range(1, 5):
        bank.ingest(session_text(conversation, number), f"session {number}",
                    into=bank.session.store if number > 1 else None)
    return bank.export(work / "bank.sqlite")


def test_adding_to_an_opened_bank_runs_the_model_on_the_new_document_only(saved_bank, conversation, embedder, tmp_path):
    fresh = SpiedEmbedder(cache_dir=embedder.cache_dir, batch_size=embedder.batch_size)
    store = MemoryStore.load(saved_bank, fresh)
    old = {node.id: node.embedding_text for node in store.graph.nodes_dict.values()}
    assert fresh.encoded == []  # opening reads the stored vectors
    heuristic_bank(tmp_path, fresh).ingest(session_text(conversation, 5), "session 5", into=store)
    new = [node for node in store.graph.nodes_dict.values() if node.id not in old]
    assert new and any(link in old for node in new for link in node.links)  # analysis compared them with old nodes
    assert fresh.encoded  # the new session was embedded...
    assert not set(fresh.encoded) & set(old.values())  # ...and no old node's text was embedded again
