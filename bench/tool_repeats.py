"""How often the executor repeats a search or a visit within a task, and how many the tool cache answers
from memory: HotpotQA questions in bank mode over a local corpus of all their paragraphs (as
``amb eval --mode bank --corpus``). One line per question, then a JSON line.

    python bench/tool_repeats.py ../shared/datasets/hotpotqa/dev_distractor_300.jsonl [--n 5] [--lm local]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.storage import Hop, hop_summary  # noqa: E402
from amb_dspy.tools import LocalCorpus  # noqa: E402
from optimize.hotpotqa import load_hotpotqa  # noqa: E402
from optimize.hotpotqa_eval import write_corpus  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--lm", default="local")
    parser.add_argument("--max-loops", type=int, default=3)
    args = parser.parse_args()
    items = load_hotpotqa(f"hotpotqa:{args.path}", n=args.n)
    embedder = default_embedder()
    totals: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="amb-repeats-") as work:
        work = Path(work)
        corpus = LocalCorpus.load(write_corpus(items, work), embedder)
        config = AmbConfig(lm=args.lm, storage_dir=work / "s", temp_dir=work / "t", max_loops=args.max_loops,
                           react_max_iters=4)
        print(f"{'question':<26}{'searches':>9}{'unique':>8}{'repeats avoided':>17}{'visits':>8}{'hops':>6}{'s':>8}")
        for item in items:
            started = time.monotonic()
            result = MemoryBank(config, embedder=embedder, corpus=corpus).run(item.question)
            counts = hop_summary([Hop.model_validate(hop) for hop in result.hops])
            for key, value in counts.items():
                totals[key] = totals.get(key, 0) + value
            print(f"{item.id:<26}{counts['searches']:>9}{counts['unique_searches']:>8}{counts['repeats_avoided']:>17}"
                  f"{counts['visits']:>8}{counts['hops']:>6}{time.monotonic() - started:>8.1f}", flush=True)
    print(json.dumps({"questions": len(items), "lm": args.lm, **totals}))


if __name__ == "__main__":
    main()
