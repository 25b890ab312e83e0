"""A bank that grows: one SQLite file whose save after an add writes only the rows that changed.

A JSON bank file (:mod:`amb_dspy.storage.bank_file`) is one document, so adding a 1.5k-token conversation to a
1M-token bank rewrites some 60 MB. Here the bank is rows keyed by id, so a save writes the new nodes, the few
old ones the add re-linked or re-described, the new entries and merge events, and the small header. SQLite
(stdlib ``sqlite3``) rather than an append-only log with snapshots: one file, no compaction to write, and its
transactions are the crash safety: each save is one transaction, so a process killed mid-save leaves the bank of
the previous save (the next open rolls the unfinished one back). WAL mode lets ``amb show`` read while a task
writes. A save holds the bank's write lock (:mod:`amb_dspy.storage.bank_lock`); a new database is written whole
under a temporary name and linked into place, so it is complete or absent. Embeddings are float32 blobs, read back straight into one matrix: exact, and no model run on open.
The evidence view's line vectors (:mod:`amb_dspy.storage.line_vectors`) are kept too, so that the first question
after opening a large bank does not embed every line again (minutes at a million tokens): one row per save of the
vectors it added, their keys and float32 values end to end (a row per vector would waste a third of each page).

Tables::

    meta(key, value)                       format, schema_version, embedding_model, embedding_dim,
                                           insight_doc, hops, save_id, lines_embedded (values JSON)
    nodes(id, seq, body, entries, vector)  one Query Graph node a row, in graph order (seq); body: the node
                                           without its embedding, JSON; entries: its Interaction Tree entry ids
    entries(seq, id, body)                 the tree's entries, append-only
    merge_events(seq, body)                append-only
    line_vectors(seq, model, keys, vectors)  append-only, a row per save; model: the embedder's name/dimension,
                                           keys: 16-byte hashes of the lines' texts, vectors: theirs in order;
                                           lines_embedded names the model whose vectors cover every line of
                                           every node saved (a bank database written before line vectors has
                                           no such table: its lines are embedded again)
    line_layouts(key, save_id, body)       the evidence view's layouts of the bank's lines (bank_rows: a blob
                                           per key, of the save that wrote it; a save deletes the others; a
                                           database written before layouts were kept gets the table at its
                                           next save, and until then its readers build their layouts)

The JSON file stays the interchange format; :func:`read_bank_db` turns the rows into the object a JSON bank file
holds and validates it with the same code, so both formats load to the same bank.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection
from contextlib import closing
from pathlib import Path
from typing import Any

from amb_dspy.errors import one_line
from amb_dspy.files import PRIVATE_MODE, link_new, new_temp_beside, replace_with
from amb_dspy.notices import Notify, notice
from amb_dspy.storage.bank_db_connections import kept_here, opened, read_only
from amb_dspy.storage.bank_file import (
    BankFileError,
    LoadedBank,
    bank_from_payload,
    export_target,
    load_bank,
)
from amb_dspy.storage.bank_lock import bank_lock
from amb_dspy.storage.bank_rows import (
    BankParts,
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
from amb_dspy.storage.line_vectors import LineVectors

DB_SUFFIXES = (".sqlite", ".db")
_MAGIC = b"SQLite format 3\x00"
_TABLES = ("meta", "nodes", "entries", "merge_events")  # what a bank database must hold
_LINE_VECTORS = ("CREATE TABLE IF NOT EXISTS line_vectors (seq INTEGER PRIMARY KEY, model TEXT NOT NULL, keys BLOB NOT NULL, "
                 "vectors BLOB NOT NULL)")
_LINE_LAYOUTS = "CREATE TABLE IF NOT EXISTS line_layouts (key TEXT PRIMARY KEY, save_id TEXT NOT NULL, body BLOB NOT NULL)"
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes (id TEXT PRIMARY KEY, seq INTEGER NOT NULL UNIQUE, body TEXT NOT NULL, entries TEXT,
                    vector BLOB NOT NULL);
CREATE TABLE entries (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, body TEXT NOT NULL);
CREATE TABLE merge_events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);
"""


Also = Callable[[sqlite3.Connection], None]
"""More statements for a save's transaction (see :func:`write_bank_db`)."""


def is_bank_db(path: str | Path) -> bool:
    """Whether ``path`` is (or, when missing or empty, names) a bank database rather than a JSON bank file:
    decided by its first bytes when it has some, else by its suffix (``.sqlite`` or ``.db``)."""
    path = Path(path)
    if kept_here(path):  # this process keeps a connection to it: opening and closing it here would cost its locks
        return True
    try:
        with path.open("rb") as handle:
            head = handle.read(len(_MAGIC))
    except OSError:
        head = b""
    return head == _MAGIC if head else path.suffix.lower() in DB_SUFFIXES


def _db_error(path: Path, exc: sqlite3.Error) -> BankFileError:
    return BankFileError(f"{path}: not a readable bank database ({' '.join(str(exc).split())[:150]})")


# --- reading -----------------------------------------------------------------------------------
def read_bank_db(path: str | Path, embedding_dim: int | None, line_model: str | None = None,
                 line_dim: int | None = None) -> tuple[LoadedBank, SavePoint]:
    """Read and fully validate a bank database (BankFileError, one line, if it is none or damaged), and the save point
    a store opened from it starts at. With ``line_model`` and ``line_dim`` (the embedder's name and dimension; default
    ``embedding_dim``), ``line_vectors`` are the stored line vectors of that model and dimension (none of another)."""
    line_dim, path = line_dim or embedding_dim, Path(path)
    if not path.is_file():
        raise BankFileError(f"{path}: no such bank file")
    if path.stat().st_size == 0:
        raise BankFileError(f"{path}: empty file, not a bank database")
    try:
        with closing(sqlite3.connect(path, isolation_level=None)) as connection:
            connection.execute("BEGIN")  # one snapshot, though a writer commits meanwhile
            raw, save_id = _payload(path, connection)
            lines = _line_vectors(connection, line_model, line_dim) if line_model and line_dim else None
            layouts = _line_layouts(connection, save_id)
    except sqlite3.Error as exc:
        raise _db_error(path, exc) from None
    except BankFileError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:  # a row that is not the JSON or the blob it should be
        raise BankFileError(f"{path}: damaged bank database ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:120]})") from None
    loaded = bank_from_payload(raw, embedding_dim, path)
    loaded.line_vectors, loaded.line_layouts = lines, layouts
    return loaded, SavePoint(path, save_id, len(loaded.tree.entries), len(loaded.tree.merge_events))


def _payload(path: Path, connection: sqlite3.Connection) -> tuple[dict[str, Any], str]:
    """The object a JSON bank file would hold, from the rows (embeddings as arrays), and the save id."""
    present = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = [table for table in _TABLES if table not in present]
    if missing:
        raise BankFileError(f"{path}: not a bank database (no table {', '.join(missing)})")
    meta = {key: json.loads(value) for key, value in connection.execute("SELECT key, value FROM meta")}
    if "save_id" not in meta:
        raise BankFileError(f"{path}: not a bank database (no save id: never saved in full)")
    nodes = connection.execute("SELECT id, body, entries, vector FROM nodes ORDER BY seq").fetchall()
    entries = [body for (body,) in connection.execute("SELECT body FROM entries ORDER BY seq")]
    events = [body for (body,) in connection.execute("SELECT body FROM merge_events ORDER BY seq")]
    return bank_payload_from_rows(path, meta, nodes, entries, events), meta["save_id"]


def _line_vectors(connection: sqlite3.Connection, model_name: str, dim: int) -> LineVectors:
    """The stored line vectors of this model and dimension, read into one matrix (a row whose sizes do not agree
    is left out, as the vectors of another model are: those lines are embedded again)."""
    model = LineVectors(model_name, dim).model
    if not connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'line_vectors'").fetchone():
        return LineVectors(model_name, dim)  # a bank database saved before line vectors were kept
    rows = connection.execute("SELECT keys, vectors FROM line_vectors WHERE model = ? ORDER BY seq", (model,)).fetchall()
    embedded = connection.execute("SELECT value FROM meta WHERE key = 'lines_embedded'").fetchone()
    return line_vectors_from_rows(model_name, dim, rows, json.loads(embedded[0]) if embedded else None)


def _line_layouts(connection: sqlite3.Connection, save_id: str) -> dict[str, bytes]:
    """The stored line layouts of the save ``save_id`` (none in a database saved before they were kept)."""
    if not connection.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'line_layouts'").fetchone():
        return {}
    return layouts_from_rows(connection.execute("SELECT key, body FROM line_layouts WHERE save_id = ?", (save_id,)))


# --- writing -----------------------------------------------------------------------------------
def write_bank_db(path: str | Path, bank: BankParts, since: SavePoint | None = None,
                  changed: Collection[str] = (), notify: Notify = notice, also: Also | None = None) -> SavePoint:
    """Save ``bank`` to the database at ``path`` in one transaction, holding the bank's write lock
    (:mod:`amb_dspy.storage.bank_lock`); returns the new save point.

    With ``since`` (the save point of this bank's last save to ``path``, still the file's), only the rows of
    the node ids in ``changed`` (added, edited or removed since) and the entries and merge events after
    ``since`` are written. Otherwise the file gets the whole bank, replacing what it held, unless it holds a
    larger bank: then the whole bank goes to a new name beside it, with a notice (as JSON bank files do).
    A new database is written whole under a temporary name and then linked into place: it is complete or absent,
    whatever stops the save (a crash, kill -9, a row that cannot be stored). ``also``: more statements for the
    same transaction (a task store's own rows beside the bank's)."""
    path = Path(path)
    with bank_lock(path):
        if since is not None and (since.where != path or saved_id(path) != since.save_id):
            since = None
        if since is None:
            path = export_target(path, len(bank.graph), len(bank.tree), notify, size=bank_db_size)
        if holds_no_bank(path):
            point, lines = _write_new(path, bank, also)
        else:
            point, lines = _write_into(path, bank, since, changed, also)
    if bank.line_vectors is not None:
        bank.line_vectors.saved(lines, bank.lines_complete)
    return point


def _write_into(path: Path, bank: BankParts, since: SavePoint | None, changed: Collection[str],
                also: Also | None = None) -> tuple[SavePoint, list[bytes]]:
    """One save into the database file at ``path``, one transaction (rolled back whole on any error)."""
    try:
        with opened(path) as connection:
            connection.execute("BEGIN IMMEDIATE")
            try:
                point, lines = _write(connection, path, bank, since, changed)
                if also is not None:
                    also(connection)
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
    except sqlite3.Error as exc:
        raise _db_error(path, exc) from None
    except UnicodeEncodeError as exc:  # a lone surrogate no UTF-8 holds: the doors escape them (amb_dspy.text)
        raise BankFileError(f"{path}: cannot store text that is not UTF-8 ({one_line(exc, 120)})") from None
    return point, lines


def _write_new(path: Path, bank: BankParts, also: Also | None = None) -> tuple[SavePoint, list[bytes]]:
    """A new bank database at ``path``: written whole beside it under a temporary name, flushed, then linked
    into place (a link, not a rename, so that a file made there meanwhile is never replaced: then the bank is
    saved into that one). A leftover with no bank in it (an empty file, or a database without tables that a save
    before this rule left) is replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = new_temp_beside(path, mode=PRIVATE_MODE)
    try:
        try:
            point, lines = _write_into(temp, bank, None, (), also)
        except BankFileError as exc:  # said of the bank, not of its temporary name
            raise BankFileError(str(exc).replace(str(temp), str(path))) from None
        if path.exists():  # a leftover with no bank (holds_no_bank): this one takes its place, its journal goes
            for journal in ("-wal", "-shm"):
                path.with_name(path.name + journal).unlink(missing_ok=True)
            replace_with(temp, path)
        elif not link_new(temp, path):
            return _write_into(path, bank, None, (), also)
    finally:
        temp.unlink(missing_ok=True)
    return SavePoint(path, point.save_id, point.entries, point.merge_events), lines


def holds_no_bank(path: Path) -> bool:
    """Whether ``path`` holds no bank at all: missing, empty, or a SQLite file without a table."""
    if not path.exists():
        return True
    if not path.is_file():
        return False
    if path.stat().st_size == 0:
        return True
    try:
        with opened(path, read_only) as connection:
            return connection.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.Error:
        return False


def _write(connection: sqlite3.Connection, path: Path, bank: BankParts, since: SavePoint | None,
           changed: Collection[str]) -> tuple[SavePoint, list[bytes]]:
    """The statements of one save (inside its transaction); the new save point and the line vectors written."""
    plan = save_plan(bank, since, _save_id(connection) if since is not None else None, changed)
    if plan.whole:
        _clear(connection)
    connection.executemany("DELETE FROM nodes WHERE id = ?", [(node_id,) for node_id in plan.gone])
    _write_nodes(connection, bank, plan.nodes)
    lines = _write_line_vectors(connection, bank.line_vectors, everything=since is None)
    connection.executemany("INSERT INTO entries (seq, id, body) VALUES (?, ?, ?)", entry_rows(bank, plan.entries_from))
    connection.executemany("INSERT INTO merge_events (seq, body) VALUES (?, ?)", event_rows(bank, plan.events_from))
    save_id = new_save_id()
    connection.execute(_LINE_LAYOUTS)
    connection.execute("DELETE FROM line_layouts")  # they describe the rows as they were
    connection.executemany("INSERT INTO line_layouts (key, save_id, body) VALUES (?, ?, ?)", layout_rows(bank, save_id))
    connection.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                           [(key, json.dumps(value, ensure_ascii=False)) for key, value in
                            bank_meta(bank, save_id).items()])
    return SavePoint(path, save_id, len(bank.tree.entries), len(bank.tree.merge_events)), lines


def _save_id(connection: sqlite3.Connection) -> str | None:
    try:
        row = connection.execute("SELECT value FROM meta WHERE key = 'save_id'").fetchone()
    except sqlite3.OperationalError:  # no meta table: a new file
        return None
    return json.loads(row[0]) if row else None


def saved_id(path: str | Path) -> str | None:
    """The save id of the bank database at ``path`` (a new one at each save); None when there is none."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        with opened(path, sqlite3.connect) as connection:
            return _save_id(connection)
    except sqlite3.Error:
        return None


def _clear(connection: sqlite3.Connection) -> None:
    """An empty bank schema, in place of whatever the file held (inside the save's transaction)."""
    for table in (*_TABLES, "line_vectors", "line_layouts"):
        connection.execute(f"DROP TABLE IF EXISTS {table}")
    for statement in filter(str.strip, _SCHEMA.split(";")):  # not executescript: it would COMMIT first
        connection.execute(statement)


def _write_nodes(connection: sqlite3.Connection, bank: BankParts, node_ids: list[str]) -> None:
    """Insert or update these nodes' rows; a new node goes after the last one (its seq), an old one keeps its place."""
    rows = node_rows(bank, node_ids)
    connection.executemany(
        "INSERT INTO nodes (id, seq, body, entries, vector) "
        "VALUES (?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM nodes), ?, ?, ?) "
        "ON CONFLICT(id) DO UPDATE SET body = excluded.body, entries = excluded.entries, vector = excluded.vector",
        rows)


def _write_line_vectors(connection: sqlite3.Connection, table: LineVectors | None, everything: bool) -> list[bytes]:
    """Insert the line vectors not saved yet (``everything``: all of them, the file being written whole) as one
    row; a database saved before line vectors were kept gets their table. Returns the keys written."""
    connection.execute(_LINE_VECTORS)
    keys, vectors = table.unsaved(everything) if table is not None else ([], None)
    if keys:
        connection.execute("INSERT INTO line_vectors (model, keys, vectors) VALUES (?, ?, ?)",
                           (table.model, b"".join(keys), vectors.tobytes()))
    return keys


def read_bank(path: str | Path, embedding_dim: int | None, line_model: str | None = None,
              line_dim: int | None = None) -> tuple[LoadedBank, SavePoint | None]:
    """The bank at ``path`` in either format, decided by the file (:func:`is_bank_db`), fully validated, and
    its save point when it is a database: the one reader every command and ``MemoryStore.load`` open banks with.
    ``embedding_dim`` None: the file's own (every node must have it). ``line_model``, ``line_dim``: the embedder's
    name and dimension, to read a database's line vectors of that model (:func:`read_bank_db`)."""
    if is_bank_db(path):
        return read_bank_db(path, embedding_dim, line_model, line_dim)
    return load_bank(path, embedding_dim), None


def bank_db_size(path: Path) -> tuple[int, int] | None:
    """(nodes, entries) of the bank database at ``path``; ``None`` when there is none or it is no bank."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        with closing(sqlite3.connect(path)) as connection:
            return (connection.execute("SELECT COUNT(*) FROM nodes").fetchone()[0],
                    connection.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
    except sqlite3.Error:
        return None
