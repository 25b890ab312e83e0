"""Strictly increasing timestamps, so that "newest first" is a total order even within one tick."""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_last = 0.0


def now() -> float:
    global _last
    with _lock:
        t = time.time()
        _last = t if t > _last else _last + 1e-6
        return _last
