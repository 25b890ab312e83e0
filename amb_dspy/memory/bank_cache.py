"""Banks opened once per process: what every task on the same version of a bank shares.

A task started on a bank (``memory_start_task(bank=...)``, ``MemoryBank.start_session(bank=...)``) reads the bank
file and lays out its lines for the evidence view: 0.3 s and 0.5 s on a 215k-token bank, each time, for every task
(issue 40). Here a bank version is read once per process (:class:`BankCache`) and kept as a store no one changes;
each task gets a store *lent* from it (:meth:`~amb_dspy.memory.graph_ops.MemoryStore.lent`: copy-on-write; the
task's first change copies the graph, the tree and the node index, so its additions stay its own and never reach
the shared store). What a reader builds over the bank's content once, the evidence view's layout of the lines with
their indexes and tables (:class:`~amb_dspy.memory.view.line_index.LineIndex`), is kept beside the shared store
(:func:`shared_layout`) and taken over by each task's view, which copies it before the task's first change too.

A bank version is the bank database's save id (every save writes a new one, so a task started after a save reads
the new version, which gets its own entry when a task first asks for it), or a JSON bank file's content
fingerprint (BLAKE2b of its bytes, worked out again only when the file's size, time or inode changed). The cache
keeps the ``AMB_BANK_CACHE`` most recently used versions (default 4; 0: none, every task reads its bank file as
before); an entry dropped from it lives on in the tasks that still read it, and goes with the last of them.
"""

from __future__ import annotations

import gc
import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding_base import Embedder, embedding_model_name
from amb_dspy.storage.bank_place import BankPlace, FileBank, bank_at
from amb_dspy.storage.insight_doc import InsightDoc

DEFAULT_SIZE = 4  # bank versions kept (AMB_BANK_CACHE)
_CHUNK = 1 << 20


@dataclass
class _Entry:
    """One bank version once read: its store (changed by no one) and the notices its reading gave."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    store: MemoryStore | None = None
    notices: tuple[str, ...] = ()


class BankCache:
    """The stores of the ``size`` most recently used bank versions, each read once and lent to every task on it."""

    def __init__(self, size: int = DEFAULT_SIZE):
        self.size = size
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._fingerprints: dict[Path, tuple[tuple[int, int, int], str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def store_for_task(self, where, embedder: Embedder, insight_doc: InsightDoc | None,
                       notices: list[str]) -> MemoryStore:
        """A task's store on the bank at ``where`` (a path, or a :class:`~amb_dspy.storage.bank_place.BankPlace`:
        a file or a named bank in PostgreSQL): lent from the shared store of its current version (read now when no
        task read it before), with the notices reading it gave added to ``notices``; BankFileError (nothing kept)
        when the bank is bad or missing."""
        place = bank_at(where)
        if isinstance(place, FileBank):
            place = FileBank(place.path.resolve())  # one entry for every path that leads to the file
        return self.lend((repr(place), self.version(place)), embedder, insight_doc, notices,
                         lambda said: MemoryStore.load_for_task(place, embedder, None, notices=said))

    def lend(self, bank: tuple, embedder: Embedder, insight_doc: InsightDoc | None, notices: list[str],
             load: Callable[[list[str]], MemoryStore]) -> MemoryStore:
        """A store lent from the shared store of ``bank`` (where it is, its version), which ``load(notices)``
        reads when it is not kept: the entry point for a bank kept elsewhere than in a file."""
        if self.size <= 0:  # read for this task alone, as it is
            store = load(notices)
            store.set_insight_doc(insight_doc)
            return store
        key = (*bank, embedding_model_name(embedder), embedder.dim)
        entry = self._entry(key)
        with entry.lock:  # two tasks starting on one bank at once read it once
            if entry.store is None:
                said: list[str] = []
                try:
                    with collection_paused():
                        entry.store, entry.notices = load(said), tuple(said)
                except BaseException:
                    self._drop(key, entry)
                    raise
        notices.extend(entry.notices)
        return entry.store.lent(insight_doc, embedder)

    def _entry(self, key: tuple) -> _Entry:
        """The entry of ``key``, made when missing, now the most recently used; the least recently used dropped
        beyond ``size``."""
        with self._lock:
            entry = self._entries.pop(key, None) or _Entry()
            self._entries[key] = entry
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return entry

    def _drop(self, key: tuple, entry: _Entry) -> None:
        """Forget ``key``'s entry (a bank that could not be read keeps no place)."""
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]

    def version(self, place: BankPlace) -> str:
        """The bank's version: a bank database's save id (a file's or PostgreSQL's), a JSON file's content
        fingerprint ("" for no file: its reading then fails with the file's own error)."""
        if place.grows:
            return f"save {place.saved_id()}"
        path = place.path
        try:
            stat = path.stat()
        except OSError:
            return ""
        seen = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        known = self._fingerprints.get(path)
        if known is None or known[0] != seen:
            known = self._fingerprints[path] = (seen, f"blake2b {_fingerprint(path)}")
        return known[1]


def _fingerprint(path: Path) -> str:
    """BLAKE2b of the file's bytes ("" when it cannot be read)."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return ""
    return digest.hexdigest()


_shared = BankCache()


def shared_banks(size: int = DEFAULT_SIZE) -> BankCache:
    """The process's cache, keeping ``size`` bank versions from now on (the task's ``AMB_BANK_CACHE``)."""
    _shared.size = size
    return _shared


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a bank version is read or its lines laid out: hundreds of
    thousands of dicts, lists and models, none in a cycle, whose making sets off full collections over the whole
    heap (a third of the time of each at a million tokens). Reference counting frees what it always frees; the
    collector runs again after (a thread that collects meanwhile finds it off: it collects a moment later)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --- what readers build over a shared store ------------------------------------------------------------------
_layouts: weakref.WeakKeyDictionary[MemoryStore, tuple[threading.Lock, dict]] = weakref.WeakKeyDictionary()
_layouts_lock = threading.Lock()


def shared_layout(store: MemoryStore, key: Any, build: Callable[[], Any]) -> Any:
    """What ``build()`` makes over ``store`` (a store that lends, so never changed), made once per ``key``, by the
    first reader that asks (the others wait for it), and kept as long as the store is."""
    with _layouts_lock:
        lock, built = _layouts.setdefault(store, (threading.Lock(), {}))
    with lock:
        if key not in built:
            built[key] = build()
        return built[key]
