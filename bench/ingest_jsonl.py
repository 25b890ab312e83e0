"""A large .jsonl of passages through ``amb ingest --policy heuristic``: time, tokens/s and peak memory, measured on a
slice and extrapolated to the whole file when the whole would take too long (issue 41's 50 MB case).

    python bench/ingest_jsonl.py [--mb 50] [--slice-mb 5]

The file is synthetic, built from the shared HotpotQA paragraphs (dev_distractor_300 and train_100, each distinct
title once: about 3 MB): one passage a line, ``{"id", "title", "text"}``, the paragraphs in order, then again as
copies until the file holds ``--mb`` MB. Copy k (k >= 1) of a paragraph has " (copy k)" after its title and after
each of its sentences, so that no sentence of it is one the embedder or the token counter has seen (a repeat would
be a cache hit and make the ingest look faster than new text is). The first ``--slice-mb`` MB of it (whole lines)
is ingested into a new bank in a fresh process (the real CLI); the whole file is only read
(:func:`amb_dspy.memory.documents.read_documents`, in another fresh process), to show what reading 50 MB costs in time
and memory. Peak RSS is the child's (``resource.getrusage(RUSAGE_CHILDREN)``, as ``/usr/bin/time -v`` reports it).

Extrapolation (when a slice is ingested): the rest of the file's tokens at the slice's seconds per token after its
first fifth (start-up aside), and at its last fifth's (documents committed into the largest bank of the slice: slower
if the cost per document grows with the bank); the peak RSS grows from the slice's by the slice's MB per token after
its first fifth (the child's VmRSS when each fifth is committed). Both are estimates, and printed as such. The last
line is JSON with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "datasets" / "hotpotqa"
READ_ONLY = """
import resource, sys, time
from amb_dspy.memory.documents import read_documents
started = time.perf_counter()
count = sum(1 for _ in read_documents([sys.argv[1]], 10**9, lambda line: None))
print(count, time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def paragraphs() -> list[tuple[str, list[str]]]:
    """Each distinct HotpotQA title once, with its sentences."""
    seen: dict[str, list[str]] = {}
    for name in ("dev_distractor_300.jsonl", "train_100.jsonl"):
        with open(SHARED / name, encoding="utf-8") as lines:
            for line in lines:
                for title, sentences in json.loads(line)["context"]:
                    seen.setdefault(title, [s for s in sentences if s.strip()])
    return [(t, s) for t, s in seen.items() if s]


def build(path: Path, megabytes: float) -> int:
    """The synthetic file (see the module docstring); returns its passages."""
    pool, size, count = paragraphs(), 0, 0
    with open(path, "w", encoding="utf-8") as out:
        while size < megabytes * 1e6:
            copy, (title, sentences) = divmod(count, len(pool))[0], pool[count % len(pool)]
            mark = f" (copy {copy})" if copy else ""
            text = "".join(s.rstrip() + mark + " " for s in sentences).strip()
            line = json.dumps({"id": f"p{count}", "title": title + mark, "text": text}, ensure_ascii=False) + "\n"
            out.write(line)
            size, count = size + len(line.encode("utf-8")), count + 1
    return count


def head(source: Path, target: Path, megabytes: float) -> int:
    """The first whole lines of ``source`` up to ``megabytes`` MB, into ``target``; returns how many."""
    size, count = 0, 0
    with open(source, "rb") as lines, open(target, "wb") as out:
        for line in lines:
            if size + len(line) > megabytes * 1e6:
                break
            out.write(line)
            size, count = size + len(line), count + 1
    return count


def tokens_of(path: Path) -> int:
    from amb_dspy.agents.chunking import estimate_tokens
    from amb_dspy.memory.documents import read_documents

    return sum(estimate_tokens(d.text) for d in read_documents([path], 10**9, lambda line: None))


def ingest(path: Path, work: Path, documents: int) -> dict[str, float]:
    """``amb ingest PATH --bank NEW --policy heuristic`` in a fresh process: its wall time, the times at which each
    fifth of the documents was committed (from its progress lines), and its peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "AMB_STORAGE_DIR": str(work / "storage"), "AMB_TEMP_DIR": str(work / "temp")}
    command = [sys.executable, "-c", "from amb_dspy.cli import app; app()", "ingest", str(path),
               "--bank", str(work / "bank.sqlite"), "--policy", "heuristic"]
    started, marks, rss = time.perf_counter(), [], []
    with subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:
        for line in child.stderr:
            if line.startswith("committed ") and len(marks) < 5 and \
                    int(line.split()[1].split("/")[0]) >= documents * (len(marks) + 1) // 5:
                marks.append(time.perf_counter() - started)
                rss.append(_rss_mb(child.pid))
    if child.returncode:
        raise SystemExit(f"amb ingest failed ({child.returncode})")
    wall = time.perf_counter() - started
    return {"seconds": wall, "fifths": marks, "fifths_rss_mb": rss,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def _rss_mb(pid: int) -> float:
    """A running process's resident memory now (Linux), in MB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


def read_only(path: Path) -> dict[str, float]:
    """Reading every document of ``path`` (no ingest) in a fresh process: documents, seconds, peak RSS."""
    done = subprocess.run([sys.executable, "-c", READ_ONLY, str(path)], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True)
    count, seconds, rss = done.stdout.split()
    return {"documents": int(count), "seconds": float(seconds), "peak_rss_mb": int(rss) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=50.0, help="size of the synthetic file")
    parser.add_argument("--slice-mb", type=float, default=5.0, help="what is ingested: its first MB (0: the whole)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        whole, part = work / "passages.jsonl", work / "slice.jsonl"
        passages = build(whole, args.mb)
        documents = head(whole, part, args.slice_mb) if args.slice_mb else passages
        target = part if args.slice_mb else whole
        run = ingest(target, work, documents)  # first: RUSAGE_CHILDREN is then this child's peak
        slice_tokens, whole_tokens = tokens_of(target), tokens_of(whole)
        reading = read_only(whole)
    scale, more = whole_tokens / slice_tokens, whole_tokens - slice_tokens
    fifths, sizes = run["fifths"], run["fifths_rss_mb"]
    steady = (fifths[4] - fifths[0]) / (0.8 * slice_tokens)  # seconds a token after the first fifth (start-up aside)
    late = (fifths[4] - fifths[3]) / (0.2 * slice_tokens)  # in the last fifth: into the largest bank of the slice
    by_mean, by_last_fifth = run["seconds"] + more * steady, run["seconds"] + more * late
    rss_estimate = run["peak_rss_mb"] + more * (sizes[4] - sizes[0]) / (0.8 * slice_tokens)
    load_after = os.getloadavg()[0]
    print(f"synthetic .jsonl {args.mb:.0f} MB, {passages} passages, {whole_tokens} tokens; ingested {args.slice_mb or args.mb:.1f} MB: "
          f"{documents} passages, {slice_tokens} tokens; {os.cpu_count()} CPUs, load {load_before:.1f} before, {load_after:.1f} after")
    print(f"ingest {run['seconds']:.0f} s ({slice_tokens / run['seconds']:.0f} tokens/s), peak RSS {run['peak_rss_mb']:.0f} MB; "
          f"fifths committed at {', '.join(f'{t:.0f}' for t in run['fifths'])} s")
    print(f"reading the whole {args.mb:.0f} MB file only: {reading['documents']} documents in {reading['seconds']:.1f} s, "
          f"peak RSS {reading['peak_rss_mb']:.0f} MB")
    print(f"whole file ({scale:.1f}x the slice's tokens), extrapolated: {by_mean / 60:.0f} min at the slice's rate after "
          f"its first fifth, {by_last_fifth / 60:.0f} min at its last fifth's; peak RSS about {rss_estimate:.0f} MB "
          f"(RSS at the fifths: {', '.join(f'{m:.0f}' for m in sizes)} MB)")
    print(json.dumps({"passages": passages, "tokens": whole_tokens, "slice_passages": documents, "slice_tokens": slice_tokens,
                      "slice_seconds": round(run["seconds"], 1), "slice_tokens_per_s": round(slice_tokens / run["seconds"]),
                      "slice_peak_rss_mb": round(run["peak_rss_mb"]), "fifths_s": [round(t, 1) for t in run["fifths"]],
                      "read_seconds": round(reading["seconds"], 1), "read_peak_rss_mb": round(reading["peak_rss_mb"]),
                      "fifths_rss_mb": [round(m) for m in sizes], "estimated_minutes": round(by_mean / 60, 1),
                      "estimated_minutes_last_fifth": round(by_last_fifth / 60, 1), "estimated_peak_rss_mb": round(rss_estimate),
                      "cpus": os.cpu_count(), "load_before": round(load_before, 2), "load_after": round(load_after, 2)}))


if __name__ == "__main__":
    main()
