"""What the memory puts in front of the executor, and at what token cost: no answering LM needed.

Each conversation (LoCoMo) or item (HotpotQA, distractor setting: the item's paragraphs are the context) is
ingested once into a bank (``MemoryBank.ingest``; ``--policy heuristic`` needs no LM). For every question,
the ``<memory>`` block the adapter would write is built at budgets of 500, 1,000 and 2,000 tokens in three
views (``amb_dspy.memory.view``):

* ``summary`` -- the spec's node blocks (topic, keywords, summary), top nodes and their one hop, in rank order;
* ``evidence`` -- the nodes' raw source lines, ranked as amb_dspy.memory.view ranks them (its defaults);
* ``flat`` -- no memory: the raw turns (LoCoMo) or sentences (HotpotQA) ranked by the project's hybrid index.

The ``summary`` view shows a node's topic and best lines instead of its summary where the summary does not
fit; its provenance is then those lines.

Two recalls per block: *evidence recall*, the share of the evidence turns / supporting sentences that the
block covers by provenance (the sources of the nodes shown for ``summary``, the lines shown otherwise; a
turn counts when any part of it was shown), and *answer recall*, whether the gold answer,
normalised as ``optimize.metrics.normalize_answer`` does, appears in the block's text. Tokens are
``estimate_tokens``'s (a deliberately high estimate).

    python bench/memory_recall.py locomo:PATH|hotpotqa:PATH [--n N] [--start I] [--policy heuristic|lm|auto]
                                  [--lm MODEL] [--database postgresql://...]

Each bank is measured as it reads back after a save, as ``amb ingest --bank`` saves it and a task opens it: a
SQLite bank database (``STORAGE_DIR/banks/``), or with ``--database URL`` a named bank in that PostgreSQL
database (``bench/with_postgres.py`` starts a throwaway server). The figures are the same on both.

PATH for LoCoMo is one conversation's JSON file or a folder of them. ``--n`` limits questions (LoCoMo: over
all conversations; HotpotQA: items), ``--start`` skips the first HotpotQA items (``--start 150 --n 150``:
items 150-299). Prints a table, the recalls at 1,000 tokens per question kind (LoCoMo categories 1-4,
HotpotQA bridge / comparison), the *answer ceiling* (share of questions whose normalised answer appears
anywhere in the context: answer recall cannot exceed it), nodes per context and tokens per node, and as
its last line one JSON object; ``memory_*`` keys are the default view (``AmbConfig().memory_view``).

The figures are the same on every run of the same data (the ``*_seconds`` timings aside): node ids are random,
but nothing that is measured depends on them (ties are broken by position, a header is costed at its dearest
form), and agent calls run one at a time (``lm_threads=1``), so texts are embedded in the same batches.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig, RankWeights
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view import LINE_TOKENS, EvidenceView, Ranking, SummaryView
from amb_dspy.retrieval.embedding import default_embedder
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.storage import bank_names
from optimize.hotpotqa import load_hotpotqa
from optimize.locomo import CATEGORIES, load_locomo
from optimize.metrics import normalize_answer

BUDGETS = (500, 1000, 2000)
_ID = re.compile(r"\(node [0-9a-f]+")  # node ids are random: blocks are costed with their dearest form
VIEWS = ("summary", "evidence", "flat")
Span = tuple[int, int]


@dataclass
class Question:
    text: str
    answer: str
    evidence: list[Span]
    kind: str = ""  # LoCoMo category name, HotpotQA type


@dataclass
class Context:
    """One text to ingest, its questions and its flat units (turns or sentences) as spans of the text."""

    name: str
    text: str
    units: list[Span]
    questions: list[Question] = field(default_factory=list)


def locomo_contexts(source: str, n: int | None) -> list[Context]:
    contexts = []
    for conversation in load_locomo(source, n=n):
        text, spans = conversation.render()
        questions = [Question(q.question, q.answer, [spans[e] for e in q.evidence], f"{q.category} {CATEGORIES[q.category]}")
                     for q in conversation.questions]
        contexts.append(Context(conversation.name, text, list(spans.values()), questions))
    return contexts


def hotpotqa_contexts(source: str, n: int | None, start: int = 0) -> list[Context]:
    contexts = []
    for item in load_hotpotqa(source, split="validation", n=None if n is None else start + n)[start:]:
        text = item.context_text()
        units, by_sentence, offset = [], {}, 0
        for paragraph in item.context:
            offset = text.index(paragraph.title, offset) + len(paragraph.title) + 1  # the title line, then the text
            for i, sentence in enumerate(paragraph.sentences):
                stripped = sentence.strip()
                if not stripped:
                    continue
                start = text.index(stripped, offset)
                offset = start + len(stripped)
                units.append((start, offset))
                by_sentence[(paragraph.title, i)] = (start, offset)
        evidence = [by_sentence[(f.title, f.sent_id)] for f in item.supporting_facts if (f.title, f.sent_id) in by_sentence]
        contexts.append(Context(item.id, text, units, [Question(item.question, item.answer, evidence, item.type)]))
    return contexts


def entry_offsets(entries, text: str) -> dict[str, int]:
    """Where the text of each of ``entries`` (in order) starts in ``text``, the context they were ingested from:
    one entry, or one per session for a dialogue of dated sessions (``MemoryBank.ingest`` cuts it at its
    sessions), so that provenance spans can be read as spans of the context."""
    offsets, position = {}, 0
    for entry in entries:
        found = text.find(entry.text, position)
        if found >= 0:
            offsets[entry.entry_id], position = found, found + len(entry.text)
    return offsets


def covered(evidence: list[Span], shown: list[Span]) -> float:
    """Share of the evidence spans that overlap what was shown (a sentence of a long turn counts)."""
    if not evidence:
        return 0.0
    return sum(any(min(end, b) > max(start, a) for a, b in shown) for start, end in evidence) / len(evidence)


def answer_shown(answer: str, text: str) -> float:
    gold = normalize_answer(answer)
    return float(bool(gold) and f" {gold} " in f" {normalize_answer(text)} ")


def flat_block(index: HybridIndex, units: list[Span], text: str, query: str, vector: np.ndarray,
               budget: int, alpha: float) -> tuple[str, list[Span]]:
    shown, used = [], 0
    for key, _score in index.rank(vector, query, k=len(units), alpha=alpha):
        start, end = units[int(key)]
        cost = estimate_tokens(text[start:end]) + 1
        if used + cost <= budget:
            shown.append((start, end))
            used += cost
    shown.sort()
    return "\n".join(text[a:b] for a, b in shown), shown


def _line_spans(lines, offsets: dict[str, int]) -> list[Span]:
    """The shown lines as spans of the context (``offsets``: :func:`entry_offsets`)."""
    return [(line.start + offsets[line.entry_id], line.end + offsets[line.entry_id])
            for line in lines if line.entry_id in offsets]


def saved_and_opened(store: MemoryStore, where, embedder) -> MemoryStore:
    """The bank as a save to ``where`` (a bank database file, or a named bank in PostgreSQL) and a fresh open give it
    back, as ``amb ingest --bank`` saves it (its lines' vectors too) and a task opens it."""
    store.save(where)
    return MemoryStore.load(where, embedder)


def bank_place(config: AmbConfig, number: int):
    """Where the bank of the ``number``-th context is kept: the configured database, else a bank database file."""
    return bank_names.bank_place(f"recall-{number}", config.paths.storage_dir, config.paths.database_url)


def measure(contexts: list[Context], config: AmbConfig, lm, embedder, weights: RankWeights, line_tokens: int) -> dict:
    rows = {(view, budget): {"recall": [], "answer": [], "tokens": []} for view in VIEWS for budget in BUDGETS}
    kinds: dict[tuple[str, str], dict[str, list[float]]] = {}  # (kind, view) -> recalls at 1,000 tokens
    ingest = {"seconds": 0.0, "calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "nodes": [],
              "seconds_each": [], "node_tokens": []}
    context_tokens, ceiling = [], []
    for number, context in enumerate(contexts):
        bank = MemoryBank(config, lm=lm, embedder=embedder)
        result = bank.ingest(context.text, context.name)
        ingest["seconds"] += result.seconds
        ingest["seconds_each"].append(result.seconds)
        ingest["nodes"].append(result.nodes)
        for usage in result.usage.values():
            for key in ("calls", "prompt_tokens", "completion_tokens"):
                ingest[key] += usage[key]
        store = saved_and_opened(result.store, bank_place(config, number), embedder)
        offsets = entry_offsets(store.tree.entries.values(), context.text)  # spans are read as the context's
        ingest["node_tokens"].extend(
            sum(estimate_tokens(store.tree.entries[src.entry_id].text[a:b]) for src in node.sources for a, b in src.spans)
            for node in store.graph.nodes_dict.values())
        ranking = Ranking(store, weights=weights, k=config.retrieval.retrieval_k, alpha=config.retrieval.retrieval_alpha,
                          line_tokens=line_tokens)
        summary, evidence = SummaryView(ranking), EvidenceView(ranking)
        flat = HybridIndex(embedder.dim)
        flat.add_many([str(i) for i in range(len(context.units))], [context.text[a:b] for a, b in context.units],
                      embedder.embed([context.text[a:b] for a, b in context.units]))
        context_tokens.append(estimate_tokens(context.text))
        for question in context.questions:
            ceiling.append(answer_shown(question.answer, context.text))
            query = ranking.query(question.text)
            for budget in BUDGETS:
                block = summary.block(query, budget)
                spans = [(a + offsets[source.entry_id], b + offsets[source.entry_id]) for node in block.nodes
                         for source in node.sources if source.entry_id in offsets for a, b in source.spans]
                spans += _line_spans(block.lines, offsets)
                blocks = {"summary": (block.text, spans)}
                block = evidence.block(query, budget)
                blocks["evidence"] = (block.text, _line_spans(block.lines, offsets))
                blocks["flat"] = flat_block(flat, context.units, context.text, question.text, query.vector, budget,
                                            config.retrieval_alpha)
                for name, (text, shown) in blocks.items():
                    row = rows[(name, budget)]
                    row["recall"].append(covered(question.evidence, shown))
                    row["answer"].append(answer_shown(question.answer, text))
                    row["tokens"].append(estimate_tokens(_ID.sub(lambda m: f"(node {'0a' * 16}"[:len(m.group(0))], text)))
                    if budget == 1000:
                        kind = kinds.setdefault((question.kind, name), {"recall": [], "answer": []})
                        kind["recall"].append(row["recall"][-1])
                        kind["answer"].append(row["answer"][-1])
    return {"rows": rows, "kinds": kinds, "ingest": ingest, "context_tokens": context_tokens, "ceiling": ceiling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", help="locomo:PATH or hotpotqa:PATH")
    parser.add_argument("--n", type=int, default=None, help="questions (LoCoMo) or items (HotpotQA)")
    parser.add_argument("--policy", choices=("heuristic", "lm", "auto"), default="heuristic")
    parser.add_argument("--lm", default=None, help="the memory agents' LM (a DSPy model string, local, gguf:PATH)")
    parser.add_argument("--line-tokens", type=int, default=LINE_TOKENS,
                        help="evidence view: lines longer than this are shown sentence by sentence")
    for name, setting in RankWeights.model_fields.items():  # --node-weight, --spread-seeds...: each weight's own help
        parser.add_argument(f"--{name.replace('_', '-')}", type=setting.annotation, default=setting.default,
                            help=setting.description)
    parser.add_argument("--start", type=int, default=0, help="HotpotQA: skip this many items first")
    parser.add_argument("--topic-tokens", default=None, help="MIN:MAX tokens of a topic node (AMB_TOPIC_*_TOKENS)")
    parser.add_argument("--database", default="", help="keep the banks in this PostgreSQL database (postgresql://...)")
    args = parser.parse_args()

    kind = args.dataset.partition(":")[0].strip().lower()
    contexts = (locomo_contexts(args.dataset, args.n) if kind == "locomo"
                else hotpotqa_contexts(args.dataset, args.n, args.start))
    topic = {}
    if args.topic_tokens:
        low, _, high = args.topic_tokens.partition(":")
        topic = {"topic_min_tokens": int(low), "topic_max_tokens": int(high)}
    embedder = default_embedder()
    lm = None
    if args.lm:
        from amb_dspy.lm import build_lm

        lm = build_lm(args.lm, AmbConfig())
    with tempfile.TemporaryDirectory(prefix="amb-recall-") as work:
        # One agent call at a time: concurrent structure calls fill the embedder's cache in a racing order, and a
        # text's vector differs in the last bits with the batch it was embedded in (reruns differed by ~0.01).
        config = AmbConfig(policy=args.policy, storage_dir=Path(work) / "storage", temp_dir=Path(work) / "temp",
                           lm_threads=1, database_url=args.database, **({"lm": args.lm} if args.lm else {}), **topic)
        started = time.monotonic()
        weights = RankWeights(**{name: getattr(args, name) for name in RankWeights.model_fields})
        measured = measure(contexts, config, lm, embedder, weights, args.line_tokens)
        seconds = time.monotonic() - started

    rows, ingest = measured["rows"], measured["ingest"]
    default = config.memory_view
    n_questions = len(rows[("flat", BUDGETS[0])]["recall"])
    mean = statistics.fmean
    backend = "postgresql" if args.database else "sqlite"
    print(f"{args.dataset}: {len(contexts)} context(s), {n_questions} questions, policy {args.policy}, banks in "
          f"{backend}, load {os.getloadavg()[0]:.2f}; "
          f"ingest {ingest['seconds']:.1f} s, {ingest['calls']} LM calls, nodes {ingest['nodes'][:10]}; "
          f"whole context {mean(measured['context_tokens']):.0f} tokens (mean); {seconds:.0f} s in all")
    print(f"{'view':<10}{'budget':>8}{'evidence recall':>17}{'answer recall':>15}{'tokens (mean)':>15}")
    for (view, budget), row in rows.items():
        print(f"{view + ('*' if view == default else ''):<10}{budget:>8}{mean(row['recall']):>17.3f}"
              f"{mean(row['answer']):>15.3f}{mean(row['tokens']):>15.0f}")
    print(f"* the default view (AMB_MEMORY_VIEW={default}); memory_* keys report it")
    print("at 1000 tokens, by kind: evidence recall / answer recall per view (n)")
    by_kind = {}
    for kind in sorted({k for k, _ in measured["kinds"]}):
        cells = {view: measured["kinds"][(kind, view)] for view in VIEWS}
        n = len(cells["flat"]["recall"])
        print(f"  {kind:<14}" + "".join(f"{view:>9} {mean(c['recall']):.3f} / {mean(c['answer']):.3f}"
                                         for view, c in cells.items()) + f"  ({n})")
        by_kind[kind] = {"n": n, **{f"{view}_{what}": round(mean(c[key]), 4) for view, c in cells.items()
                                    for what, key in (("recall", "recall"), ("answer_recall", "answer"))}}
    node_tokens = ingest["node_tokens"] or [0]
    print(f"answer ceiling {mean(measured['ceiling']):.3f}; nodes per context {statistics.median(ingest['nodes']):.0f} "
          f"(median), tokens per node {statistics.median(node_tokens):.0f} median, {max(node_tokens)} max; "
          f"ingest {max(ingest['seconds_each']):.1f} s at most per context")
    result = {"dataset": args.dataset, "policy": args.policy, "n_questions": n_questions, "default_view": default,
              "bank_backend": backend, "load_1m": round(os.getloadavg()[0], 2)}
    for prefix, view in (("memory", default), ("summary", "summary"), ("evidence", "evidence"), ("flat", "flat")):
        for budget in BUDGETS:
            result[f"{prefix}_recall_{budget}"] = round(mean(rows[(view, budget)]["recall"]), 4)
            result[f"{prefix}_answer_recall_{budget}"] = round(mean(rows[(view, budget)]["answer"]), 4)
    result.update({
        "memory_tokens_mean": round(mean(rows[(default, 1000)]["tokens"]), 1),
        "context_tokens_mean": round(mean(measured["context_tokens"]), 1),
        "ingest_seconds": round(ingest["seconds"], 2), "ingest_lm_calls": ingest["calls"],
        "ingest_prompt_tokens": ingest["prompt_tokens"], "ingest_completion_tokens": ingest["completion_tokens"],
        "answer_ceiling": round(mean(measured["ceiling"]), 4), "by_kind": by_kind,
        "nodes_per_context_median": statistics.median(ingest["nodes"]),
        "node_tokens_median": statistics.median(node_tokens), "node_tokens_max": max(node_tokens),
        "ingest_seconds_max": max(ingest["seconds_each"]),
    })
    print(json.dumps(result))


if __name__ == "__main__":
    main()
