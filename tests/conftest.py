"""Shared fixtures: the real embedding model, loaded once per test session; the festival and city notes as
a local corpus, and a config over it; LoCoMo conversation 30 (a test file that needs another corpus, config or
conversation defines its own)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Tests that want the corpus cache pass their own cache_dir; the rest must not fill ~/.cache.
os.environ.setdefault("AMB_CORPUS_CACHE", "0")
# Checkpoints and long-term memory of tests that name no storage folder go to a fresh one, not the user's.
os.environ.setdefault("AMB_STORAGE_DIR", tempfile.mkdtemp(prefix="amb-test-storage-"))


@pytest.fixture(scope="session")
def embedder():
    from amb_dspy.retrieval.embedding import default_embedder

    model = default_embedder()
    model.embed(["warm-up"])
    return model


@pytest.fixture(name="corpus")
def festival_corpus(tmp_path):
    """A local corpus of two notes: where the Tidewater Lantern Festival is held, and which river flows there."""
    from test_bank import CITY, FESTIVAL

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (folder / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    return folder


@pytest.fixture(name="config")
def festival_config(tmp_path, corpus):
    """A config over ``corpus`` whose storage and temp folders are the test's own, at most 3 loops."""
    from amb_dspy.config import AmbConfig

    return AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=3)


LOCOMO = Path(os.environ.get("AMB_LOCOMO_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo")


@pytest.fixture(scope="module")
def conversation():
    """LoCoMo conversation 30 from the shared data, as the growth and add-cost tests add it session by session."""
    from optimize.locomo import load_locomo

    return load_locomo(f"locomo:{LOCOMO / '30.json'}")[0]


def _throwaway_server(reason: str | None, bin_dir):
    """A cluster of the PostgreSQL in ``bin_dir`` (None: the machine's), started for the test session and stopped
    after it, its connection pools closed first; the tests skipped with ``reason`` when there is one."""
    from postgres_server import PostgresServer

    from amb_dspy.storage.postgres import close_pools

    if reason:
        pytest.skip(reason)
    server = PostgresServer(bin_dir).start()
    yield server
    close_pools()
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster for the whole test session (tests/postgres_server.py); skipped, with the
    reason, on a machine without PostgreSQL or psycopg."""
    from postgres_server import skip_reason

    yield from _throwaway_server(skip_reason(), None)


@pytest.fixture
def database_url(postgres_server):
    """The URL of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.new_database()


@pytest.fixture(scope="session")
def pgvector_server():
    """A throwaway cluster of the PostgreSQL 16 with pgvector that the ``pgserver`` wheel ships, for the whole
    test session; skipped, with the reason, where that package (the dev extra) or psycopg is missing."""
    from postgres_server import pgvector_bin_dir, skip_reason

    bin_dir = pgvector_bin_dir()
    reason = ("the pgserver package (PostgreSQL with pgvector) is not installed (pip install 'amb-dspy[dev]'): "
              "the pgvector store tests are skipped") if bin_dir is None else skip_reason(bin_dir)
    yield from _throwaway_server(reason, bin_dir)


@pytest.fixture
def pgvector_database_url(pgvector_server):
    """The URL of a fresh, empty database on the session's PostgreSQL server that has pgvector."""
    return pgvector_server.new_database()


@pytest.fixture(params=["sqlite", "postgres"])
def store_backend(request):
    """Where a store test keeps its memory: ``"sqlite"`` (files under tmp_path), or a fresh PostgreSQL database's
    URL; one suite, two backends."""
    if request.param == "sqlite":
        return "sqlite"
    return request.getfixturevalue("database_url")


@pytest.fixture(params=["sqlite", "postgres", "pgvector"])
def vector_store_backend(request):
    """``store_backend`` for the stores that keep vectors (banks, long-term memory), on a third server too: a fresh
    database on the PostgreSQL with pgvector, where they are ``vector`` columns (``BYTEA`` on the stock one)."""
    if request.param == "sqlite":
        return "sqlite"
    return request.getfixturevalue("pgvector_database_url" if request.param == "pgvector" else "database_url")
