"""What long-term memory raises: one class per kind of trouble, each with a one-line message."""

from __future__ import annotations


class LongTermError(Exception):
    """A long-term memory problem; the message is one line saying what and why."""


class StoreUnavailableError(LongTermError):
    """The store cannot be opened or reached (bad file, server down, wrong embedding size)."""


class ItemNotFoundError(LongTermError):
    """No item with that id in that namespace."""


class LongTermInputError(LongTermError, ValueError):
    """Bad input to the store: empty content, an unknown kind, a malformed namespace."""
