"""A local corpus indexed once: how long `LocalCorpus.load` takes cold, again, and after one file changed.

    python bench/corpus_cache.py                   # 5,000 documents from ../shared/datasets/hotpotqa
    python bench/corpus_cache.py --docs 1000 --baseline-docs 100

The corpus is a folder of Markdown files, one Wikipedia paragraph each: every distinct paragraph of
the HotpotQA samples (dev 300 + train 100: 3,954 titles). Beyond that, each further document joins
two consecutive paragraphs under both titles, so that the folder reaches ``--docs`` documents of real
text (5,000 by default; the issue's fullwiki sample is not among the shared datasets).

Every load runs in a fresh process (so no in-memory cache helps), timing ``LocalCorpus.load`` alone,
the model load before it where the load must embed (cold loads), and the whole process (imports,
and one search, included):

* cold: an empty cache; every passage is embedded (default backend) and the cache written;
* again: the same corpus, three times (median) -- the target is under 3 s for 5,000 documents;
* one file changed: a sentence appended to one document; only its passage should be embedded;
* before: today's load (no cache, sentence-transformers) on the first ``--baseline-docs`` documents,
  interleaved with the new cold load of the same documents; the full corpus's time today is
  extrapolated from its passages per second (a full run would take many minutes on 2 cores).

The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT.parent / "shared/datasets/hotpotqa"


def paragraphs(folder: Path) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for name in ("dev_distractor_300.jsonl", "train_100.jsonl"):
        with open(folder / name, encoding="utf-8") as lines:
            for line in lines:
                for title, sentences in json.loads(line)["context"]:
                    seen.setdefault(title, "".join(sentences).strip())
    return list(seen.items())


def write_corpus(folder: Path, items: list[tuple[str, str]], count: int) -> None:
    docs = items[:count]
    for i in range(count - len(docs)):  # beyond the distinct paragraphs: two consecutive ones joined
        (t1, p1), (t2, p2) = items[i % len(items)], items[(i + 1) % len(items)]
        docs.append((f"{t1} / {t2}", f"{p1}\n\n{p2}"))
    folder.mkdir(parents=True)
    for i, (title, text) in enumerate(docs):
        slug = re.sub(r"[^\w]+", "-", title.lower()).strip("-")[:40]
        (folder / f"{i:05d}-{slug}.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")


CHILD = """
import json, sys, time
started = time.perf_counter()
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.tools.corpus import LocalCorpus
imported = time.perf_counter() - started

class Counting:
    def __init__(self, inner):
        self.inner, self.dim, self.model_id, self.texts = inner, inner.dim, inner.model_id, 0
    def embed(self, texts):
        self.texts += len(texts)
        return self.inner.embed(texts)

folder, cache, backend, warm = sys.argv[1], sys.argv[2] or None, sys.argv[3], sys.argv[4] == "warm"
embedder = Counting(default_embedder(backend))
t = time.perf_counter()
if warm:  # the model loaded before the clock starts: load_s is then reading, embedding and indexing
    embedder.inner.embed(["warm-up"])
model_load = time.perf_counter() - t
t = time.perf_counter()
corpus = LocalCorpus.load(folder, embedder, cache_dir=cache, progress=False)
load = time.perf_counter() - t
embedded = embedder.texts
top = corpus.search("Which country is the Eiffel Tower in", k=1)
print(json.dumps({"load_s": load, "import_s": imported, "model_load_s": model_load if warm else 0.0,
                  "embedded": embedded, "documents": len(corpus), "passages": corpus.passage_count,
                  "top": top[0].title if top else ""}))
"""


def load(folder: Path, cache: Path | None, backend: str = "onnx", warm: bool = False) -> dict:
    """One load in a fresh process; ``warm`` loads the embedding model before the timed load."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(cache or ""), backend, "warm" if warm else "-"],
                          capture_output=True,
                          text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    if done.returncode:
        sys.exit(f"a load failed:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hotpotqa", type=Path, default=DATASETS, help="folder with the HotpotQA samples")
    parser.add_argument("--docs", type=int, default=5000)
    parser.add_argument("--baseline-docs", type=int, default=300, help="documents for today's load (extrapolated)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    items = paragraphs(args.hotpotqa)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus, small, cache, small_cache = tmp / "corpus", tmp / "small", tmp / "cache", tmp / "small-cache"
        write_corpus(corpus, items, args.docs)
        write_corpus(small, items, args.baseline_docs)

        today = load(small, None, "sentence-transformers", warm=True)  # before: no cache, today's embedder
        new_small = load(small, small_cache, warm=True)
        cold = load(corpus, cache, warm=True)
        again = [load(corpus, cache) for _ in range(3)]
        changed_file = sorted(corpus.iterdir())[args.docs // 2]
        with open(changed_file, "a", encoding="utf-8") as out:
            out.write("\nThis sentence was added after the corpus was first indexed.\n")
        changed = load(corpus, cache)

    load_after = os.getloadavg()[0]
    again_s = statistics.median(r["load_s"] for r in again)
    again_process_s = statistics.median(r["process_s"] for r in again)
    today_rate = today["passages"] / today["load_s"]
    today_full_s = today["model_load_s"] + cold["passages"] / today_rate
    print(f"{cold['documents']} documents, {cold['passages']} passages; {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} before, {load_after:.1f} after")
    print(f"{'load':<52} {'load s':>8} {'model s':>8} {'imports s':>9} {'process s':>10} {'embedded':>9}")
    rows = [
        (f"before: {today['documents']} docs, no cache, sentence-transformers", today),
        (f"after, cold: {new_small['documents']} docs, onnx", new_small),
        (f"after, cold: {cold['documents']} docs, onnx", cold),
        *[(f"after, again #{i + 1}", r) for i, r in enumerate(again)],
        ("after, one file changed", changed),
    ]
    for label, r in rows:
        print(f"{label:<52} {r['load_s']:>8.2f} {r['model_load_s']:>8.2f} {r['import_s']:>9.2f} {r['process_s']:>10.2f} "
              f"{r['embedded']:>9}")
    print(f"before, {cold['documents']} docs: model load + {cold['passages']} passages at {today_rate:.1f} passages/s "
          f"= {today_full_s:.0f} s (extrapolated)")
    print(json.dumps({
        "documents": cold["documents"], "passages": cold["passages"],
        "baseline_load_s_estimated": round(today_full_s, 1), "baseline_passages_per_s": round(today_rate, 2),
        "cold_load_s": round(cold["load_s"], 2), "second_load_s": round(again_s, 3),
        "second_load_process_s": round(again_process_s, 3), "second_load_embedded": max(r["embedded"] for r in again),
        "changed_file_load_s": round(changed["load_s"], 3), "changed_file_embedded": changed["embedded"],
        "second_load_speedup_vs_baseline": round(today_full_s / again_s, 1), "target_second_load_s": 3.0,
        "cpus": os.cpu_count(), "load_before": round(load_before, 2), "load_after": round(load_after, 2),
    }))


if __name__ == "__main__":
    main()
