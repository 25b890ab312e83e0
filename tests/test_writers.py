"""Issue 38, parts 1 and 2: many writers add to one bank database and lose nothing; an ingest commits as it goes.

Real ``amb ingest`` processes (the heuristic policy: no LM) side by side on one bank, killed with SIGKILL, a JSON
bank's second writer; the real embedding model, real files. The bank's entries are read with sqlite3 straight
from the file, and the file is validated as every command opens it (``read_bank_db``).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

from amb_dspy.storage.bank_db import read_bank_db

ROOT = Path(__file__).resolve().parent.parent
COLOURS = ["red", "amber", "green", "blue", "violet", "white"]


def notes(folder: Path, numbers) -> list[str]:
    """Small distinct notes, one file each; the names their documents take (the path as given)."""
    folder.mkdir(parents=True)
    names = []
    for i in numbers:
        path = folder / f"note-{i:03d}.md"
        path.write_text(f"Pier {i} of Port Merrow keeps lantern number {i}. Its keeper, Warden {i}, lights it "
                        f"{COLOURS[i % len(COLOURS)]} at {i % 12 + 1} o'clock each evening.\n", encoding="utf-8")
        names.append(path.as_posix())
    return names


def start(work: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """``amb ingest ARGS`` in a process of its own (stderr to ``log`` when given)."""
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "AMB_STORAGE_DIR": str(work / "storage"),
                   "AMB_TEMP_DIR": str(work / "temp"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    stderr = log.open("w") if log is not None else subprocess.PIPE
    return subprocess.Popen([sys.executable, "-m", "amb_dspy.cli", "ingest", *args], cwd=work, env=environment,
                            stdout=subprocess.PIPE, stderr=stderr, text=True)


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, out, err or ""


def entry_names(bank: Path) -> list[str]:
    """The names of the bank database's entries, in order (read while writers may be committing)."""
    if not bank.is_file():
        return []
    try:
        with closing(sqlite3.connect(bank)) as connection:
            return [json.loads(body)["metadata"]["name"] for (body,) in connection.execute("SELECT body FROM entries")]
    except sqlite3.OperationalError:  # no table yet
        return []


def test_writers_side_by_side_add_every_document_once(tmp_path):
    """Three ingests at once into one new bank database, each with its own notes and four notes all three add:
    every note is an entry of the bank, once (on the old code the last writer's bank replaced the others')."""
    shared = notes(tmp_path / "shared", range(100, 104))
    own = [notes(tmp_path / f"writer{k}", range(8 * k, 8 * k + 8)) for k in range(3)]
    bank = tmp_path / "bank.sqlite"
    processes = [start(tmp_path, str(tmp_path / f"writer{k}"), str(tmp_path / "shared"), "--bank", str(bank),
                       "--policy", "heuristic") for k in range(3)]
    for process in processes:
        code, out, err = finish(process)
        assert code == 0, err[-2000:]
    names = entry_names(bank)
    assert sorted(names) == sorted(shared + [name for names in own for name in names])
    loaded, _ = read_bank_db(bank, None)
    assert len(loaded.tree.entries) == 28


def test_kill_9_mid_ingest_keeps_every_commit_and_the_rerun_adds_only_the_rest(tmp_path):
    names = notes(tmp_path / "notes", range(40))
    bank = tmp_path / "bank.sqlite"
    args = (str(tmp_path / "notes"), "--bank", str(bank), "--policy", "heuristic")
    process = start(tmp_path, *args)
    while len(entry_names(bank)) < 5:  # five documents committed: kill it
        assert process.poll() is None, f"the ingest ended before 5 documents were in the bank: {finish(process)[2][-2000:]}"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL
    kept = entry_names(bank)
    assert 5 <= len(kept) < len(names) and len(set(kept)) == len(kept) and set(kept) <= set(names)
    read_bank_db(bank, None)  # a whole bank, as every command opens it
    code, out, err = finish(start(tmp_path, *args))
    assert code == 0, err[-2000:]
    assert sorted(entry_names(bank)) == sorted(names)
    assert f"documents added {len(names) - len(kept)}, newer versions 0, unchanged {len(kept)}" in out
    assert f"unchanged {len(kept)}/40" in err and "committed 40/40" in err  # each document's line, up to the last


def test_a_json_bank_refuses_a_second_writer_in_one_line_and_the_first_keeps_its_work(tmp_path):
    """A JSON bank is rewritten whole: while one ingest holds it (a slow LM), a second is refused in one line that
    names the bank database form; the first, stopped with SIGTERM, writes what it converted, none of the second's."""
    first_names = notes(tmp_path / "first", range(20))
    notes(tmp_path / "second", range(50, 53))
    bank, log = tmp_path / "bank.json", tmp_path / "first.log"
    first = start(tmp_path, str(tmp_path / "first"), "--bank", str(bank), "--lm", "python:resume_lm:make_lm",
                  "--policy", "lm", env={"AMB_TEST_LM_DELAY": "0.5"}, log=log)
    try:
        while "memorise" not in log.read_text():  # its first document is being converted
            assert first.poll() is None, log.read_text()[-2000:]
            time.sleep(0.1)
        code, out, err = finish(start(tmp_path, str(tmp_path / "second"), "--bank", str(bank), "--policy", "heuristic"))
        errors = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and len(errors) == 1 and errors[0].startswith("error: "), err[-2000:]
        assert "one writer at a time" in errors[0] and str(tmp_path / "bank.sqlite") in errors[0]
        first.send_signal(signal.SIGTERM)
        assert finish(first)[0] == 130, log.read_text()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    saved = json.loads(bank.read_text())["interaction_tree"]["entries"]
    assert saved and {entry["metadata"]["name"] for entry in saved} <= set(first_names)


def test_threads_of_one_process_take_turns_on_one_bank_too(tmp_path, embedder):
    """Two banks of one process (as a server's threads would be) add to one bank database at once through
    ``MemoryBank.add_documents``: the lock is held once per process and taken in turn by its threads."""
    from concurrent.futures import ThreadPoolExecutor

    from amb_dspy.bank import MemoryBank
    from amb_dspy.config import AmbConfig

    shared = notes(tmp_path / "shared", range(100, 103))
    own = [notes(tmp_path / f"thread{k}", range(6 * k, 6 * k + 6)) for k in range(2)]
    bank = tmp_path / "bank.sqlite"
    config = AmbConfig(policy="heuristic", storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp")

    def add(k: int):
        return MemoryBank(config, embedder=embedder).add_documents([tmp_path / f"thread{k}", tmp_path / "shared"],
                                                                    into=bank)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(add, range(2)))
    assert sorted(entry_names(bank)) == sorted(shared + own[0] + own[1])
    assert sum(len(result.added) for result in results) == 15 and all(r.written == [bank] for r in results)
