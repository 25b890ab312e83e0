"""How a vector is kept in a PostgreSQL column: pgvector's ``vector`` where the server has the extension, float32
``BYTEA`` where it does not (a stock server works).

:func:`vector_columns_step` is a schema step (:func:`~amb_dspy.storage.postgres.migrate` runs it once per database
and component): on a server that offers ``vector`` it creates the extension and turns the named ``BYTEA`` columns
into ``vector`` columns, their rows converted in the migration's transaction (a database of the old schema is
converted whole or not at all); elsewhere it changes nothing. The columns are dimension-free: one table holds the
vectors of every bank (or namespace), each of its own embedder's dimension, and search ranks in process (the
hybrid BM25 + FAISS index), so no pgvector index, which would need a fixed dimension, is wanted.

:func:`vector_column` tells a store, once per process and column, which of the two a database holds, and readies a
connection for it: the ``pgvector`` package's psycopg adapter is registered on the connection, so a vector goes
in as a numpy array and comes out of a binary cursor as fast as ``BYTEA`` (bench/pg_vector_read.py: its text
form, ``::real[]`` and ``::text`` are 11 to 20 times slower for 5,000 x 384). Stores pass :meth:`VectorColumn.value`
as a ``%b`` parameter and read with ``connection.cursor(binary=True)``; :func:`float32_bytes` turns either stored
form into the float32 bytes the rows' readers take.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amb_dspy.errors import one_line
from amb_dspy.notices import notice
from amb_dspy.storage.postgres import DatabaseError, Step

if TYPE_CHECKING:
    import numpy as np
    import psycopg

_INSTALL = "pip install 'amb-dspy[postgres]' (the pgvector package)"
_columns: dict[tuple[str, str, str], VectorColumn] = {}  # (url, table, column) -> how that database keeps it
_types: dict[str, Any] = {}  # url -> the TypeInfo of its ``vector`` type (its oid is the database's own)
_lock = threading.Lock()


@dataclass(frozen=True)
class VectorColumn:
    """A vector column of one database: ``is_vector`` when pgvector's ``vector``, else float32 ``BYTEA``."""

    is_vector: bool

    def value(self, vector: bytes | np.ndarray) -> Any:
        """``vector`` (float32 bytes or an array) as the ``%b`` parameter this column takes."""
        import numpy as np

        if self.is_vector:
            return vector if isinstance(vector, np.ndarray) else np.frombuffer(vector, dtype="<f4")
        return vector if isinstance(vector, bytes) else np.asarray(vector, dtype="<f4").tobytes()


def float32_bytes(stored: Any) -> bytes:
    """A stored vector (``BYTEA`` bytes, or the pgvector adapter's ``Vector``) as little-endian float32 bytes."""
    if isinstance(stored, (bytes, bytearray, memoryview)):
        return bytes(stored)
    import numpy as np

    array = stored.to_numpy() if hasattr(stored, "to_numpy") else stored  # pgvector < 0.4 loads an ndarray
    return np.asarray(array, dtype="<f4").tobytes()


def _server_offers_pgvector(connection: psycopg.Connection) -> bool:
    """Whether the server offers the ``vector`` extension (installed with it, created or not)."""
    return connection.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None


def vector_columns_step(*columns: tuple[str, str, tuple[str, ...]]) -> Step:
    """A schema step that makes each ``(table, column, key columns)`` a pgvector column where the server has the
    extension (its float32 ``BYTEA`` rows converted), and leaves them ``BYTEA`` where it has not."""

    def step(connection: psycopg.Connection) -> None:
        if not _server_offers_pgvector(connection) or not _created(connection):
            return
        _register(connection)
        for table, column, keys in columns:
            _convert(connection, table, column, keys)

    return step


def _created(connection: psycopg.Connection) -> bool:
    """Create the ``vector`` extension in the database unless it is there; False, with a notice, when this role may
    not (pgvector is not a trusted extension: a superuser creates it): the vectors then stay ``BYTEA``."""
    import psycopg

    try:
        with connection.transaction():  # a savepoint: a refusal leaves the migration's transaction usable
            connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except psycopg.errors.InsufficientPrivilege:
        database = connection.info.dbname
        notice(f"the server has pgvector but this role may not create it in {database!r}: vectors are kept as float32 "
               f"BYTEA (to keep them in pgvector, a superuser runs CREATE EXTENSION vector in {database!r} before "
               "amb-dspy first uses it)")
        return False
    return True


def _convert(connection: psycopg.Connection, table: str, column: str, keys: tuple[str, ...]) -> None:
    """Turn ``table.column`` from float32 ``BYTEA`` into ``vector``, every row's value kept; DatabaseError (one
    line) on a row that holds no float32 vector."""
    import numpy as np
    import psycopg

    if _type_of(connection, table, column) == "vector":
        return
    rows = connection.execute(f"SELECT {', '.join(keys)}, {column} FROM {table}").fetchall()
    connection.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} vector")
    where = " AND ".join(f"{key} = %s" for key in keys)
    try:
        connection.cursor().executemany(f"UPDATE {table} SET {column} = %b WHERE {where}",
                                        [(np.frombuffer(bytes(row[-1]), dtype="<f4"), *row[:-1]) for row in rows])
    except (ValueError, psycopg.Error) as exc:  # a damaged row: the migration rolls back whole
        raise DatabaseError(f"cannot convert {table}.{column} to pgvector, the database is left as it was: "
                            f"{one_line(exc, 120)}") from None
    connection.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET NOT NULL")


def _type_of(connection: psycopg.Connection, table: str, column: str) -> str | None:
    row = connection.execute("SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                             "AND attname = %s AND NOT attisdropped", (table, column)).fetchone()
    return row[0] if row else None


def vector_column(connection: psycopg.Connection, url: str, table: str, column: str = "vector") -> VectorColumn:
    """How the database at ``url`` (its schema migrated) keeps ``table.column``, learnt once per process; when it is
    a pgvector column, ``connection`` is readied for it (the adapter registered, no round trip after the first)."""
    key = (url, table, column)
    with _lock:
        kept = _columns.get(key)
    if kept is None:
        kept = VectorColumn(_type_of(connection, table, column) == "vector")
        with _lock:
            _columns[key] = kept
    if kept.is_vector and connection.adapters.types.get("vector") is None:
        _register(connection, url)
    return kept


def _register(connection: psycopg.Connection, url: str | None = None) -> None:
    """Register the pgvector package's psycopg adapter on ``connection``, the database's ``vector`` type looked up
    once per process for ``url`` (each time without one); DatabaseError (one line, how to install it) when the
    package is missing."""
    from psycopg.types import TypeInfo

    try:
        from pgvector.psycopg.vector import register_vector_info
    except ImportError:
        raise DatabaseError(f"the database server has pgvector; its vectors need {_INSTALL}") from None
    info = _types.get(url) if url else None
    if info is None:
        info = TypeInfo.fetch(connection, "vector")
        if url:
            _types[url] = info
    register_vector_info(connection, info)
