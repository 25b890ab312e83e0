"""The PostgreSQL foundation (amb_dspy/storage/postgres.py) on a real throwaway server: a component's schema
migrates forward once, a newer one is refused with one line, an unreachable server is one line too."""

from __future__ import annotations

import pytest

from amb_dspy.storage import postgres
from amb_dspy.storage.postgres import DatabaseError, is_database_url, migrate, schema_version, shown, transaction


def test_a_database_url_is_told_from_a_path_and_its_password_is_never_shown():
    assert is_database_url("postgresql://amb@db:5432/memory") and is_database_url("postgres://db/x")
    assert not is_database_url("banks/team.sqlite") and not is_database_url(None)
    assert shown("postgresql://amb:s3cret@db:5432/memory") == "postgresql://amb:***@db:5432/memory"


def test_a_component_migrates_forward_once_and_records_its_version(database_url):
    steps = ["CREATE TABLE things (id TEXT PRIMARY KEY)", "ALTER TABLE things ADD COLUMN n INTEGER DEFAULT 0"]
    migrate(database_url, "things", steps)
    assert schema_version(database_url, "things") == 2
    postgres._migrated.clear()  # a new process: the steps it finds applied are not run again (they would fail)
    migrate(database_url, "things", steps)
    migrate(database_url, "things", [*steps, "CREATE INDEX things_n ON things (n)"])
    assert schema_version(database_url, "things") == 3
    with transaction(database_url) as connection:
        assert connection.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'things_n'").fetchone()[0] == 1


def test_a_database_of_a_newer_schema_is_refused_with_one_line(database_url):
    migrate(database_url, "keys", ["CREATE TABLE k (id TEXT)", "ALTER TABLE k ADD COLUMN label TEXT"])
    postgres._migrated.clear()
    with pytest.raises(DatabaseError) as refused:
        migrate(database_url, "keys", ["CREATE TABLE k (id TEXT)"])
    line = str(refused.value)
    assert "\n" not in line and "keys schema version 2" in line and "upgrade amb-dspy" in line


def test_a_failed_step_leaves_the_schema_as_it_was(database_url):
    import psycopg

    with pytest.raises(psycopg.errors.DuplicateTable):
        migrate(database_url, "broken", ["CREATE TABLE half (id TEXT)", "CREATE TABLE half (id TEXT)"])
    assert schema_version(database_url, "broken") == 0
    with transaction(database_url) as connection:
        assert connection.execute("SELECT to_regclass('half')").fetchone()[0] is None


def test_an_unreachable_server_is_one_line(postgres_server):
    url = f"postgresql://amb:pw@127.0.0.1:{postgres_server.port + 1}/nothing"
    with pytest.raises(DatabaseError) as refused:
        with transaction(url):
            pass
    line = str(refused.value)
    assert "\n" not in line and "cannot reach the database" in line and "pw" not in line
