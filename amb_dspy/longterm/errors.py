"""What long-term memory raises: one class per kind of trouble, each with a one-line message."""

from __future__ import annotations

from contextlib import contextmanager

from amb_dspy.errors import UserError


class LongTermError(UserError):
    """A long-term memory problem; the message is one line saying what and why."""


class StoreUnavailableError(LongTermError):
    """The store cannot be opened or reached (bad file, server down, wrong embedding size)."""


class ItemNotFoundError(LongTermError):
    """No item with that id in that namespace."""


class LongTermInputError(LongTermError, ValueError):
    """Bad input to the store: empty content, an unknown kind, a malformed namespace."""


@contextmanager
def unavailable_on_error(where: str, doing: str = ""):
    """Turn whatever a backend's client raises (server down, file unreadable) into one
    :class:`StoreUnavailableError` line; long-term errors pass through as they are."""
    try:
        yield
    except LongTermError:
        raise
    except Exception as exc:  # noqa: BLE001 - a client, server or file problem: the store is unusable
        text = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
        raise StoreUnavailableError(f"long-term store {where}: {doing + ' ' if doing else ''}({why})") from None
