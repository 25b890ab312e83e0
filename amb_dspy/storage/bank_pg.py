"""Named banks in PostgreSQL (``AMB_DATABASE_URL``, ``--database URL``): the bank database of
:mod:`amb_dspy.storage.bank_db`, its rows keyed by the bank's name in tables many processes share.

The rows are the SQLite bank database's (:mod:`amb_dspy.storage.bank_rows` owns them), so a bank reads back the
same from either; the semantics are too: a save is one transaction that writes the nodes that changed and the
entries, merge events and line vectors added since the store's save point when the bank still carries that save
id, and the whole bank otherwise; a process killed mid-save leaves the previous save (the server rolls the
transaction back). The bank's write lock is an advisory lock (:mod:`amb_dspy.storage.advisory_lock`). A node's
vector is a pgvector ``vector`` where the server has the extension, float32 ``BYTEA`` on a stock server
(:mod:`amb_dspy.storage.pg_vectors`; its schema step, the last, converts an older database); either way a
bank's vectors are read whole into FAISS, the process's cache of them. The line vectors stay one float32 ``BYTEA`` block per save: a
block holds many vectors, read whole by the view's layout.

Tables (schema component ``banks``, :func:`~amb_dspy.storage.postgres.migrate`)::

    banks(name, save_id, meta, version)              meta: the header (JSON); version: +1 at each save
    bank_nodes(bank, id, seq, body, entries, vector)  vector: pgvector's vector, or float32 BYTEA
    bank_entries(bank, seq, id, body)                append-only
    bank_merge_events(bank, seq, body)               append-only
    bank_line_vectors(bank, seq, model, keys, vectors)  a row per save
    bank_line_layouts(bank, key, save_id, body)     the evidence view's layouts of the bank's lines, as a bank
                                                     database keeps them (bank_rows; a schema step of its own)

(``bank_`` before the row tables' names: one database also holds the server's tasks, keys and long-term memory.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from amb_dspy.errors import one_line
from amb_dspy.notices import Notify, notice
from amb_dspy.storage.advisory_lock import AdvisoryLock
from amb_dspy.storage.bank_file import BankFileError, LoadedBank, bank_from_payload
from amb_dspy.storage.bank_rows import (
    BankParts,
    SavePlan,
    SavePoint,
    bank_meta,
    bank_payload_from_rows,
    entry_rows,
    event_rows,
    layout_rows,
    layouts_from_rows,
    line_vectors_from_rows,
    new_save_id,
    node_rows,
    save_plan,
)
from amb_dspy.storage.pg_vectors import float32_bytes, vector_column, vector_columns_step
from amb_dspy.storage.postgres import DatabaseError, migrate, shown

COMPONENT = "banks"
SCHEMA = [
    "CREATE TABLE banks (name TEXT PRIMARY KEY, save_id TEXT NOT NULL, meta JSON NOT NULL, "
    "version BIGINT NOT NULL DEFAULT 1);"
    "CREATE TABLE bank_nodes (bank TEXT NOT NULL REFERENCES banks (name) ON DELETE CASCADE, id TEXT NOT NULL, "
    "seq BIGINT NOT NULL, body TEXT NOT NULL, entries TEXT, vector BYTEA NOT NULL, PRIMARY KEY (bank, id));"
    "CREATE INDEX bank_nodes_order ON bank_nodes (bank, seq);"
    "CREATE TABLE bank_entries (bank TEXT NOT NULL REFERENCES banks (name) ON DELETE CASCADE, seq BIGINT NOT NULL, "
    "id TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (bank, seq));"
    "CREATE TABLE bank_merge_events (bank TEXT NOT NULL REFERENCES banks (name) ON DELETE CASCADE, "
    "seq BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (bank, seq));"
    "CREATE TABLE bank_line_vectors (bank TEXT NOT NULL REFERENCES banks (name) ON DELETE CASCADE, "
    "seq BIGINT NOT NULL, model TEXT NOT NULL, keys BYTEA NOT NULL, vectors BYTEA NOT NULL, PRIMARY KEY (bank, seq))",
    # the evidence view's line layouts (bank_rows: a blob per key, of the save that wrote it)
    "CREATE TABLE bank_line_layouts (bank TEXT NOT NULL REFERENCES banks (name) ON DELETE CASCADE, key TEXT NOT NULL, "
    "save_id TEXT NOT NULL, body BYTEA NOT NULL, PRIMARY KEY (bank, key))",
    vector_columns_step(("bank_nodes", "vector", ("bank", "id"))),  # pgvector where the server has it
]
# what a whole save deletes first (the bank's line layouts go at every save, whole or not: _write)
_ROW_TABLES = ("bank_nodes", "bank_entries", "bank_merge_events", "bank_line_vectors")
Also = Callable[[Any], None]
"""More statements for a save's transaction, on its psycopg connection."""


@dataclass(frozen=True)
class DatabaseBank:
    """The bank called ``name`` in the PostgreSQL database at ``url``: where a bank lives, as a path is for a file
    (:mod:`amb_dspy.storage.bank_place`). Shown as ``NAME in postgresql://...`` (password hidden)."""

    url: str
    name: str
    grows = True  # saves write what changed; writers commit one document at a time

    def __str__(self) -> str:
        return f"bank {self.name!r} in {shown(self.url)}"

    def lock(self) -> AdvisoryLock:
        """The bank's write lock, seen by every process on the database (its tables made first, so that a holder
        never asks the pool for a second connection)."""
        migrate(self.url, COMPONENT, SCHEMA)
        return AdvisoryLock(self.url, f"bank:{self.name}")

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A transaction on the database, its schema brought up to date; a failed statement is one line."""
        import psycopg

        try:
            with self.lock().transaction() as connection:  # the lock's own connection while this thread holds it
                yield connection
        except UnicodeEncodeError as exc:  # a lone surrogate no UTF-8 holds (the doors escape them: amb_dspy.text)
            raise BankFileError(f"{self}: cannot store text that is not UTF-8 ({one_line(exc, 120)})") from None
        except psycopg.Error as exc:
            raise DatabaseError(f"{self}: {type(exc).__name__}: {one_line(exc, 160)}") from None

    # --- reading -------------------------------------------------------------------------------
    def saved_id(self) -> str | None:
        """The bank's save id (a new one at each save); None when there is no such bank."""
        with self._transaction() as connection:
            row = connection.execute("SELECT save_id FROM banks WHERE name = %s", (self.name,)).fetchone()
        return row[0] if row else None

    def holds_no_bank(self) -> bool:
        return self.saved_id() is None

    def exists(self) -> bool:
        return self.saved_id() is not None

    def size(self) -> tuple[int, int] | None:
        """(nodes, entries) of the bank; None when there is none."""
        with self._transaction() as connection:
            return _size(connection, self.name)

    def read(self, embedding_dim: int | None, line_model: str | None = None,
             line_dim: int | None = None) -> tuple[LoadedBank, SavePoint]:
        """The bank, read in one snapshot and fully validated, and the save point a store opened from it starts
        at (as :func:`~amb_dspy.storage.bank_db.read_bank_db`); BankFileError (one line) when there is none."""
        line_dim = line_dim or embedding_dim
        with self._transaction() as connection:
            connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            row = connection.execute("SELECT save_id, meta FROM banks WHERE name = %s", (self.name,)).fetchone()
            if row is None:
                raise BankFileError(f"no {self}: add documents to it with amb ingest --bank {self.name}")
            save_id, meta = row
            vector_column(connection, self.url, "bank_nodes")  # readies the connection for pgvector's vectors
            nodes = [(node_id, body, linked, float32_bytes(vector)) for node_id, body, linked, vector in
                     connection.cursor(binary=True).execute("SELECT id, body, entries, vector FROM bank_nodes "
                                                            "WHERE bank = %s ORDER BY seq", (self.name,))]
            entries = [body for (body,) in connection.execute(
                "SELECT body FROM bank_entries WHERE bank = %s ORDER BY seq", (self.name,))]
            events = [body for (body,) in connection.execute(
                "SELECT body FROM bank_merge_events WHERE bank = %s ORDER BY seq", (self.name,))]
            lines = None
            if line_model and line_dim:
                model = f"{line_model}/{line_dim}"
                rows = connection.execute("SELECT keys, vectors FROM bank_line_vectors WHERE bank = %s AND model = %s "
                                          "ORDER BY seq", (self.name, model)).fetchall()
                lines = line_vectors_from_rows(line_model, line_dim, rows, meta.get("lines_embedded"))
            layouts = layouts_from_rows(connection.execute(
                "SELECT key, body FROM bank_line_layouts WHERE bank = %s AND save_id = %s", (self.name, save_id)))
        try:
            loaded = bank_from_payload(bank_payload_from_rows(self, meta, nodes, entries, events), embedding_dim, self)
        except (ValueError, TypeError, RecursionError) as exc:
            if isinstance(exc, BankFileError):
                raise
            raise BankFileError(f"{self}: damaged bank ({type(exc).__name__}: {one_line(exc, 120)})") from None
        loaded.line_vectors, loaded.line_layouts = lines, layouts
        return loaded, SavePoint(self, save_id, len(loaded.tree.entries), len(loaded.tree.merge_events))

    def held_open(self) -> AbstractContextManager:
        """Nothing to hold: each save takes a pooled connection (:mod:`amb_dspy.storage.postgres`)."""
        return nullcontext()

    def keep_line_layout(self, save_id: str, key: str, body: bytes) -> bool:
        """Store a line layout built for the save ``save_id``, if the bank still carries it (checked in the same
        transaction, the bank's row held against a save meanwhile); False when it does not, or the database
        refused (a layout is a cache: its reader builds it again)."""
        try:
            with self._transaction() as connection:
                if not connection.execute("SELECT 1 FROM banks WHERE name = %s AND save_id = %s FOR SHARE",
                                          (self.name, save_id)).fetchone():
                    return False
                connection.execute("INSERT INTO bank_line_layouts (bank, key, save_id, body) VALUES (%s, %s, %s, %s) "
                                   "ON CONFLICT (bank, key) DO UPDATE SET save_id = excluded.save_id, body = excluded.body",
                                   (self.name, key, save_id, body))
        except (DatabaseError, BankFileError):
            return False
        return True

    # --- writing -------------------------------------------------------------------------------
    def write(self, bank: BankParts, since: SavePoint | None = None, changed: Collection[str] = (),
              notify: Notify = notice, also: Also | None = None) -> SavePoint:
        """Save ``bank`` in one transaction under the bank's write lock (as
        :func:`~amb_dspy.storage.bank_db.write_bank_db`): only what changed since ``since`` when the bank still
        carries its save id; else the whole bank, unless the bank holds a larger one: then it goes to the first
        free ``NAME.N``, with a notice. ``also(connection)``: more statements in the same transaction."""
        with self.lock():
            if since is not None and (since.where != self or self.saved_id() != since.save_id):
                since = None  # another writer saved meanwhile: the whole bank, kept from replacing a larger one
            target = self if since is not None else self._target(bank, notify)
            with target.lock(), target._transaction() as connection:
                point, lines = target._write(connection, bank, since, changed)
                if also is not None:
                    also(connection)
        if bank.line_vectors is not None:
            bank.line_vectors.saved(lines, bank.lines_complete)
        return point

    def _target(self, bank: BankParts, notify: Notify) -> DatabaseBank:
        """Where a whole save goes: this bank, or a new name when it holds more nodes or entries."""
        old, nodes, entries = self.size(), len(bank.graph), len(bank.tree)
        if old is None or (nodes >= old[0] and entries >= old[1]):
            return self
        number = 1
        while (target := DatabaseBank(self.url, f"{self.name}.{number}")).exists():
            number += 1
        notify(f"{self} holds a larger bank ({old[0]} nodes, {old[1]} entries) than this one ({nodes} nodes, "
               f"{entries} entries): kept it and wrote {target}")
        return target

    def _write(self, connection: Any, bank: BankParts, since: SavePoint | None,
               changed: Collection[str]) -> tuple[SavePoint, list[bytes]]:
        """The statements of one save (inside its transaction); the new save point and the line vectors written."""
        row = connection.execute("SELECT save_id FROM banks WHERE name = %s FOR UPDATE", (self.name,)).fetchone()
        plan = save_plan(bank, since, row[0] if row else None, changed)
        save_id = new_save_id()
        meta = json.dumps(bank_meta(bank, save_id), ensure_ascii=False)
        connection.execute("INSERT INTO banks (name, save_id, meta) VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
                           "SET save_id = excluded.save_id, meta = excluded.meta, version = banks.version + 1",
                           (self.name, save_id, meta))
        if plan.whole:
            for table in _ROW_TABLES:
                connection.execute(f"DELETE FROM {table} WHERE bank = %s", (self.name,))
        self._write_rows(connection, bank, plan)
        connection.execute("DELETE FROM bank_line_layouts WHERE bank = %s", (self.name,))  # of the rows as they were
        connection.cursor().executemany("INSERT INTO bank_line_layouts (bank, key, save_id, body) VALUES (%s, %s, %s, %s)",
                                        [(self.name, *row) for row in layout_rows(bank, save_id)])
        lines = self._write_line_vectors(connection, bank, everything=since is None)
        return SavePoint(self, save_id, len(bank.tree.entries), len(bank.tree.merge_events)), lines

    def _write_rows(self, connection: Any, bank: BankParts, plan: SavePlan) -> None:
        column = vector_column(connection, self.url, "bank_nodes")  # before the cursor, which copies the adapters
        cursor, name = connection.cursor(), self.name
        cursor.executemany("DELETE FROM bank_nodes WHERE bank = %s AND id = %s", [(name, i) for i in plan.gone])
        first = connection.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM bank_nodes WHERE bank = %s",
                                   (name,)).fetchone()[0]
        cursor.executemany(  # a new node goes after the last one; an old one keeps its place (its seq)
            "INSERT INTO bank_nodes (bank, id, seq, body, entries, vector) VALUES (%s, %s, %s, %s, %s, %b) "
            "ON CONFLICT (bank, id) DO UPDATE SET body = excluded.body, entries = excluded.entries, "
            "vector = excluded.vector",
            [(name, node_id, first + n, body, linked, column.value(vector))
             for n, (node_id, body, linked, vector) in enumerate(node_rows(bank, plan.nodes))])
        cursor.executemany("INSERT INTO bank_entries (bank, seq, id, body) VALUES (%s, %s, %s, %s)",
                           [(name, *row) for row in entry_rows(bank, plan.entries_from)])
        cursor.executemany("INSERT INTO bank_merge_events (bank, seq, body) VALUES (%s, %s, %s)",
                           [(name, *row) for row in event_rows(bank, plan.events_from)])

    def _write_line_vectors(self, connection: Any, bank: BankParts, everything: bool) -> list[bytes]:
        """The line vectors not saved yet (``everything``: all, the bank being written whole), as one row."""
        table = bank.line_vectors
        keys, vectors = table.unsaved(everything) if table is not None else ([], None)
        if keys:
            connection.execute("INSERT INTO bank_line_vectors (bank, seq, model, keys, vectors) VALUES (%s, "
                               "(SELECT COALESCE(MAX(seq), -1) + 1 FROM bank_line_vectors WHERE bank = %s), %s, %s, %s)",
                               (self.name, self.name, table.model, b"".join(keys), vectors.tobytes()))
        return keys


def _size(connection: Any, name: str) -> tuple[int, int] | None:
    row = connection.execute("SELECT (SELECT COUNT(*) FROM bank_nodes WHERE bank = %s), "
                             "(SELECT COUNT(*) FROM bank_entries WHERE bank = %s), "
                             "EXISTS (SELECT 1 FROM banks WHERE name = %s)", (name, name, name)).fetchone()
    return (row[0], row[1]) if row[2] else None
