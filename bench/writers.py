"""Many writers on one bank database, and ingests killed with SIGKILL: count the documents lost and duplicated.

Documents: HotpotQA context paragraphs (``/work/shared/datasets/hotpotqa``, read here, never copied into the
repository), one ``.md`` file each in a temporary folder. Every ingest is the real ``amb ingest`` in a process
of its own, with the heuristic policy (no LM).

* writers: ``--writers`` processes at once add ``--docs`` documents each to one new bank database, the first
  ``--shared`` of them the same for every writer (a race on the same text must add it once); ``--trials``
  times. Lost: documents some writer added that are not entries of the bank; duplicated: entries beyond one
  per document.
* kills: one ingest of ``--docs`` documents is killed with SIGKILL at a uniform random moment of its run (its
  uninterrupted wall time measured first), ``--kills`` times. Lost: documents that were entries of the bank just
  before the kill and are not after it; the same command then runs again, and is complete when the bank holds
  every document exactly once.

    python bench/writers.py [--writers 4] [--docs 30] [--shared 5] [--trials 3] [--kills 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOTPOTQA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or ROOT.parent / "shared" / "datasets" / "hotpotqa") \
    / "dev_distractor_300.jsonl"


def paragraphs(count: int) -> list[tuple[str, str]]:
    """``count`` distinct (title, paragraph) pairs from HotpotQA's contexts, in file order."""
    seen: dict[str, str] = {}
    with HOTPOTQA.open(encoding="utf-8") as handle:
        for line in handle:
            for title, sentences in json.loads(line)["context"]:
                seen.setdefault(title, "".join(sentences).strip())
                if len(seen) == count:
                    return list(seen.items())
    raise SystemExit(f"{HOTPOTQA} holds fewer than {count} paragraphs")


def write_folder(folder: Path, items: list[tuple[str, str]]) -> list[str]:
    """One .md file per paragraph; the names their documents take."""
    folder.mkdir(parents=True)
    names = []
    for i, (title, text) in enumerate(items):
        path = folder / f"{i:03d}.md"
        path.write_text(f"# {title}\n\n{text}\n", encoding="utf-8")
        names.append(path.as_posix())
    return names


def ingest(work: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AMB_STORAGE_DIR": str(work / "storage"),
           "AMB_TEMP_DIR": str(work / "temp"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "amb_dspy.cli", "ingest", *args, "--policy", "heuristic"],
                            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> None:
    _, err = process.communicate(timeout=1800)
    if process.returncode != 0:
        raise SystemExit(f"amb ingest failed ({process.returncode}): {err.strip().splitlines()[-3:]}")


def entry_names(bank: Path) -> list[str]:
    if not bank.is_file():
        return []
    try:
        with closing(sqlite3.connect(bank)) as connection:
            return [json.loads(body)["metadata"]["name"] for (body,) in connection.execute("SELECT body FROM entries")]
    except sqlite3.OperationalError:
        return []


def writers_trial(work: Path, folders: list[Path], shared: Path, expected: set[str]) -> dict:
    """All writers at once on one new bank; what the bank holds after."""
    bank = work / "bank.sqlite"
    began = time.monotonic()
    processes = [ingest(work, str(folder), str(shared), "--bank", str(bank)) for folder in folders]
    for process in processes:
        finish(process)
    names = entry_names(bank)
    return {"seconds": round(time.monotonic() - began, 1), "entries": len(names),
            "lost": len(expected - set(names)), "duplicated": len(names) - len(set(names))}


def kill_trial(work: Path, folders: list[str], expected: set[str], moment: float) -> dict:
    """One ingest killed with SIGKILL ``moment`` seconds after its start, then run again."""
    bank = work / "bank.sqlite"
    process = ingest(work, *folders, "--bank", str(bank))
    time.sleep(moment)
    before = set(entry_names(bank))
    process.send_signal(signal.SIGKILL)
    process.wait()
    after = entry_names(bank)
    finish(ingest(work, *folders, "--bank", str(bank)))
    final = entry_names(bank)
    return {"moment": round(moment, 1), "before": len(before), "after": len(after), "lost": len(before - set(after)),
            "complete": sorted(final) == sorted(expected)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("writers", 4), ("docs", 30), ("shared", 5), ("trials", 3), ("kills", 5), ("seed", 0)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    own = args.docs - args.shared
    items = paragraphs(args.shared + own * args.writers)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shared_names = write_folder(root / "shared", items[:args.shared])
        folders = [root / f"writer{k}" for k in range(args.writers)]
        names = set(shared_names)
        for k, folder in enumerate(folders):
            names.update(write_folder(folder, items[args.shared + own * k: args.shared + own * (k + 1)]))
        trials = []
        for trial in range(args.trials):
            (work := root / f"trial{trial}").mkdir()
            trials.append(writers_trial(work, folders, root / "shared", names))
        kill_folders = [str(folders[0]), str(root / "shared")]  # one writer's documents
        kill_names = {path.as_posix() for folder in kill_folders for path in Path(folder).iterdir()}
        (reference := root / "reference").mkdir()
        began = time.monotonic()
        finish(ingest(reference, *kill_folders, "--bank", str(reference / "bank.sqlite")))
        whole = time.monotonic() - began
        kills = []
        for number in range(args.kills):
            (work := root / f"kill{number}").mkdir()
            kills.append(kill_trial(work, kill_folders, kill_names, rng.uniform(0, whole)))
    report(args, trials, kills, whole)


def report(args, trials: list[dict], kills: list[dict], whole: float) -> None:
    load = os.getloadavg()
    print(f"machine load (1, 5, 15 min): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    print(f"\n{args.writers} writers x {args.docs} documents ({args.shared} the same for all) on one bank database")
    print(f"{'trial':>5} {'seconds':>8} {'entries':>8} {'lost':>5} {'duplicated':>10}")
    for number, trial in enumerate(trials, 1):
        print(f"{number:>5} {trial['seconds']:>8} {trial['entries']:>8} {trial['lost']:>5} {trial['duplicated']:>10}")
    print(f"\none ingest of {args.docs} documents ({whole:.1f} s uninterrupted) killed with SIGKILL, "
          "then run again")
    print(f"{'kill':>4} {'at s':>6} {'before':>7} {'after':>6} {'lost':>5} {'rerun complete':>15}")
    for number, kill in enumerate(kills, 1):
        print(f"{number:>4} {kill['moment']:>6} {kill['before']:>7} {kill['after']:>6} {kill['lost']:>5} "
              f"{str(kill['complete']):>15}")
    print(json.dumps({"writers": args.writers, "documents_each": args.docs, "trials": len(trials),
                      "writers_lost": sum(t["lost"] for t in trials),
                      "writers_duplicated": sum(t["duplicated"] for t in trials),
                      "kills": len(kills), "kill_lost": sum(k["lost"] for k in kills),
                      "kill_rerun_complete": all(k["complete"] for k in kills),
                      "trial_seconds": [t["seconds"] for t in trials], "load": [round(x, 2) for x in load]}))


if __name__ == "__main__":
    main()
