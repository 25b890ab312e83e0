"""The keys of `amb serve --http` on both stores (`store_backend`: the storage folder's SQLite file, or a fresh
PostgreSQL database on the session's throwaway server): made, verified, listed and revoked; a key made by one
process is accepted by another that was already running, and its revocation too, at once; a database of a newer
keys schema is refused in one line by `amb keys` and by `amb serve`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_keys import ROOT, amb
from test_serve import SERVE, _env

from amb_dspy.errors import InputError
from amb_dspy.serve.keys import open_key_store
from amb_dspy.storage import postgres

VERIFIER = """
import sys
from amb_dspy.serve.keys import open_key_store
store = open_key_store(sys.argv[1], sys.argv[2])
for line in sys.stdin:
    key = store.verify(line.strip())
    print(key.key_id if key else "-", flush=True)
"""


def made_key(tmp_path: Path, namespace: str, *flags: str) -> tuple[str, str]:
    """A key made by `amb keys create --namespace NAMESPACE FLAGS` in a process of its own: (its id, the key)."""
    made = amb(tmp_path, "keys", "create", "--namespace", namespace, *flags)
    assert made.returncode == 0, made.stderr
    return made.stderr.split()[1], made.stdout.strip()


def _database(store_backend: str) -> list[str]:
    """The `--database URL` flags of ``store_backend`` (none for the storage folder's file)."""
    return [] if store_backend == "sqlite" else ["--database", store_backend]


def test_a_key_is_made_verified_listed_and_revoked(store_backend, tmp_path):
    store = open_key_store("" if store_backend == "sqlite" else store_backend, tmp_path)
    assert store.list() == [] and store.verify("amb_nothing") is None
    alice, alice_token = store.create(["alice", "team", "alice"], "alice laptop")
    bob, bob_token = store.create(["bob"])
    assert alice.namespaces == ("alice", "team") and alice_token.startswith("amb_")
    assert store.verify(alice_token) == alice and store.verify(bob_token) == bob
    assert store.verify(alice_token[:-1]) is None
    assert {key.key_id for key in store.list()} == {alice.key_id, bob.key_id}
    assert store.revoke(alice.key_id) == alice
    assert store.verify(alice_token) is None and store.list() == [bob]
    with pytest.raises(InputError, match=f"no key '{alice.key_id}'"):
        store.revoke(alice.key_id)
    with pytest.raises(InputError, match="a namespace is empty"):
        store.create([" "])
    assert store.list() == [bob]


def test_a_key_made_by_one_process_is_verified_by_another_at_once(store_backend, tmp_path):
    verifier = subprocess.Popen([sys.executable, "-c", VERIFIER, "" if store_backend == "sqlite" else store_backend,
                                 str(tmp_path / "storage")], env={**_env(tmp_path), "PYTHONPATH": str(ROOT)},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def verified(token: str) -> str:
        verifier.stdin.write(token + "\n")
        verifier.stdin.flush()
        return verifier.stdout.readline().strip()

    try:
        assert verified("amb_not_made_yet") == "-"  # the verifier has its store open before the key exists
        key_id, token = made_key(tmp_path, "team", *_database(store_backend))
        assert verified(token) == key_id
        assert amb(tmp_path, "keys", "revoke", key_id, *_database(store_backend)).returncode == 0
        assert verified(token) == "-"
    finally:
        verifier.stdin.close()
        verifier.wait(timeout=30)
    if store_backend != "sqlite":  # the key went to the database, not to the storage folder
        assert not (tmp_path / "storage" / "keys.sqlite").exists()


def test_a_database_of_a_newer_keys_schema_is_refused_in_one_line(database_url, tmp_path):
    assert amb(tmp_path, "keys", "create", "--namespace", "team", "--database", database_url).returncode == 0
    with postgres.transaction(database_url) as connection:
        connection.execute("UPDATE amb_schema SET version = 99 WHERE component = 'keys'")
    listed = amb(tmp_path, "keys", "list", "--database", database_url)
    assert listed.returncode == 1 and listed.stdout == ""
    line = listed.stderr.strip()
    assert "\n" not in line and line.startswith("error: the database postgresql://")
    assert "keys schema version 99" in line and "upgrade amb-dspy" in line
    served = subprocess.run([sys.executable, *SERVE, "--http", "1"], env={**_env(tmp_path),
                            "AMB_DATABASE_URL": database_url}, capture_output=True, text=True, timeout=120)
    assert served.returncode == 1 and served.stderr.strip() == line


def test_a_database_option_that_is_not_a_postgresql_url_is_one_line(tmp_path):
    done = amb(tmp_path, "keys", "list", "--database", "mysql://db/keys")
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: database 'mysql://db/keys': give a PostgreSQL URL, "
                                   "postgresql://user@host:port/database")
    assert not Path(tmp_path / "storage" / "keys.sqlite").exists()


def test_a_server_on_the_database_asks_its_keys_and_sees_a_revocation_at_once(database_url, tmp_path, monkeypatch):
    from test_serve_keys import http_server, status

    key_id, token = made_key(tmp_path, "team", "--database", database_url)
    monkeypatch.setenv("AMB_DATABASE_URL", database_url)  # the server's configuration: no --database flag needed
    with http_server(tmp_path) as url:
        assert status(url) == 401 and status(url, token) == 200
        later_id, later = made_key(tmp_path, "ops", "--database", database_url)
        assert status(url, later) == 200  # made while the server runs, by another process
        assert amb(tmp_path, "keys", "revoke", key_id, "--database", database_url).returncode == 0
        assert status(url, token) == 401 and status(url, later) == 200
    assert later_id != key_id and not (tmp_path / "storage" / "keys.sqlite").exists()
