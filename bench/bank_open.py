"""Opening and saving a large bank, JSON file against bank database, without growing one for an hour.

``bench/growth.py`` measures open time on a real grown bank, but growing one to a million tokens takes long. This
builds a bank of the same shape at once: documents of ~1,000 tokens (random words), five nodes each (summary,
context, keywords, a source span), each node linked to two earlier ones, unit vectors of the embedder's dimension
(random: opening never runs the model, so the values do not matter). It then prints, for the JSON bank file and
the bank database: seconds to save the whole bank, bytes, seconds to open it (``MemoryStore.load``; wall and CPU), and seconds
to save again after adding one more document (the JSON file is rewritten; the database writes only the new rows),
and the process's peak RSS. Last line: one JSON object.

    python bench/bank_open.py [--tokens 1000000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft  # noqa: E402
from amb_dspy.storage.insight_doc import InsightDoc  # noqa: E402
from amb_dspy.storage.interaction_tree import InteractionEntry  # noqa: E402

WORDS_PER_DOCUMENT, NODES_PER_DOCUMENT = 750, 5  # ~1,000 tokens a document


class RandomEmbedder:
    """Unit vectors of the default model's dimension; what a bank stores, without running a model."""

    dim, model_name = 384, "random-unit-vectors"

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def add_document(store: MemoryStore, rng: random.Random, vocabulary: list[str], number: int) -> None:
    def text(n: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(n))

    drafts = [NodeDraft(summary=text(30), context=text(40), keywords=[rng.choice(vocabulary) for _ in range(8)])
              for _ in range(NODES_PER_DOCUMENT)]
    older = list(store.graph.nodes_dict)
    nodes = store.add_nodes(drafts)
    entry = InteractionEntry(text=text(WORDS_PER_DOCUMENT), metadata={"name": f"document {number}"})
    store.record_entry(entry, [n.id for n in nodes], {n.id: [(100 * i, 100 * i + 90)] for i, n in enumerate(nodes)})
    for node in nodes:
        for other in rng.sample(older, min(2, len(older))):
            store.add_edge(node.id, other)


def timed(function, *args):
    """The result, wall seconds and this process's CPU seconds (what a loaded machine does not inflate)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return result, round(time.perf_counter() - started, 3), round(time.process_time() - cpu, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="the bank's size (documents of ~1,000 tokens)")
    args = parser.parse_args()
    rng, vocabulary = random.Random(0), [f"w{i}" for i in range(20_000)]
    store = MemoryStore(RandomEmbedder(), InsightDoc(task_goal="bench/bank_open.py"))
    documents = max(1, args.tokens // 1000)
    for number in range(documents):
        add_document(store, rng, vocabulary, number)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="amb-bank-open-") as work:
        for name in ("bank.json", "bank.sqlite"):
            path, saved, _ = timed(store.export, Path(work) / name)
            opened_store, opened, opened_cpu = timed(MemoryStore.load, path, store.embedder)
            add_document(opened_store, rng, vocabulary, documents)
            _, again, _ = timed(opened_store.export, path)
            rows[name] = {"save_s": saved, "bytes": path.stat().st_size, "open_s": opened, "open_cpu_s": opened_cpu,
                          "save_after_add_s": again}
            print(name, " ".join(f"{key}={value}" for key, value in rows[name].items()), flush=True)
    print(json.dumps({"documents": documents, "nodes": len(store.graph), **rows, "load": os.getloadavg()[0],
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
