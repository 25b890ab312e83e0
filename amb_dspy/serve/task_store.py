"""Where the MCP server keeps its tasks, so that a task outlives the process serving it (kill -9, SIGTERM, a restart).

:class:`TaskStore` is the one interface the server's :class:`~amb_dspy.serve.registry.TaskRegistry` keeps tasks
through; it is also the session's :class:`~amb_dspy.task.session.TaskKeeper`, told of every change as it happens:

* ``create``: a new task's start record (goal, the bank it started from, namespace, owner, what it holds beside
  its store) is committed before ``memory_start_task`` replies; its store's first full write runs next on the
  task's own thread (a restart before it redoes the start from the bank file);
* ``observing``: a result handed to ``memory_observe`` is committed before the call replies (it replies before
  the conversion runs); ``changed``: after each change, on the task's thread, the store and the rest of the task
  are committed together and the result's row is dropped: a result never lost, never observed twice;
* ``open``: a task this process does not hold, reopened as it was last committed, its results not yet memory
  converted again in order; ``close``/``closed``: an idle-closed or ended task, and where its bank is.

:class:`SqliteTaskStore` keeps each task in one SQLite file, ``STORAGE_DIR/tasks/<task id>.sqlite``: the task's
store as a bank database (:mod:`amb_dspy.storage.bank_db`, which ``amb show`` reads; a save writes only what
changed since the last one, so an observe on a large bank does not rewrite it) and two tables of its own in the
same transactions::

    task_record(id, goal, bank, namespace, owner, status, closed_line, snapshot)   one row; snapshot: JSON of
                                                        TaskSession.snapshot (run state, usage, tool cache...)
    task_pending(seq, tool, arguments, text)            results accepted, not yet memory
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from amb_dspy.errors import InputError, one_line
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc
from amb_dspy.storage.bank_file import BankFileError
from amb_dspy.storage.bank_pg import DatabaseBank
from amb_dspy.storage.bank_place import bank_at
from amb_dspy.task.session import TaskSession, start_store

TASKS_FOLDER = "tasks"
_TASK_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS task_record (id TEXT PRIMARY KEY, goal TEXT NOT NULL, bank TEXT, namespace TEXT, "
    "owner TEXT, status TEXT NOT NULL, closed_line TEXT, snapshot TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS task_pending (seq INTEGER PRIMARY KEY AUTOINCREMENT, tool TEXT NOT NULL, "
    "arguments TEXT NOT NULL, text TEXT NOT NULL)",
)
DATABASE_BANK = "database:"  # a task record's bank: a named bank in the server's PostgreSQL database
_WAIT_S = 60.0  # how long a write waits for the task's other writer (the first full save of a large bank)


class TaskStore(Protocol):
    """Where the server's tasks are kept (see the module docstring); SQLite now, a database server later."""

    def create(self, session: TaskSession, *, bank, owner: str | None) -> None:
        """Commit a new task's start record (``bank``: the file or named bank it started from, or None)."""

    def open(self, task_id: str, owner: str | None) -> TaskSession | None:
        """The task, reopened; None when there is none of this owner; InputError (one line) when it is closed
        (saying where its bank is) or cannot be restored."""

    def close(self, task_id: str, line: str) -> None:
        """Mark the task closed by the server (idle), ``line`` saying why and where its bank went."""

    def closed_where(self, task_id: str, owner: str | None) -> str | None:
        """The line saying a closed task of this owner was closed and where its bank is; None otherwise."""

    def observing(self, session: TaskSession, tool: str, arguments: dict[str, Any], text: str) -> int: ...

    def changed(self, session: TaskSession, observed: int | None = None) -> None: ...

    def closed(self, session: TaskSession) -> None: ...

    def current(self, session: TaskSession) -> bool:
        """Whether the session this process holds is the task as last committed (False: another process
        committed since, and the task is to be reopened from the store)."""


class KeptTasks(ABC):
    """What every task store does alike: reopen a task from its record, its bank and its pending results. A store
    gives the abstract methods below and ``database_url`` (where a task started from a named bank in PostgreSQL
    finds it again; empty: none)."""

    embedder: Any
    database_url = ""
    _open_session: Callable[..., TaskSession]

    @abstractmethod
    def _record(self, task_id: str) -> dict[str, Any] | None:
        """The task's record as a dict; None when there is no such task."""

    @abstractmethod
    def _pending(self, task_id: str) -> list[tuple[int, str, dict[str, Any], str]]:
        """The results accepted for the task and not yet memory: (seq, tool, arguments, text), in order."""

    @abstractmethod
    def task_bank(self, task_id: str):
        """Where the task's own store is kept (:func:`~amb_dspy.storage.bank_place.bank_at`)."""

    @abstractmethod
    def changed(self, session: TaskSession, observed: int | None = None) -> None:
        """Commit the task's store and the rest of the task together; ``observed``: the pending result it took."""

    @abstractmethod
    def _set_closed(self, task_id: str, line: str) -> None:
        """Mark the open task closed, ``line`` saying why and where its bank is."""

    def _where(self, task_id: str) -> str:
        """Where the task's bank is, as the line of an ended task says it."""
        return str(self.task_bank(task_id))

    def closed(self, session: TaskSession) -> None:
        if session.store.save_point is None:  # ended before its first change: its bank written now
            self.changed(session)
        self._set_closed(session.task_id, f"task {session.task_id} was ended; its bank is {self._where(session.task_id)}")

    def close(self, task_id: str, line: str) -> None:
        self._set_closed(task_id, line)

    def closed_where(self, task_id: str, owner: str | None) -> str | None:
        record = self._record(task_id)
        if record is None or record["owner"] != owner or record["status"] == "open":
            return None
        return record["closed_line"]

    def open(self, task_id: str, owner: str | None) -> TaskSession | None:
        record = self._record(task_id)
        if record is None or record["owner"] != owner:
            return None
        if record["status"] != "open":
            raise InputError(record["closed_line"] or f"task {task_id} was closed")
        try:
            return self._reopen(task_id, record)
        except (BankFileError, InputError, KeyError, TypeError, ValueError, sqlite3.Error) as exc:
            raise InputError(f"task {task_id} cannot be restored: {one_line(exc)}") from None

    def current(self, session: TaskSession) -> bool:
        return True  # one process holds a task at a time

    def _reopen(self, task_id: str, record: dict[str, Any]) -> TaskSession:
        """The task's session as last committed, its pending results queued again; a start whose store was never
        written is done again from the bank it started from."""
        place, notices = self.task_bank(task_id), []
        if place.saved_id() is not None:
            store = MemoryStore.load(place, self.embedder, notices)
            if store.insight_doc is None or store.insight_doc.doc_id != task_id:
                raise ValueError(f"the bank in {place} is another task's, not this one's")
        else:
            bank = self.started_from(record["bank"])
            if bank is not None and not bank_at(bank).exists():
                raise ValueError(f"it started from {bank}, which is no longer there")
            store, notices = start_store(self.embedder, bank, InsightDoc(task_goal=record["goal"], doc_id=task_id))
        session = self._open_session(store, namespace=record["namespace"])
        session.resume(json.loads(record["snapshot"]))
        session.state.notices.extend(notices)
        session.keeper = self  # a start never written is written at the task's first change, as at its start
        session.replay(self._pending(task_id))
        return session

    def started_from(self, text: str | None):
        """The bank a task's record says it started from: a file, or a named bank in the database."""
        if text is None or not text.startswith(DATABASE_BANK):
            return None if text is None else Path(text)
        if not self.database_url:
            raise ValueError(f"it started from a bank in a database this server does not use ({text})")
        return DatabaseBank(self.database_url, text[len(DATABASE_BANK):])


def bank_record(bank) -> str | None:
    """How a task's record names the bank it started from (:meth:`KeptTasks.started_from` reads it back)."""
    if bank is None:
        return None
    return f"{DATABASE_BANK}{bank.name}" if isinstance(bank, DatabaseBank) else str(bank)


class SqliteTaskStore(KeptTasks):
    """Each task in its own SQLite file under ``folder`` (see the module docstring). ``open_session(store,
    namespace=)`` makes a session on a store (``MemoryBank.open_session``); ``embedder`` reads stores back."""

    def __init__(self, folder: Path, open_session: Callable[..., TaskSession], embedder: Any):
        self.folder = Path(folder)
        self._open_session, self.embedder = open_session, embedder
        self._held_open: dict[str, sqlite3.Connection] = {}  # task id -> a connection kept open while it is open
        self._guard = threading.Lock()

    def path(self, task_id: str) -> Path | None:
        """The task's file, or None for an id that can name none (no path from a client's text)."""
        return self.folder / f"{task_id}.sqlite" if _TASK_ID.fullmatch(task_id or "") else None

    # --- writing ------------------------------------------------------------------------------
    def create(self, session: TaskSession, *, bank, owner: str | None) -> None:
        """Commit the start record. The store's first full write waits for the task's first change (or its end):
        until then a restart starts the task again from the bank it names, and a first ``memory_context`` asked
        at once does not wait for a copy of the whole bank."""
        path = self.path(session.task_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        record = (session.task_id, session.store.insight_doc.task_goal, bank_record(bank),
                  session.namespace, owner, "open", None, json.dumps(session.snapshot(), ensure_ascii=False))
        with self._connection(path, schema=True) as connection:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO task_record VALUES (?, ?, ?, ?, ?, ?, ?, ?)", record)
            connection.execute("COMMIT")
        self._hold_open(session.task_id)
        session.keeper = self

    def observing(self, session: TaskSession, tool: str, arguments: dict[str, Any], text: str) -> int:
        with self._connection(self.path(session.task_id)) as connection:
            cursor = connection.execute("INSERT INTO task_pending (tool, arguments, text) VALUES (?, ?, ?)",
                                        (tool, json.dumps(arguments, ensure_ascii=False, default=str), text))
            return int(cursor.lastrowid)

    def changed(self, session: TaskSession, observed: int | None = None) -> None:
        """The store (what changed since its last save) and the rest of the task, in one transaction."""
        snapshot = json.dumps(session.snapshot(), ensure_ascii=False)

        def rows(connection: sqlite3.Connection) -> None:
            connection.execute("UPDATE task_record SET snapshot = ? WHERE id = ?", (snapshot, session.task_id))
            if observed is not None:
                connection.execute("DELETE FROM task_pending WHERE seq <= ?", (observed,))

        session.store.export(self.path(session.task_id), also=rows)

    def _where(self, task_id: str) -> str:
        return f"in {self.path(task_id)}"

    def _set_closed(self, task_id: str, line: str) -> None:
        with self._connection(self.path(task_id)) as connection:
            connection.execute("UPDATE task_record SET status = 'closed', closed_line = ? "
                               "WHERE id = ? AND status = 'open'", (line, task_id))
        self._let_go(task_id)

    def open(self, task_id: str, owner: str | None) -> TaskSession | None:
        session = super().open(task_id, owner)
        if session is not None:
            self._hold_open(task_id)
        return session

    # --- the file of an open task, held open ----------------------------------------------------------
    def _hold_open(self, task_id: str) -> None:
        """Keep one idle connection to the open task's file. SQLite checkpoints a WAL database and deletes its
        journal when its last connection closes, with an fsync at each step; every call here opens and closes its
        own connections (an accepted result, a save), so without this one each of them paid that on closing. The
        journal is checkpointed as it grows instead (SQLite's own 1,000 pages), and when the task is closed."""
        with self._guard:
            if task_id not in self._held_open:
                connection = self._connection(self.path(task_id), any_thread=True).thing
                connection.execute("SELECT COUNT(*) FROM task_record").fetchone()  # it counts once it has read
                self._held_open[task_id] = connection

    def _let_go(self, task_id: str) -> None:
        with self._guard:
            connection = self._held_open.pop(task_id, None)
        if connection is not None:
            connection.close()

    # --- reading ------------------------------------------------------------------------------
    def task_bank(self, task_id: str):
        return bank_at(self.path(task_id))

    def _record(self, task_id: str) -> dict[str, Any] | None:
        """The task's record row; None when there is no such task; InputError when its file is damaged."""
        path = self.path(task_id)
        if path is None or not path.is_file():
            return None
        try:
            with closing(sqlite3.connect(path, timeout=_WAIT_S)) as connection:
                connection.row_factory = sqlite3.Row
                row = connection.execute("SELECT * FROM task_record WHERE id = ?", (task_id,)).fetchone()
        except sqlite3.Error as exc:
            raise InputError(f"task {task_id} cannot be restored: {path} is no task database "
                             f"({one_line(exc)})") from None
        if row is None:
            raise InputError(f"task {task_id} cannot be restored: {path} holds no record of it")
        return dict(row)

    def _pending(self, task_id: str) -> list[tuple[int, str, dict[str, Any], str]]:
        with closing(sqlite3.connect(self.path(task_id), timeout=_WAIT_S)) as connection:
            rows = connection.execute("SELECT seq, tool, arguments, text FROM task_pending ORDER BY seq").fetchall()
        return [(int(seq), str(tool), json.loads(arguments), str(text)) for seq, tool, arguments, text in rows]

    @staticmethod
    def _connection(path: Path, schema: bool = False, any_thread: bool = False) -> closing[sqlite3.Connection]:
        """A connection to a task's file (``schema``: its tables made; ``any_thread``: usable and closable from any
        thread); autocommit unless a BEGIN says otherwise."""
        connection = sqlite3.connect(path, timeout=_WAIT_S, isolation_level=None, check_same_thread=not any_thread)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        for statement in _SCHEMA if schema else ():
            connection.execute(statement)
        return closing(connection)
