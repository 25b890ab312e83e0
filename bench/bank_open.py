"""Opening and saving a large bank, JSON file against bank database, and its first question, without growing one
for an hour.

``bench/growth.py`` measures open time on a real grown bank, but growing one to a million tokens takes long. This
builds a bank of the same shape at once: documents of ~1,000 tokens (750 random words in 25 speaker turns), five
nodes each (summary, context, keywords, a fifth of the document as their source span, so the evidence view lays out
every turn), each node linked to two earlier ones, unit vectors of the embedder's dimension (random: opening never
runs the model, so the values do not matter). It then prints, for the JSON bank file and the bank database: seconds
to save the whole bank (the database with its line vectors: ``MemoryStore.save``, as ``amb ingest --bank`` saves),
bytes, seconds to open it (``MemoryStore.load``; wall and CPU), to copy the open store for a task (``copy``: what a
task started on a store held in memory makes) and to open it for a task (``start_store``: what
``memory_start_task(bank=...)`` and ``amb run --bank`` do, the open included), seconds to that task's first evidence
block (what
``memory_context`` shows first: the view lays out and indexes every line, and embeds those the bank holds no
vector for: all of them from a JSON file, none from a database) and how many texts it ran through the model (the
question and those lines), the p50 and p95 of the next questions, seconds to save again after adding one more document (the JSON file is rewritten; the database
writes only the new rows), and the process's RSS after each. Then what an MCP client sees: seconds for
``memory_start_task(bank=...)`` (``MemoryBank.start_session``) and for its first ``memory_context`` asked ``--think``
seconds later (the agent's turn, in which the task lays out the bank's lines on its own thread) or at once
(``--think 0``). Last line: one JSON object, with the load average.

``--embedder onnx`` runs the real model instead of random vectors (minutes to build at a million tokens: use it at
a smaller ``--tokens``), so that what the first question costs without stored line vectors shows in seconds.

    python bench/bank_open.py [--tokens 1000000] [--embedder random|onnx] [--think 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig, PathSettings  # noqa: E402
from amb_dspy.memory.graph_ops import MemoryStore, NodeDraft  # noqa: E402
from amb_dspy.memory.view import EvidenceView, Ranking  # noqa: E402
from amb_dspy.retrieval.onnx_embedding import OnnxEmbedder  # noqa: E402
from amb_dspy.storage.insight_doc import InsightDoc  # noqa: E402
from amb_dspy.storage.interaction_tree import InteractionEntry  # noqa: E402
from amb_dspy.task.inputs import start_store  # noqa: E402

TURNS_PER_DOCUMENT, WORDS_PER_TURN, NODES_PER_DOCUMENT = 25, 30, 5  # 750 words, ~1,000 tokens a document
QUESTIONS = 21  # the first, then 20 for the p50 and p95


class RandomEmbedder:
    """Unit vectors of the default model's dimension; what a bank stores, without running a model."""

    dim, model_name = 384, "random-unit-vectors"

    def __init__(self) -> None:
        self.rng = np.random.default_rng(0)
        self.encoded_texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.encoded_texts += len(texts)
        vectors = self.rng.standard_normal((len(texts), self.dim)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def add_document(store: MemoryStore, rng: random.Random, vocabulary: list[str], number: int) -> None:
    def text(n: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(n))

    drafts = [NodeDraft(summary=text(30), context=text(40), keywords=[rng.choice(vocabulary) for _ in range(8)])
              for _ in range(NODES_PER_DOCUMENT)]
    older = list(store.graph.nodes_dict)
    nodes = store.add_nodes(drafts)
    turns = "\n".join(f"Speaker {rng.randint(1, 3)}: {text(WORDS_PER_TURN)}." for _ in range(TURNS_PER_DOCUMENT))
    entry = InteractionEntry(text=turns, metadata={"name": f"document {number}"})
    fifth = len(turns) // NODES_PER_DOCUMENT
    store.record_entry(entry, [n.id for n in nodes], {n.id: [(fifth * i, fifth * (i + 1))] for i, n in enumerate(nodes)})
    for node in nodes:
        for other in rng.sample(older, min(2, len(older))):
            store.add_edge(node.id, other)


def timed(function, *args):
    """The result, wall seconds and this process's CPU seconds (what a loaded machine does not inflate)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = function(*args)
    return result, round(time.perf_counter() - started, 3), round(time.process_time() - cpu, 3)


def rss_mb() -> int:
    """This process's resident memory now, in MB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))


def questions(rng: random.Random, vocabulary: list[str]) -> list[str]:
    return [f"What did Speaker {rng.randint(1, 3)} say about {' and '.join(rng.sample(vocabulary, 3))}?"
            for _ in range(QUESTIONS)]


def fresh_embedder(kind: str):
    """The embedder a new process opens the bank with: the model loaded, its cache of vectors empty (what this
    process embedded before must not make the first question look cheap)."""
    if kind == "random":
        return RandomEmbedder()
    embedder = OnnxEmbedder(cache_dir=PathSettings().cache_dir)
    embedder.embed(["warm-up"])
    embedder.encoded_texts = 0
    return embedder


def first_questions(store: MemoryStore, asked: list[str]) -> dict:
    """Seconds to the first evidence block on a store just opened, the texts it ran through the model (the
    question and the lines the bank holds no vector for), and the next questions' p50."""
    view = EvidenceView(Ranking(store))
    _, first, first_cpu = timed(view.block, asked[0], 1000)
    embedded = store.embedder.encoded_texts
    later = sorted(timed(view.block, question, 1000)[1] for question in asked[1:])
    return {"first_answer_s": first, "first_answer_cpu_s": first_cpu, "texts_embedded_by_first": embedded,
            "lines": len(view.ranking.line_index.lines), "next_p50_ms": round(1000 * later[len(later) // 2], 1),
            "next_p95_ms": round(1000 * later[max(0, math.ceil(0.95 * len(later)) - 1)], 1)}


def first_context(path: Path, kind: str, goal: str, think: float) -> dict:
    """Seconds to start a task on the bank file as ``memory_start_task(bank=...)`` does, and to its first
    ``memory_context`` asked ``think`` seconds later."""
    with tempfile.TemporaryDirectory(prefix="amb-bank-open-temp-") as temp:
        config = AmbConfig(policy="heuristic", storage_dir=path.parent, temp_dir=temp, recall=False, memory_view="evidence")
        bank = MemoryBank(config, embedder=fresh_embedder(kind))
        session, started, _ = timed(lambda: bank.start_session(goal, bank=path))
        time.sleep(think)
        _, first, _ = timed(session.context)
        session.close(remember=False)
    return {"session_start_s": started, "first_context_s": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000, help="the bank's size (documents of ~1,000 tokens)")
    parser.add_argument("--embedder", choices=("random", "onnx"), default="random",
                        help="random unit vectors (default), or the real model (slow to build)")
    parser.add_argument("--think", type=float, default=2.0,
                        help="seconds between memory_start_task and the first memory_context (the agent's turn)")
    args = parser.parse_args()
    rng = random.Random(0)
    vocabulary = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9)))
                  for _ in range(20_000)]
    store = MemoryStore(fresh_embedder(args.embedder), InsightDoc(task_goal="bench/bank_open.py"))
    documents = max(1, args.tokens // 1000)
    started = time.perf_counter()
    for number in range(documents):
        add_document(store, rng, vocabulary, number)
    print(f"built {documents} documents, {len(store.graph)} nodes in {time.perf_counter() - started:.1f} s", flush=True)
    rows, asked = {}, questions(rng, vocabulary)
    with tempfile.TemporaryDirectory(prefix="amb-bank-open-") as work:
        for name in ("bank.json", "bank.sqlite"):
            path, saved, _ = timed(store.save, Path(work) / name)
            opened_store, opened, opened_cpu = timed(MemoryStore.load, path, fresh_embedder(args.embedder))
            _, copied, copied_cpu = timed(opened_store.copy, InsightDoc(task_goal=asked[0]))  # dropped at once
            # what memory_start_task(bank=...) does: the bank opened for the task, whose store memory_context reads
            (task_store, _), task_start, task_start_cpu = timed(start_store, fresh_embedder(args.embedder), path,
                                                                InsightDoc(task_goal=asked[0]))
            row = {"save_s": saved, "bytes": path.stat().st_size, "open_s": opened, "open_cpu_s": opened_cpu,
                   "copy_s": copied, "copy_cpu_s": copied_cpu, "task_start_s": task_start,
                   "task_start_cpu_s": task_start_cpu, "rss_after_open_mb": rss_mb(),
                   **first_questions(task_store, asked), "rss_after_answer_mb": rss_mb()}
            del task_store
            add_document(opened_store, rng, vocabulary, documents)
            _, row["save_after_add_s"], _ = timed(opened_store.save, path)
            row |= {**first_context(path, args.embedder, asked[0], args.think), "think_s": args.think}
            rows[name] = row
            print(name, " ".join(f"{key}={value}" for key, value in row.items()), f"load={os.getloadavg()[0]:.2f}",
                  flush=True)
            del opened_store
    print(json.dumps({"documents": documents, "nodes": len(store.graph), "embedder": args.embedder, **rows,
                      "load": os.getloadavg()[0],
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))


if __name__ == "__main__":
    main()
