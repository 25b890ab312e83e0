"""``amb eval --dataset locomo:PATH``: long-dialogue QA on LoCoMo, the memory bank beside three baselines.

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
Each conversation is one group of questions (:class:`optimize.evaluate.Group`), with solvers of its own.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

import dspy

from amb_dspy.agents.chunking import token_counter_for
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import one_line
from amb_dspy.files import write_atomically
from amb_dspy.lm import adapter_for, prompt_budget
from amb_dspy.memory.graph_ops import MemoryStore
from optimize.evaluate import Answered, EvalRun, Group, QADataset
from optimize.locomo import Conversation, LoCoMoQuestion, load_locomo, locomo_exact_match, locomo_f1
from optimize.locomo_eval_report import IngestCost, LoCoMoReport, LoCoMoResult
from optimize.rag import FlatRetriever, RagAnswerer, turn_units
from optimize.solvers import BankSolver, ProgramSolver, RagSolver, ResearchQuestion, passage_corpus, react_program

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
    result.export(bank_path)  # atomic; the cost file, read only beside a bank, comes second
    write_atomically(cost_path, cost.model_dump_json())
    return result.store, cost


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


def judge(judge_lm: Any, question: LoCoMoQuestion, prediction: str) -> float | None:
    """1.0 when the judge LM says CORRECT, 0.0 for WRONG, None when it could not judge."""
    try:
        with dspy.context(lm=judge_lm, adapter=adapter_for(judge_lm)):
            label = dspy.Predict(JudgeAnswer)(question=question.question, gold_answer=question.answer,
                                              generated_answer=prediction).label
    except Exception:  # noqa: BLE001 - an unjudged question is left out of J, not scored 0
        return None
    return float(label == "CORRECT")


def bank_solver(group: Group, run: EvalRun) -> BankSolver:
    """The conversation ingested into a bank once (or read from the cache), then each question run against it."""
    store, cost = cached_bank(group.about, config=run.config, lm=run.lm, lm_name=run.lm_name, compiled=run.compiled,
                              embedder=run.embedder, notices=run.notices)
    run.costs.append(cost)
    return BankSolver(lambda: MemoryBank(run.config, lm=run.lm, compiled=run.compiled, embedder=run.embedder),
                      lambda question: {"bank": store})


def react_solver(group: Group, run: EvalRun) -> ProgramSolver:
    """ReAct searching the conversation's turns as a local corpus (one passage per turn)."""
    conversation = group.about
    corpus = passage_corpus(run, f"{conversation.name}.turns.jsonl",
                            [{"id": t.dia_id, "title": f"{t.dia_id} {t.date}", "text": t.line()} for t in conversation.turns])
    return ProgramSolver(run.lm, react_program(run, corpus, ResearchQuestion), lambda q: {"question": q.question})


def context_solver(group: Group, run: EvalRun) -> ProgramSolver:
    """The whole conversation (or its most recent turns that fit the LM) in one chain-of-thought call."""
    text = fitting_tail(group.about.text(), run.lm)
    return ProgramSolver(run.lm, dspy.ChainOfThought(AnswerFromConversation),
                         lambda q: {"conversation": text, "question": q.question})


def rag_solver(group: Group, run: EvalRun) -> RagSolver:
    """The conversation's turns indexed flat; each question gets the best of them in the ``<memory>`` budget."""
    retriever = FlatRetriever(turn_units(group.about.turns), run.embedder, alpha=run.config.retrieval_alpha)
    return RagSolver(run.lm, RagAnswerer(retriever, run.config, run.compiled))


class LoCoMo(QADataset):
    """LoCoMo conversations (a JSON file or a folder of them), one group each; scored by the paper's F1 and
    EM and, with a judge LM, by Mem0's J."""

    name, title, judged = "locomo", "LoCoMo", True
    solvers = {"bank": bank_solver, "react": react_solver, "context": context_solver, "rag": rag_solver}

    def load(self, source: str, n: int | None) -> list[Group]:
        return [Group(conversation.questions, conversation) for conversation in load_locomo(source, n=n)]

    def score(self, question: LoCoMoQuestion, answered: Answered, run: EvalRun) -> LoCoMoResult:
        prediction, usage = answered.prediction, answered.usage
        return LoCoMoResult(
            id=question.id, question=question.question, gold=question.answer, prediction=prediction,
            category=question.category, em=locomo_exact_match(prediction, question.answer),
            f1=round(locomo_f1(prediction, question.answer, question.category), 4), seconds=round(answered.seconds, 2),
            calls=usage["calls"], prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
            error=answered.error, judge=judge(run.judge_lm, question, prediction) if run.judge_lm is not None else None,
        )

    def report(self, source: str, run: EvalRun, results: list[LoCoMoResult]) -> LoCoMoReport:
        return LoCoMoReport(dataset=source, mode=run.mode, model=run.lm_name,
                            compiled=str(run.compiled) if run.compiled else None, questions=results, ingest=run.costs)


LOCOMO = LoCoMo()
