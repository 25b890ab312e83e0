"""Kill `amb run` at random moments, resume it, and count the tool responses lost and the tools called twice.

The run is the demo task over the demo corpus with the scripted LM of ``tests/resume_lm.py`` (three
searches per task, one of them a repeat the tool cache answers; ``AMB_TEST_LM_DELAY`` spreads the run
out); the real corpus search logs every query that reaches it. One uninterrupted run gives the reference
(its searches, its bank, its answer, its wall time T); then each trial starts the same run with a
checkpoint folder, SIGKILLs it after a uniform random time in (0, T), and resumes it (or, killed before
its first checkpoint, starts it again on the same folder). Per trial:

* calls twice: searches that reached the corpus more than once over the killed and the resumed process;
* lost: responses of the reference run that are not in the resumed run's bank (its interaction entries);
* same bank: the resumed bank equals the reference one (ids and times left out).

    python bench/resume_kills.py [--trials 20] [--seed 0] [--delay 0.15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_provenance import _canonical  # noqa: E402

TASK = "When is the Tidewater Lantern Festival?"


def start(args: list[str], work: Path, log: Path, delay: tuple[float, float]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}", "AMB_STORAGE_DIR": str(work / "storage"),
           "AMB_TEMP_DIR": str(work / "temp"), "AMB_CORPUS": str(ROOT / "datasets" / "demo"), "HF_HUB_OFFLINE": "1",
           "AMB_TEST_SEARCH_LOG": str(log), "AMB_TEST_LM_DELAY": str(delay[0]), "AMB_TEST_SEARCH_DELAY": str(delay[1])}
    return subprocess.Popen([sys.executable, "-c", "from cli import app; app()", "run", *args, "--lm",
                             "python:resume_lm:make_lm"], env=env, cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=600)
    if process.returncode != 0:
        raise SystemExit(f"amb run failed: {err.strip().splitlines()[-1:]}")
    return out.strip().splitlines()[-1]


def queries(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


def responses(journal: Path) -> list[str]:
    return [json.loads(line)["full"] for line in journal.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.15, help="seconds each scripted LM call waits")
    parser.add_argument("--search-delay", type=float, default=1.0, help="seconds each search waits (a hosted one's trip)")
    args = parser.parse_args()
    delays = (args.delay, args.search_delay)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ref = root / "reference"
        ref.mkdir()
        began = time.monotonic()
        answer = finish(start([TASK, "--checkpoint", str(ref / "cp"), "--export", str(ref / "bank.json")], ref,
                              ref / "searches.log", delays))
        whole_time = time.monotonic() - began
        reference = _canonical(ref / "bank.json")
        ref_searches, ref_responses = queries(ref / "searches.log"), responses(ref / "cp" / "tool_calls.jsonl")
        print(f"reference run: {whole_time:.1f}s, {len(ref_searches)} searches, answer {answer!r}")
        print(f"{'trial':>5} {'kill at s':>9} {'loops done':>10} {'before kill':>11} {'after':>5} "
              f"{'twice':>5} {'lost':>4} {'same bank':>9} {'answer':>6}")
        rows = []
        for trial in range(args.trials):
            work = root / f"t{trial}"
            work.mkdir()
            log, checkpoint = work / "searches.log", work / "cp"
            moment = rng.uniform(0, whole_time)
            killed = start([TASK, "--checkpoint", str(checkpoint)], work, log, delays)
            try:
                killed.wait(timeout=moment)
            except subprocess.TimeoutExpired:
                killed.send_signal(signal.SIGKILL)
                killed.wait(timeout=30)
            before = len(queries(log))
            saved = checkpoint / "checkpoint.json"
            loops = json.loads(saved.read_text())["run"]["loops"] if saved.is_file() else None
            export = ["--export", str(work / "bank.json")]
            again = (["--resume", str(checkpoint)] if saved.is_file() else [TASK, "--checkpoint", str(checkpoint)]) + export
            got = finish(start(again, work, log, delays))
            made = Counter(queries(log))
            kept = "\n".join(text for text, _ in _canonical(work / "bank.json")["entries"])
            row = {"trial": trial, "kill_at_s": round(moment, 2), "loops_done": loops, "searches_before_kill": before,
                   "searches_after": sum(made.values()) - before, "called_twice": sum(n - 1 for n in made.values()),
                   "missing_searches": sum((Counter(ref_searches) - made).values()),
                   "lost": sum(response not in kept for response in ref_responses),
                   "same_bank": _canonical(work / "bank.json") == reference, "same_answer": got == answer}
            rows.append(row)
            print(f"{trial:>5} {moment:>9.2f} {str(loops):>10} {before:>11} {row['searches_after']:>5} "
                  f"{row['called_twice']:>5} {row['lost']:>4} {str(row['same_bank']):>9} {str(row['same_answer']):>6}",
                  flush=True)
    print(json.dumps({"bench": "resume_kills", "trials": len(rows), "seed": args.seed,
                      "killed_before_the_last_search": sum(r["searches_before_kill"] < len(ref_searches) for r in rows),
                      "tools_called_twice": sum(r["called_twice"] for r in rows),
                      "responses_lost": sum(r["lost"] for r in rows),
                      "searches_missing": sum(r["missing_searches"] for r in rows),
                      "same_bank": sum(r["same_bank"] for r in rows), "same_answer": sum(r["same_answer"] for r in rows),
                      "rows": rows}))


if __name__ == "__main__":
    main()
