"""One-line notices for the user, on stderr: something was done on their behalf, or skipped.

Library code that must tell the user something without failing (a cache rebuilt, a file skipped)
takes a ``notify`` callable and defaults to :func:`notice`; tests pass a list's ``append``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Notify = Callable[[str], None]


def notice(message: str) -> None:
    """Print ``note: <message>`` on stderr, as one line."""
    print(f"note: {' '.join(message.split())}", file=sys.stderr, flush=True)
