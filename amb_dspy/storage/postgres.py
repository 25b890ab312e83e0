"""PostgreSQL, the store many processes share (``AMB_DATABASE_URL=postgresql://...``): one connection pool per
database and process, a schema that migrates itself forward, and locks every process sees.

What lives there (named banks, the server's tasks, its keys, long-term memory) each owns its tables and
registers its schema as a *component* with its own list of steps: :func:`migrate` applies the steps a database
has not had yet, in one transaction under an advisory lock (two processes starting at once migrate once), and
records the component's version in ``amb_schema``. A database whose version of a component is newer than this
code's steps is refused with one line: an older amb-dspy must not write a schema it does not know.

psycopg 3 (the ``postgres`` extra) is imported on first use, so nothing here costs a process that keeps its
memory in files. SQLite stays the embedded default.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from amb_dspy.errors import UserError, one_line

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

URL_SCHEMES = ("postgresql", "postgres")
POOL_SIZE = 8  # connections one process holds at most per database: its task threads and server calls share them
_CONNECT_TIMEOUT_S = 10.0

Step = str | Callable[["psycopg.Connection"], None]
"""One schema step: SQL statements (``;``-separated) or a function run on the migration's connection."""

_pools: dict[str, ConnectionPool] = {}
_migrated: set[tuple[str, str, int]] = set()  # (url, component, version) this process brought it to
_lock = threading.Lock()


class DatabaseError(UserError):
    """The database cannot be reached, or holds what this code cannot use (one line; the user can fix it)."""


def is_database_url(text: object) -> bool:
    """Whether ``text`` names a PostgreSQL server (``postgresql://...`` or ``postgres://...``)."""
    return isinstance(text, str) and urlsplit(text.strip()).scheme in URL_SCHEMES


def shown(url: str) -> str:
    """``url`` with its password hidden, for lines a user sees."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        from psycopg_pool import ConnectionPool
    except ImportError:
        raise DatabaseError("a PostgreSQL database needs psycopg: pip install 'amb-dspy[postgres]'") from None
    return psycopg, ConnectionPool


def database_pool(url: str) -> ConnectionPool:
    """This process's pool of connections to ``url``, opened on first use (DatabaseError, one line, when the
    server cannot be reached within 10 s)."""
    with _lock:
        pool = _pools.get(url)
        if pool is not None:
            return pool
        psycopg, connection_pool = _psycopg()
        pool = connection_pool(url, min_size=1, max_size=POOL_SIZE, open=False, name="amb",
                               kwargs={"autocommit": False, "connect_timeout": int(_CONNECT_TIMEOUT_S)})
        try:
            pool.open(wait=True, timeout=_CONNECT_TIMEOUT_S)
        except Exception as exc:  # PoolTimeout, OperationalError: the server is down, the URL wrong
            pool.close()
            raise DatabaseError(f"cannot reach the database {shown(url)}: {one_line(exc, 160)}") from None
        _pools[url] = pool
        return pool


@contextmanager
def transaction(url: str) -> Iterator[psycopg.Connection]:
    """A pooled connection to ``url`` inside one transaction: committed when the block ends, rolled back on an
    error. A connection error becomes a DatabaseError (one line)."""
    psycopg, _ = _psycopg()
    try:
        with database_pool(url).connection() as connection:
            yield connection
    except psycopg.OperationalError as exc:
        raise DatabaseError(f"the database {shown(url)} failed: {one_line(exc, 160)}") from None


def lock_key(name: str) -> int:
    """A stable signed 64-bit key for PostgreSQL's advisory locks, the same in every process."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "big", signed=True)


def migrate(url: str, component: str, steps: Sequence[Step]) -> None:
    """Bring ``component``'s tables in the database at ``url`` to version ``len(steps)``: the steps it has not
    had yet, in one transaction, under an advisory lock (once per process and component). DatabaseError when the
    database's version is newer than ``len(steps)``."""
    if (url, component, len(steps)) in _migrated:
        return
    with transaction(url) as connection:
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("amb_schema"),))
        connection.execute("CREATE TABLE IF NOT EXISTS amb_schema (component TEXT PRIMARY KEY, "
                           "version INTEGER NOT NULL)")
        row = connection.execute("SELECT version FROM amb_schema WHERE component = %s", (component,)).fetchone()
        version = row[0] if row else 0
        if version > len(steps):
            raise DatabaseError(f"the database {shown(url)} holds {component} schema version {version}, newer than "
                                f"this amb-dspy's {len(steps)}: upgrade amb-dspy to use it")
        for step in steps[version:]:
            if callable(step):
                step(connection)
            else:
                for statement in filter(str.strip, step.split(";")):
                    connection.execute(statement)
        connection.execute("INSERT INTO amb_schema (component, version) VALUES (%s, %s) ON CONFLICT (component) "
                           "DO UPDATE SET version = excluded.version", (component, len(steps)))
    _migrated.add((url, component, len(steps)))


def schema_version(url: str, component: str) -> int:
    """The version of ``component`` the database holds (0: none)."""
    with transaction(url) as connection:
        exists = connection.execute("SELECT to_regclass('amb_schema')").fetchone()[0]
        if exists is None:
            return 0
        row = connection.execute("SELECT version FROM amb_schema WHERE component = %s", (component,)).fetchone()
        return row[0] if row else 0


def close_pools() -> None:
    """Close every pool this process opened (a server's stop, a test's end)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
        _migrated.clear()
    for pool in pools:
        pool.close()
