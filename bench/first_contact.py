"""A new user's first commands, as the README and the Makefile write them, on a fresh storage folder.

Runs, one after the other, with the embedded model and nothing else set (no ``AMB_*`` setting but the
storage and temp folders, which are new):

1. ``make demo``'s run (the command of the Makefile's demo target, read from the Makefile);
2. the README's first run: ``amb run "Which river ...?" --context-file datasets/demo-notes.md --corpus
   datasets/demo --export demo-bank.json``;
3. ``amb ingest --context-file datasets/demo-notes.md --lm local`` (the bank exported);
4. a question on that bank: ``amb run "Which river ...?" --bank notes-bank.json --corpus datasets/demo``.

For each: the exit code, the seconds, the LM calls and prompt tokens (from the command's own report), and
whether the answer names the Sennet. The machine's load (``os.getloadavg``) is printed beside the figures;
the last line is JSON.

    python bench/first_contact.py [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Which river flows through the city where the Tidewater Lantern Festival is held?"
_USAGE_ROW = re.compile(r"^\s+\w+\s+calls\s+(\d+)\s+prompt\s+(\d+)", re.M)
_INGEST_CALLS = re.compile(r"LM calls (\d+), tokens (\d+)")


def demo_arguments() -> list[str]:
    """The ``amb run`` arguments of the Makefile's demo target, as ``make demo`` runs them."""
    recipe = re.search(r"^demo:.*?\n((?:\t.*\n?)+)", (ROOT / "Makefile").read_text(), re.M)
    if recipe is None:
        raise SystemExit("the Makefile has no demo target")
    command = shlex.split(recipe.group(1).replace("\\\n", " "))
    if any("=" in word and not word.startswith("-") for word in command[: command.index("run")]):
        raise SystemExit(f"the demo target sets hidden settings: {' '.join(command)}")
    return command[command.index("run"):]


def commands(folder: Path) -> list[tuple[str, list[str]]]:
    notes, corpus = "datasets/demo-notes.md", "datasets/demo"
    bank = str(folder / "notes-bank.json")
    return [
        ("make demo", [arg.replace("amb_runs/", f"{folder}/") for arg in demo_arguments()]),
        ("README first run", ["run", QUESTION, "--context-file", notes, "--corpus", corpus,
                             "--export", str(folder / "demo-bank.json")]),
        ("ingest --lm local", ["ingest", "--context-file", notes, "--lm", "local", "--export", bank]),
        ("question on the bank", ["run", QUESTION, "--bank", bank, "--corpus", corpus]),
    ]


def run_one(name: str, arguments: list[str], env: dict[str, str], timeout: float) -> dict:
    started, load = time.monotonic(), os.getloadavg()[0]
    try:
        done = subprocess.run([sys.executable, str(ROOT / "cli.py"), *arguments], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    seconds = round(time.monotonic() - started, 1)
    rows = [(int(c), int(p)) for c, p in _USAGE_ROW.findall(err)]
    ingest = _INGEST_CALLS.search(out)
    calls = sum(c for c, _ in rows) if rows else (int(ingest.group(1)) if ingest else None)
    prompt = sum(p for _, p in rows) if rows else None
    lines = out.strip().splitlines()
    answer = lines[-1] if lines and arguments[0] == "run" else ""
    termination = re.search(r"^termination: (\w+)", err, re.M)
    return {"command": name, "exit": code, "seconds": seconds, "load": round(load, 2), "lm_calls": calls,
            "prompt_tokens": prompt, "termination": termination.group(1) if termination else None,
            "names_sennet": ("sennet" in answer.lower()) if arguments[0] == "run" else None,
            # the corpus's date (the notes only repeat a blog's unchecked "mid-August"); asked by make demo alone
            "names_date": ("last saturday of september" in answer.lower()) if "take place" in arguments[1] else None,
            "cited_sennet": ("sennet" in err.lower().split("termination:")[-1]) if arguments[0] == "run" else None,
            "answer": answer[:300], "argv": " ".join(shlex.quote(a) for a in ["amb", *arguments])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=900, help="seconds one command may take")
    parser.add_argument("--repeat", type=int, default=1, help="run the commands this many times (the embedded "
                        "model samples at temperature 0.6, so one run's answer is one draw)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="amb-first-contact-"))
    env = {key: value for key, value in os.environ.items() if not key.startswith("AMB_")}
    env.update({"AMB_STORAGE_DIR": str(folder / "storage"), "AMB_TEMP_DIR": str(folder / "temp"),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"})
    if "AMB_CACHE_DIR" in os.environ:  # the exported embedding model, made once by `make install`
        env["AMB_CACHE_DIR"] = os.environ["AMB_CACHE_DIR"]
    results = []
    for name, arguments in [command for _ in range(args.repeat) for command in commands(folder)]:
        result = run_one(name, arguments, env, args.timeout)
        results.append(result)
        print(f"{name:<22} exit {result['exit']!s:<7} {result['seconds']:>7.1f} s  load {result['load']:<5} "
              f"LM calls {result['lm_calls']!s:<4} prompt {result['prompt_tokens']!s:<6} "
              f"names the Sennet {result['names_sennet']!s:<5} | {result['answer'][:120]}", flush=True)
    asked = [r for r in results if r["names_sennet"] is not None]
    print(json.dumps({"folder": str(folder), "runs_naming_sennet": f"{sum(r['names_sennet'] for r in asked)}/{len(asked)}",
                      "runs_citing_sennet": f"{sum(r['cited_sennet'] for r in asked)}/{len(asked)}",
                      "demo_runs_naming_date": f"{sum(bool(r['names_date']) for r in asked if r['names_date'] is not None)}"
                                               f"/{sum(r['names_date'] is not None for r in asked)}",
                      "results": results}))


if __name__ == "__main__":
    main()
