"""Run a command beside a throwaway PostgreSQL server (tests/postgres_server.py: ``initdb`` in a temporary folder,
a free port, stopped and removed at the end), ``{url}`` in its arguments replaced by a fresh database's URL.

    python bench/with_postgres.py python bench/memory_recall.py locomo:PATH --n 40 --database {url}

Exits with the command's exit code; says in one line why when PostgreSQL or psycopg is missing here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer, skip_reason  # noqa: E402


def main() -> int:
    command = sys.argv[1:]
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    reason = skip_reason()
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    server = PostgresServer().start()
    try:
        url = server.new_database()
        return subprocess.call([part.replace("{url}", url) for part in command])
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
