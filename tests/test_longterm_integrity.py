"""A damaged embedded store refuses to open instead of reopening empty, and two processes writing one
store lose nothing and duplicate nothing.

Real stores on real files (SQLite, Chroma, Qdrant Edge) and a real PostgreSQL server (the concurrent writers, on
SQLite and on PostgreSQL with and without pgvector: ``vector_store_backend``), real processes for the concurrent writers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from amb_dspy.config import AmbConfig
from amb_dspy.longterm import StoreUnavailableError, open_store

ROOT = Path(__file__).resolve().parent.parent
FACTS = [
    "The Sennet flows through Marrowick.", "Port Merrow lies on the Gull Coast.", "The Calder rises in the Fenwick hills.",
    "Ashby has an old mill on the river.", "The lantern festival is held in July.",
]


def _config(tmp_path: Path, backend: str) -> AmbConfig:
    return AmbConfig(storage_dir=tmp_path / "storage", longterm_backend=backend, longterm_url="")


def _write_five(config: AmbConfig, embedder) -> None:
    with open_store(config, embedder=embedder) as store:
        for fact in FACTS:
            store.write("ns", fact, "fact")
        assert len(store.list("ns")) == 5


def _refused(config: AmbConfig, embedder, *needles: str) -> str:
    with pytest.raises(StoreUnavailableError) as raised:
        open_store(config, embedder=embedder)
    message = str(raised.value)
    assert "\n" not in message and "export" in message, message
    assert all(n in message for n in needles), message
    return message


def test_a_zero_byte_or_deleted_sqlite_file_is_refused(tmp_path, embedder):
    config = _config(tmp_path, "sqlite")
    _write_five(config, embedder)
    path = config.storage_dir / "longterm.sqlite3"
    path.write_bytes(b"")
    _refused(config, embedder, "0 bytes")
    assert path.stat().st_size == 0  # left as it was, not made into an empty store
    path.unlink()
    _refused(config, embedder, "longterm.sqlite3 is missing", "5 item(s)")
    assert not path.exists()


def test_a_sqlite_store_missing_rows_is_refused(tmp_path, embedder):
    import sqlite3

    config = _config(tmp_path, "sqlite")
    _write_five(config, embedder)
    with sqlite3.connect(config.storage_dir / "longterm.sqlite3") as db:  # rows lost outside the store
        db.execute("DELETE FROM items WHERE rowid % 2 = 0")
    _refused(config, embedder, "holds 3 item(s)", "recorded 5")


def test_a_chroma_folder_missing_its_database_is_refused(tmp_path, embedder):
    pytest.importorskip("chromadb")
    config = _config(tmp_path, "chroma")
    _write_five(config, embedder)
    (config.storage_dir / "longterm-chroma" / "chroma.sqlite3").unlink()
    _refused(config, embedder, "chroma.sqlite3 is missing")


def test_a_qdrant_folder_missing_files_is_refused_through_the_cli(tmp_path, embedder, monkeypatch):
    pytest.importorskip("qdrant_edge")
    from cli import app

    config = _config(tmp_path, "qdrant")
    _write_five(config, embedder)
    files = sorted(p for p in (config.storage_dir / "longterm-qdrant").rglob("*") if p.is_file())
    for path in files[::2]:
        path.unlink()
    _refused(config, embedder)
    monkeypatch.setenv("AMB_STORAGE_DIR", str(config.storage_dir))
    monkeypatch.setenv("AMB_LONGTERM_BACKEND", "qdrant")
    monkeypatch.delenv("AMB_LONGTERM_URL", raising=False)
    result = CliRunner().invoke(app, ["memory", "list", "--namespace", "ns"])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "export" in lines[0], result.output


WRITER = textwrap.dedent("""
    import sys, time
    from amb_dspy.config import AmbConfig
    from amb_dspy.longterm import open_store
    from amb_dspy.retrieval.embedding import default_embedder

    backend, storage, start, hold, first, count = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    embedder = default_embedder()
    embedder.embed(["warm up"])
    while time.time() < start:
        time.sleep(0.01)
    config = AmbConfig(storage_dir=storage, longterm_backend=backend, longterm_url="")
    with open_store(config, embedder=embedder) as store:
        for i in range(first, first + count):
            store.write("ns", f"Lantern {i} of the Tidewater festival hangs on pier {i} of Port Merrow.", "fact")
        time.sleep(hold)
    print("done")
""")


def _writers(tmp_path: Path, backend: str, *runs: tuple[float, int, int], extra_env: dict | None = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           **(extra_env or {})}
    start = time.time() + 20  # both load the model first, then write at the same moment
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, backend, str(tmp_path / "storage"), str(start),
                               str(hold), str(first), str(count)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for hold, first, count in runs]
    return [(p.wait(timeout=300), *p.communicate()) for p in procs]


def test_two_processes_writing_the_same_facts_make_one_item_each(tmp_path, embedder, vector_store_backend):
    backend, database = ("sqlite", "") if vector_store_backend == "sqlite" else ("postgres", vector_store_backend)
    results = _writers(tmp_path, backend, (0, 0, 20), (0, 0, 20), extra_env={"AMB_DATABASE_URL": database})
    assert all(code == 0 for code, _, _ in results), results
    config = _config(tmp_path, backend).model_copy(update={"database_url": database})
    with open_store(config, embedder=embedder) as store:
        contents = [item.content for item in store.list("ns")]
    assert len(contents) == 20 == len(set(contents))


def test_a_second_qdrant_process_waits_for_the_first_and_loses_nothing(tmp_path, embedder):
    pytest.importorskip("qdrant_edge")
    results = _writers(tmp_path, "qdrant", (1.0, 0, 20), (1.0, 100, 20))
    assert all(code == 0 for code, _, _ in results), results
    with open_store(_config(tmp_path, "qdrant"), embedder=embedder) as store:
        assert len(store.list("ns")) == 40


def test_a_qdrant_process_that_waits_too_long_is_told_which_process_holds_the_store(tmp_path, embedder, monkeypatch):
    pytest.importorskip("qdrant_edge")
    holder = _writers(tmp_path, "qdrant", (0, 0, 1))  # create the store
    assert holder[0][0] == 0, holder
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    hold = subprocess.Popen([sys.executable, "-c", WRITER, "qdrant", str(tmp_path / "storage"), "0", "60", "0", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        owner = tmp_path / "storage" / "longterm-qdrant.owner"
        deadline = time.time() + 120
        while not (owner.exists() and f"process {hold.pid}" in owner.read_text()) and time.time() < deadline:
            time.sleep(0.2)
        from amb_dspy.longterm import edge

        monkeypatch.setattr(edge, "OPEN_TIMEOUT_S", 0.5)
        with pytest.raises(StoreUnavailableError) as raised:
            open_store(_config(tmp_path, "qdrant"), embedder=embedder)
        assert f"process {hold.pid}" in str(raised.value) and "\n" not in str(raised.value)
    finally:
        hold.kill()
        hold.wait()
