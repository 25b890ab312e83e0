"""A bank that grows: documents added one by one to one bank, measured at each size on the way up.

The documents are pooled HotpotQA items (the distractor setting: an item's ten paragraphs are one document; the
shared dev file, then the train file) with LoCoMo sessions spread among them (each session its own document,
dated, as an assistant would receive it). Each is added with ``MemoryBank.ingest(text, name, into=store)`` under
the heuristic policy (no LM). At each size in ``--sizes`` (tokens, ``estimate_tokens``), it prints: the tokens and
nodes, the seconds the last step's documents took to add and the last LoCoMo session's add alone, the evidence
view's ``<memory>`` block at 1,000 tokens (what ``memory_context`` returns) p50 / p95 over ``--questions``
HotpotQA questions of the items in the bank (and the first block after the step, which lays out the new
lines), the evidence recall of that block and of a flat hybrid index over all the items' sentences at the same
budget (``bench/memory_recall.py``'s measures), the seconds to open the exported bank, its bytes, and the
process's RSS; the same for the bank database (``bank.sqlite``, saved after each step with only what the step
changed: ``db_save_s``, ``db_open_s``, ``db_bytes``). First, unless ``--no-sessions``: LoCoMo conversations ingested in one go against session by
session, evidence recall at 1,000 tokens of each. Last line: one JSON object.

    python bench/growth.py [--hotpotqa PATH]... [--locomo PATH]... [--sizes 16000,64000,...] [--questions 60]
                           [--no-sessions | --sessions-only]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from memory_recall import Question, covered, entry_offsets, hotpotqa_contexts  # noqa: E402

from amb_dspy.agents.chunking import estimate_tokens  # noqa: E402
from amb_dspy.bank import MemoryBank  # noqa: E402
from amb_dspy.config import AmbConfig  # noqa: E402
from amb_dspy.memory.graph_ops import MemoryStore  # noqa: E402
from amb_dspy.memory.view import EvidenceView, Ranking  # noqa: E402
from amb_dspy.retrieval.embedding import default_embedder  # noqa: E402
from amb_dspy.retrieval.hybrid import HybridIndex  # noqa: E402
from amb_dspy.storage import InsightDoc  # noqa: E402
from optimize.locomo import Conversation, load_locomo  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
BUDGET = 1000
SIZES = (16_000, 32_000, 64_000, 128_000, 256_000, 512_000, 1_000_000)


@dataclass
class Document:
    """One text to add, its flat units (sentences or turns) and questions, as spans of the text."""

    name: str
    text: str
    units: list[tuple[int, int]]
    questions: list[Question] = field(default_factory=list)
    date: str = ""
    session: bool = False


def sessions(conversation: Conversation) -> list[Document]:
    """The conversation's sessions, each a document of its turns' lines; a question goes with the session of
    its last evidence turn (when it can first be answered), its evidence as (session, span) pairs."""
    documents, where = [], {}
    for number in sorted({turn.session for turn in conversation.turns}):
        turns = [turn for turn in conversation.turns if turn.session == number]
        lines, units, offset = [], [], 0
        for turn in turns:
            line = turn.line()
            units.append((offset, offset + len(line)))
            where[turn.dia_id] = (len(documents), units[-1])
            lines.append(line)
            offset += len(line) + 1
        documents.append(Document(f"{conversation.name} session {number}", "\n".join(lines), units,
                                  date=turns[0].date, session=True))
    for question in conversation.questions:
        places = [where[e] for e in question.evidence if e in where]
        if places:
            evidence = [(documents[d].name, span) for d, span in places]
            documents[max(d for d, _ in places)].questions.append(Question(question.question, question.answer, evidence))
    return documents


def pooled(hotpotqa: list[str], locomo: list[str]) -> list[Document]:
    """HotpotQA items (each item once, in file order), the LoCoMo sessions spread evenly among them."""
    items, seen = [], set()
    for path in hotpotqa:
        for context in hotpotqa_contexts(f"hotpotqa:{path}", None):
            if context.name not in seen:
                seen.add(context.name)
                questions = [Question(q.text, q.answer, [(context.name, span) for span in q.evidence])
                             for q in context.questions]
                items.append(Document(context.name, context.text, context.units, questions))
    chats = [document for path in locomo for c in load_locomo(f"locomo:{path}") for document in sessions(c)]
    every = max(1, len(items) // max(1, len(chats)))
    out = []
    for i, item in enumerate(items):
        out.append(item)
        if i % every == every - 1 and chats:
            out.append(chats.pop(0))
    return out + chats


class GrowingBank:
    """One bank, documents added to it; a flat hybrid index over the same documents' units beside it."""

    def __init__(self, config: AmbConfig, embedder, goal: str | None = None):
        """``goal``: the task goal of the bank's store (the heuristic structure policy favours its words); by
        default the goal ``MemoryBank.ingest`` gives a new store, named after the first document."""
        self.bank, self.embedder = MemoryBank(config, embedder=embedder), embedder
        self.store = None if goal is None else MemoryStore(embedder, InsightDoc(task_goal=goal))
        self.flat, self.units = HybridIndex(embedder.dim), []  # unit key -> (document name, span, text)
        self.placed: dict[str, tuple[str, int]] = {}  # entry id -> its document's name, where it starts in it
        self.view: EvidenceView | None = None
        self.tokens = 0

    def add(self, document: Document) -> float:
        before = 0 if self.store is None else len(self.store.tree.entries)
        started = time.perf_counter()
        ingested = self.bank.ingest(document.text, document.name, into=self.store, date=document.date)
        seconds = time.perf_counter() - started
        self.store = ingested.store
        # the document's entries: one, or one per session of a dialogue of dated sessions
        added = list(self.store.tree.entries.values())[before:]
        self.placed.update((entry_id, (document.name, offset))
                           for entry_id, offset in entry_offsets(added, document.text).items())
        texts = [document.text[a:b] for a, b in document.units]
        first = len(self.units)
        self.units += [(document.name, span, text) for span, text in zip(document.units, texts)]
        self.flat.add_many([str(i) for i in range(first, len(self.units))], texts, self.embedder.embed(texts))
        self.tokens += estimate_tokens(document.text)
        if self.view is None:
            self.view = EvidenceView(Ranking(self.store, k=self.bank.config.retrieval.retrieval_k,
                                             alpha=self.bank.config.retrieval.retrieval_alpha))
        return seconds

    def view_recall(self, question: Question) -> float:
        lines = self.view.block(question.text, BUDGET).lines
        return _recall(question, [(self.placed[line.entry_id][0], (line.start + self.placed[line.entry_id][1],
                                                                   line.end + self.placed[line.entry_id][1]))
                                  for line in lines if line.entry_id in self.placed])

    def flat_recall(self, question: Question) -> float:
        vector = self.embedder.embed([question.text])[0]
        shown, used = [], 0
        for key, _score in self.flat.rank(vector, question.text, k=min(len(self.units), 400),
                                          alpha=self.bank.config.retrieval_alpha):
            name, span, text = self.units[int(key)]
            cost = estimate_tokens(text) + 1
            if used + cost <= BUDGET:
                shown.append((name, span))
                used += cost
        return _recall(question, shown)


def _recall(question: Question, shown: list[tuple[str, tuple[int, int]]]) -> float:
    """Share of the question's (document, span) evidence that the shown (document, span) pairs overlap."""
    by_document: dict[str, list[tuple[int, int]]] = {}
    for name, span in shown:
        by_document.setdefault(name, []).append(span)
    hits = [covered([span], by_document.get(name, [])) for name, span in question.evidence]
    return statistics.fmean(hits) if hits else 0.0


def _rss_mb() -> tuple[float, float]:
    """The process's resident memory now and at its peak, MB."""
    now = next((int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmRSS:")), 0)
    return now / 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_size(growing: GrowingBank, questions: list[Question], work: Path) -> dict:
    """The figures at the bank's current size (see the module docstring)."""
    started = time.perf_counter()
    growing.view.block(questions[0].text, BUDGET)  # lays out the lines the last step added
    first = time.perf_counter() - started
    times, view, flat = [], [], []
    for question in questions:
        started = time.perf_counter()
        view.append(growing.view_recall(question))
        times.append(time.perf_counter() - started)
        flat.append(growing.flat_recall(question))
    path = work / "bank.json"
    started = time.perf_counter()
    growing.store.export(path)
    exported = time.perf_counter() - started
    started = time.perf_counter()
    MemoryStore.load(path, growing.embedder)
    opened = time.perf_counter() - started
    database, saved, db_opened = bank_database(growing.store, work)
    rss, peak = _rss_mb()
    times.sort()
    return {"tokens": growing.tokens, "nodes": len(growing.store.graph), "entries": len(growing.store.tree),
            "context_ms_p50": round(1000 * statistics.median(times), 1),
            "context_ms_p95": round(1000 * times[min(len(times) - 1, int(0.95 * len(times)))], 1),
            "first_context_ms": round(1000 * first, 1), "view_recall": round(statistics.fmean(view), 4),
            "flat_recall": round(statistics.fmean(flat), 4), "questions": len(questions),
            "open_s": round(opened, 3), "export_s": round(exported, 3), "bytes": path.stat().st_size,
            "db_open_s": round(db_opened, 3), "db_save_s": round(saved, 3), "db_bytes": database.stat().st_size,
            "rss_mb": round(rss), "peak_rss_mb": round(peak)}


def bank_database(store: MemoryStore, work: Path) -> tuple[Path, float, float]:
    """The bank saved to its database (only what changed since the last size's save: the same store, the same
    file) and opened from it: the path, seconds to save, seconds to open."""
    started = time.perf_counter()
    path = store.save(work / "bank.sqlite")  # as amb ingest --bank saves it: with its line vectors
    saved = time.perf_counter() - started
    started = time.perf_counter()
    MemoryStore.load(path, store.embedder)
    return path, saved, time.perf_counter() - started


def spread(questions: list[Question], n: int) -> list[Question]:
    """``n`` questions taken evenly over the list (all of them when there are fewer)."""
    if len(questions) <= n:
        return list(questions)
    return [questions[round(i * (len(questions) - 1) / (n - 1))] for i in range(n)]


def grow(documents: list[Document], sizes: list[int], n_questions: int, config: AmbConfig, embedder, work: Path,
         max_step_seconds: float) -> tuple[list[dict], dict]:
    """Add ``documents`` in order, measuring at each of ``sizes``; stops early when a step took longer than
    ``max_step_seconds`` (the rows so far, and why it stopped)."""
    growing, rows, asked, pending = GrowingBank(config, embedder), [], [], list(documents)
    empty = GrowingBank(config, embedder)  # a session added to an empty bank: the add-time target's yardstick
    first_session = next((d for d in documents if d.session), None)
    baseline = {"session_into_empty_s": round(empty.add(first_session), 3)} if first_session else {}
    for size in sizes:
        step_seconds, last_session = 0.0, None
        while pending and growing.tokens < size:
            document = pending.pop(0)
            seconds = growing.add(document)
            step_seconds += seconds
            if document.session:
                last_session = seconds
            else:
                asked.extend(document.questions)
        row = measure_size(growing, spread(asked, n_questions), work)
        row.update({"step_add_s": round(step_seconds, 2),
                    "last_session_add_s": None if last_session is None else round(last_session, 3)})
        rows.append(row)
        print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
        if not pending:
            baseline["stopped"] = f"out of documents at {growing.tokens} tokens"
            break
        if step_seconds > max_step_seconds:
            baseline["stopped"] = f"the step to {size} tokens took {step_seconds:.0f} s (over {max_step_seconds:.0f} s)"
            break
    return rows, baseline


def sessionwise(path: str, config: AmbConfig, embedder) -> dict:
    """Evidence recall at 1,000 tokens of one LoCoMo conversation ingested in one go and session by session: the
    same questions (those with evidence), the same turn lines, both banks under the same task goal (the
    heuristic structure policy favours the goal's words: a first document named "... session 1" would bias
    every summary towards "session")."""
    conversation = load_locomo(f"locomo:{path}")[0]
    text, spans = conversation.render()
    whole = Document(conversation.name, text, list(spans.values()),
                     [Question(q.question, q.answer, [(conversation.name, spans[e]) for e in q.evidence])
                      for q in conversation.questions])
    goal = f"Ingest {conversation.name}"
    at_once, by_session = GrowingBank(config, embedder, goal), GrowingBank(config, embedder, goal)
    at_once.add(whole)
    documents = sessions(conversation)
    for document in documents:
        by_session.add(document)
    questions = [q for q in whole.questions if q.evidence]
    per_session = [q for d in documents for q in d.questions]
    one_go = statistics.fmean(at_once.view_recall(q) for q in questions)
    session = statistics.fmean(by_session.view_recall(q) for q in per_session)
    return {"conversation": conversation.name, "questions": len(questions), "one_go_recall": round(one_go, 4),
            "session_recall": round(session, 4), "difference_points": round(100 * (session - one_go), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hotpotqa", action="append", help="a HotpotQA file (repeatable; default the shared dev, "
                        "then train)")
    parser.add_argument("--locomo", action="append", help="a LoCoMo conversation file (repeatable; default 26, 30)")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="token sizes to measure at")
    parser.add_argument("--questions", type=int, default=60, help="HotpotQA questions per size")
    parser.add_argument("--max-step-seconds", type=float, default=1800, help="stop after a step slower than this")
    parser.add_argument("--no-sessions", action="store_true", help="skip LoCoMo one go against session by session")
    parser.add_argument("--sessions-only", action="store_true", help="only LoCoMo one go against session by session")
    args = parser.parse_args()
    hotpotqa = args.hotpotqa or [str(SHARED / "hotpotqa" / "dev_distractor_300.jsonl"),
                                 str(SHARED / "hotpotqa" / "train_100.jsonl")]
    locomo = args.locomo or [str(SHARED / "locomo" / "26.json"), str(SHARED / "locomo" / "30.json")]
    embedder = default_embedder()
    with tempfile.TemporaryDirectory(prefix="amb-growth-") as work:
        config = AmbConfig(policy="heuristic", storage_dir=Path(work) / "storage", temp_dir=Path(work) / "temp",
                           lm_threads=1)
        started = time.monotonic()
        compared = [] if args.no_sessions else [sessionwise(path, config, embedder) for path in locomo]
        for row in compared:
            print(" ".join(f"{key}={value}" for key, value in row.items()), flush=True)
        rows, notes = ([], {}) if args.sessions_only else grow(
            pooled(hotpotqa, locomo), [int(s) for s in args.sizes.split(",")], args.questions, config, embedder,
            Path(work), args.max_step_seconds)
    print(json.dumps({"sizes": rows, **notes, "sessionwise": compared, "load": os.getloadavg()[0],
                      "seconds": round(time.monotonic() - started)}))


if __name__ == "__main__":
    main()
