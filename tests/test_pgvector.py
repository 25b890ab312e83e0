"""Issue 40: vectors in pgvector where the server has it, float32 ``BYTEA`` where it does not. A bank's node vectors
and long-term items' vectors are ``vector`` columns on the PostgreSQL with pgvector (the ``pgserver`` wheel's, the
``pgvector_database_url`` fixture) and ``BYTEA`` on the stock server; a database of the old schema (``BYTEA`` on a
server with pgvector) opens and is converted, every vector kept; and both servers give identical answers. Real
servers, the real embedding model; the heuristic policy (no LM)."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from test_bank_store import grown, same_bank, sessions  # noqa: F401 - fixtures: two sessions' bank

from amb_dspy.longterm import postgres as longterm_pg
from amb_dspy.longterm.postgres import PostgresStore
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import bank_pg, pg_vectors, postgres
from amb_dspy.storage.bank_pg import DatabaseBank

FACTS = ["The Seine flows through Paris before reaching the English Channel at Le Havre.",
         "The Tidewater Lantern Festival is held every spring in the harbour of Port Merrow.",
         "Caroline moved from Sweden four years ago and keeps her grandmother's necklace.",
         "The river Loire is the longest river in France, rising in the Massif Central."]
QUESTIONS = ["Which river reaches the sea at Le Havre?", "When is the lantern festival?", "Where is Caroline from?"]


def column_types(url: str) -> dict[str, str]:
    """The type of each vector column, as the database's catalogue says (``vector`` or ``bytea``)."""
    with postgres.transaction(url) as connection:
        return dict(connection.execute(
            "SELECT table_name, udt_name FROM information_schema.columns WHERE column_name = 'vector' "
            "AND table_name IN ('bank_nodes', 'amb_longterm_items')").fetchall())


def answers(url: str, embedder) -> tuple[list, list]:
    """The bank's and the long-term store's answers to the questions, read fresh from the database at ``url``."""
    bank = MemoryStore.load(DatabaseBank(url, "bank"), embedder)
    longterm_pg._cache.clear()  # the search ranks on indexes built from the rows, not on this process's writes
    store = PostgresStore(url, embedder)
    return ([[node.id for node in bank.retrieve_for_text(q, k=3)] for q in QUESTIONS],
            [[(h.item.content, h.score) for h in store.search("ns", q, k=2)] for q in QUESTIONS])


def same_answers(a: tuple[list, list], b: tuple[list, list]) -> None:
    """The same nodes and items in the same order; the items' scores equal but for their recency's decay, which
    moves with the seconds between the two writes and the two searches."""
    assert a[0] == b[0]
    assert [[content for content, _ in hits] for hits in a[1]] == [[content for content, _ in hits] for hits in b[1]]
    assert [score for hits in a[1] for _, score in hits] == pytest.approx(
        [score for hits in b[1] for _, score in hits], abs=1e-6)


def stored_vectors(url: str) -> dict[str, bytes]:
    """Every stored vector by its row, as float32 bytes, whichever way the database keeps it."""
    with postgres.transaction(url) as connection:
        pg_vectors.vector_column(connection, url, "bank_nodes")
        pg_vectors.vector_column(connection, url, "amb_longterm_items")
        rows = connection.cursor(binary=True).execute(
            "SELECT 'node ' || id, vector FROM bank_nodes UNION ALL SELECT 'item ' || content, vector "
            "FROM amb_longterm_items").fetchall()
    return {key: pg_vectors.float32_bytes(vector) for key, vector in rows}


def fill(url: str, bank: MemoryStore, embedder) -> None:
    """The bank saved as ``bank`` and the facts written to namespace ``ns`` in the database at ``url``."""
    bank.save(DatabaseBank(url, "bank"))
    PostgresStore(url, embedder).add_many("ns", FACTS, "fact")


def test_vectors_are_pgvector_columns_where_the_server_has_it_and_bytea_where_not(
        grown, embedder, database_url, pgvector_database_url):  # noqa: F811
    for url in (database_url, pgvector_database_url):
        fill(url, grown, embedder)
    assert column_types(database_url) == {"bank_nodes": "bytea", "amb_longterm_items": "bytea"}
    assert column_types(pgvector_database_url) == {"bank_nodes": "vector", "amb_longterm_items": "vector"}
    same_bank(MemoryStore.load(DatabaseBank(database_url, "bank"), embedder),
              MemoryStore.load(DatabaseBank(pgvector_database_url, "bank"), embedder))
    assert stored_vectors(pgvector_database_url) == stored_vectors(database_url)  # float32, bit for bit
    same_answers(answers(pgvector_database_url, embedder), answers(database_url, embedder))


def test_a_bytea_database_of_the_old_schema_is_converted_when_opened(
        grown, embedder, pgvector_database_url, monkeypatch):  # noqa: F811
    url = pgvector_database_url
    with monkeypatch.context() as old_code:  # the schema before pgvector: all but its last step (banks), step 1 (longterm)
        old_code.setattr(bank_pg, "SCHEMA", bank_pg.SCHEMA[:-1])
        old_code.setattr(longterm_pg, "SCHEMA", longterm_pg.SCHEMA[:1])
        fill(url, grown, embedder)
        before, old_answers = stored_vectors(url), answers(url, embedder)
    assert column_types(url) == {"bank_nodes": "bytea", "amb_longterm_items": "bytea"}
    postgres._migrated.clear()  # as a process of the new code that starts now finds it
    pg_vectors._columns.clear()
    same_answers(answers(url, embedder), old_answers)
    assert column_types(url) == {"bank_nodes": "vector", "amb_longterm_items": "vector"}
    assert stored_vectors(url) == before and len(before) == len(grown.graph) + len(FACTS)
    assert postgres.schema_version(url, "banks") == len(bank_pg.SCHEMA)
    assert postgres.schema_version(url, "longterm") == len(longterm_pg.SCHEMA)


def test_an_old_database_whose_vector_cannot_be_converted_is_one_line_and_left_as_it_was(
        grown, embedder, pgvector_database_url, monkeypatch):  # noqa: F811
    url = pgvector_database_url
    with monkeypatch.context() as old_code:
        old_code.setattr(bank_pg, "SCHEMA", bank_pg.SCHEMA[:-1])
        grown.save(DatabaseBank(url, "bank"))
    with postgres.transaction(url) as connection:  # a damaged row: three bytes are no float32 vector
        connection.execute("UPDATE bank_nodes SET vector = '\\x010203' WHERE id = (SELECT min(id) FROM bank_nodes)")
    postgres._migrated.clear()
    pg_vectors._columns.clear()
    with pytest.raises(postgres.DatabaseError) as refused:
        MemoryStore.load(DatabaseBank(url, "bank"), embedder)
    assert str(refused.value).startswith("cannot convert bank_nodes.vector to pgvector, the database is left as it "
                                         "was: ") and "\n" not in str(refused.value)
    assert column_types(url) == {"bank_nodes": "bytea"} and postgres.schema_version(url, "banks") == len(bank_pg.SCHEMA) - 1


@pytest.mark.parametrize("created_by_a_superuser", [True, False])
def test_a_role_that_may_not_create_the_extension_works_and_is_told_how_to_have_pgvector(
        grown, embedder, pgvector_server, capsys, created_by_a_superuser):  # noqa: F811
    name = f"app_{uuid.uuid4().hex[:10]}"  # a database owned by a role that is not a superuser, as a team's would be
    with psycopg.connect(pgvector_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        admin.execute(f"CREATE DATABASE {name} OWNER {name}")
    if created_by_a_superuser:
        with psycopg.connect(pgvector_server.url(name), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION vector")
    url = pgvector_server.url(name).replace("postgres@", f"{name}@")
    fill(url, grown, embedder)
    kept = "vector" if created_by_a_superuser else "bytea"
    assert column_types(url) == {"bank_nodes": kept, "amb_longterm_items": kept}
    same_bank(grown, MemoryStore.load(DatabaseBank(url, "bank"), embedder))
    told = [line for line in capsys.readouterr().err.splitlines() if "pgvector" in line]
    assert told == ([] if created_by_a_superuser else [
        f"note: the server has pgvector but this role may not create it in {name!r}: vectors are kept as float32 BYTEA "
        f"(to keep them in pgvector, a superuser runs CREATE EXTENSION vector in {name!r} before amb-dspy first uses "
        "it)"] * 2)  # once for the banks' schema, once for long-term memory's


@pytest.fixture(autouse=True)
def _fresh_vector_caches():
    """This process's caches of what each database holds start and end empty (they are per URL: no test's leaks)."""
    yield
    pg_vectors._columns.clear()
    longterm_pg._cache.clear()
