"""A long-term backend that cannot be reached never fails a run: the local SQLite store takes over, and
with AMB_LONGTERM_DUAL_WRITE=1 the server is caught up on the next connection.

Real parts throughout: qdrant-client (a refusing address on 127.0.0.1), a Qdrant Edge folder
held by another process, a real ``chroma run`` server stopped mid-run and started again, SQLite, the
embedder and the bank. No Qdrant server binary is to be had from PyPI or Debian, so the server stopped
mid-run is Chroma's; the code path (DualStore) is the same for every backend.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from local_servers import free_port, stop, wait_listening
from test_longterm import SEINE, _chroma_cli
from test_longterm_run import ANSWER, scripted

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.longterm import open_store_with_fallback
from amb_dspy.longterm.chroma import ChromaStore
from amb_dspy.longterm.dual import JOURNAL_NAME, DualStore
from amb_dspy.longterm.edge import FOLDER_NAME, QdrantEdgeStore
from amb_dspy.longterm.sqlite import FILE_NAME, SQLiteStore

DANUBE = "The Danube is the second-longest river in Europe, after the Volga."


def test_a_refusing_qdrant_server_gives_way_to_the_local_store(tmp_path, embedder):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: connection refused
    config = AmbConfig(storage_dir=tmp_path, longterm_backend="qdrant", longterm_url=url)
    store, notice = open_store_with_fallback(config, embedder=embedder)
    try:
        assert isinstance(store, SQLiteStore)
        assert notice.startswith(f"long-term store {url}: cannot reach (") and "\n" not in notice
        assert notice.endswith("; using the local SQLite store this run")
        store.write("ns", SEINE, "fact")
    finally:
        store.close()
    assert (tmp_path / FILE_NAME).is_file()


def test_a_run_with_an_unreachable_qdrant_server_and_dual_writes_goes_on_and_journals(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=1, remember=True,
                       recall=True, longterm_backend="qdrant", longterm_url=f"http://127.0.0.1:{free_port()}",
                       longterm_dual_write=True)
    result = MemoryBank(config, lm=scripted(ANSWER), embedder=embedder).run("When is the Tidewater Lantern Festival?")
    assert result.answer == ANSWER
    assert any("writing the local SQLite store only this run" in n for n in result.notices)
    assert not [n for n in result.notices if n.startswith("not remembered")]
    assert (config.storage_dir / JOURNAL_NAME).read_text().count('"id"') >= 2  # conclusion and trajectory


HOLD = """
import sys
import qdrant_edge
shard = qdrant_edge.EdgeShard.load(sys.argv[1] + "/edge")
print("holding", flush=True)
sys.stdin.readline()
shard.close()
"""


def test_a_qdrant_folder_held_elsewhere_is_caught_up_on_the_next_connection(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path, longterm_backend="qdrant", longterm_dual_write=True)
    QdrantEdgeStore.local(tmp_path / FOLDER_NAME, embedder).close()  # the folder exists, with its shard
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str((tmp_path / FOLDER_NAME).resolve())],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        store, notice = open_store_with_fallback(config, embedder=embedder)
        assert isinstance(store, DualStore) and store.remote is None
        assert "writing the local SQLite store only this run" in notice
        written = store.write("ns", SEINE, "fact", task_id="t1").item
        assert store.search("ns", "Seine Paris", k=1)[0].item.id == written.id  # the local store answers
        store.close()
    finally:
        holder.communicate("release\n", timeout=30)

    store, notice = open_store_with_fallback(config, embedder=embedder)
    try:
        assert notice == "long-term store qdrant: caught up 1 item(s) written while it was unreachable"
        assert store.remote.get("ns", written.id).content == SEINE
        assert [r.action for r in store.remote.audit("ns", item_id=written.id)] == ["write"]
        assert not (tmp_path / JOURNAL_NAME).exists()
    finally:
        store.close()


def _serve_chroma(port: int, folder) -> subprocess.Popen:
    cli = _chroma_cli()
    if cli is None:
        pytest.skip("the `chroma` CLI is not installed (pip install chromadb, the `longterm` extra)")
    server = subprocess.Popen([cli, "run", "--host", "127.0.0.1", "--port", str(port), "--path", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={"ANONYMIZED_TELEMETRY": "False", "PATH": "/usr/bin:/bin"})
    wait_listening(port, server, 60, what="chroma run",
                   probe=lambda: ChromaStore.http(f"http://127.0.0.1:{port}", _Probe()).close())
    return server


class _Probe:
    """An embedder stand-in for a start-up probe that embeds nothing (only ``dim`` is read)."""

    dim = 384

    def embed(self, texts):
        raise AssertionError("the probe embeds nothing")


def test_a_server_stopped_mid_run_never_fails_a_write_and_is_caught_up(tmp_path, embedder):
    port, folder = free_port(), tmp_path / "server"
    config = AmbConfig(storage_dir=tmp_path / "storage", longterm_backend="chroma",
                       longterm_url=f"http://127.0.0.1:{port}", longterm_dual_write=True)
    server = _serve_chroma(port, folder)
    try:
        store, notice = open_store_with_fallback(config, embedder=embedder)
        assert notice is None and store.remote is not None
        first = store.write("ns", SEINE, "fact", task_id="t1").item
        stop(server)  # the server goes away mid-run
        second = store.write("ns", DANUBE, "fact", task_id="t1").item
        assert store.remote is None and "long-term server unreachable" in store.notices[0]
        assert {h.item.id for h in store.search("ns", "European rivers", k=5)} == {first.id, second.id}
        store.close()
        server = _serve_chroma(port, folder)  # back, with what it had before it stopped
        store, notice = open_store_with_fallback(config, embedder=embedder)
        assert notice.endswith("caught up 1 item(s) written while it was unreachable")
        assert {item.id for item in store.remote.list("ns")} == {first.id, second.id}
        assert store.local.get("ns", second.id) == store.remote.get("ns", second.id)
        store.close()
    finally:
        stop(server)
