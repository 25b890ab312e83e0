"""What an embedded long-term store records beside itself: how many items it holds, and its writers' lock.

A damaged embedded store must not reopen as an empty one (a Qdrant folder missing half its files, a
Chroma folder missing ``chroma.sqlite3``, a SQLite file cut to 0 bytes): the next write would succeed
and the loss would go unnoticed. So every change of an embedded store ends by writing its item count
to a small JSON file beside it (``<store>.ledger.json``, replaced atomically), and opening the store
compares: fewer items than recorded, or the store's own files gone while the ledger names items, is
refused with one line saying what is missing and how to recover.

The same ledger holds an advisory lock (``<store>.ledger.lock``, ``fcntl.flock``) that a write takes
around its merge check and its insert, so two processes writing the same fact make one item, not two;
a process that waits longer than ``timeout_s`` gets one line naming the process that holds the lock.
A store that one process may open at a time (Qdrant's local mode) is held with :meth:`Ledger.own`
(``<store>.owner``) for as long as it is open.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from amb_dspy.files import write_atomically
from amb_dspy.longterm.errors import StoreUnavailableError

try:
    import fcntl
except ImportError:  # Windows: no advisory lock; writers rely on the backend's own
    fcntl = None  # type: ignore[assignment]

LOCK_TIMEOUT_S = 30.0
_POLL_S = 0.05


RECOVERY_HINT = ("restore it from a backup or from your last `amb memory export` (its audit log lists every "
                 "write), or move it aside to start an empty store")


class Ledger:
    """The item count and writers' lock of the store at ``store_path`` (a file or a folder)."""

    def __init__(self, store_path: str | Path, *, timeout_s: float = LOCK_TIMEOUT_S):
        self.store_path = Path(store_path)
        self.path = self.store_path.with_name(self.store_path.name + ".ledger.json")
        self.lock_path = self.store_path.with_name(self.store_path.name + ".ledger.lock")
        self.owner_path = self.store_path.with_name(self.store_path.name + ".owner")
        self.timeout_s = timeout_s
        self._depth = 0
        self._handle = None

    def recorded(self) -> int:
        """The item count the last change recorded (0 when there is no ledger or it cannot be read)."""
        try:
            return int(json.loads(self.path.read_text(encoding="utf-8"))["items"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def refuse(self, what: str) -> StoreUnavailableError:
        return StoreUnavailableError(f"long-term store {self.store_path}: {what}; {RECOVERY_HINT}")

    def check_files(self, *needed: Path) -> None:
        """Refuse before opening when the ledger names items but one of the store's ``needed`` files is gone
        (opening would create an empty store in its place)."""
        recorded = self.recorded()
        missing = [p for p in needed if not p.exists()]
        if recorded and missing:
            names = ", ".join(p.name if p == self.store_path or not p.is_relative_to(self.store_path)
                              else str(p.relative_to(self.store_path)) for p in missing)
            raise self.refuse(f"{names} is missing, but the store recorded {recorded} item(s)")

    def check_count(self, count: int) -> None:
        """Refuse an opened store that holds fewer items than its ledger recorded."""
        recorded = self.recorded()
        if count < recorded:
            raise self.refuse(f"holds {count} item(s), but recorded {recorded}: files are missing or damaged")

    def record(self, count: int) -> None:
        write_atomically(self.path, json.dumps({"items": count, "at": time.time()}) + "\n")

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the writers' lock (re-entrant within this ledger) for a merge check and its change."""
        if fcntl is None or self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        release = self._acquire(self.lock_path, self.timeout_s, "has been writing it")
        self._depth = 1
        try:
            yield
        finally:
            self._depth = 0
            release()

    def own(self, timeout_s: float, advice: str) -> Callable[[], None]:
        """Hold the store for this process alone (a store that one process may open at a time) until the
        returned function is called; after ``timeout_s`` of waiting, one line naming the holder and ``advice``."""
        if fcntl is None:
            return lambda: None
        return self._acquire(self.owner_path, timeout_s, f"has it open ({advice})")

    def _acquire(self, path: Path, timeout_s: float, busy: str) -> Callable[[], None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until released
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    handle.close()
                    raise StoreUnavailableError(f"long-term store {self.store_path}: {holder} {busy}; waited "
                                                f"{timeout_s:g} s, try again when it is done") from None
                time.sleep(_POLL_S)
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} ({' '.join(sys.argv)[:100]})")
        handle.flush()

        def release() -> None:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

        return release
