"""Where a bank lives: a file (a JSON bank file or a SQLite bank database) or a named bank in a PostgreSQL database.

One seam for every reader and writer of banks (``MemoryStore.load`` and ``export``, :class:`BankWriter`, the
server's task store): they ask :func:`bank_at` for the place and call its methods, rather than asking what kind
of place it is. A place is a small value, compared by what it names:

* :class:`FileBank` (``bank_at(path)``): the file at a path; ``grows`` when it is a bank database
  (:mod:`amb_dspy.storage.bank_db`), a JSON bank file otherwise (:mod:`amb_dspy.storage.bank_file`, written
  whole at each export, no save points);
* :class:`~amb_dspy.storage.bank_pg.DatabaseBank` (``bank_at(DatabaseBank(url, name))``): a named bank in
  PostgreSQL (:mod:`amb_dspy.storage.bank_pg`), which always grows.

Both have ``read`` (the bank and its save point), ``write`` (a bank database's save: what changed since the save
point, or everything), ``saved_id``, ``holds_no_bank``, ``exists``, ``lock`` (the bank's write lock,
:class:`~amb_dspy.storage.bank_lock.BankLock`) and ``keep_line_layout`` (a layout of the evidence view's lines kept
for the save it was built on, :mod:`amb_dspy.storage.bank_rows`) and ``held_open`` (what a writer adding many
documents holds open between its saves).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from amb_dspy.notices import Notify, notice
from amb_dspy.storage import bank_db
from amb_dspy.storage.bank_db_connections import kept_open
from amb_dspy.storage.bank_file import LoadedBank, load_bank
from amb_dspy.storage.bank_lock import BankLock, bank_lock
from amb_dspy.storage.bank_rows import BankParts, SavePoint

__all__ = ["BankPlace", "FileBank", "bank_at"]


class BankPlace(Protocol):
    """Where a bank lives (see the module docstring)."""

    grows: bool  # a bank database: saves write what changed since the store's save point; many writers commit

    def read(self, embedding_dim: int | None, line_model: str | None = None,
             line_dim: int | None = None) -> tuple[LoadedBank, SavePoint | None]: ...

    def write(self, bank: BankParts, since: SavePoint | None = None, changed: Collection[str] = (),
              notify: Notify = notice, also: Callable[[Any], None] | None = None) -> SavePoint: ...

    def saved_id(self) -> str | None: ...

    def holds_no_bank(self) -> bool: ...

    def exists(self) -> bool: ...

    def lock(self) -> BankLock: ...

    def keep_line_layout(self, save_id: str, key: str, body: bytes) -> bool: ...

    def held_open(self) -> AbstractContextManager: ...


@dataclass(frozen=True)
class FileBank:
    """The bank file at ``path`` (see the module docstring)."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)

    @property
    def grows(self) -> bool:
        return bank_db.is_bank_db(self.path)

    def read(self, embedding_dim: int | None, line_model: str | None = None,
             line_dim: int | None = None) -> tuple[LoadedBank, SavePoint | None]:
        """The bank in either format, fully validated (:func:`~amb_dspy.storage.bank_db.read_bank`)."""
        if self.grows:
            return bank_db.read_bank_db(self.path, embedding_dim, line_model, line_dim)
        return load_bank(self.path, embedding_dim), None

    def write(self, bank: BankParts, since: SavePoint | None = None, changed: Collection[str] = (),
              notify: Notify = notice, also: Callable[[Any], None] | None = None) -> SavePoint:
        """A bank database's save (:func:`~amb_dspy.storage.bank_db.write_bank_db`)."""
        return bank_db.write_bank_db(self.path, bank, since, changed, notify, also)

    def saved_id(self) -> str | None:
        return bank_db.saved_id(self.path)

    def holds_no_bank(self) -> bool:
        return bank_db.holds_no_bank(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def lock(self) -> BankLock:
        return bank_lock(self.path)

    def held_open(self) -> AbstractContextManager:
        """Inside, this thread's saves of a bank database go through one connection, opened once (a writer's
        add: :func:`~amb_dspy.storage.bank_db_connections.kept_open`)."""
        return kept_open(self.path)

    def keep_line_layout(self, save_id: str, key: str, body: bytes) -> bool:
        """False: a bank file is left as its readers found it, byte for byte (a user's file, copied, compared,
        perhaps read-only); a layout reaches a bank database with a save given one (``line_layouts``)."""
        return False


def bank_at(where: str | Path | BankPlace) -> BankPlace:
    """The place ``where`` names: a path is a :class:`FileBank`; a place is itself."""
    if isinstance(where, (str, Path)):
        return FileBank(Path(where))
    return where
