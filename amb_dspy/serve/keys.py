"""Keys for ``amb serve --http``: who may call the server, and which long-term namespaces each caller reaches.

A key is a random token of 256 bits (``secrets.token_urlsafe(32)``) shown once, when it is made; the store
keeps only its SHA-256. A slow, salted hash (bcrypt, scrypt) protects secrets people choose, which are few
enough to guess; a 256-bit random token cannot be guessed whatever the hash, so one SHA-256 is as safe and
lets a request's key be found by its hash alone, at once, on every call (a revoked key fails the next call).

:class:`KeyStore` is the interface the server and ``amb keys`` use; :func:`open_key_store` chooses the store
for both: :class:`SqliteKeyStore`, kept in ``STORAGE_DIR/keys.sqlite``, where every change is one SQLite
transaction, so any number of ``amb keys create`` at once each add their key and lose none; or, with
``AMB_DATABASE_URL`` / ``--database URL``, :class:`PostgresKeyStore`, shared by
every replica of the server.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from amb_dspy.errors import InputError, UserError

KEYS_FILE = "keys.sqlite"
KEY_PREFIX = "amb_"  # says what a token is when it turns up in a config file or a log
MAX_NAME_CHARS = 200  # a namespace or a label, as the memory tools bound a namespace
BUSY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ApiKey:
    """What the store knows of a key: never the key itself. ``namespaces``: the long-term namespaces it
    reaches, the first being the one a call that names none works in."""

    key_id: str
    label: str
    namespaces: tuple[str, ...]
    created: str  # ISO 8601, UTC


class KeyStore(Protocol):
    """The keys of one server: made, listed, revoked, and a presented token checked. ``where`` names the store
    for a user (a file, or a database URL with its password hidden)."""

    where: str

    def create(self, namespaces: Sequence[str], label: str = "") -> tuple[ApiKey, str]:
        """A new key for ``namespaces``: what is kept of it, and the token (shown once, kept nowhere)."""

    def list(self) -> list[ApiKey]:
        """Every key not revoked, oldest first."""

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` (InputError when there is no such key); every later call with it fails."""

    def verify(self, token: str) -> ApiKey | None:
        """The key ``token`` is, unless it is unknown or revoked."""


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def key_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def checked_names(namespaces: Sequence[str], label: str) -> tuple[tuple[str, ...], str]:
    """``namespaces`` (at least one, each 1 to 200 characters, no repeats, order kept) and ``label``, or
    InputError naming what is wrong."""
    if not namespaces:
        raise InputError("a key needs at least one namespace: --namespace NS")
    for name in [*namespaces, label]:
        if len(name) > MAX_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise InputError(f"{name[:40]!r}...: at most {MAX_NAME_CHARS} characters, no control characters")
    if not all(n.strip() for n in namespaces):
        raise InputError("a namespace is empty")
    return tuple(dict.fromkeys(namespaces)), label


class SqliteKeyStore:
    """The keys in one SQLite file (owner-only, mode 0600); see the module docstring."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.where = str(self.path)

    @classmethod
    def in_folder(cls, storage_dir: str | Path) -> SqliteKeyStore:
        return cls(Path(storage_dir).expanduser() / KEYS_FILE)

    @contextmanager
    def _connection(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction (``write``: taken at once, so concurrent writers queue instead of failing)."""
        if write and not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))  # an empty file is an empty database
        try:
            with closing(sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)) as db:
                db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    if write:
                        db.execute("CREATE TABLE IF NOT EXISTS keys (key_id TEXT PRIMARY KEY, hash TEXT NOT NULL "
                                   "UNIQUE, label TEXT NOT NULL, namespaces TEXT NOT NULL, created TEXT NOT NULL, "
                                   "revoked TEXT)")
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        except sqlite3.DatabaseError as exc:
            raise UserError(f"the key store {self.path}: {exc}") from None

    def _rows(self, where: str, *values: str) -> list[ApiKey]:
        if not self.path.exists():
            return []
        with self._connection(write=False) as db:
            if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'keys'").fetchone():
                return []
            rows = db.execute(f"SELECT key_id, label, namespaces, created FROM keys WHERE revoked IS NULL {where} "
                              "ORDER BY created, key_id", values).fetchall()
        return [ApiKey(key_id, label, tuple(json.loads(namespaces)), created)
                for key_id, label, namespaces, created in rows]

    def create(self, namespaces: Sequence[str], label: str = "") -> tuple[ApiKey, str]:
        names, label = checked_names(namespaces, label)
        token = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(secrets.token_hex(6), label, names, _utc_now())
        with self._connection(write=True) as db:
            db.execute("INSERT INTO keys (key_id, hash, label, namespaces, created) VALUES (?, ?, ?, ?, ?)",
                       (key.key_id, key_hash(token), label, json.dumps(names), key.created))
        return key, token

    def list(self) -> list[ApiKey]:
        return self._rows("")

    def revoke(self, key_id: str) -> ApiKey:
        with self._connection(write=True) as db:
            row = db.execute("SELECT label, namespaces, created FROM keys WHERE key_id = ? AND revoked IS NULL",
                             (key_id,)).fetchone()
            if row is None:
                raise InputError(f"no key {key_id!r} (amb keys list shows the keys)")
            db.execute("UPDATE keys SET revoked = ? WHERE key_id = ?", (_utc_now(), key_id))
        return ApiKey(key_id, row[0], tuple(json.loads(row[1])), row[2])

    def verify(self, token: str) -> ApiKey | None:
        found = self._rows("AND hash = ?", key_hash(token))
        return found[0] if found else None


KEYS_COMPONENT = "keys"
KEYS_SCHEMA = [  # one entry per version; append, never edit (storage/postgres.py migrates a database forward)
    "CREATE TABLE amb_keys (key_id TEXT PRIMARY KEY, hash TEXT NOT NULL UNIQUE, label TEXT NOT NULL, "
    "namespaces JSONB NOT NULL, created TEXT NOT NULL, revoked TEXT)",
]
_PG_COLUMNS = "key_id, label, namespaces, created"


def _pg_key(row: tuple) -> ApiKey:
    key_id, label, namespaces, created = row
    return ApiKey(key_id, label, tuple(namespaces), created)


class PostgresKeyStore:
    """The keys in PostgreSQL (``AMB_DATABASE_URL``, ``--database URL``), shared by every replica of the server and
    every ``amb keys`` on any machine; ``where`` names the database, password hidden.

    Nothing is cached: a key made on one machine is accepted by every replica on its next call, and a revoked one
    refused on its next call (one indexed lookup by hash). The table is the component ``keys`` of
    :func:`~amb_dspy.storage.postgres.migrate`: made on first use; a database of a newer schema is refused in one line.
    """

    def __init__(self, url: str):
        from amb_dspy.storage.postgres import shown

        self.url = url
        self.where = shown(url)

    def _ready(self) -> str:
        from amb_dspy.storage.postgres import migrate

        migrate(self.url, KEYS_COMPONENT, KEYS_SCHEMA)  # once per process; DatabaseError (one line) on a newer schema
        return self.url

    def _transaction(self) -> AbstractContextManager:
        """One transaction on the database, its keys table made first (once per process)."""
        from amb_dspy.storage.postgres import transaction

        return transaction(self._ready())

    def create(self, namespaces: Sequence[str], label: str = "") -> tuple[ApiKey, str]:
        names, label = checked_names(namespaces, label)
        token = KEY_PREFIX + secrets.token_urlsafe(32)
        key = ApiKey(secrets.token_hex(6), label, names, _utc_now())
        with self._transaction() as connection:
            connection.execute("INSERT INTO amb_keys (key_id, hash, label, namespaces, created) "
                               "VALUES (%s, %s, %s, %s, %s)",
                               (key.key_id, key_hash(token), label, json.dumps(names), key.created))
        return key, token

    def list(self) -> list[ApiKey]:
        with self._transaction() as connection:
            rows = connection.execute(f"SELECT {_PG_COLUMNS} FROM amb_keys WHERE revoked IS NULL "
                                      "ORDER BY created, key_id").fetchall()
        return [_pg_key(row) for row in rows]

    def revoke(self, key_id: str) -> ApiKey:
        with self._transaction() as connection:
            row = connection.execute(f"UPDATE amb_keys SET revoked = %s WHERE key_id = %s AND revoked IS NULL "
                                     f"RETURNING {_PG_COLUMNS}", (_utc_now(), key_id)).fetchone()
        if row is None:
            raise InputError(f"no key {key_id!r} (amb keys list shows the keys)")
        return _pg_key(row)

    def verify(self, token: str) -> ApiKey | None:
        with self._transaction() as connection:
            row = connection.execute(f"SELECT {_PG_COLUMNS} FROM amb_keys WHERE hash = %s AND revoked IS NULL",
                                     (key_hash(token),)).fetchone()
        return _pg_key(row) if row else None


def open_key_store(config_or_url: Any, storage_dir: str | Path) -> KeyStore:
    """The key store ``amb keys`` and ``amb serve`` use: PostgreSQL when ``config_or_url`` is a database URL
    (``--database URL``) or a configuration whose ``database_url`` is set (``AMB_DATABASE_URL``), else
    ``storage_dir/keys.sqlite``. InputError (one line) when the URL given is not a PostgreSQL one."""
    from amb_dspy.storage.postgres import is_database_url

    paths = getattr(config_or_url, "paths", None)
    url = (paths.database_url if paths is not None else config_or_url or "").strip()
    if not url:
        return SqliteKeyStore.in_folder(storage_dir)
    if not is_database_url(url):
        raise InputError(f"database {url[:80]!r}: give a PostgreSQL URL, postgresql://user@host:port/database")
    return PostgresKeyStore(url)
