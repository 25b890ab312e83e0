"""The server's open tasks: one :class:`~amb_dspy.task.session.TaskSession` each, idle ones exported and closed.

Every task is its own bank (its own store, tree, indexes and tool cache); only the bank's agents, LMs
and embedding model are shared, and they are safe to share across threads (the embedding model guards
itself, agents keep no per-call state, each thread sets its LM with ``dspy.context``). A task serves
one request at a time (on its session's own thread), tasks run at once.

With a :class:`~amb_dspy.serve.task_store.TaskStore` every task is also kept there as it changes: a task this
process does not hold (the server restarted, or another replica on the same PostgreSQL database started it or
changed it since) is reopened from the store on first use, and one closed says where
its bank is, across restarts. A task started with an ``owner`` (an API key's id) is reached by that owner only:
to anyone else it is "no open task", as if it did not exist.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from amb_dspy.errors import InputError, one_line
from amb_dspy.serve.task_store import TaskStore
from amb_dspy.task.session import TaskSession

logger = logging.getLogger("amb_dspy.serve")

DEFAULT_IDLE_S = 1800.0
DEFAULT_MAX_TASKS = 256
REOPEN_STRIPES = 64


class TaskRegistry:
    """Open tasks by id. ``start_session(goal, bank=, namespace=)`` makes a session (``MemoryBank.start_session``);
    a task unused for ``idle_s`` seconds is exported under ``export_dir`` and closed by :meth:`expire_idle`,
    which a daemon thread calls every ``min(idle_s / 4, 30)`` seconds once :meth:`start_reaper` is called.
    ``store``: where tasks are kept across restarts (none: in this process only)."""

    def __init__(self, start_session: Callable[..., TaskSession], *, export_dir: Path,
                 idle_s: float = DEFAULT_IDLE_S, max_tasks: int = DEFAULT_MAX_TASKS,
                 clock: Callable[[], float] = time.monotonic, store: TaskStore | None = None):
        self._start_session = start_session
        self.export_dir = Path(export_dir)
        self.idle_s, self.max_tasks, self.clock, self.store = idle_s, max_tasks, clock, store
        self._tasks: dict[str, TaskSession] = {}
        self._used: dict[str, float] = {}
        self._owners: dict[str, str | None] = {}
        self._expired: dict[str, str] = {}  # task id -> the line saying where its bank was exported
        self._lock = threading.Lock()
        # never two sessions on one task; a task being reopened (its bank read back from the store) holds up the
        # calls on the few task ids that share its stripe only, not every call that needs a task reopened
        self._reopening = tuple(threading.Lock() for _ in range(REOPEN_STRIPES))
        self._stop = threading.Event()

    def start(self, goal: str, *, bank: str | Path | None = None, namespace: str | None = None,
              owner: str | None = None) -> TaskSession:
        """A new open task (``bank``: a file the tool table already checked) of ``owner``, unless ``max_tasks``
        are open; with a store, its start is committed there before it is returned."""
        with self._lock:
            self._forget_closed()
            if len(self._tasks) >= self.max_tasks:
                raise InputError(f"{len(self._tasks)} tasks are open, the server's limit: end one first")
        session = self._start_session(goal, bank=bank, namespace=namespace)
        if self.store is not None:
            self.store.create(session, bank=bank, owner=owner)
        self._hold(session, owner)
        return session

    def _hold(self, session: TaskSession, owner: str | None) -> None:
        session.owner = owner
        with self._lock:
            self._tasks[session.task_id] = session
            self._used[session.task_id] = self.clock()
            self._owners[session.task_id] = owner

    def get(self, task_id: str, owner: str | None = None) -> TaskSession:
        """The open task ``task_id`` of ``owner`` (its idle clock restarts), reopened from the store when this
        process does not hold it or holds it as it was before another process (a replica on the same database)
        changed it, or InputError saying why there is none (another owner's: as if none)."""
        session = self._held(task_id, owner)
        if session is not None and self.store is not None and not self.store.current(session):
            self._let_go(session)
            session = None
        if session is not None:
            return session
        if self.store is not None:
            with self._reopening_lock(task_id):
                session = self._held(task_id, owner)  # reopened by another request meanwhile
                if session is None:
                    session = self.store.open(task_id, owner)
                    if session is not None:
                        self._hold(session, owner)
            if session is not None:
                return session
        with self._lock:
            expired = self._expired.get(task_id) if self._owners.get(task_id, owner) == owner else None
        if expired:
            raise InputError(expired)
        raise InputError(f"no open task {task_id!r}: start one with memory_start_task")

    def _reopening_lock(self, task_id: str) -> threading.Lock:
        """The lock a reopening of ``task_id`` holds: one of :data:`REOPEN_STRIPES`, by the id's hash (a fixed
        number, so that ids a client makes up cost no memory)."""
        return self._reopening[hash(task_id) % REOPEN_STRIPES]

    def _held(self, task_id: str, owner: str | None) -> TaskSession | None:
        with self._lock:
            self._forget_closed()
            session = self._tasks.get(task_id)
            if session is None or self._owners.get(task_id) != owner:
                return None
            self._used[task_id] = self.clock()
            return session

    def _let_go(self, session: TaskSession) -> None:
        """Stop holding a session another process changed the task behind: it commits nothing more, and the task
        is reopened from the store."""
        session.keeper = None
        session.worker.close()
        with self._lock:
            if self._tasks.get(session.task_id) is session:
                del self._tasks[session.task_id], self._used[session.task_id], self._owners[session.task_id]

    def _forget_closed(self) -> None:
        """Drop the tasks their clients ended (``memory_end_task`` closes the session itself)."""
        for task_id in [i for i, session in self._tasks.items() if session.closed]:
            del self._tasks[task_id], self._used[task_id], self._owners[task_id]

    def settled(self) -> bool:
        """Whether no open task has a request running or queued (a graceful stop waits for it)."""
        with self._lock:
            return not any(session.busy for session in self._tasks.values())

    def open_ids(self) -> list[str]:
        with self._lock:
            self._forget_closed()
            return list(self._tasks)

    def expire_idle(self) -> list[str]:
        """Export and close every task idle for ``idle_s`` seconds (not one serving a request); their ids."""
        now = self.clock()
        with self._lock:
            idle = [(i, s) for i, s in self._tasks.items() if now - self._used[i] >= self.idle_s]
        expired = []
        for task_id, session in idle:
            if session.busy:
                continue  # serving a request right now: not idle after all
            try:
                path = session.export(self.export_dir / f"{task_id}.json")
                line = f"task {task_id} was closed after {self.idle_s:g} s idle; its bank is in {path}"
                if self.store is not None:
                    self.store.close(task_id, line)
                session.close(remember=False)
            except InputError:  # ended by its client meanwhile
                continue
            with self._lock:
                self._tasks.pop(task_id, None)
                self._used.pop(task_id, None)
                self._expired[task_id] = line
            expired.append(task_id)
        return expired

    def start_reaper(self) -> threading.Thread:
        interval = max(0.05, min(self.idle_s / 4, 30.0))

        def reap() -> None:
            while not self._stop.wait(interval):
                try:
                    self.expire_idle()
                except Exception as exc:  # noqa: BLE001 - a failed export is retried on the next round
                    logger.warning("idle tasks not closed: %s: %s", type(exc).__name__, one_line(exc))

        thread = threading.Thread(target=reap, name="amb-serve-reaper", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()
