"""Questions on a bank database as an agent asks them: task start, the first ``memory_context``, the next ones.

For a bank built by ``bench/add_latency.py --cache DIR`` (``DIR/bank_1000000.sqlite``, saved with its line
vectors) or any bank file: starts a task on it as the MCP server's ``memory_start_task(bank=...)`` does, asks
its first ``memory_context`` at once and, on a second task, after ``--think`` seconds (the task lays its lines
out meanwhile), then times the evidence block of ``--n`` HotpotQA questions (p50 / p95). Last line JSON.

    python bench/bank_questions.py /tmp/cache/bank_1000000.sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402

QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa" / "dev_distractor_300.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bank", help="a bank file (a .sqlite bank database keeps its line vectors)")
    parser.add_argument("--n", type=int, default=30, help="questions timed after the first")
    parser.add_argument("--think", type=float, default=3.0, help="seconds between the second task's start and its first question")
    args = parser.parse_args()
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()][: args.n + 1]
    embedder = default_embedder()
    embedder.embed(["warm-up"])
    work = Path(tempfile.mkdtemp(prefix="amb-bank-questions-"))
    bank = MemoryBank(AmbConfig(policy="heuristic", storage_dir=work / "storage", temp_dir=work / "temp"), embedder=embedder)
    row = {"load": round(os.getloadavg()[0], 2)}
    for think in (0.0, args.think):
        started = time.perf_counter()
        session = bank.start_session(questions[0], bank=args.bank)
        row[f"start_s_{think:g}"] = round(time.perf_counter() - started, 2)
        time.sleep(think)
        started = time.perf_counter()
        session.context(1000)
        row[f"first_context_s_after_{think:g}s"] = round(time.perf_counter() - started, 3)
    view, times = session.memory.adapter.view, []
    for question in questions[1:]:
        started = time.perf_counter()
        view.block(question, 1000)
        times.append(time.perf_counter() - started)
    times.sort()
    row.update(nodes=len(session.store.graph), p50_ms=round(1000 * statistics.median(times), 1),
               p95_ms=round(1000 * times[max(0, int(0.95 * len(times)) - 1)], 1),
               rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    print("  ".join(f"{key} {value}" for key, value in row.items()))
    print(json.dumps(row))


if __name__ == "__main__":
    main()
