"""The MCP server's tasks in PostgreSQL (``amb serve --database URL`` or ``AMB_DATABASE_URL``), shared by every
replica of the server on that database: :class:`PostgresTaskStore`, the :class:`~amb_dspy.serve.task_store.TaskStore`
of :class:`~amb_dspy.serve.task_store.SqliteTaskStore`'s semantics, a task's store kept as the named bank
``task/<id>`` (:mod:`amb_dspy.storage.bank_pg`; the ``/`` keeps it from every ``--bank NAME``, so a task's memory is
never another's start) and its record and pending results in two tables, committed in the bank save's transaction.

Schema component ``tasks``::

    task_record(id, goal, bank, namespace, owner, status, closed_line, snapshot, version)
    task_pending(seq, task, tool, arguments, text)      results accepted, not yet memory

Replicas: a replica that does not hold a task reopens it from here. ``version`` counts the task's commits and
accepted results; a replica remembers the version it last saw, and a call on a task whose version moved on (a
call on another replica) reopens it first (:meth:`PostgresTaskStore.current`, asked by the registry). Two calls on
one task at once on two replicas are serialised by the task's advisory lock: the second to commit finds the
version moved on and writes nothing over the first; its result stays pending, and the next call on either replica
reopens the task and makes it memory. Never a lost update.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from amb_dspy.errors import InputError
from amb_dspy.serve.task_store import _TASK_ID, KeptTasks, bank_record
from amb_dspy.storage.bank_pg import COMPONENT as BANKS
from amb_dspy.storage.bank_pg import SCHEMA as BANKS_SCHEMA
from amb_dspy.storage.bank_pg import DatabaseBank
from amb_dspy.storage.postgres import migrate, transaction
from amb_dspy.task.session import TaskSession

COMPONENT = "tasks"
SCHEMA = [
    "CREATE TABLE task_record (id TEXT PRIMARY KEY, goal TEXT NOT NULL, bank TEXT, namespace TEXT, owner TEXT, "
    "status TEXT NOT NULL, closed_line TEXT, snapshot TEXT NOT NULL, version BIGINT NOT NULL DEFAULT 0);"
    "CREATE TABLE task_pending (seq BIGSERIAL PRIMARY KEY, task TEXT NOT NULL REFERENCES task_record (id) "
    "ON DELETE CASCADE, tool TEXT NOT NULL, arguments TEXT NOT NULL, text TEXT NOT NULL);"
    "CREATE INDEX task_pending_order ON task_pending (task, seq)",
]
_RECORD = ("id", "goal", "bank", "namespace", "owner", "status", "closed_line", "snapshot", "version")


def open_database(url: str) -> None:
    """Reach the database and bring the banks' and tasks' tables up to date (DatabaseError, one line: the server
    is down, the URL wrong, or the schema newer than this amb-dspy's)."""
    migrate(url, BANKS, BANKS_SCHEMA)
    migrate(url, COMPONENT, SCHEMA)


class PostgresTaskStore(KeptTasks):
    """Tasks in the PostgreSQL database at ``url`` (see the module docstring)."""

    def __init__(self, url: str, open_session: Callable[..., TaskSession], embedder: Any):
        open_database(url)
        self.database_url, self._open_session, self.embedder = url, open_session, embedder
        self._seen: dict[str, int] = {}  # task id -> the version this process's session last saw
        self._guard = threading.Lock()
        self._counts: dict[str, threading.Lock] = {}

    def task_bank(self, task_id: str) -> DatabaseBank:
        if not _TASK_ID.fullmatch(task_id or ""):
            raise InputError(f"no open task {task_id!r}: start one with memory_start_task")
        return DatabaseBank(self.database_url, f"task/{task_id}")

    # --- writing ------------------------------------------------------------------------------
    def create(self, session: TaskSession, *, bank, owner: str | None) -> None:
        """Commit the start record; the store's first full write waits for the task's first change or its end
        (:meth:`SqliteTaskStore.create <amb_dspy.serve.task_store.SqliteTaskStore.create>` says why)."""
        record = (session.task_id, session.store.insight_doc.task_goal, bank_record(bank), session.namespace, owner,
                  "open", None, json.dumps(session.snapshot(), ensure_ascii=False))
        with transaction(self.database_url) as connection:
            connection.execute("INSERT INTO task_record (id, goal, bank, namespace, owner, status, closed_line, "
                               "snapshot) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", record)
        self._saw(session.task_id, 0)
        session.keeper = self

    def observing(self, session: TaskSession, tool: str, arguments: dict[str, Any], text: str) -> int:
        """Keep the result (committed before the call replies); the task's version moves on."""
        task_id = session.task_id
        with self._counting(task_id), transaction(self.database_url) as connection:
            seq = connection.execute(
                "INSERT INTO task_pending (task, tool, arguments, text) VALUES (%s, %s, %s, %s) RETURNING seq",
                (task_id, tool, json.dumps(arguments, ensure_ascii=False, default=str), text)).fetchone()[0]
            version = connection.execute("UPDATE task_record SET version = version + 1 WHERE id = %s "
                                         "RETURNING version", (task_id,)).fetchone()[0]
            self._advance(task_id, version)
        return int(seq)

    def changed(self, session: TaskSession, observed: int | None = None) -> None:
        """The store (what changed since its last save) and the rest of the task, in one transaction under the
        task's lock, unless another replica committed the task meanwhile: then nothing is written over it (the
        result stays pending, and the task is reopened at its next call)."""
        task_id, place = session.task_id, self.task_bank(session.task_id)
        snapshot = json.dumps(session.snapshot(), ensure_ascii=False)
        with place.lock():
            with self._counting(task_id):  # not between an accepted result's commit and its count here
                current = self._seen.get(task_id) is not None and self._version(task_id, place) == self._seen[task_id]
            if not current:
                return

            def rows(connection: Any) -> None:
                version = connection.execute("UPDATE task_record SET snapshot = %s, version = version + 1 WHERE id = %s "
                                             "RETURNING version", (snapshot, task_id)).fetchone()[0]
                self._advance(task_id, version)  # before the commit lets a result accepted meanwhile count on it
                if observed is not None:
                    connection.execute("DELETE FROM task_pending WHERE task = %s AND seq = %s", (task_id, observed))

            session.store.export(place, also=rows)

    def _set_closed(self, task_id: str, line: str) -> None:
        with transaction(self.database_url) as connection:
            connection.execute("UPDATE task_record SET status = 'closed', closed_line = %s, version = version + 1 "
                               "WHERE id = %s AND status = 'open'", (line, task_id))

    # --- reading ------------------------------------------------------------------------------
    def current(self, session: TaskSession) -> bool:
        seen = self._seen.get(session.task_id)
        return seen is not None and self._version(session.task_id) == seen

    def open(self, task_id: str, owner: str | None) -> TaskSession | None:
        self._saw(task_id, self._version(task_id))  # before its first write, queued on the task's thread
        return super().open(task_id, owner)

    def _version(self, task_id: str, place: DatabaseBank | None = None) -> int | None:
        """The task's version (``place``: the task's bank, whose lock this thread holds: asked on its connection)."""
        with (place.lock().transaction() if place is not None else transaction(self.database_url)) as connection:
            row = connection.execute("SELECT version FROM task_record WHERE id = %s", (task_id,)).fetchone()
        return row[0] if row else None

    def _saw(self, task_id: str, version: int | None) -> None:
        with self._guard:
            self._seen[task_id] = version

    def _counting(self, task_id: str) -> threading.Lock:
        """The task's lock in this process over a change of its version and this process's count of it."""
        with self._guard:
            return self._counts.setdefault(task_id, threading.Lock())

    def _advance(self, task_id: str, version: int) -> None:
        """This process made the task's version ``version``: still current when it had seen the one before (else
        another replica changed the task meanwhile, and it is reopened at its next call)."""
        with self._guard:
            if self._seen.get(task_id) == version - 1:
                self._seen[task_id] = version

    def _record(self, task_id: str) -> dict[str, Any] | None:
        if not _TASK_ID.fullmatch(task_id or ""):
            return None
        with transaction(self.database_url) as connection:
            row = connection.execute(f"SELECT {', '.join(_RECORD)} FROM task_record WHERE id = %s",
                                     (task_id,)).fetchone()
        return dict(zip(_RECORD, row)) if row else None

    def _pending(self, task_id: str) -> list[tuple[int, str, dict[str, Any], str]]:
        with transaction(self.database_url) as connection:
            rows = connection.execute("SELECT seq, tool, arguments, text FROM task_pending WHERE task = %s "
                                      "ORDER BY seq", (task_id,)).fetchall()
        return [(int(seq), str(tool), json.loads(arguments), str(text)) for seq, tool, arguments, text in rows]
