"""Independent LM calls at once: ``map_in_context`` runs a function over items in a thread pool.

Each item runs in a copy of the caller's context, so DSPy's settings (the LM, the adapter, the run's
usage meter; DSPy keeps them in a context variable) and the agent a call is metered as reach the worker
threads. Results come back in the items' order, so the memory they make is the same, node for node,
as with one thread. An exception (the LM-call cap included) reaches the caller.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_in_context(function: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``[function(item) for item in items]``, up to ``threads`` at once."""
    if threads <= 1 or len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(threads, len(items))) as pool:
        futures = [pool.submit(contextvars.copy_context().run, function, item) for item in items]
        return [future.result() for future in futures]
