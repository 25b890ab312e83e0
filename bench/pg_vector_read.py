"""How fast 5,000 x 384 float32 vectors come back from PostgreSQL into one numpy matrix, by each way a vector can be
stored and read: float32 ``BYTEA`` (a stock server), and a pgvector ``vector`` column read through the ``pgvector``
package's psycopg adapter (text and binary results), as ``::real[]`` (text and binary), as ``::text`` parsed here,
and as the bytes of ``vector_send`` (pgvector's own binary form, big-endian after a 4-byte header).

It starts the PostgreSQL 16 with pgvector that the ``pgserver`` wheel ships (tests/postgres_server.py), writes the
same random unit vectors into both columns, and reads each way ``--repeat`` times (the best and the median wall
seconds). Last line: one JSON object, with the load average.

    python bench/pg_vector_read.py [--rows 5000] [--dim 384] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer, pgvector_bin_dir, skip_reason  # noqa: E402


def _ways(dim: int) -> dict[str, tuple[str, bool, Callable[[list], np.ndarray]]]:
    """name -> (SELECT, binary results, rows -> matrix)."""
    def from_blobs(rows):
        return np.frombuffer(b"".join(bytes(r[0]) for r in rows), dtype="<f4").reshape(len(rows), dim)

    def from_sends(rows):
        return np.frombuffer(b"".join(bytes(r[0])[4:] for r in rows), dtype=">f4").reshape(len(rows), dim)

    def from_vectors(rows):
        return np.stack([r[0].to_numpy() for r in rows])

    def from_lists(rows):
        return np.array([r[0] for r in rows], dtype=np.float32)

    def from_texts(rows):
        return np.array([np.fromstring(r[0][1:-1], sep=",", dtype=np.float32) for r in rows])

    return {
        "bytea": ("SELECT b FROM v ORDER BY id", False, from_blobs),
        "vector, pgvector adapter, text": ("SELECT x FROM v ORDER BY id", False, from_vectors),
        "vector, pgvector adapter, binary": ("SELECT x FROM v ORDER BY id", True, from_vectors),
        "vector::real[], text": ("SELECT x::real[] FROM v ORDER BY id", False, from_lists),
        "vector::real[], binary": ("SELECT x::real[] FROM v ORDER BY id", True, from_lists),
        "vector::text": ("SELECT x::text FROM v ORDER BY id", False, from_texts),
        "vector_send(vector)": ("SELECT vector_send(x) FROM v ORDER BY id", False, from_sends),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bin_dir = pgvector_bin_dir()
    reason = "the pgserver package is not installed (pip install pgserver)" if bin_dir is None else skip_reason(bin_dir)
    if reason:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    import psycopg
    from pgvector.psycopg import register_vector

    server = PostgresServer(bin_dir).start()
    try:
        with psycopg.connect(server.new_database(), autocommit=True) as connection:
            connection.execute("CREATE EXTENSION vector")
            register_vector(connection)
            connection.execute("CREATE TABLE v (id INTEGER PRIMARY KEY, b BYTEA NOT NULL, x vector NOT NULL)")
            vectors = np.random.default_rng(0).standard_normal((args.rows, args.dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            connection.cursor().executemany("INSERT INTO v VALUES (%s, %s, %s)",
                                            [(i, v.tobytes(), v) for i, v in enumerate(vectors)])
            table, figures = [], {}
            for name, (sql, binary, matrix) in _ways(args.dim).items():
                seconds = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    got = matrix(connection.cursor(binary=binary).execute(sql).fetchall())
                    seconds.append(time.perf_counter() - start)
                    assert np.allclose(got, vectors, atol=1e-6), name
                figures[name] = {"best_s": round(min(seconds), 4), "median_s": round(statistics.median(seconds), 4)}
                table.append(f"{name:34} {min(seconds):8.3f} {statistics.median(seconds):8.3f}")
    finally:
        server.stop()
    load = os.getloadavg()
    print(f"{args.rows} x {args.dim} float32 vectors, {args.repeat} reads each; load {load[0]:.2f} {load[1]:.2f}")
    print(f"{'way':34} {'best s':>8} {'median s':>8}")
    print("\n".join(table))
    print(json.dumps({"rows": args.rows, "dim": args.dim, "ways": figures, "load": [round(x, 2) for x in load]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
