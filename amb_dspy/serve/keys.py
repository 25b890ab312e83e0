"""Keys for ``amb serve --http``: who may call the server, and which long-term namespaces each caller reaches.

A key is a random token of 256 bits (``secrets.token_urlsafe(32)``) shown once, when it is made; the store
keeps only its SHA-256. A slow, salted hash (bcrypt, scrypt) protects secrets people choose, which are few
enough to guess; a 256-bit random token cannot be guessed whatever the hash, so one SHA-256 is as safe and
lets a request's key be found by its hash alone, at once, on every call (a revoked key fails the next call).

:class:`KeyStore` is the interface the server and ``amb keys`` use (a PostgreSQL store can stand behind
it); :class:`SqliteKeyStore` is the one kept in ``STORAGE_DIR/keys.sqlite``, where every change is one
SQLite transaction, so any number of ``amb keys create`` at once each add their key and lose none.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

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
    """The keys of one server: made, listed, revoked, and a presented token checked."""

    def create(self, namespaces: Sequence[str], label: str = "") -> tuple[ApiKey, str]:
        """A new key for ``namespaces``: what is kept of it, and the token (shown once, kept nowhere)."""

    def list(self) -> list[ApiKey]:
        """Every key not revoked, oldest first."""

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` (InputError when there is no such key); every later call with it fails."""

    def verify(self, token: str) -> ApiKey | None:
        """The key ``token`` is, unless it is unknown or revoked."""


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
        key = ApiKey(secrets.token_hex(6), label, names,
                     datetime.now(timezone.utc).isoformat(timespec="seconds"))
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
            db.execute("UPDATE keys SET revoked = ? WHERE key_id = ?",
                       (datetime.now(timezone.utc).isoformat(timespec="seconds"), key_id))
        return ApiKey(key_id, row[0], tuple(json.loads(row[1])), row[2])

    def verify(self, token: str) -> ApiKey | None:
        found = self._rows("AND hash = ?", key_hash(token))
        return found[0] if found else None
