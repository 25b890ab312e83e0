"""Where a bank a user names lives: one rule for every door (``amb ingest --bank``, ``amb run --bank``,
``amb show``, ``MemoryBank.run(bank=...)``, the MCP server's ``memory_start_task(bank=...)``).

Light on purpose: ``amb show`` resolves a name without loading DSPy.
"""

from __future__ import annotations

import os
from pathlib import Path

from amb_dspy.storage.bank_db import DB_SUFFIXES

__all__ = ["BANKS_FOLDER", "bank_path", "bank_place", "database_bank", "is_bank_name", "named_bank"]

BANKS_FOLDER = "banks"  # under STORAGE_DIR: where a bank named without a folder lives (the MCP server reads there)


def bank_path(bank: str | Path, storage_dir: Path) -> Path:
    """Where the bank ``bank`` lives, for every command that names one (``amb ingest --bank``, ``amb run
    --bank``, ``amb show``, ``MemoryBank.run(bank=...)``): a path with a folder is itself, and so is a name
    without one that is a file here; any other name (``notes``, ``notes.json``) is a file in
    ``STORAGE_DIR/banks/`` (:func:`named_bank`), where ``memory_start_task(bank="notes")`` finds it."""
    bank = str(bank)
    if is_bank_name(bank) and not Path(bank).is_file():
        return named_bank(bank, storage_dir)
    return Path(bank).expanduser()


def bank_place(bank, storage_dir: Path, database_url: str = ""):
    """Where the bank ``bank`` lives, with a PostgreSQL database configured (``database_url``, ``AMB_DATABASE_URL``
    or ``--database``): a name without a folder that is no file here is the bank of that name in the database
    (:class:`~amb_dspy.storage.bank_pg.DatabaseBank`); anything else is :func:`bank_path`'s file. A place already
    resolved (a ``DatabaseBank``) is itself."""
    if not isinstance(bank, (str, Path)):
        return bank
    if database_url and is_bank_name(str(bank)) and not Path(bank).is_file():
        from amb_dspy.storage.bank_pg import DatabaseBank

        return DatabaseBank(database_url, str(bank))
    return bank_path(bank, storage_dir)


def database_bank(database_url: str, name: str):
    """The bank ``name`` in the database, which must hold it (InputError, one line, when it does not)."""
    from amb_dspy.errors import InputError
    from amb_dspy.storage.bank_pg import DatabaseBank

    bank = DatabaseBank(database_url, name)
    if not bank.exists():
        raise InputError(f"no {bank}: add documents to it with amb ingest --database URL --bank {name}")
    return bank


def named_bank(name: str, storage_dir: Path) -> Path:
    """The file of the bank called ``name`` in ``STORAGE_DIR/banks/``: ``notes.json`` or ``notes.sqlite`` as
    named; ``notes`` the one of that name already there (the bank database first), else a new bank database,
    since a bank that grows document by document must not be rewritten whole at every add."""
    folder = Path(storage_dir).expanduser() / BANKS_FOLDER
    if Path(name).suffix:
        return folder / name
    existing = [folder / f"{name}{suffix}" for suffix in DB_SUFFIXES + (".json",)]
    return next((path for path in existing if path.is_file()), folder / f"{name}.sqlite")


def is_bank_name(bank: str) -> bool:
    """Whether ``bank`` names a bank without a folder (``notes``, ``notes.json``), not a path."""
    return not ("/" in bank or os.sep in bank or Path(bank).expanduser().is_absolute() or bank.startswith("~"))
