"""A throwaway PostgreSQL cluster for the tests and benchmarks: ``initdb`` in a temporary folder, ``pg_ctl``
on a free port of 127.0.0.1, stopped and removed at the end. As root the cluster runs as the ``postgres``
user (the server refuses root). No mock: the store tests run on the real server.

Where PostgreSQL or psycopg is missing, :func:`skip_reason` says why, and the tests that need it are skipped
with that line (the README says how to install PostgreSQL).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path


def _bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: Debian's versioned folder, else the PATH's."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").is_file():
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def pgvector_bin_dir() -> Path | None:
    """The bin folder of the PostgreSQL 16 with pgvector that the ``pgserver`` wheel ships (found without importing
    it: only its binaries are used); None when the package is not installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)), "pginstall", "bin")
    return folder if Path(folder, "initdb").is_file() else None


def skip_reason(bin_dir: Path | None = None) -> str | None:
    """Why PostgreSQL tests cannot run here (with the binaries of ``bin_dir``, else the system's); None when they
    can."""
    if (bin_dir or _bin_dir()) is None:
        return "PostgreSQL is not installed (apt-get install postgresql): the PostgreSQL store tests are skipped"
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'amb-dspy[postgres]'): the PostgreSQL store tests are skipped"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: cannot start PostgreSQL as another user"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PostgresServer:
    """One throwaway cluster (the system's PostgreSQL, or the one in ``bin_dir``); ``url(database)`` names a database on it, ``new_database()`` makes a fresh one."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="amb-pg-"))
        self.port = _free_port()
        self._bin = bin_dir or _bin_dir()
        self._as_postgres = os.geteuid() == 0

    def _run(self, *argv: str) -> None:
        command = [str(self._bin / argv[0]), *argv[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def _runnable_bin(self) -> Path:
        """The bin folder, or, when the ``postgres`` user may not run it (a virtual environment in a folder only
        root enters), a copy inside the cluster's folder of the ``pgserver`` wheel's installation laid out as
        installed: ``pgserver/pginstall/{bin,lib,share}`` beside ``pgserver.libs``, where its binaries' rpath
        (``$ORIGIN/../../../pgserver.libs``) finds libpq."""
        probe = ["runuser", "-u", "postgres", "--", str(self._bin / "postgres"), "--version"]
        if not self._as_postgres or subprocess.run(probe, capture_output=True).returncode == 0:
            return self._bin
        top, copy = self._bin.parents[2], self.folder / "install"
        install = self._bin.parent.relative_to(top)
        shutil.copytree(top / install, copy / install, ignore=shutil.ignore_patterns("include"), symlinks=True)
        libs = top / f"{install.parts[0]}.libs"
        if libs.is_dir():
            shutil.copytree(libs, copy / libs.name, symlinks=True)
        return copy / install / self._bin.name

    def start(self) -> PostgresServer:
        if self._as_postgres:
            shutil.chown(self.folder, "postgres")
            self._bin = self._runnable_bin()
        data = self.folder / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync")
        options = (f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=on "
                   "-c max_connections=200 -c shared_buffers=64MB")
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        except subprocess.SubprocessError:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh empty database on this server; its URL."""
        import psycopg

        name = f"amb_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
