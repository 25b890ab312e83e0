"""Who may write a bank now: one writer at a time, across processes and threads.

:class:`BankLock` is the interface every writer of a bank goes through (``amb ingest``, ``MemoryBank.add_documents``,
a task's export to a bank database): :func:`bank_lock` gives the one for a bank file. Today that is
:class:`FileBankLock`, an exclusive ``flock`` on a file beside the bank (``BANK.lock``); a bank kept elsewhere (a
PostgreSQL advisory lock, say) is another class behind the same two methods.

Why a lock file beside the bank rather than the bank itself: a new bank database is written under a temporary
name and renamed into place, and a JSON bank is replaced by a rename at every save, so the bank's own file (its
inode) changes under a writer; the lock file never does, and it is never deleted (two writers could each lock a
different one). Why ``flock``: the kernel lets go of it when its process ends, ``kill -9`` included, so a crashed
writer never leaves a bank locked; it is not SQLite's own (``fcntl``) lock, so the two never meet.

In one process the lock is held once per bank and re-entered by the thread holding it (a commit that saves
through :func:`~amb_dspy.storage.bank_db.write_bank_db`, which locks too); other threads wait as other
processes do.
"""

from __future__ import annotations

import fcntl
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from amb_dspy.files import PRIVATE_MODE

LOCK_SUFFIX = ".lock"


class BankLock(Protocol):
    """A bank's write lock: at most one holder at a time, re-entered by the thread that holds it."""

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock; ``wait``: until it is free, else give up at once. Whether it was taken."""

    def release(self) -> None:
        """Let the lock go (once per ``acquire`` that took it)."""

    def __enter__(self) -> BankLock:
        """``acquire()``, waiting."""

    def __exit__(self, *exc: object) -> None:
        """``release()``."""


@dataclass
class _Held:
    """One lock's state in this process: its thread lock, what holds it across processes while it is held (an open
    lock file, a database connection), which thread holds it and how deep."""

    threads: threading.RLock = field(default_factory=threading.RLock)
    handle: Any = None
    holder: int | None = None
    depth: int = 0


_HELD: dict[tuple, _Held] = {}
_HELD_GUARD = threading.Lock()


class HeldOnce(ABC):
    """A :class:`BankLock` held once per process and re-entered by the thread holding it (other threads wait as
    other processes do): the one place that keeps a lock's depth. A subclass says how the lock is taken across
    processes (:meth:`_take`, giving a handle, or None when another holds it and ``wait`` is False) and let go
    (:meth:`_let_go`). ``key``: one state per key in the process."""

    def __init__(self, key: tuple):
        with _HELD_GUARD:
            self._held = _HELD.setdefault(key, _Held())

    @abstractmethod
    def _take(self, wait: bool) -> Any:
        """What holds the lock across processes; None when another holds it and ``wait`` is False."""

    @abstractmethod
    def _let_go(self, handle: Any) -> None:
        """Let go of the lock ``handle`` holds."""

    def held_here(self) -> Any:
        """The handle when the calling thread holds the lock; None otherwise."""
        held = self._held
        return held.handle if held.holder == threading.get_ident() else None

    def acquire(self, wait: bool = True) -> bool:
        held = self._held
        if not held.threads.acquire(blocking=wait):
            return False
        if held.depth == 0:
            try:
                held.handle = self._take(wait)
            except BaseException:
                held.threads.release()
                raise
            if held.handle is None:
                held.threads.release()
                return False
            held.holder = threading.get_ident()
        held.depth += 1
        return True

    def release(self) -> None:
        held = self._held
        held.depth -= 1
        try:
            if held.depth == 0 and held.handle is not None:
                handle, held.handle, held.holder = held.handle, None, None
                self._let_go(handle)
        finally:
            held.threads.release()

    def __enter__(self) -> HeldOnce:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class FileBankLock(HeldOnce):
    """:class:`BankLock` as an exclusive ``flock`` on ``BANK.lock`` (see the module docstring)."""

    def __init__(self, bank: str | Path):
        bank = Path(bank).expanduser().resolve()  # one lock for every path that leads to the bank
        self.path = bank.with_name(bank.name + LOCK_SUFFIX)
        super().__init__(("file", self.path))

    def _take(self, wait: bool) -> int | None:
        return self._lock_file(wait)

    def _let_go(self, handle: int) -> None:
        os.close(handle)  # closing the only descriptor lets the flock go

    def _lock_file(self, wait: bool) -> int | None:
        """The lock file, open and flocked; None when another holds it and ``wait`` is False."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd


def bank_lock(bank: str | Path) -> BankLock:
    """The write lock of the bank at ``bank`` (a path; see the module docstring)."""
    return FileBankLock(bank)
