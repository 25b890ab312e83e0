"""The connections a bank database's saves and save-id reads go through: one kept open while a writer adds to it.

Each save (:func:`~amb_dspy.storage.bank_db.write_bank_db`) and each look at the save id used to open a connection
and close it. Closing the last connection to a database in WAL mode checkpoints it: the pages the save put in the
write-ahead log are copied into the database file and both are flushed to disk, and the log is deleted. An ingest
that commits one document at a time paid that, and three openings, at every document (about 6 ms of the 60 ms a
passage took). Inside :func:`kept_open` this thread's saves and reads of that file go through one connection,
opened at the first and closed at the end; the commit of each save is as durable as before (``synchronous=FULL``:
the log is flushed at each COMMIT), and SQLite checkpoints the log on its own as it grows.

The connection is this thread's (SQLite connections stay in the thread that made them) and belongs to the file it
was opened on: a file replaced meanwhile (another inode at the path) gets a new connection, and a statement that
fails closes it (the next use opens another).

While it is open, nothing else in the process may open and close that file outside SQLite: POSIX lets go of every
lock a process holds on a file when any of its descriptors of the file is closed, SQLite's included, and a
connection of another process that then closes believes it is the last one, checkpoints and deletes the log the
kept connection still writes to (its later commits lost). :func:`kept_here` says which files are kept, so that
:func:`~amb_dspy.storage.bank_db.is_bank_db` does not read their first bytes; an add's reading of its documents
leaves its own bank file and log alone (:func:`~amb_dspy.memory.documents.read_documents`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

_kept = threading.local()  # .files: path -> (connection, the file's (device, inode)) or None before the first use
_inodes: dict[tuple[int, int], int] = {}  # (device, inode) of each file kept open in this process -> connections
_inodes_lock = threading.Lock()


def connect(path: Path) -> sqlite3.Connection:
    """A new connection for a save: transactions explicit (BEGIN ... COMMIT), WAL, each COMMIT flushed."""
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


@contextmanager
def kept_open(path: str | Path) -> Iterator[None]:
    """This thread's saves to the bank database at ``path`` and reads of its save id go through one connection
    inside (see the module docstring); nested, the outer one keeps it."""
    files = _files()
    key = _key(path)
    if key in files:
        yield
        return
    files[key] = None
    try:
        yield
    finally:
        _close(files.pop(key))


def kept_here(path: Path) -> bool:
    """Whether a connection to the file at ``path`` is kept open in this process (by any thread)."""
    if not _inodes:  # no add running: no need to look at the file
        return False
    identity = _identity(path)
    with _inodes_lock:
        return identity is not None and identity in _inodes


def read_only(path: Path) -> sqlite3.Connection:
    """A new connection that only reads (and never makes the file)."""
    return sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)


@contextmanager
def opened(path: Path, make: Callable[[Path], sqlite3.Connection] = connect) -> Iterator[sqlite3.Connection]:
    """A connection to the database at ``path``: the one :func:`kept_open` keeps for it when the file is there,
    else ``make(path)``, closed after."""
    files, key = _files(), _key(path)
    identity = _identity(path) if key in files else None
    if identity is None:
        with closing(make(path)) as connection:
            yield connection
        return
    held = files[key]
    if held is None or held[1] != identity:
        _close(held)
        files[key] = None
        held = files[key] = (connect(path), identity)
        with _inodes_lock:
            _inodes[identity] = _inodes.get(identity, 0) + 1
    try:
        yield held[0]
    except BaseException:
        files[key] = None
        _close(held)
        raise


def _close(held: tuple[sqlite3.Connection, tuple[int, int]] | None) -> None:
    if held is None:
        return
    held[0].close()
    with _inodes_lock:
        _inodes[held[1]] -= 1
        if not _inodes[held[1]]:
            del _inodes[held[1]]


def _files() -> dict[str, tuple[sqlite3.Connection, tuple[int, int]] | None]:
    if not hasattr(_kept, "files"):
        _kept.files = {}
    return _kept.files


def _key(path: str | Path) -> str:
    return os.path.abspath(path)


def _identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode) when it is there and not empty, else None (no connection is kept for it)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if status.st_size else None
