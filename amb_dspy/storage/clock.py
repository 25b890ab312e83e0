"""Strictly increasing timestamps, so that "newest first" is a total order even within one tick."""

from __future__ import annotations

import threading
import time
from typing import Annotated

from pydantic import Field

# Timestamps are Unix epoch seconds, from 1970 up to (not including) the year 3000: a bank file with
# an infinite or absurd time is refused when it is read, not when something later formats the date.
MAX_TIMESTAMP = 32_503_680_000.0  # 3000-01-01T00:00:00Z
Timestamp = Annotated[float, Field(ge=0.0, lt=MAX_TIMESTAMP, allow_inf_nan=False)]

_lock = threading.Lock()
_last = 0.0


def now() -> float:
    global _last
    with _lock:
        t = time.time()
        _last = t if t > _last else _last + 1e-6
        return _last
