"""The few places where amb-dspy relies on DSPy internals, each behind one small function.

DSPy has no public API for these. ``tests/test_internals.py`` checks each against the installed DSPy
and fails with a message naming the function to update when an upgrade changes them.
"""

from __future__ import annotations

from typing import Any


def json_adapter_prepare_response_format(adapter: Any, lm: Any, lm_kwargs: dict[str, Any], signature: Any) -> None:
    """Call ``dspy.JSONAdapter``'s hook that writes ``response_format`` into ``lm_kwargs`` for ``signature``.

    ``adapter`` is the JSONAdapter (or a ``super()`` proxy of a subclass) whose hook to run.
    """
    adapter._prepare_response_format(lm, lm_kwargs, signature)


def reported_usage(lm: Any, outputs: Any) -> tuple[int, int]:
    """Prompt and completion tokens the provider reported for the LM call that returned ``outputs``.

    DSPy's callbacks see a call's outputs but not its usage; the LM's history entry for that very call
    holds both (the same outputs object), so it is found by identity, which is safe under threads.
    """
    from dspy.clients.base_lm import GLOBAL_HISTORY

    for history in (getattr(lm, "history", []), GLOBAL_HISTORY):
        for entry in reversed(history[-64:]):
            if entry.get("outputs") is outputs:
                usage = entry.get("usage") or {}
                return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return 0, 0
