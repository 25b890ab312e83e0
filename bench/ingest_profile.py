"""Where an ingest's time goes a passage: ``amb ingest --policy heuristic`` of a slice of the synthetic .jsonl under
cProfile, its main thread (the commits) and its read-ahead threads (reading; preparing: the policies, the embedding; added up) each
profiled, broken down into the parts of a commit.

    python bench/ingest_profile.py [--mb 0.5] [--into BANK.sqlite] [--source FOLDER] [--top 25]

The passages are the first ``--mb`` MB of ``bench/ingest_jsonl.py``'s synthetic file (shared HotpotQA paragraphs),
ingested in this process by the real CLI into a new bank, or into a copy of ``--into`` (a large bank, e.g. the one
``bench/ingest_large_bank.py --keep DIR`` leaves: what a passage costs when the bank is large). Prints milliseconds a
passage for each part, then the ``--top`` functions of each thread by own time; the last line is JSON with the load.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import ingest_jsonl  # noqa: E402 - the synthetic file's builder

# (part, file suffix, function): the cumulative time of these functions, a passage
PARTS = [
    ("waiting for the read-ahead", "memory/ingest_ahead.py", "__iter__"),
    ("commit (BankWriter.commit)", "memory/bank_writer.py", "commit"),
    ("  conversion of the passage", "task/ingest.py", "ingest"),
    ("    classification + structure (prepared ahead)", "memory/writer.py", "_classify_structure"),
    ("    analysis", "memory/writer.py", "_analyse_new"),
    ("      retrieval against the bank", "memory/graph_ops.py", "retrieve_for_node"),
    ("      the heuristic verdict", "fallback/analysis.py", "relate_by_hybrid_score"),
    ("    new nodes and entry (graph_ops)", "memory/graph_ops.py", ("add_nodes", "record_entry")),
    ("    the session's progress events", "task/session.py", "emit"),
    ("  save (MemoryStore.save)", "memory/bank_io.py", "save"),
    ("    laying out the new lines", "memory/bank_io.py", "embed_lines"),
    ("    the bank database's write", "storage/bank_db.py", "write_bank_db"),
    ("progress lines", "view/progress.py", "show"),
    ("read-ahead: the embedder", "retrieval/embedding_base.py", "embed"),
    ("read-ahead: token counts of the policies", "agents/base.py", "count_tokens"),
]


def part_ms(stats: pstats.Stats, suffix: str, names, passages: int) -> float:
    names = (names,) if isinstance(names, str) else names
    return 1000 * sum(ct for (file, _, name), (_, _, _, ct, _) in stats.stats.items()
                      if file.endswith(suffix) and name in names) / passages


def profiled_ingest(source: Path, bank: Path, work: Path) -> tuple[cProfile.Profile, list[cProfile.Profile], float]:
    """The CLI's ingest in this process: the main thread's profile, the read-ahead's (its reading thread's and each
    preparing thread's), the seconds."""
    from amb_dspy.cli import app
    from amb_dspy.memory import ingest_ahead

    main, ahead, run = cProfile.Profile(), cProfile.Profile(), ingest_ahead.ReadAhead._run
    prepare, preparers, each = ingest_ahead.ReadAhead._prepared, [], threading.local()

    def profiled_run(self, *args):
        ahead.enable()
        try:
            return run(self, *args)
        finally:
            ahead.disable()

    def profiled_prepare(self, *args):  # in the preparing threads: a profile each, added up below
        if not hasattr(each, "profile"):
            each.profile = cProfile.Profile()
            preparers.append(each.profile)
        each.profile.enable()
        try:
            return prepare(self, *args)
        finally:
            each.profile.disable()

    ingest_ahead.ReadAhead._run, ingest_ahead.ReadAhead._prepared = profiled_run, profiled_prepare
    os.environ.update(AMB_STORAGE_DIR=str(work / "storage"), AMB_TEMP_DIR=str(work / "temp"))
    started = time.perf_counter()
    main.enable()
    try:
        app(["ingest", str(source), "--bank", str(bank), "--policy", "heuristic"], standalone_mode=False)
    finally:
        main.disable()
        ingest_ahead.ReadAhead._run, ingest_ahead.ReadAhead._prepared = run, prepare
    return main, [ahead, *preparers], time.perf_counter() - started  # the read-ahead: reading and preparing threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=0.5, help="MB of the synthetic file ingested")
    parser.add_argument("--into", type=Path, help="a bank database to ingest into (a copy of it)")
    parser.add_argument("--source", type=Path, help="a folder of documents ingested instead of the slice (e.g. the one "
                        "bench/ingest_speed.py writes); 'passage' then means one of its documents")
    parser.add_argument("--top", type=int, default=25, help="functions of each thread printed")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.source is not None:
            source, passages = args.source, sum(1 for path in args.source.rglob("*") if path.is_file())
        else:
            ingest_jsonl.build(work / "passages.jsonl", args.mb + 0.1)
            source, passages = work / "slice.jsonl", ingest_jsonl.head(work / "passages.jsonl", work / "slice.jsonl", args.mb)
        if args.into is not None:
            shutil.copy(args.into, work / "bank.sqlite")
        main_profile, ahead_profiles, seconds = profiled_ingest(source, work / "bank.sqlite", work)
    main_stats, ahead_stats = pstats.Stats(main_profile), pstats.Stats(*ahead_profiles)
    print(f"{passages} passages in {seconds:.1f} s ({1000 * seconds / passages:.1f} ms a passage, profiled), into "
          f"{args.into or 'a new bank'}; {os.cpu_count()} CPUs, load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    parts = {}
    for name, suffix, functions in PARTS:
        stats = ahead_stats if name.startswith("read-ahead") else main_stats
        parts[name.strip()] = round(part_ms(stats, suffix, functions, passages), 2)
        print(f"{name:<52} {parts[name.strip()]:>8.1f} ms")
    for title, stats in (("main thread", main_stats), ("read-ahead threads, added up", ahead_stats)):
        print(f"\n--- {title}, by own time")
        stats.stream = sys.stdout
        stats.sort_stats("tottime").print_stats(args.top)
    print(json.dumps({"passages": passages, "seconds": round(seconds, 1), "ms_per_passage": parts,
                      "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
