"""Where a bank a user names lives: one rule for every door (``amb ingest --bank``, ``amb run --bank``,
``amb show``, ``MemoryBank.run(bank=...)``, the MCP server's ``memory_start_task(bank=...)``).

Light on purpose: ``amb show`` resolves a name without loading DSPy.
"""

from __future__ import annotations

import os
from pathlib import Path

from amb_dspy.storage.bank_db import DB_SUFFIXES

__all__ = ["BANKS_FOLDER", "bank_path", "is_bank_name", "named_bank"]

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
