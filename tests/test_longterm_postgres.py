"""Long-term memory in PostgreSQL (``AMB_LONGTERM_BACKEND=postgres``) beyond the suite every backend passes
(tests/test_longterm.py): the registry finds its database, a write by another process is seen by this process's
next search although it holds the namespace's indexes in its cache, a text the server refuses (NUL) is kept, and
a database it cannot use is one line. A real throwaway PostgreSQL server, real processes, the real embedder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from amb_dspy.config import AmbConfig
from amb_dspy.longterm import StoreUnavailableError, open_store, open_store_or_notice
from amb_dspy.longterm.postgres import SCHEMA, PostgresStore
from amb_dspy.longterm.registry import store_exists
from amb_dspy.storage import postgres

ROOT = Path(__file__).resolve().parent.parent
SEINE = "The Seine flows through Paris before reaching the English Channel at Le Havre."
LANTERN = "The Tidewater Lantern Festival is held every spring in the harbour of Port Merrow."

OTHER_PROCESS = textwrap.dedent("""
    import sys
    from amb_dspy.config import AmbConfig
    from amb_dspy.longterm import open_store

    namespace, content, item_id = sys.argv[1], sys.argv[2], sys.argv[3]
    with open_store(AmbConfig(longterm_backend="postgres")) as store:  # AMB_DATABASE_URL names the database
        print(store.write(namespace, content, "fact").item.id)
        store.update(namespace, item_id, content="The Seine flows through Rouen too.")
""")


def test_the_registry_opens_the_database_of_longterm_url_or_of_database_url(database_url, tmp_path, embedder):
    for settings in [{"database_url": database_url}, {"longterm_url": database_url},
                     {"longterm_url": database_url, "database_url": "postgresql://nobody@127.0.0.1:1/none"}]:
        config = AmbConfig(storage_dir=tmp_path, longterm_backend="postgres", **settings)
        with open_store(config, embedder=embedder) as store:
            assert isinstance(store, PostgresStore) and store.url == database_url
        assert store_exists(config)
    store, notice = open_store_or_notice(AmbConfig(storage_dir=tmp_path, longterm_backend="postgres",
                                                   database_url=""), embedder=embedder)
    assert store is None and notice.endswith("the postgres long-term backend needs a database: AMB_DATABASE_URL "
                                             "or AMB_LONGTERM_URL=postgresql://user@host:port/database")
    assert not (tmp_path / "longterm.sqlite3").exists()  # nothing was written beside it


def test_a_write_by_another_process_is_seen_by_the_next_search_here(database_url, embedder):
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    store = PostgresStore(database_url, embedder)
    seine = store.write(namespace, SEINE, "fact").item
    assert [s.item.id for s in store.search(namespace, "Seine river Paris")] == [seine.id]  # indexes cached here
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMB_DATABASE_URL": database_url, "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", OTHER_PROCESS, namespace, LANTERN, seine.id], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lantern_id = done.stdout.split()[-1]
    found = store.search(namespace, "When is the lantern festival held in Port Merrow?", k=1)
    assert [s.item.id for s in found] == [lantern_id]
    rouen = store.search(namespace, "Rouen", k=1)[0]
    assert rouen.item.id == seine.id and rouen.item.content == "The Seine flows through Rouen too."
    assert [r.action for r in store.audit(namespace)] == ["write", "write", "update"]


def test_a_nul_character_the_server_refuses_is_kept_as_a_replacement_character(database_url, embedder):
    store = PostgresStore(database_url, embedder)
    item = store.write("ns", "The page said: gate code 4471\x00 (binary tail)", "fact", reason="from a\x00tool").item
    assert store.get("ns", item.id).content == "The page said: gate code 4471\ufffd (binary tail)"
    assert store.audit("ns")[0].reason == "from a\ufffdtool"
    assert store.search("ns", "gate code", k=1)[0].item.id == item.id


@pytest.mark.parametrize("case", ["newer schema", "another embedder"])
def test_a_database_it_cannot_use_is_one_line(database_url, embedder, case):
    PostgresStore(database_url, embedder).write("ns", SEINE, "fact")
    with postgres.transaction(database_url) as connection:
        if case == "newer schema":
            connection.execute("UPDATE amb_schema SET version = 7 WHERE component = 'longterm'")
            postgres._migrated.clear()  # as a process that starts now finds it
        else:
            connection.execute("UPDATE amb_longterm_meta SET value = 'openai/text-embedding-3-small' "
                               "WHERE key = 'model'")
    with pytest.raises(StoreUnavailableError) as refused:
        PostgresStore(database_url, embedder)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("long-term store postgresql://")
    assert {"newer schema": f"longterm schema version 7, newer than this amb-dspy's {len(SCHEMA)}",
            "another embedder": "holds vectors of openai/text-embedding-3-small"}[case] in line
