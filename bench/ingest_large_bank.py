"""The cost of one more passage as the bank grows: ``amb ingest --policy heuristic`` of the same passages into a small
bank and into a large one, per document committed (what the 50 MB .jsonl of issue 41 meets in its last hour).

    python bench/ingest_large_bank.py [--nodes 50000] [--passages 150] [--trees OLD_TREE ...]

The passages are the synthetic .jsonl of ``bench/ingest_jsonl.py`` (shared HotpotQA paragraphs). The small bank is
its first ``--seed-mb`` MB ingested by the real CLI. The large bank is the small one and copies of it (each node,
entry and edge again, the entries' texts marked ``(replica k)`` at their end so that no two are the same document;
their nodes' texts and lines are the originals', so no model runs to make them) until it holds ``--nodes`` nodes,
saved as a bank database: a bank of that size without hours of embedding. Then ``--passages`` passages from later in
the file (none of them in either bank) are ingested into a copy of each bank, in a fresh process each; the time per
document is taken between the first and the last "committed" progress lines (the bank's load aside).

``--trees``: source trees to run the CLI from (``PYTHONPATH``), e.g. this tree and a checkout of main, run in turn
on the same banks. The last line is JSON with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import ingest_jsonl  # noqa: E402 - the synthetic file's builder


def run_cli(tree: Path, work: Path, source: Path, bank: Path) -> list[float]:
    """``amb ingest SOURCE --bank BANK --policy heuristic`` from ``tree`` in a fresh process: the times at which each
    document was committed."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "AMB_STORAGE_DIR": str(work / "storage"), "AMB_TEMP_DIR": str(work / "temp")}
    command = [sys.executable, "-c", "from amb_dspy.cli import app; app()", "ingest", str(source), "--bank", str(bank),
               "--policy", "heuristic"]
    started, marks = time.perf_counter(), []
    with subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:
        for line in child.stderr:
            if line.startswith("committed "):
                marks.append(time.perf_counter() - started)
    if child.returncode:
        raise SystemExit(f"amb ingest failed ({child.returncode})")
    return marks


def grow(small: Path, large: Path, nodes: int) -> int:
    """``large``: the bank at ``small`` and copies of it up to ``nodes`` nodes (see the module docstring)."""
    from amb_dspy.config import AmbConfig
    from amb_dspy.memory.graph_ops import MemoryStore
    from amb_dspy.retrieval.embedding import shared_embedder

    config = AmbConfig()
    store = MemoryStore.load(small, shared_embedder(config.embedding, config.paths.cache_dir))
    nodes_0, entries_0 = list(store.graph.nodes_dict.values()), list(store.tree.entries.values())
    held: dict[str, dict[str, list]] = {}  # entry id -> node id -> its spans in the entry
    for node in nodes_0:
        for source in node.sources:
            held.setdefault(source.entry_id, {}).setdefault(node.id, []).extend(source.spans)
    copy, edges_0 = 0, store.graph.edges()
    while len(store.graph) < nodes:
        copy += 1
        _replica(store, nodes_0, [(e, held.get(e.entry_id, {})) for e in entries_0], edges_0, copy)
    store.save(large)
    return len(store.graph)


def _replica(store, nodes, entries, edges, copy: int) -> None:
    """One copy of ``nodes``, ``entries`` and ``edges`` into ``store``, as one change."""
    import hashlib

    from amb_dspy.storage import InteractionEntry, NodeContent

    with store.transaction():
        made = store.add_nodes([NodeContent(summary=n.summary, context=n.context, keywords=list(n.keywords))
                                for n in nodes])
        new_id = {old.id: new.id for old, new in zip(nodes, made)}
        for entry, holders in entries:
            text = f"{entry.text}\n(replica {copy})"
            metadata = {**entry.metadata, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "name": f"{entry.metadata.get('name', '')}/replica{copy}"}
            spans = {new_id[node_id]: node_spans for node_id, node_spans in holders.items()}
            store.record_entry(InteractionEntry(text=text, metadata=metadata), list(spans), spans=spans)
        for a, b in edges:
            store.add_edge(new_id[a], new_id[b])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50_000, help="nodes of the large bank")
    parser.add_argument("--seed-mb", type=float, default=0.3, help="MB of the file in the small bank")
    parser.add_argument("--passages", type=int, default=150, help="passages ingested into each bank")
    parser.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to run the CLI from")
    parser.add_argument("--keep", type=Path, help="a new folder to work in and leave (the banks, the passages)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=args.keep is None)
        whole, seed, more = work / "passages.jsonl", work / "seed.jsonl", work / "more.jsonl"
        ingest_jsonl.build(whole, 6)
        seeded = ingest_jsonl.head(whole, seed, args.seed_mb)
        _later(whole, more, 3 * seeded, args.passages)  # paragraphs neither bank holds
        small, large = work / "small.sqlite", work / "large.sqlite"
        run_cli(Path(args.trees[0]), work, seed, small)
        started = time.perf_counter()
        size = grow(small, large, args.nodes)
        grown = time.perf_counter() - started
        for tree in args.trees:
            for name, bank in (("small", small), ("large", large)):
                target = work / f"into-{name}.sqlite"
                shutil.copy(bank, target)
                marks = run_cli(Path(tree), work, more, target)
                per_doc = (marks[-1] - marks[0]) / (len(marks) - 1) * 1000
                rows.append({"tree": tree, "bank": name, "documents": len(marks), "ms_per_document": round(per_doc, 1),
                             "load": round(os.getloadavg()[0], 2)})
                target.unlink()
    small_nodes = seeded  # about one node a passage
    print(f"small bank: {seeded} passages (~{small_nodes} nodes); large bank: {size} nodes, grown in {grown:.0f} s; "
          f"{args.passages} more passages into each; {os.cpu_count()} CPUs, load {load_before:.1f} before")
    print(f"{'tree':<40} {'bank':<6} {'docs':>5} {'ms/doc':>8} {'load':>5}")
    for row in rows:
        print(f"{row['tree'][-40:]:<40} {row['bank']:<6} {row['documents']:>5} {row['ms_per_document']:>8.1f} {row['load']:>5.1f}")
    print(json.dumps({"large_nodes": size, "runs": rows, "cpus": os.cpu_count(), "load_before": round(load_before, 2),
                      "load_after": round(os.getloadavg()[0], 2)}))


def _later(source: Path, target: Path, skip: int, count: int) -> None:
    """Lines ``skip`` to ``skip + count`` of ``source`` into ``target``."""
    with open(source, encoding="utf-8") as lines, open(target, "w", encoding="utf-8") as out:
        for number, line in enumerate(lines):
            if number >= skip + count:
                break
            if number >= skip:
                out.write(line)


if __name__ == "__main__":
    main()
