"""How long memory conversion and a whole run take with a hosted-like LM, one call at a time and 8 at once.

A scripted LM answers every call after a fixed delay (default 300 ms, a hosted API's round trip). It
drives one memory conversion of a long tool response (12 topics: 1 classification call, the structure
calls, then analysis in the spec's order; batched, a batch call waiting once, as in AMB_INGEST_BATCH) and one whole run. The LM calls, the longest chain of calls
that had to wait for each other (measured at 8 threads from the calls' start and end times), and the wall
times are printed, then a JSON line.

    python bench/latency.py [--delay 0.3] [--topics 12]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from scripted_lm import ScriptedLM  # noqa: E402
from test_bank import EXTRACT, FINISH, REACT, compress, one_cluster_per_segment, unrelated  # noqa: E402

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402


class TimedLM:
    """Scripted words after ``delay`` seconds; every call's (start, end) is kept."""

    def __init__(self, delay: float):
        self.delay, self.spans, self._lock = delay, [], threading.Lock()
        plans = iter([{"executed_status": "success", "executed_context": "", "next_task": "Look it up"}])
        self.lm = ScriptedLM(
            classification=self._slow(one_cluster_per_segment), structure=self._slow(compress),
            analysis=self._slow(unrelated),
            planning=self._slow(lambda c: next(plans, {"executed_status": "success", "executed_context": "",
                                                       "next_task": ""})),
            **{REACT: self._slow(lambda c: FINISH), EXTRACT: self._slow(lambda c: {"reasoning": "r", "answer": "x"})},
            wrap_batches=self._slow,  # a batch call (several clusters or nodes) waits once
        )

    def _slow(self, script):
        def call(c):
            if c.batch:  # an item of a batch call, which waited already
                return script(c)
            start = time.perf_counter()
            time.sleep(self.delay)
            with self._lock:
                self.spans.append((start, time.perf_counter()))
            return script(c)
        return call


def critical_path(spans: list[tuple[float, float]]) -> int:
    """The longest chain of calls each of which started after the previous one ended."""
    spans = sorted(spans)
    longest = [1] * len(spans)
    for i, (start, _) in enumerate(spans):
        longest[i] = 1 + max((longest[j] for j in range(i) if spans[j][1] <= start), default=0)
    return max(longest, default=0)


def measure(text: str, threads: int, delay: float, embedder, work: Path, whole_run: bool) -> dict:
    timed = TimedLM(delay)
    config = AmbConfig(storage_dir=work / f"s{threads}", temp_dir=work / f"t{threads}", lm_threads=threads,
                       policy="lm", max_loops=2)
    bank = MemoryBank(config, lm=timed.lm, embedder=embedder)
    started = time.perf_counter()
    if whole_run:
        result = bank.run("What did the harbour towns build?", context=text)
    else:
        result = bank.ingest(text, name="tool response")
    return {"seconds": time.perf_counter() - started, "calls": len(timed.spans), "path": critical_path(timed.spans),
            "nodes": len(result.store.graph)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--topics", type=int, default=12)
    args = parser.parse_args()
    text = "\n\n".join(
        f"Record {i}: the harbour town number {i} built {i * 3} boats in {1800 + i}; its fishers sailed to island "
        f"{i}, and guild {i} kept the accounts of the trade in salt, rope and timber for {i + 2} decades." * 2
        for i in range(args.topics))
    embedder = default_embedder()
    embedder.embed(["warm-up"])
    with tempfile.TemporaryDirectory(prefix="amb-latency-") as work:
        rows = {(kind, threads): measure(text, threads, args.delay, embedder, Path(work), kind == "run")
                for kind in ("conversion", "run") for threads in (1, 8)}
    print(f"{'what':<12}{'threads':>8}{'LM calls':>10}{'critical path':>15}{'nodes':>7}{'wall s':>9}")
    for (kind, threads), row in rows.items():
        print(f"{kind:<12}{threads:>8}{row['calls']:>10}{row['path']:>15}{row['nodes']:>7}{row['seconds']:>9.2f}")
    conv1, conv8 = rows[("conversion", 1)], rows[("conversion", 8)]
    run1, run8 = rows[("run", 1)], rows[("run", 8)]
    print(json.dumps({
        "delay_s": args.delay, "topics": args.topics, "lm_calls": conv8["calls"],
        "critical_path_calls": conv8["path"], "conversion_s_1": round(conv1["seconds"], 3),
        "conversion_s_8": round(conv8["seconds"], 3), "conversion_speedup": round(conv1["seconds"] / conv8["seconds"], 2),
        "run_lm_calls": run8["calls"], "run_critical_path_calls": run8["path"], "run_s_1": round(run1["seconds"], 3),
        "run_s_8": round(run8["seconds"], 3), "run_speedup": round(run1["seconds"] / run8["seconds"], 2),
    }))


if __name__ == "__main__":
    main()
