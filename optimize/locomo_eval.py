"""``amb eval --dataset locomo:PATH``: long-dialogue QA on LoCoMo, the memory bank beside two baselines.

Each conversation is rendered as text (:meth:`optimize.locomo.Conversation.render`) and every question of
categories 1-4 is answered

* ``bank`` -- from a copy of a bank the conversation was ingested into once (``MemoryBank.ingest``, then
  ``run(task=question, bank=store)``). The ingested bank is kept in ``config.cache_dir/locomo-banks/`` under
  a key of the conversation's text, the compiled agents' files, the policy and the LM, with its ingest cost
  beside it, so a rerun reuses it and still reports what ingesting cost;
* ``context`` -- from the whole conversation in one chain-of-thought call (for an LM with a smaller window,
  its most recent turns that fit);
* ``react`` -- by plain ``dspy.ReAct`` searching the turns as a local corpus (one passage per turn);
* ``rag`` -- the best turns by hybrid score within the bank's ``<memory>`` budget, then the answer agent's
  signature in one call (:mod:`optimize.rag`).

Scores: the LoCoMo paper's F1 and exact match (:mod:`optimize.locomo`), and with ``judge_lm`` an LLM judge's
correct/incorrect against the gold answer (Mem0's J). Usage per question as ``optimize.evaluate`` measures it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import dspy
from pydantic import BaseModel

from amb_dspy.agents.chunking import token_counter_for
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import one_line
from amb_dspy.files import write_atomically
from amb_dspy.lm import adapter_for, prompt_budget
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.tools import SearchTool, VisitTool, build_tools, make_search_backend
from optimize.evaluate import MODES, EvalError, QuestionResult, ResearchQuestion, answer_all, measured
from optimize.locomo import Conversation, LoCoMoQuestion, load_locomo, locomo_exact_match, locomo_f1

BANK_CACHE = "locomo-banks"


class AnswerFromConversation(dspy.Signature):
    """Answer the question about the conversation. Each line is one turn: [date of the session] speaker: text.
    For "when" questions give the date the event happened, working out words like "yesterday" or "last
    week" from the session's date. Reply with a short answer: a name, a date, a few words."""

    conversation: str = dspy.InputField()
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the short answer")


class JudgeAnswer(dspy.Signature):
    """Judge a generated answer against the gold answer of a question about a conversation. Be generous:
    CORRECT when it touches the same topic, names the same thing or refers to the same date or period as
    the gold answer, even in other words or another format; WRONG otherwise."""

    question: str = dspy.InputField()
    gold_answer: str = dspy.InputField()
    generated_answer: str = dspy.InputField()
    label: Literal["CORRECT", "WRONG"] = dspy.OutputField()


class LoCoMoResult(QuestionResult):
    category: int
    judge: float | None = None


class IngestCost(BaseModel):
    conversation: str
    nodes: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    cached: bool


class LoCoMoReport(BaseModel):
    dataset: str
    mode: str
    model: str
    compiled: str | None
    questions: list[LoCoMoResult]
    ingest: list[IngestCost]

    def means(self, category: int | None = None) -> dict[str, Any]:
        rows = [q for q in self.questions if category is None or q.category == category]
        fields = ("em", "f1", "calls", "prompt_tokens", "completion_tokens", "seconds")
        means = {f: round(sum(getattr(q, f) for q in rows) / len(rows), 4) if rows else 0.0 for f in fields}
        judged = [q.judge for q in rows if q.judge is not None]
        means["judge"] = round(sum(judged) / len(judged), 4) if judged else None
        return {"n": len(rows), **means, "errors": sum(q.error is not None for q in rows)}

    def ingest_totals(self) -> dict[str, Any]:
        """Ingest cost over all conversations, and amortised over the questions asked."""
        total = {f: sum(getattr(c, f) for c in self.ingest) for f in ("calls", "prompt_tokens", "completion_tokens")}
        total["seconds"] = round(sum(c.seconds for c in self.ingest), 2)
        count = max(len(self.questions), 1)
        return {**{f"ingest_{k}": v for k, v in total.items()},
                **{f"ingest_{k}_per_question": round(v / count, 2) for k, v in total.items()}}


# what ingest builds from the same text changed (2: a dialogue of dated sessions is an entry a session): banks
# cached before are not reused
INGEST_REVISION = 2


def bank_key(text: str, config: AmbConfig, lm_name: str, compiled: str | Path | None) -> str:
    """What an ingested bank depends on: the conversation, the compiled agents' files, the policy, the LM, and
    :data:`INGEST_REVISION`."""
    digest = hashlib.sha256(f"{INGEST_REVISION}\0{text}".encode())
    if compiled is not None:
        for file in sorted(Path(compiled).iterdir()):
            if file.is_file():
                digest.update(file.name.encode() + b"\0" + file.read_bytes())
    digest.update(f"\0{config.policy}\0{lm_name if config.policy != 'heuristic' else ''}".encode())
    return digest.hexdigest()[:32]


def cached_bank(conversation: Conversation, *, config: AmbConfig, lm: Any, lm_name: str, compiled: Any,
                embedder: Any, notices: list[str]) -> tuple[MemoryStore, IngestCost]:
    """The conversation's ingested bank from the cache, or ingested now and cached (written atomically)."""
    folder = Path(config.cache_dir) / BANK_CACHE
    key = bank_key(conversation.text(), config, lm_name, compiled)
    bank_path, cost_path = folder / f"{key}.json", folder / f"{key}.cost.json"
    if bank_path.exists() and cost_path.exists():
        try:
            store = MemoryStore.load(bank_path, embedder, notices=notices)
            cost = IngestCost.model_validate_json(cost_path.read_text(encoding="utf-8"))
            return store, cost.model_copy(update={"cached": True})
        except Exception as exc:  # noqa: BLE001 - a bad cache file is rebuilt, never trusted
            notices.append(f"{bank_path}: unusable cached bank ({one_line(exc, 120)}); ingesting again")
    bank = MemoryBank(config, lm=lm, compiled=compiled, embedder=embedder)
    result = bank.ingest(conversation.text(), conversation.name)
    usage = {f: sum(u[f] for u in result.usage.values()) for f in ("calls", "prompt_tokens", "completion_tokens")}
    cost = IngestCost(conversation=conversation.name, nodes=result.nodes, seconds=result.seconds, cached=False, **usage)
    bank.export(bank_path)  # atomic; the cost file, read only beside a bank, comes second
    write_atomically(cost_path, cost.model_dump_json())
    return bank.session.store, cost


def fitting_tail(text: str, lm: Any, reserve: int = 600) -> str:
    """``text``, or its last lines that fit the embedded LM's prompt budget less ``reserve`` tokens."""
    budget = prompt_budget(lm)
    count = token_counter_for(lm)
    if budget is None or count(text) <= budget - reserve:
        return text
    lines, kept, used = text.split("\n"), [], 0
    for line in reversed(lines):
        used += count(line) + 1
        if used > budget - reserve:
            break
        kept.append(line)
    return "\n".join(reversed(kept))


class ConversationSolver:
    """Answers the questions of one conversation in one mode."""

    def __init__(self, mode: str, conversation: Conversation, *, lm: Any, config: AmbConfig, compiled: Any,
                 embedder: Any, bank: MemoryStore | None, work_dir: Path):
        self.mode, self.lm, self.config, self.compiled, self.embedder, self.bank = mode, lm, config, compiled, embedder, bank
        if mode == "context":
            self.text = fitting_tail(conversation.text(), lm)
            self.reader = dspy.ChainOfThought(AnswerFromConversation)
        elif mode == "react":
            from amb_dspy.tools.corpus import LocalCorpus

            path = work_dir / f"{conversation.name}.turns.jsonl"
            path.write_text("".join(json.dumps({"id": t.dia_id, "title": f"{t.dia_id} {t.date}", "text": t.line()}) + "\n"
                                    for t in conversation.turns), encoding="utf-8")
            corpus = LocalCorpus.load(path, embedder)
            tools = build_tools(search=SearchTool(make_search_backend(config.tools, corpus)),
                                visit=VisitTool(config.tools, corpus=corpus))
            self.react = dspy.ReAct(ResearchQuestion, tools=tools, max_iters=config.react_max_iters)
        elif mode == "rag":
            from optimize.rag import FlatRetriever, RagAnswerer, turn_units

            retriever = FlatRetriever(turn_units(conversation.turns), embedder, alpha=config.retrieval_alpha)
            self.rag = RagAnswerer(retriever, config, compiled)

    @functools.cached_property
    def memory_bank(self) -> MemoryBank:
        """One bank for every question (agents, LMs and window checks once); each run is a task of its own."""
        return MemoryBank(self.config, lm=self.lm, compiled=self.compiled, embedder=self.embedder)

    def __call__(self, question: LoCoMoQuestion) -> str:
        if self.mode == "bank":
            result = self.memory_bank.run(task=question.question, bank=self.bank)
            if not result.answer and result.errors:
                raise RuntimeError(result.errors[-1])
            return result.answer
        with dspy.context(lm=self.lm, adapter=adapter_for(self.lm)):
            if self.mode == "react":
                return str(self.react(question=question.question).answer or "")
            if self.mode == "rag":
                return self.rag(question.question)
            return str(self.reader(conversation=self.text, question=question.question).answer or "")


def judge(judge_lm: Any, question: LoCoMoQuestion, prediction: str) -> float | None:
    """1.0 when the judge LM says CORRECT, 0.0 for WRONG, None when it could not judge."""
    try:
        with dspy.context(lm=judge_lm, adapter=adapter_for(judge_lm)):
            label = dspy.Predict(JudgeAnswer)(question=question.question, gold_answer=question.answer,
                                              generated_answer=prediction).label
    except Exception:  # noqa: BLE001 - an unjudged question is left out of J, not scored 0
        return None
    return float(label == "CORRECT")


def run_locomo_eval(
    dataset: str, *, lm: Any, n: int | None = None, mode: str = "bank", compiled: str | Path | None = None,
    config: AmbConfig | None = None, lm_name: str = "", embedder: Any = None, judge_lm: Any = None,
    num_threads: int = 1, on_result: Callable[[LoCoMoResult], None] | None = None,
    notices: list[str] | None = None,
) -> LoCoMoReport:
    """Answer the first ``n`` category 1-4 questions of ``locomo:PATH`` in ``mode`` and score them."""
    if getattr(lm, "cache", False):
        lm = lm.copy(cache=False)  # cached replies would report no tokens and no time: measure real work
    if mode not in MODES:
        raise EvalError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    config = config or AmbConfig()
    notices = notices if notices is not None else []
    conversations = load_locomo(dataset, n=n)
    if compiled is not None:
        from amb_dspy.agents.compiled import read_manifest

        read_manifest(compiled)
    if embedder is None and mode != "context":
        from amb_dspy.retrieval.embedding import default_embedder

        embedder = default_embedder()
    results: list[LoCoMoResult] = []
    ingest: list[IngestCost] = []
    with tempfile.TemporaryDirectory(prefix="amb-locomo-") as work:
        work_dir = Path(work)
        config = config.model_copy(update={"storage_dir": work_dir / "storage", "temp_dir": work_dir / "temp"})
        for conversation in conversations:
            store = None
            if mode == "bank":
                store, cost = cached_bank(conversation, config=config, lm=lm, lm_name=lm_name, compiled=compiled,
                                          embedder=embedder, notices=notices)
                ingest.append(cost)
            solve = ConversationSolver(mode, conversation, lm=lm, config=config, compiled=compiled, embedder=embedder,
                                       bank=store, work_dir=work_dir)

            def answer(question: LoCoMoQuestion, solve=solve) -> LoCoMoResult:
                prediction, error, usage, seconds = measured(solve, question)
                return LoCoMoResult(
                    id=question.id, question=question.question, gold=question.answer, prediction=prediction,
                    category=question.category, em=locomo_exact_match(prediction, question.answer),
                    f1=round(locomo_f1(prediction, question.answer, question.category), 4), seconds=round(seconds, 2),
                    calls=usage["calls"], prompt_tokens=usage["prompt_tokens"],
                    completion_tokens=usage["completion_tokens"], error=error,
                    judge=judge(judge_lm, question, prediction) if judge_lm is not None else None,
                )

            results += answer_all(conversation.questions, answer, num_threads=num_threads, on_result=on_result)
    return LoCoMoReport(dataset=dataset, mode=mode, model=lm_name, compiled=str(compiled) if compiled else None,
                        questions=results, ingest=ingest)
