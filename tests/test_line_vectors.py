"""The evidence view's line vectors are kept with a bank database (issue 34): a reopened bank embeds no line it
already embedded, and shows the same evidence as before; a bank of another model is embedded again, never mixed;
a save after an add writes only the new vectors; a killed save leaves the last saved ones.

Real embedding model (wrapped to see what it is asked to embed), real FAISS, real files, the heuristic policy (no
LM), a real subprocess killed with SIGKILL."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from amb_dspy.bank import IngestResult
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import EvidenceView, Ranking
from amb_dspy.storage.bank_db import read_bank_db
from amb_dspy.storage.line_vectors import LineVectors, line_key
from amb_dspy.task.tools import memory_context
from tests.test_bank_store import kill_mid_save, new_bank, sessions  # noqa: F401  (sessions: a fixture)

QUESTION = "What did Caroline research, and when did Melanie paint the sunrise?"


class Counted:
    """The real embedder, recording every text it is asked to embed (``name``: the model it says it is)."""

    def __init__(self, inner, name: str | None = None):
        self.inner, self.dim, self.texts = inner, inner.dim, []
        self.model_name = name or inner.model_name

    def embed(self, texts: list[str]):
        self.texts.extend(texts)
        return self.inner.embed(texts)


def lines_of(store: MemoryStore) -> set[str]:
    """Every line the evidence view lays out for the store."""
    return {line.text for line in Ranking(store).line_index.refresh()}


def block(store: MemoryStore, question: str = QUESTION) -> str:
    return EvidenceView(Ranking(store)).block(question, 1000).text


@pytest.fixture
def grown_bank(tmp_path, embedder, sessions) -> IngestResult:  # noqa: F811
    """The ingest of LoCoMo 30's second session after its first, each its own document; no question asked."""
    bank = new_bank(tmp_path, embedder)
    first = bank.ingest(sessions[0], "session 1", date="2023-05-08")
    return bank.ingest(sessions[1], "session 2", into=first.store, date="2023-05-25")


@pytest.fixture
def grown(grown_bank) -> MemoryStore:
    return grown_bank.store


def test_a_reopened_database_answers_memory_context_without_embedding_a_line(grown, tmp_path, embedder):
    before = block(grown)  # the lines embedded by this question are saved with the bank
    path = grown.export(tmp_path / "s" / "bank.sqlite")
    counted = Counted(embedder)
    session = new_bank(tmp_path, counted).start_session(QUESTION, bank=path)
    context = memory_context(session).text
    assert f"<memory>\n{before}\n</memory>" in context  # the same evidence as before the save
    assert set(counted.texts) <= {QUESTION}, set(counted.texts) - {QUESTION}  # the question, no line
    assert block(MemoryStore.load(path, counted)) == before


def test_a_bank_saved_without_a_question_opens_with_every_line_embedded(grown_bank, grown, tmp_path, embedder,
                                                                      sessions):  # noqa: F811
    path = grown_bank.export(tmp_path / "bank.sqlite")  # as `amb ingest --bank` saves
    counted = Counted(embedder)
    reopened = MemoryStore.load(path, counted)
    assert len(reopened.line_vectors) == len(lines_of(grown)) and reopened.line_vectors.complete
    assert block(reopened) == block(grown) and set(counted.texts) == {QUESTION}
    # an add to the reopened bank embeds the new document's lines, and only those, at its save
    new_bank(tmp_path, embedder).ingest(sessions[2], "session 3", into=reopened, date="2023-06-09")
    counted.texts.clear()
    assert reopened.save(path) == path
    assert set(counted.texts) == lines_of(reopened) - lines_of(grown)
    counted.texts.clear()
    assert block(MemoryStore.load(path, counted)) == block(reopened) and set(counted.texts) == {QUESTION}


def stored_rows(path: Path) -> list[tuple[str, list[bytes], int]]:
    """Per row of the line_vectors table, in order: its model, its keys and the bytes of its vectors."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT model, keys, length(vectors) FROM line_vectors ORDER BY seq").fetchall()
    return [(model, [keys[i:i + 16] for i in range(0, len(keys), 16)], size) for model, keys, size in rows]


def test_a_save_after_an_add_writes_only_the_new_vectors(grown, tmp_path, embedder, sessions):  # noqa: F811
    path = grown.save(tmp_path / "bank.sqlite")
    old = {line_key(text) for text in lines_of(grown)}
    (_, first, _), = stored_rows(path)
    assert set(first) == old and len(first) == len(old)
    store = MemoryStore.load(path, embedder)
    new_bank(tmp_path, embedder).ingest(sessions[2], "session 3", into=store, date="2023-06-09")
    store.save(path)
    (_, kept, _), (model, written, size) = stored_rows(path)  # the first save's row untouched, one row added
    assert kept == first and model == f"{embedder.model_name}/{embedder.dim}" and size == len(written) * 4 * embedder.dim
    assert sorted(written) == sorted({line_key(text) for text in lines_of(store)} - old)  # the new lines, no old one


def test_a_bank_of_another_model_is_embedded_again_never_mixed(grown, tmp_path, embedder):
    path = grown.save(tmp_path / "bank.sqlite")
    lines = lines_of(grown)
    other = Counted(embedder, name="another-model")
    notices: list[str] = []
    store = MemoryStore.load(path, other, notices)
    assert len(store.line_vectors) == 0 and "embedded again" in notices[0]
    block(store)
    assert lines <= set(other.texts)  # every line embedded again, under the other model's name
    store.save(path)
    with sqlite3.connect(path) as connection:
        models = dict(connection.execute("SELECT model, SUM(length(keys)) / 16 FROM line_vectors GROUP BY model"))
    assert models == {f"{embedder.model_name}/{embedder.dim}": len(lines), f"another-model/{embedder.dim}": len(lines)}
    # each model reads back its own vectors only; another dimension under the same name reads none
    for name in (embedder.model_name, "another-model"):
        loaded, _ = read_bank_db(path, embedder.dim, name)
        assert len(loaded.line_vectors) == len(lines) and loaded.line_vectors.model == f"{name}/{embedder.dim}"
    assert LineVectors("another-model", embedder.dim // 2).model != f"another-model/{embedder.dim}"
    with sqlite3.connect(path) as connection:  # a row of the right label but the wrong length is not used
        connection.execute("UPDATE line_vectors SET vectors = substr(vectors, 1, 100) WHERE model = ?",
                           (f"another-model/{embedder.dim}",))
    assert len(read_bank_db(path, embedder.dim, "another-model")[0].line_vectors) == 0


def test_a_json_bank_carries_no_line_vectors_and_still_loads(grown, tmp_path, embedder):
    before = block(grown)
    path = grown.export(tmp_path / "bank.json")
    assert "line_vectors" not in path.read_text()
    counted = Counted(embedder)
    store = MemoryStore.load(path, counted)
    assert len(store.line_vectors) == 0 and not store.line_vectors.complete
    assert block(store) == before and lines_of(grown) <= set(counted.texts)


def test_kill_9_mid_save_keeps_the_last_saved_vectors(grown, tmp_path, embedder, sessions):  # noqa: F811
    path = grown.save(tmp_path / "bank.sqlite")
    saved = read_bank_db(path, embedder.dim, embedder.model_name)[0].line_vectors
    kill_mid_save(path, tmp_path, sessions[2], stall="_write_line_vectors")
    after = read_bank_db(path, embedder.dim, embedder.model_name)[0].line_vectors
    (keys, vectors), (saved_keys, saved_vectors) = after.unsaved(everything=True), saved.unsaved(everything=True)
    assert keys == saved_keys and np.array_equal(vectors, saved_vectors) and after.complete
    counted = Counted(embedder)
    assert block(MemoryStore.load(path, counted)) == block(grown) and set(counted.texts) == {QUESTION}


def test_embed_lines_embeds_each_line_once(grown, embedder):
    counted = Counted(embedder)
    grown.embedder = counted
    assert grown.embed_lines() == len(lines_of(grown)) == len(counted.texts)
    assert grown.embed_lines() == 0


def test_a_database_saved_before_line_vectors_opens_and_gets_them_at_its_next_save(grown, tmp_path, embedder):
    path = grown.export(tmp_path / "bank.sqlite")
    with sqlite3.connect(path) as connection:  # as a bank database of the previous release holds it
        connection.execute("DROP TABLE line_vectors")
        connection.execute("DELETE FROM meta WHERE key = 'lines_embedded'")
    counted = Counted(embedder)
    store = MemoryStore.load(path, counted)
    assert len(store.line_vectors) == 0 and not store.line_vectors.complete
    assert store.save(path) == path  # nothing changed but the vectors: every line embedded, once
    assert sorted(counted.texts) == sorted(lines_of(grown))
    counted.texts.clear()
    reopened = MemoryStore.load(path, counted)
    assert reopened.line_vectors.complete and block(reopened) == block(grown) and counted.texts == [QUESTION]
