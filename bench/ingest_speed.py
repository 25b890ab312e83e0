"""Ingest speed: tokens per second of ``amb ingest --policy heuristic`` (no LM), the default embedding setting
against the path before issue 41 (the baseline: ``AMB_EMBEDDING_PRECISION=float32 AMB_EMBEDDING_WORKERS=1
AMB_EMBEDDING_NODE_VECTORS=whole``, the float ONNX model in batches of 8 texts on one session, each node text embedded
whole), on the same documents in one run, with the share of the time spent inside the embedder.

    python bench/ingest_speed.py [--items 110] [--repeats 1] [--profile 15] [--sets hotpotqa locomo]

Two document sets, written at bench time into a temporary folder (nothing is kept):

* ``hotpotqa``: the first ``--items`` HotpotQA dev items (../shared/datasets/hotpotqa), one Markdown file per
  item holding its ten paragraphs (``# title`` + text), as a folder of notes;
* ``locomo``: the shared LoCoMo conversations (../shared/datasets/locomo/*.json), which ``amb ingest`` reads
  as conversations, one document each.

Each ingest is the real CLI (``amb_dspy.cli.app``) in a fresh process into a new bank database, timed from the
process's start to its end (imports and model load included). The process reports the time spent in the
embedder's model and tokenizer (``CachingEmbedder.encode_seconds``, summed over the embedders it made):
``embed_share`` = that / the ingest's time. Tokens are ``estimate_tokens`` of each document as read
(``amb_dspy.memory.documents.read_documents``). Baseline and default alternate (``--repeats`` pairs, medians).
``--profile N`` runs one more default ingest of the HotpotQA folder under cProfile and prints its top ``N``
functions by own time and by cumulative time: where the rest of the time goes.

The model's ceiling: the texts the default ingest ran through the model (recorded by the child, in order) are
embedded again by the default embedder with nothing else running, one text a call as the ingest's calls go, in a
fresh process from one thread per CPU at once, then in another from one thread. The set's tokens over that time is
the rate no heuristic ingest can pass on this machine with this model and setting, whatever the rest of it costs
(``model_ceiling_tokens_per_s``; one thread: ``model_one_thread_tokens_per_s``).

The last line is JSON: ``tokens_per_s`` / ``baseline_tokens_per_s`` / ``embed_share`` /
``model_ceiling_tokens_per_s`` (HotpotQA, the target set), the same per set, and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets"
# The path before issue 41: the float model in its own batches of 8 texts, on one session, node texts embedded whole
BASELINE = {"AMB_EMBEDDING_PRECISION": "float32", "AMB_EMBEDDING_WORKERS": "1", "AMB_EMBEDDING_NODE_VECTORS": "whole"}

# Run in the child: the CLI, then what its embedders spent, as one JSON line on the last line of stdout.
CHILD = """
import cProfile, json, os, pstats, sys, threading, time
started = time.perf_counter()
from amb_dspy.cli import app
from amb_dspy.retrieval import embedding
ran, lock = [], threading.Lock()  # the texts the ONNX model ran, when AMB_BENCH_TEXTS names a file for them
if os.environ.get("AMB_BENCH_TEXTS"):
    from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder
    encode = OnnxEmbedder._encode
    def recorded(self, texts):
        with lock:
            ran.extend(texts)
        return encode(self, texts)
    OnnxEmbedder._encode = recorded
profile = cProfile.Profile() if sys.argv[1] != "-" else None
profile and profile.enable()
try:
    app(sys.argv[2:], standalone_mode=False)
finally:
    profile and profile.disable()
    models = list(embedding._defaults.values())
    if os.environ.get("AMB_BENCH_TEXTS"):  # the texts the model ran, for the ceiling (see ceiling())
        json.dump(ran, open(os.environ["AMB_BENCH_TEXTS"], "w"))
    print(json.dumps({"seconds": time.perf_counter() - started, "encode_seconds": sum(m.encode_seconds for m in models),
                      "texts": sum(m.encoded_texts for m in models)}))
    if profile:
        for key in ("tottime", "cumulative"):
            pstats.Stats(profile, stream=sys.stderr).sort_stats(key).print_stats(int(sys.argv[1]))
"""

# Run in a child for the ceiling: the recorded texts through a fresh default embedder, one a call, from argv[2]
# threads at once; prints the seconds as JSON.
CEILING = """
import json, sys, threading, time
from amb_dspy.config import AmbConfig
from amb_dspy.retrieval.embedding import shared_embedder
texts, threads = json.load(open(sys.argv[1])), int(sys.argv[2])
config = AmbConfig()
model = shared_embedder(config.embedding, config.paths.cache_dir)
model.cache_size = 0  # every text runs through the model, as each did once in the ingest
model.embed(["warm up"])
def work(part):
    for text in part:
        model.embed([text])
started = time.perf_counter()
workers = [threading.Thread(target=work, args=(texts[i::threads],)) for i in range(threads)]
[w.start() for w in workers]
[w.join() for w in workers]
print(json.dumps({"seconds": time.perf_counter() - started}))
"""


def write_hotpotqa(folder: Path, items: int) -> Path:
    """One Markdown file per HotpotQA item: its paragraphs, each under its title."""
    folder.mkdir(parents=True)
    with open(SHARED / "hotpotqa" / "dev_distractor_300.jsonl", encoding="utf-8") as lines:
        for number, line in zip(range(items), lines):
            item = json.loads(line)
            text = "\n\n".join(f"# {title}\n\n{''.join(sentences).strip()}" for title, sentences in item["context"])
            (folder / f"item-{number:03d}.md").write_text(text + "\n", encoding="utf-8")
    return folder


def count_tokens(folder: Path) -> int:
    from amb_dspy.agents.chunking import estimate_tokens
    from amb_dspy.config import AmbConfig
    from amb_dspy.memory.documents import read_documents

    limit = AmbConfig().limits.max_context_bytes
    return sum(estimate_tokens(doc.text) for doc in read_documents([folder], limit, lambda line: None))


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """A child's environment: this one, ``extra``, this tree on the path, no hub reached."""
    return {**os.environ, **extra, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def ingest(folder: Path, workdir: Path, env_extra: dict[str, str], profile: int = 0) -> dict[str, float]:
    """One ``amb ingest FOLDER --bank NEW --policy heuristic`` in a fresh process: its seconds and embedding's
    (``AMB_BENCH_TEXTS`` in ``env_extra``: the file it writes the texts its ONNX model ran to)."""
    bank = Path(tempfile.mkdtemp(dir=workdir)) / "bank.sqlite"
    env = child_env({**env_extra, "AMB_STORAGE_DIR": str(bank.parent / "storage"), "AMB_TEMP_DIR": str(bank.parent / "temp")})
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(profile or "-"), "ingest", str(folder), "--bank", str(bank),
                           "--policy", "heuristic"], env=env, cwd=workdir, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"amb ingest failed ({done.returncode}): {done.stderr[-800:]}")
    if profile:
        print(done.stderr[done.stderr.find("   Ordered by"):], file=sys.stderr)
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": wall, "encode_seconds": stats["encode_seconds"], "texts": stats["texts"]}


def ceiling(texts: Path, workdir: Path) -> dict[str, float]:
    """The seconds the default embedder takes for ``texts`` (a JSON list) alone, one text a call, each in a fresh
    process as the ingest's are: from one thread per CPU at once (``all``), then from one thread (``one``)."""
    env, seconds = child_env({}), {}
    for name, threads in (("all", len(os.sched_getaffinity(0))), ("one", 1)):
        done = subprocess.run([sys.executable, "-c", CEILING, str(texts), str(threads)], env=env, cwd=workdir,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the ceiling run failed ({done.returncode}): {done.stderr[-800:]}")
        seconds[name] = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    return seconds


def measure(folder: Path, workdir: Path, repeats: int) -> dict[str, float]:
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "default": []}
    texts = workdir / f"{folder.name}-model-texts.json"
    for r in range(repeats):
        for name in (("baseline", "default") if r % 2 == 0 else ("default", "baseline")):
            runs[name].append(ingest(folder, workdir, BASELINE if name == "baseline" else {"AMB_BENCH_TEXTS": str(texts)}))
    tokens = count_tokens(folder)
    out: dict[str, float] = {"tokens": tokens}
    if json.loads(texts.read_text()):  # none when the default backend is not ONNX's
        model = ceiling(texts, workdir)
        out["model_ceiling_tokens_per_s"] = tokens / model["all"]
        out["model_one_thread_tokens_per_s"] = tokens / model["one"]
    for name, samples in runs.items():
        seconds = statistics.median(s["seconds"] for s in samples)
        out[f"{name}_seconds"] = seconds
        out[f"{name}_tokens_per_s"] = tokens / seconds
        out[f"{name}_embed_share"] = statistics.median(s["encode_seconds"] / s["seconds"] for s in samples)
        out[f"{name}_texts"] = samples[0]["texts"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=110, help="HotpotQA items, one document each")
    parser.add_argument("--repeats", type=int, default=1, help="baseline/default pairs per set (medians)")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions of one default ingest")
    parser.add_argument("--sets", nargs="+", choices=("hotpotqa", "locomo"), default=["hotpotqa", "locomo"])
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    load_before = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hotpotqa = write_hotpotqa(work / "hotpotqa", args.items)
        locomo = work / "locomo"
        locomo.mkdir()
        for conversation in sorted((SHARED / "locomo").glob("*.json")):
            (locomo / conversation.name).write_bytes(conversation.read_bytes())
        for name, folder in (("hotpotqa", hotpotqa), ("locomo", locomo)):
            if name not in args.sets:
                continue
            results[name] = measure(folder, work, args.repeats)
            results[name]["load"] = os.getloadavg()[0]
        if args.profile:
            ingest(hotpotqa, work, {}, profile=args.profile)
    load_after = os.getloadavg()[0]
    print(f"amb ingest --policy heuristic, fresh bank each; {args.repeats} run(s) per path (median); {os.cpu_count()} CPUs, "
          f"load average {load_before:.1f} before, {load_after:.1f} after; baseline = " + " ".join(f"{k}={v}" for k, v in BASELINE.items()))
    print(f"{'set':<10} {'tokens':>8} {'texts':>7} {'baseline tok/s':>15} {'default tok/s':>14} {'speed-up':>9} "
          f"{'embed share b/d':>16} {'model alone tok/s 1 / all':>26} {'load':>5}")
    for name, r in results.items():
        alone = (f"{r['model_one_thread_tokens_per_s']:>12.0f} / {r['model_ceiling_tokens_per_s']:<11.0f}"
                 if "model_ceiling_tokens_per_s" in r else f"{'-':>26}")
        print(f"{name:<10} {r['tokens']:>8} {r['default_texts']:>7} {r['baseline_tokens_per_s']:>15.0f} "
              f"{r['default_tokens_per_s']:>14.0f} {r['default_tokens_per_s'] / r['baseline_tokens_per_s']:>8.2f}x "
              f"{r['baseline_embed_share']:>7.2f} / {r['default_embed_share']:.2f} {alone} {r['load']:>5.1f}")
    hot = results.get("hotpotqa") or results["locomo"]
    print(json.dumps({
        "tokens_per_s": round(hot["default_tokens_per_s"]), "baseline_tokens_per_s": round(hot["baseline_tokens_per_s"]),
        "embed_share": round(hot["default_embed_share"], 3), "baseline_embed_share": round(hot["baseline_embed_share"], 3),
        "model_ceiling_tokens_per_s": round(hot.get("model_ceiling_tokens_per_s", 0)),
        "sets": {name: {key: round(value, 3) for key, value in r.items()} for name, r in results.items()},
        "cpus": os.cpu_count(), "load_before": round(load_before, 2), "load_after": round(load_after, 2),
    }))


if __name__ == "__main__":
    main()
