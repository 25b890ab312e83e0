"""Servers the tests and benches start on 127.0.0.1 (llama_cpp.server, `amb serve --http`, `chroma run`):
a free port, waiting until one listens, and stopping one."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable


def free_port() -> int:
    """A port nothing listens on now (the OS's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, timeout: float, *, what: str = "the server",
                   output: Callable[[], str] = lambda: "", probe: Callable[[], object] | None = None,
                   pause: float = 0.3) -> None:
    """Return once ``probe()`` succeeds (default: a TCP connection to 127.0.0.1:``port``); raise RuntimeError
    naming ``what`` (and ``output()``, e.g. its log) when ``process`` exits first or ``timeout`` seconds pass."""
    def connect() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}; {output()}".rstrip("; "))
        try:
            (probe or connect)()
            return
        except Exception:  # noqa: BLE001 - not up yet: a refused connection, or the probe's own error
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port} within {timeout:g} s; {output()}"
                                   .rstrip("; ")) from None
            time.sleep(pause)


def stop(process: subprocess.Popen, timeout: float = 20) -> None:
    """Terminate ``process``, killing it if it has not ended within ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
