"""One task's requests run one at a time, in the order they came, on the task's own thread.

A :class:`~amb_dspy.task.session.TaskSession` driven from outside (an MCP client, a LangGraph node, a
coding agent) may be called from any thread; its public methods are :func:`serial`: each is queued on
the task's :class:`TaskWorker` and waited for. Tasks do not wait for each other: each has its own thread.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from amb_dspy.errors import InputError

__all__ = ["TaskWorker", "serial"]


class TaskWorker:
    """The thread of one task (``name``: how a refusal names the task); no thread exists before the first job."""

    def __init__(self, name: str):
        self.name = name
        self.closed = False
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amb-task")
        self._on_worker = threading.local()
        self._queued = 0
        self._lock = threading.Lock()

    @property
    def on_worker(self) -> bool:
        """Whether the caller is already one of this task's jobs (a job calling another runs it inline)."""
        return getattr(self._on_worker, "value", False)

    @property
    def busy(self) -> bool:
        """Whether a job of this task is running or waiting."""
        with self._lock:
            return self._queued > 0

    def submit(self, job: Callable[[], Any]) -> Future:
        """Queue ``job`` in the caller's context (its DSPy settings); a closed task refuses it."""
        if self.closed:
            raise InputError(f"task {self.name} is closed")
        context = contextvars.copy_context()

        def run() -> Any:
            self._on_worker.value = True
            try:
                if self.closed:
                    raise InputError(f"task {self.name} is closed")
                return context.run(job)
            finally:
                with self._lock:
                    self._queued -= 1

        with self._lock:
            self._queued += 1
        try:
            return self._pool.submit(run)
        except RuntimeError:  # closed by another request meanwhile: its thread takes no more work
            with self._lock:
                self._queued -= 1
            raise InputError(f"task {self.name} is closed") from None

    def close(self) -> None:
        """Refuse every later job; the one running (the caller, when it is a job) finishes."""
        self.closed = True
        self._pool.shutdown(wait=False)


def serial(method: Callable) -> Callable:
    """Run a session's method on its task's worker, after every request before it."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self.worker.on_worker:  # already in one of this task's requests
            return method(self, *args, **kwargs)
        return self.worker.submit(functools.partial(method, self, *args, **kwargs)).result()

    return call
