"""Adding one LoCoMo session to a bank that holds many tokens already: seconds, against an empty bank.

The issue's target: one session (~1.5k tokens, heuristic policy) added to a bank of 1M tokens in <= 2 s, and no
slower than twice the same add to an empty bank. The banks are real: pooled HotpotQA items (the shared dev file,
then train; an item's ten paragraphs are one document) with LoCoMo 30's sessions spread among them, each added
with ``MemoryBank.ingest(text, name, into=store)`` under the heuristic policy, as ``bench/growth.py`` grows its
bank. The sessions added are LoCoMo 26's (read as ``amb ingest`` reads the file: one document per session,
dated), so none of them is in the bank already.

At each size of ``--sizes`` (tokens, ``estimate_tokens``; 0 is the empty bank) the bank is saved to a bank
database (``bank_SIZE.sqlite`` under ``--cache``, kept for the next run, which opens it instead of growing it
again), opened from it as a user's ``amb ingest --bank`` would, and ``--probes`` sessions are added to it one
after the other. Each add is timed alone (``ingest``), the embedder's cache of vectors emptied first (a new
session was never embedded, and a process that opened a bank holds none of its nodes' vectors), then saved to
the database. Prints a row per size (tokens, nodes, the median add, each add, the median add's CPU seconds --
this process's, less swayed by other work on the machine --, the median save, the seconds to open the bank, the
median add over the empty bank's) and, last, one JSON object with the load average. ``--profile FILE`` writes a
cProfile of the largest size's adds. The shared data gives ~830k tokens at most: a larger size stops there.

    python bench/add_latency.py [--sizes 0,64000,256000,1000000] [--probes 3] [--cache DIR] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from growth import SHARED, pooled  # noqa: E402

from amb_dspy.agents.chunking import estimate_tokens  # noqa: E402
from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.memory.documents import NamedDocument, read_documents  # noqa: E402
from amb_dspy.memory.graph_ops import MemoryStore  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.storage import InsightDoc  # noqa: E402

SIZES = (0, 64_000, 256_000)
PROBE_SESSIONS = (11, 12, 13, 4, 1)  # LoCoMo 26's sessions of ~1.5k tokens first


def probes(path: Path, n: int) -> list[NamedDocument]:
    """The first ``n`` of :data:`PROBE_SESSIONS`, as ``amb ingest`` reads the conversation file."""
    sessions = {int(d.name.rsplit("_", 1)[1]): d for d in read_documents([path], 10**8, print)}
    return [sessions[number] for number in PROBE_SESSIONS[:n]]


class Grower:
    """The bank of one run, grown document by document to each size; its state saved beside each size's file."""

    def __init__(self, bank: MemoryBank, documents: list, cache: Path):
        self.bank, self.documents, self.cache = bank, documents, cache
        self.store = MemoryStore(bank.embedder, InsightDoc(task_goal="bench/add_latency.py"))
        self.used, self.tokens = 0, 0  # documents added, their tokens

    def bank_of(self, size: int) -> Path:
        """The bank file of ``size`` tokens: opened from the cache when there, else grown to it and saved."""
        path, state = self.cache / f"bank_{size}.sqlite", self.cache / f"bank_{size}.json"
        if path.exists() and state.exists():
            self.store = MemoryStore.load(path, self.bank.embedder)
            self.used, self.tokens = json.loads(state.read_text())["documents"], json.loads(state.read_text())["tokens"]
            return path
        started = time.perf_counter()
        while self.tokens < size and self.used < len(self.documents):
            document = self.documents[self.used]
            self.bank.ingest(document.text, document.name, into=self.store, date=document.date)
            self.used, self.tokens = self.used + 1, self.tokens + estimate_tokens(document.text)
        grown = time.perf_counter() - started
        self.store.save(path)  # as amb ingest --bank saves: the new lines embedded, their vectors kept
        state.write_text(json.dumps({"documents": self.used, "tokens": self.tokens, "grow_s": round(grown, 1)}))
        return path


def forget_vectors(embedder) -> None:
    """Empty the embedder's cache of vectors: a session a user adds was never embedded before, and the same
    sessions are added at every size here."""
    with embedder._lock:
        embedder._cache.clear()


def add_probes(bank: MemoryBank, path: Path | None, sessions: list[NamedDocument], work: Path,
               profiler: cProfile.Profile | None) -> tuple[MemoryStore, dict]:
    """Open a copy of the bank at ``path`` (a new one when None) and add each session, saving after each: the
    store and the seconds (open; each add, wall and this process's CPU; each save)."""
    copy = work / "probe.sqlite"
    copy.unlink(missing_ok=True)
    started = time.perf_counter()
    if path is not None:
        shutil.copyfile(path, copy)
        store = MemoryStore.load(copy, bank.embedder)
    else:
        store = MemoryStore(bank.embedder, InsightDoc(task_goal="bench/add_latency.py"))
    seconds = {"open": time.perf_counter() - started, "add": [], "cpu": [], "save": []}
    for session in sessions:
        forget_vectors(bank.embedder)
        if profiler is not None:
            profiler.enable()
        started, cpu = time.perf_counter(), time.process_time()
        bank.ingest(session.text, session.name, into=store, date=session.date)
        seconds["add"].append(time.perf_counter() - started)
        seconds["cpu"].append(time.process_time() - cpu)
        if profiler is not None:
            profiler.disable()
        started = time.perf_counter()
        store.save(copy)
        seconds["save"].append(time.perf_counter() - started)
    return store, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bank sizes in tokens (0: empty)")
    parser.add_argument("--probes", type=int, default=3, help=f"sessions added per size (at most {len(PROBE_SESSIONS)})")
    parser.add_argument("--cache", help="folder keeping the grown banks between runs (default: a temporary one)")
    parser.add_argument("--profile", help="write a cProfile of the largest size's adds to this file")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {0})
    sessions = probes(SHARED / "locomo" / "26.json", min(args.probes, len(PROBE_SESSIONS)))
    embedder = default_embedder()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="amb-add-latency-") as work:
        config = AmbConfig(policy="heuristic", storage_dir=Path(work) / "storage", temp_dir=Path(work) / "temp",
                           lm_threads=1)
        bank = MemoryBank(config, embedder=embedder)
        cache = Path(args.cache) if args.cache else Path(work) / "cache"
        cache.mkdir(parents=True, exist_ok=True)
        documents = pooled([str(SHARED / "hotpotqa" / "dev_distractor_300.jsonl"),
                            str(SHARED / "hotpotqa" / "train_100.jsonl")], [str(SHARED / "locomo" / "30.json")])
        grower, rows = Grower(bank, documents, cache), []
        add_probes(bank, None, probes(SHARED / "locomo" / "26.json", 5)[-1:], Path(work), None)  # warms the model
        for size in sizes:
            path = grower.bank_of(size) if size else None
            profiler = cProfile.Profile() if args.profile and size == sizes[-1] else None
            store, seconds = add_probes(bank, path, sessions, Path(work), profiler)
            if profiler is not None:
                profiler.dump_stats(args.profile)
            row = {"size": size, "tokens": grower.tokens if size else 0,
                   "bank_nodes": len(grower.store.graph) if size else 0, "nodes_after": len(store.graph),
                   "add_s_median": round(statistics.median(seconds["add"]), 3),
                   "add_s": [round(s, 3) for s in seconds["add"]],
                   "add_cpu_s_median": round(statistics.median(seconds["cpu"]), 3),
                   "save_s_median": round(statistics.median(seconds["save"]), 3), "open_s": round(seconds["open"], 3)}
            row["vs_empty"] = round(row["add_s_median"] / rows[0]["add_s_median"], 2) if rows else 1.0
            rows.append(row)
            print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
    print(json.dumps({"sizes": rows, "sessions": [s.name for s in sessions], "load": os.getloadavg(),
                      "seconds": round(time.monotonic() - started)}))


if __name__ == "__main__":
    main()
