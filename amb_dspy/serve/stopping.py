"""A graceful stop for ``amb serve``: on SIGTERM or Ctrl-C the calls in flight finish, then the server stops.

uvicorn's own graceful shutdown ends the streamable-HTTP response streams at once, so a tool call in flight
would lose its reply (its work is kept either way: every change is committed to the task store as it
happens, :mod:`amb_dspy.serve.task_store`). Here the first signal refuses new tool calls (one line: the
server is stopping), waits for the calls running and for every task's queued work (results handed to
``memory_observe`` and not yet memory) up to ``DRAIN_S`` seconds, and only then lets the transport stop. A
second signal stops at once, as uvicorn does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from amb_dspy.errors import InputError

DRAIN_S = 60.0
STOPPING = "the server is stopping: call again once it is back (every task is kept)"


class InFlight:
    """The tool calls running now; :meth:`drain` refuses new ones and waits for these."""

    def __init__(self) -> None:
        self._running = 0
        self._changed = threading.Condition()
        self.stopping = False

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._changed:
            if self.stopping:
                raise InputError(STOPPING)
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    def drain(self, settled: Callable[[], bool], timeout: float = DRAIN_S) -> bool:
        """Refuse new calls; wait until none runs and ``settled()`` (no task has queued work); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self.stopping = True
            if not self._changed.wait_for(lambda: self._running == 0, timeout):
                return False
        while not settled():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        time.sleep(0.2)  # the last replies reach their streams before the transport closes them
        return True


def run_http(app: Any, *, host: str, port: int, log_level: str, drain: Callable[[], Any]) -> None:
    """Serve the ASGI ``app`` with uvicorn, ``drain()`` running before its shutdown on the first signal."""
    import uvicorn

    class Draining(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self.draining or self.should_exit:  # a second signal: stop now
                super().handle_exit(sig, frame)
                return
            self.draining = True
            threading.Thread(target=lambda: (drain(), super(Draining, self).handle_exit(sig, frame)),
                             name="amb-serve-drain", daemon=True).start()

    Draining(uvicorn.Config(app, host=host, port=port, log_level=log_level)).run()


def drain_on_sigterm(drain: Callable[[], Any]) -> None:
    """Under stdio: SIGTERM drains (in a thread), then ends the process with SIGTERM's exit status (143): the
    thread reading stdin cannot be woken, and everything is committed by then."""
    def end() -> None:
        drain()
        sys.stdout.flush()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, lambda _sig, _frame: threading.Thread(target=end, daemon=True).start())
