"""Long-term memory: one suite over every backend (SQLite file, Chroma embedded, Chroma HTTP server,
Qdrant's local mode (Qdrant Edge), qdrant-client's own local mode, the client code a server runs, and PostgreSQL).

Everything is real: the all-MiniLM-L6-v2 embedder, SQLite, FAISS, ChromaDB, qdrant-edge, qdrant-client, a
``chroma run`` server on 127.0.0.1 started by the ``chroma_url`` fixture, and a throwaway PostgreSQL server
(``database_url``: a fresh database per test; skipped, saying why, where PostgreSQL is not installed). No Qdrant server binary is
to be had from PyPI or Debian, so the Qdrant server path is tested against refusing addresses only
(tests/test_longterm_fallback.py). Each test works in its own namespace, so
tests sharing the server do not see each other's items.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from local_servers import free_port, stop, wait_listening

from amb_dspy.config import AmbConfig
from amb_dspy.longterm import (
    ItemMetadata,
    ItemNotFoundError,
    LongTermInputError,
    SourceSpan,
    StoreUnavailableError,
    format_recalled,
    open_store,
    open_store_or_notice,
    recall,
    remember_task,
)
from amb_dspy.longterm.chroma import ChromaStore
from amb_dspy.longterm.edge import QdrantEdgeStore
from amb_dspy.longterm.postgres import PostgresStore
from amb_dspy.longterm.qdrant import QdrantStore
from amb_dspy.longterm.scoring import decay
from amb_dspy.longterm.sqlite import SQLiteStore

BACKENDS = ["sqlite", "chroma", "chroma-http", "qdrant", "qdrant-client", "postgres", "pgvector"]
DAY = 86_400.0


class Clock:
    """A clock the test moves: items written "200 days ago" without waiting."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _chroma_cli() -> str | None:
    beside_python = Path(sys.executable).with_name("chroma")
    return str(beside_python) if beside_python.is_file() else shutil.which("chroma")


@pytest.fixture(scope="session")
def chroma_url(tmp_path_factory):
    """A real Chroma server, ``chroma run`` on 127.0.0.1 and a free port, stopped after the session."""
    cli = _chroma_cli()
    if cli is None:
        pytest.skip("the `chroma` CLI is not installed (pip install chromadb, the `longterm` extra)")
    port, folder = free_port(), tmp_path_factory.mktemp("chroma-server")
    log = (folder.parent / "chroma-server.log").open("wb")
    server = subprocess.Popen([cli, "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(folder)],
                              stdout=log, stderr=subprocess.STDOUT, env={"ANONYMIZED_TELEMETRY": "False",
                                                                         "PATH": "/usr/bin:/bin"})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_listening(port, server, 60, what="chroma run", output=lambda: f"see {log.name}", pause=0.2)
        yield url
    finally:
        stop(server)
        log.close()


@pytest.fixture(params=BACKENDS)
def make_store(request, tmp_path, embedder):
    """Open (and later close) a store of the parametrised backend; the same location every call."""
    opened = []

    def make(model=None, **options):
        model = model or embedder
        if request.param == "sqlite":
            store = SQLiteStore(tmp_path / "longterm.sqlite3", model, **options)
        elif request.param == "chroma":
            store = ChromaStore.persistent(tmp_path / "chroma", model, **options)
        elif request.param == "qdrant":
            store = QdrantEdgeStore.local(tmp_path / "qdrant", model, **options)
        elif request.param == "qdrant-client":
            store = QdrantStore.local(tmp_path / "qdrant-client", model, **options)
        elif request.param in ("postgres", "pgvector"):  # vectors in BYTEA on the stock server, vector with pgvector
            url = request.getfixturevalue("pgvector_database_url" if request.param == "pgvector" else "database_url")
            store = PostgresStore(url, model, **options)
        else:
            store = ChromaStore.http(request.getfixturevalue("chroma_url"), model, **options)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def ns() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"


DERRICKSON = "Scott Derrickson is an American film director, screenwriter and producer."
DERRICKSON_PARAPHRASE = "Scott Derrickson, an American director of films, also writes screenplays and produces."
DERRICKSON_HOME = "Scott Derrickson lives in Los Angeles, California."
SEINE = "The Seine flows through Paris before reaching the English Channel at Le Havre."


def test_write_get_list_update_search(make_store, ns):
    store = make_store()
    first = store.write(ns, DERRICKSON, "fact", task_id="t1", reason="test")
    second = store.write(ns, SEINE, "fact", task_id="t1")
    assert first.action == second.action == "added"
    assert store.get(ns, first.item.id).content == DERRICKSON
    assert {i.id for i in store.list(ns)} == {first.item.id, second.item.id}

    hits = store.search(ns, "Which river runs through Paris?", k=2)
    assert hits[0].item.id == second.item.id and hits[0].score > hits[1].score

    updated = store.update(ns, second.item.id, content="The Seine flows through Paris.", task_id="t2", reason="shorter")
    assert store.get(ns, second.item.id).content == "The Seine flows through Paris."
    assert updated.created_at == second.item.created_at and updated.updated_at >= second.item.updated_at
    assert [r.action for r in store.audit(ns, item_id=second.item.id)] == ["write", "update"]
    assert store.search(ns, "river in Paris", k=1)[0].item.content == "The Seine flows through Paris."


def test_items_come_back_exactly(make_store, ns):
    store = make_store(clock=Clock(1795333764.7999341))  # a time whose float needs all 17 digits
    metadata = ItemMetadata(node_ids=("n1",), source_spans=(SourceSpan(source="corpus://a.md", quote="q", start=3, end=9),),
                            citations=("wikipedia:Seine",), extra={"status": "success"})
    written = store.write(ns, SEINE, "conclusion", metadata=metadata, task_id="t1").item
    assert store.get(ns, written.id) == written == make_store().list(ns)[0]
    assert written.metadata.task_ids == ("t1",) and written.source_boost == 1.0


def test_delete_removes_from_search_and_leaves_an_audit_row(make_store, ns):
    store = make_store()
    river = store.write(ns, SEINE, "fact", task_id="t1").item
    store.write(ns, DERRICKSON, "fact", task_id="t1")
    assert store.search(ns, "Seine river Paris", k=1)[0].item.id == river.id

    store.delete(ns, river.id, task_id="t2", reason="user asked")
    assert river.id not in {hit.item.id for hit in store.search(ns, "Seine river Paris", k=5)}
    assert river.id not in {item.id for item in store.list(ns)}
    with pytest.raises(ItemNotFoundError, match="no long-term item"):
        store.get(ns, river.id)
    rows = store.audit(ns, item_id=river.id)
    assert [(r.action, r.task_id, r.reason) for r in rows] == [("write", "t1", ""), ("delete", "t2", "user asked")]
    assert "Seine" in rows[-1].detail


def test_paraphrase_is_merged_and_a_different_fact_is_not(make_store, ns):
    store = make_store()
    original = store.write(ns, DERRICKSON, "fact", task_id="t1").item
    merged = store.write(ns, DERRICKSON_PARAPHRASE, "fact", task_id="t2")
    other = store.write(ns, DERRICKSON_HOME, "fact", task_id="t2")
    assert merged.action == "merged" and merged.item.id == original.id
    assert merged.similarity >= store.dedup_threshold
    assert other.action == "added"
    assert len(store.list(ns)) == 2
    kept = store.get(ns, original.id)
    assert kept.metadata.task_ids == ("t1", "t2")
    # neither contains the other word for word: the item keeps both sentences (a merge loses nothing)
    assert kept.content == f"{DERRICKSON_PARAPHRASE} {DERRICKSON}"
    assert [r.action for r in store.audit(ns, item_id=original.id)] == ["write", "merge"]
    # the same statement under another kind is not a duplicate, nor one that disagrees on a number
    assert store.write(ns, DERRICKSON, "conclusion").action == "added"
    store.write(ns, "It was the 44th season of the University fielding a men's basketball team.", "fact")
    assert store.write(ns, "It was the 45th season of the University fielding a men's basketball team.",
                       "fact").action == "added"


def test_merge_by_kind_and_by_a_given_merger(make_store, ns):
    store = make_store()
    store.write(ns, "Answer in British English, please.", "preference")
    newest = store.write(ns, "Please answer in British English and keep it short.", "preference")
    assert newest.action == "merged" and newest.item.content == "Please answer in British English and keep it short."

    store.write(ns, "Task: find the Seine's mouth\nOutcome: failure\nhop 1. search: Seine mouth", "trajectory")
    again = store.write(ns, "Task: find the Seine's mouth\nOutcome: success\nhop 1. search: Seine estuary", "trajectory")
    assert again.action == "merged"
    assert "Outcome: failure" in again.item.content and "Outcome: success" in again.item.content

    seen = []

    def merger(old: str, new: str) -> str:
        seen.append((old, new))
        return "Scott Derrickson (born 1966) is an American director, screenwriter and producer."

    store.write(ns, DERRICKSON, "fact")
    merged = store.write(ns, DERRICKSON_PARAPHRASE, "fact", merge=merger)
    assert seen == [(DERRICKSON, DERRICKSON_PARAPHRASE)] and merged.item.content.startswith("Scott Derrickson (born 1966)")

    def failing(old: str, new: str) -> str:
        raise RuntimeError("LM unavailable")

    merged = store.write(ns, "Scott Derrickson is an American director, screenwriter and film producer.", "fact",
                         merge=failing)
    assert merged.action == "merged" and "Derrickson" in merged.item.content  # the heuristic took over


def test_newer_item_scores_higher_by_decay(make_store, ns):
    clock = Clock()
    store = make_store(clock=clock)
    old = store.write(ns, SEINE, "fact").item
    clock.now += 200 * DAY
    new = store.write(ns, SEINE, "conclusion").item  # same text, other kind: no merge, same similarity
    hits = store.search(ns, "Where does the Seine reach the sea?", k=2)
    assert [h.item.id for h in hits] == [new.id, old.id]
    assert hits[0].similarity == pytest.approx(hits[1].similarity, abs=1e-4)
    expected_gap = store.weights.recency * (1.0 - decay(200, store.weights.decay_per_day))
    assert hits[0].score - hits[1].score == pytest.approx(expected_gap, abs=1e-4)

    clock.now += 100 * DAY
    pruned = store.prune(ns, older_than_days=250, task_id="t9")
    assert [i.id for i in pruned] == [old.id] and [i.id for i in store.list(ns)] == [new.id]
    assert store.audit(ns, item_id=old.id)[-1].action == "prune"


def test_namespaces_are_separate(make_store, ns):
    store = make_store()
    item = store.write(ns, SEINE, "fact").item
    other = ns + "-other"
    assert store.search(other, "Seine Paris") == [] and store.list(other) == []
    with pytest.raises(ItemNotFoundError):
        store.delete(other, item.id)
    assert store.write(other, SEINE, "fact").action == "added"  # no merging across namespaces


def test_bad_input_is_refused_and_writes_nothing(make_store, ns):
    store = make_store()
    for content, kind, message in [("  ", "fact", "the content is empty"), (SEINE, "opinion", "unknown kind"),
                                   ("x" * 40_000, "fact", "over the 32000 limit")]:
        with pytest.raises(LongTermInputError, match=message):
            store.write(ns, content, kind)
    with pytest.raises(LongTermInputError, match="the namespace is empty"):
        store.write(" ", SEINE, "fact")
    assert store.list(ns) == [] and store.audit(ns) == []


def test_items_persist_and_another_handle_sees_changes(make_store, ns):
    first = make_store()
    item = first.write(ns, SEINE, "fact").item
    second = make_store()  # built from what is stored
    assert second.search(ns, "Seine", k=1)[0].item.id == item.id
    second.delete(ns, item.id, reason="from another handle")
    assert first.search(ns, "Seine", k=5) == []


def test_remember_then_recall_finds_the_conclusion(make_store, ns):
    store = make_store()
    outcomes = remember_task(
        store, namespace=ns, task_id="task-1",
        goal="Which river flows through the city where the Tidewater Lantern Festival is held?",
        answer="The Seine: the festival is held in Paris.",
        citations=[{"source": "corpus://festivals.md", "quote": "held each spring in Paris", "node_id": "n1"}],
        completed_tasks=[{"description": "Find where the festival is held", "status": "success",
                          "context": "The Tidewater Lantern Festival is held in Paris every spring."}],
        hops=[{"tool": "search", "query": "Tidewater Lantern Festival"}])
    assert [(o.action, o.item.kind) for o in outcomes] == [("added", "conclusion"), ("added", "fact"),
                                                          ("added", "trajectory")]
    conclusion = outcomes[0].item
    assert conclusion.source_boost == 1.0 and conclusion.metadata.node_ids == ("n1",)

    found = recall(store, namespace=ns, query="What river runs through the Tidewater Lantern Festival's city?")
    assert found[0].item.id == conclusion.id
    text = format_recalled(found)
    assert text.startswith("From earlier tasks:\n- [task task-1, ")
    assert "The Seine: the festival is held in Paris." in text
    assert recall(store, namespace=ns, query="Who composed the Moonlight Sonata?") == []
    assert format_recalled([]) == ""
    tight = recall(store, namespace=ns, query="Tidewater Lantern Festival river", max_tokens=40)
    assert len(tight) < len(found) or len(found) == 1


def test_remember_redacts_before_writing(make_store, ns):
    store = make_store()
    remember_task(store, namespace=ns, task_id="t1", goal="How do I reach the festival office?",
                  answer="Write to office@lantern-festival.org or call +1 415 555 2671; key sk-abcdefghijklmnopqrstuvwx12",
                  completed_tasks=[{"description": "find contacts", "status": "success",
                                    "context": "Contact: jane.doe@example.com, (212) 736-5000"}],
                  redact=True)
    stored = " ".join(item.content for item in store.list(ns))
    for secret in ("office@lantern-festival.org", "415 555 2671", "sk-abcdef", "jane.doe@example.com", "736-5000"):
        assert secret not in stored
    assert "[EMAIL]" in stored and "[PHONE]" in stored and "[SECRET]" in stored


def test_embedding_size_mismatch_is_refused(make_store, embedder, ns):
    make_store().write(ns, SEINE, "fact")

    class Wider:
        dim = embedder.dim * 2

        def embed(self, texts):
            raise AssertionError("never called")

    with pytest.raises(StoreUnavailableError, match=f"holds {embedder.dim}-d embeddings"):
        make_store(Wider())


# --- opening: what cannot be opened or reached is one line, and the run goes on -------------------------

def test_unreachable_server_is_a_one_line_notice(tmp_path, embedder):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = AmbConfig(storage_dir=tmp_path, longterm_backend="chroma", longterm_url=url)
    store, notice = open_store_or_notice(config, embedder=embedder)
    assert store is None
    assert notice.startswith("no long-term memory this run: long-term store http://127.0.0.1:") and "\n" not in notice
    with pytest.raises(StoreUnavailableError):
        open_store(config, embedder=embedder)


@pytest.mark.parametrize("case", ["not a database", "a folder", "unknown backend"])
def test_store_that_cannot_be_opened_is_a_one_line_notice(tmp_path, embedder, case):
    config = AmbConfig(storage_dir=tmp_path, longterm_backend="pinecone" if case == "unknown backend" else "sqlite")
    if case == "not a database":
        (tmp_path / "longterm.sqlite3").write_text("these are notes, not SQLite " * 100)
    elif case == "a folder":
        (tmp_path / "longterm.sqlite3").mkdir()
    store, notice = open_store_or_notice(config, embedder=embedder)
    assert store is None and len(notice.splitlines()) == 1
    assert {"not a database": "file is not a database", "a folder": "cannot open",
            "unknown backend": "unknown long-term backend 'pinecone'"}[case] in notice


def test_registry_opens_the_configured_backend(tmp_path, embedder, chroma_url):
    for backend, url, kind in [("sqlite", "", SQLiteStore), ("chroma", "", ChromaStore), ("chroma", chroma_url, ChromaStore),
                               ("qdrant", "", QdrantEdgeStore)]:
        store, notice = open_store_or_notice(AmbConfig(storage_dir=tmp_path, longterm_backend=backend,
                                                       longterm_url=url), embedder=embedder)
        assert notice is None and isinstance(store, kind)
        store.close()
    assert (tmp_path / "longterm.sqlite3").is_file() and (tmp_path / "longterm-chroma").is_dir()
    assert (tmp_path / "longterm-qdrant" / "edge" / "edge_config.json").is_file()


def test_sqlite_write_that_cannot_commit_leaves_nothing(tmp_path, embedder):
    store = SQLiteStore(tmp_path / "lt.sqlite3", embedder, busy_timeout_s=0.1)
    store.write("ns", DERRICKSON, "fact")
    blocker = sqlite3.connect(tmp_path / "lt.sqlite3")
    blocker.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    try:
        with pytest.raises(StoreUnavailableError, match="database is locked"):
            store.write("ns", SEINE, "fact")
    finally:
        blocker.rollback()
        blocker.close()
    assert [i.content for i in store.list("ns")] == [DERRICKSON]
    assert [h.item.content for h in store.search("ns", "Seine Paris river", k=5)] == [DERRICKSON]
    assert len(store.audit("ns")) == 1
    store.close()
    with pytest.raises(StoreUnavailableError, match="closed"):
        store.list("ns")


def test_chroma_never_uses_its_own_embedding_function(tmp_path, embedder, monkeypatch):
    """Chroma's default embedding function downloads an ONNX model on first use: it must never run."""
    from chromadb.api.types import DefaultEmbeddingFunction
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def refuse(self, input):  # Chroma checks an embedding function's signature
        raise AssertionError("Chroma tried to embed (and download its model) by itself")

    monkeypatch.setattr(DefaultEmbeddingFunction, "__call__", refuse)
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "_download_model_if_not_exists", lambda self: refuse(self, None))
    store = ChromaStore.persistent(tmp_path / "chroma", embedder)
    item = store.write("ns", SEINE, "fact").item
    store.write("ns", SEINE + " It is 777 km long.", "fact")
    store.update("ns", item.id, content="The Seine flows through Paris.")
    assert store.search("ns", "Seine", k=1)[0].item.content.startswith("The Seine flows through Paris.")
    for collection in store._client.list_collections():
        assert collection.configuration.get("embedding_function") is None, collection.name


def test_qdrant_client_change_that_fails_midway_leaves_nothing(tmp_path, embedder, monkeypatch):
    store = QdrantStore.local(tmp_path / "qdrant", embedder)
    kept = store.write("ns", DERRICKSON, "fact").item
    client = store._client
    upsert = client.upsert

    def audit_fails(collection_name, *args, **kwargs):
        if collection_name == "amb_longterm_audit":
            raise ConnectionError("server went away")
        return upsert(collection_name, *args, **kwargs)

    monkeypatch.setattr(client, "upsert", audit_fails)
    with pytest.raises(StoreUnavailableError, match="server went away"):
        store.write("ns", SEINE, "fact")  # the item went in, then its audit row failed: the item is taken out
    with pytest.raises(StoreUnavailableError):
        store.write("ns", DERRICKSON_PARAPHRASE, "fact")  # a merge: the old content is put back
    monkeypatch.undo()
    assert [(i.id, i.content) for i in store.list("ns")] == [(kept.id, DERRICKSON)]
    assert [h.item.id for h in store.search("ns", "Seine Paris river", k=5)] == [kept.id]
    assert len(store.audit("ns")) == 1
    store.close()
    with pytest.raises(StoreUnavailableError, match="closed"):
        store.list("ns")
