"""A write lock every process on one PostgreSQL database sees: :class:`~amb_dspy.storage.bank_lock.BankLock` as a
session-level advisory lock (``pg_advisory_lock``), for a bank kept in the database (``bank:NAME``) and for a
server's task (``task:ID``).

The lock lives on a connection of the process's pool (:func:`~amb_dspy.storage.postgres.database_pool`), kept
aside while the lock is held and returned when it is let go. The server lets go of an advisory lock when its
connection ends, so a holder killed with ``kill -9`` never leaves the lock taken, as a ``flock`` is let go.
In one process the lock is held once per name and re-entered by the thread holding it (a commit whose save locks
too); other threads wait as other processes do, without a connection each. While a thread holds the lock, what it
asks of the database goes through the lock's own connection (:meth:`AdvisoryLock.transaction`): a holder never
waits for a second connection of the pool, so as many tasks as the pool has connections can write at once without
ever starving each other of one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from amb_dspy.errors import one_line
from amb_dspy.storage.bank_lock import HeldOnce
from amb_dspy.storage.postgres import DatabaseError, database_pool, lock_key, shown, transaction


class AdvisoryLock(HeldOnce):
    """:class:`~amb_dspy.storage.bank_lock.BankLock` as the advisory lock ``name`` of the database at ``url``."""

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name
        super().__init__(("advisory", url, name))

    def _take(self, wait: bool) -> Any:
        return self._lock(wait)

    def _let_go(self, connection: Any) -> None:
        try:
            connection.execute("SELECT pg_advisory_unlock(%s)", (lock_key(self.name),))
            connection.commit()
        except Exception:  # noqa: BLE001 - a broken connection: closing it lets the lock go all the same
            connection.close()
        finally:
            database_pool(self.url).putconn(connection)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A transaction on the lock's connection when this thread holds the lock, else on a pooled one
        (:func:`~amb_dspy.storage.postgres.transaction`); committed when the block ends, rolled back on an error."""
        connection = self.held_here()
        if connection is None:
            with transaction(self.url) as connection:
                yield connection
            return
        with connection.transaction():
            yield connection

    def _lock(self, wait: bool) -> Any:
        """A pooled connection holding the lock; None when another holds it and ``wait`` is False."""
        pool = database_pool(self.url)
        try:
            connection = pool.getconn()
        except Exception as exc:  # noqa: BLE001 - PoolTimeout: every connection busy, or the server gone
            raise DatabaseError(f"the database {shown(self.url)} gave no connection: {one_line(exc, 160)}") from None
        try:
            call = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
            taken = connection.execute(f"SELECT {call}(%s)", (lock_key(self.name),)).fetchone()[0]
            connection.commit()  # the session's lock outlives the transaction; the connection is left idle
        except BaseException as exc:  # Ctrl-C while waiting too: the connection goes, and any lock with it
            connection.close()
            pool.putconn(connection)
            if isinstance(exc, Exception):
                raise DatabaseError(f"the database {shown(self.url)} failed: {one_line(exc, 160)}") from None
            raise
        if wait or taken:
            return connection
        pool.putconn(connection)
        return None
