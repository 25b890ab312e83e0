"""Run a command beside a throwaway PostgreSQL server (tests/postgres_server.py: ``initdb`` in a temporary folder,
a free port, stopped and removed at the end), ``{url}`` in its arguments replaced by a fresh database's URL.

    python bench/with_postgres.py python bench/memory_recall.py locomo:PATH --n 40 --database {url}
    python bench/with_postgres.py --pgvector python bench/memory_recall.py ...   # PostgreSQL 16 with pgvector

``--pgvector`` starts the PostgreSQL with pgvector that the ``pgserver`` package ships (the dev extra) instead of
the system's, so the vectors are ``vector`` columns.

Exits with the command's exit code; says in one line why when PostgreSQL or psycopg is missing here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer, pgvector_bin_dir, skip_reason  # noqa: E402


def main() -> int:
    command = sys.argv[1:]
    with_pgvector = command[:1] == ["--pgvector"]
    command = command[1:] if with_pgvector else command
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    bin_dir = pgvector_bin_dir() if with_pgvector else None
    reason = ("the pgserver package is not installed (pip install 'amb-dspy[dev]')" if with_pgvector and bin_dir is None
              else skip_reason(bin_dir))
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    server = PostgresServer(bin_dir).start()
    try:
        url = server.new_database()
        return subprocess.call([part.replace("{url}", url) for part in command])
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
