"""``amb eval``: answer HotpotQA questions and score them, the memory bank side by side with two baselines.

Modes:

* ``bank`` -- the memory bank: ``MemoryBank(...).run(task=question, context=paragraphs)``;
* ``react`` -- plain ``dspy.ReAct`` with the same search and visit tools and no memory;
* ``context`` -- the whole context in one chain-of-thought call (the long-context baseline);
* ``rag`` -- flat hybrid retrieval of sentences into the bank's ``<memory>`` budget, then the answer
  agent's signature in one call (:mod:`optimize.rag`).

By default (the distractor setting) a question's own paragraphs are the context it is given: long-document
QA. With ``corpus=True`` the paragraphs of all the questions become one local search corpus instead, and
the bank and ReAct must find what they need with the search tool (deep research over a local corpus);
the ``context`` mode still reads the question's own paragraphs, as an upper bound.

Each question is scored with the official HotpotQA answer EM and F1 and measured in LM calls, prompt and
completion tokens and seconds (all LM calls, tools' own calls included; DSPy's response cache is off so
that a rerun measures the same work). ``num_threads`` questions run at once in DSPy's ``ParallelExecutor``;
each question's usage meter is attached in its own thread, so per-question counts stay exact (the embedded
model's engine serialises its calls, so threads only help hosted LMs). A question that fails scores 0 and
the run goes on; its error is kept.
"""

from __future__ import annotations

import functools
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import UserError, one_line
from amb_dspy.lm import UsageMeter, adapter_for
from amb_dspy.tools import SearchTool, VisitTool, build_tools, load_corpus, make_search_backend
from optimize.hotpotqa import HotpotQAItem, load_hotpotqa
from optimize.metrics import answer_exact_match, answer_f1

MODES = ("bank", "react", "context", "rag")


class EvalError(UserError, ValueError):
    """The evaluation cannot run as asked; the message is one line."""


class AnswerFromContext(dspy.Signature):
    """Answer the question using the context. Reply with the answer alone: a short span from the
    context (a name, a date, a number, a place) or yes/no for a yes/no question."""

    context: str = dspy.InputField(desc="paragraphs, each headed by its title")
    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the short answer")


class ResearchQuestion(dspy.Signature):
    """Answer the question. Use the tools to find the facts you need. Reply with the answer alone: a short
    span (a name, a date, a number, a place) or yes/no for a yes/no question."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the short answer")


class ResearchQuestionWithContext(ResearchQuestion):
    context: str = dspy.InputField(desc="paragraphs given with the question, each headed by its title")


class QuestionResult(BaseModel):
    id: str
    question: str
    gold: str
    prediction: str
    em: float
    f1: float
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    error: str | None = None


class EvalReport(BaseModel):
    dataset: str
    mode: str
    model: str
    compiled: str | None
    corpus: bool
    questions: list[QuestionResult]

    def means(self) -> dict[str, Any]:
        fields = ("em", "f1", "calls", "prompt_tokens", "completion_tokens", "seconds")
        count = len(self.questions)
        means = {f: round(sum(getattr(q, f) for q in self.questions) / count, 4) if count else 0.0 for f in fields}
        return {"mode": self.mode, "n": count, **means, "errors": sum(q.error is not None for q in self.questions)}


def write_corpus(items: list[HotpotQAItem], directory: Path) -> Path:
    """All paragraphs of ``items`` as a JSONL of passages (one per title) for ``LocalCorpus``."""
    path = directory / "hotpotqa_paragraphs.jsonl"
    seen: set[str] = set()
    with path.open("w", encoding="utf-8") as out:
        for item in items:
            for paragraph in item.context:
                if paragraph.title not in seen:
                    seen.add(paragraph.title)
                    out.write(json.dumps({"id": paragraph.title, "title": paragraph.title, "text": paragraph.text},
                                         ensure_ascii=False) + "\n")
    return path


class _Solver:
    """Answers one question in a given mode; holds what all questions share (LM, tools, compiled path)."""

    def __init__(self, mode: str, *, lm: Any, config: AmbConfig, compiled: str | Path | None, corpus: Any, embedder: Any):
        self.mode, self.lm, self.config, self.compiled, self.corpus, self.embedder = mode, lm, config, compiled, corpus, embedder
        if mode == "react":
            if corpus is None:
                corpus = load_corpus(config.tools, embedder, cache_dir=config.paths.cache_dir)
            tools = build_tools(search=SearchTool(make_search_backend(config.tools, corpus)),
                                visit=VisitTool(config.tools, corpus=corpus))
            signature = ResearchQuestion if corpus is not None else ResearchQuestionWithContext
            self.react = dspy.ReAct(signature, tools=tools, max_iters=config.react_max_iters)
        elif mode == "context":
            self.reader = dspy.ChainOfThought(AnswerFromContext)

    @functools.cached_property
    def memory_bank(self) -> MemoryBank:
        """One bank for every question (agents, LMs and window checks once); each run is a task of its own."""
        return MemoryBank(self.config, lm=self.lm, compiled=self.compiled, embedder=self.embedder, corpus=self.corpus)

    def use_passages(self, items: list[HotpotQAItem]) -> None:
        """For ``rag``: index the paragraphs of ``items`` once (each question then reads its own, or all of
        them with a corpus)."""
        from optimize.rag import FlatRetriever, RagAnswerer, paragraph_units

        units = paragraph_units([p for item in items for p in item.context])
        self.rag = RagAnswerer(FlatRetriever(units, self.embedder, alpha=self.config.retrieval_alpha), self.config,
                               self.compiled)

    def __call__(self, item: HotpotQAItem) -> str:
        context = item.context_text()
        if self.mode == "bank":
            result = self.memory_bank.run(task=item.question, context="" if self.corpus is not None else context)
            if not result.answer and result.errors:
                raise RuntimeError(result.errors[-1])
            return result.answer
        with dspy.context(lm=self.lm, adapter=adapter_for(self.lm)):
            if self.mode == "react":
                inputs = {"question": item.question} if self.corpus is not None else {"question": item.question, "context": context}
                return str(self.react(**inputs).answer or "")
            if self.mode == "rag":
                return self.rag(item.question, within=None if self.corpus is not None else {p.title for p in item.context})
            return str(self.reader(context=context, question=item.question).answer or "")


def measured(solve: Callable[[Any], str], item: Any) -> tuple[str, str | None, dict[str, int], float]:
    """``solve(item)``'s answer, its error (None when it answered), the LM usage it made and its seconds.

    The meter is attached in the calling thread (``dspy.context`` is per thread), so only this question's
    calls are counted, also while other questions run in other threads."""
    meter = UsageMeter()  # every LM called for this question, per-agent LMs (config.agent_lms) included
    started = time.monotonic()
    error = None
    try:
        with meter.counting():
            prediction = solve(item)
    except Exception as exc:  # noqa: BLE001 - one failed question scores 0; the evaluation goes on
        prediction, error = "", f"{type(exc).__name__}: {one_line(exc, 200)}"
    return prediction, error, meter.total(), time.monotonic() - started


def answer_all(items: list[Any], answer: Callable[[Any], Any], *, num_threads: int = 1,
               on_result: Callable[[Any], None] | None = None) -> list[Any]:
    """``answer(item)`` for every item, in order; ``num_threads`` > 1 runs them in DSPy's ``ParallelExecutor``,
    which gives each worker thread the caller's DSPy settings (LM, adapter, callbacks). ``answer`` must not
    raise (see :func:`measured`). The embedded model serialises its calls, so threads help hosted LMs."""
    if num_threads < 1:
        raise EvalError(f"num_threads must be at least 1, got {num_threads}")
    lock = threading.Lock()

    def one(item: Any) -> Any:
        result = answer(item)
        if on_result is not None:
            with lock:
                on_result(result)
        return result

    if num_threads == 1:
        return [one(item) for item in items]
    from dspy.utils.parallelizer import ParallelExecutor

    executor = ParallelExecutor(num_threads=num_threads, disable_progress_bar=True, max_errors=len(items) + 1)
    return executor.execute(one, items)


def run_eval(
    dataset: str,
    *,
    lm: Any,
    n: int | None = None,
    mode: str = "bank",
    compiled: str | Path | None = None,
    corpus: bool = False,
    config: AmbConfig | None = None,
    lm_name: str = "",
    embedder: Any = None,
    on_result: Callable[[QuestionResult], None] | None = None,
    num_threads: int = 1,
) -> EvalReport:
    """Answer the first ``n`` questions of ``dataset`` (``hotpotqa`` = the Hugging Face validation split, or
    ``hotpotqa:PATH``) in ``mode`` and score them; ``on_result`` sees each question as it is done;
    ``num_threads`` questions run at once (:func:`answer_all`)."""
    if getattr(lm, "cache", False):
        lm = lm.copy(cache=False)  # cached replies would report no tokens and no time: measure real work
    if mode not in MODES:
        raise EvalError(f"unknown mode {mode!r}: choose one of {', '.join(MODES)}")
    config = config or AmbConfig()
    if compiled is not None:
        from amb_dspy.agents.compiled import read_manifest

        read_manifest(compiled)  # a bad directory stops the run before the first question
    items = load_hotpotqa(dataset, split="validation", n=n)
    needs_embedder = mode in ("bank", "rag") or corpus or config.corpus is not None
    if embedder is None and needs_embedder:
        from amb_dspy.retrieval.embedding import default_embedder

        embedder = default_embedder()

    with tempfile.TemporaryDirectory(prefix="amb-eval-") as work:
        work_dir = Path(work)
        # Every bank writes its storage under this run's own folder, never into the user's data/.
        config = config.model_copy(update={"storage_dir": work_dir / "storage", "temp_dir": work_dir / "temp"})
        search_corpus = None
        if corpus:
            from amb_dspy.tools.corpus import LocalCorpus

            search_corpus = LocalCorpus.load(write_corpus(items, work_dir), embedder)
        solve = _Solver(mode, lm=lm, config=config, compiled=compiled, corpus=search_corpus, embedder=embedder)
        if mode == "rag":
            solve.use_passages(items)

        def answer(item: HotpotQAItem) -> QuestionResult:
            prediction, error, usage, seconds = measured(solve, item)
            return QuestionResult(
                id=item.id, question=item.question, gold=item.answer, prediction=prediction,
                em=answer_exact_match(prediction, item.answer), f1=round(answer_f1(prediction, item.answer), 4),
                calls=usage["calls"], prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
                seconds=round(seconds, 2), error=error,
            )

        results = answer_all(items, answer, num_threads=num_threads, on_result=on_result)
    return EvalReport(
        dataset=dataset, mode=mode, model=lm_name, compiled=str(compiled) if compiled else None, corpus=corpus,
        questions=results,
    )
