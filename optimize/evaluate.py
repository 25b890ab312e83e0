"""``amb eval``: one evaluator for every dataset -- answer its questions in one mode, score and measure each.

A dataset (:class:`Dataset`) says how its source loads into groups of questions, which solver answers a
group in each mode it supports (``solvers``, by mode name), how an answer is scored and what its report
looks like. The built-in ones are HotpotQA (:mod:`optimize.hotpotqa_eval`) and LoCoMo
(:mod:`optimize.locomo_eval`); ``--dataset NAME:PATH`` picks one by its name, and a third dataset is one
new module with one class, added with :func:`register_dataset`. The modes they share:

* ``bank`` -- the memory bank answers each question as a task of its own;
* ``react`` -- plain ``dspy.ReAct`` with search and visit tools and no memory;
* ``context`` -- the whole context in one chain-of-thought call (the long-context baseline);
* ``rag`` -- flat hybrid retrieval into the bank's ``<memory>`` budget, then the answer agent's signature
  in one call (:mod:`optimize.rag`).

Each question is measured in LM calls, prompt and completion tokens and seconds (all LM calls, tools' own
calls included; DSPy's response cache is off so that a rerun measures the same work). ``num_threads``
questions run at once in DSPy's ``ParallelExecutor``; each question's usage meter is attached in its own
thread, so per-question counts stay exact. A question that fails scores 0 and the run goes on; its error
is kept. Every bank the run builds writes under a temporary folder of its own, never into the user's data/.
"""

from __future__ import annotations

import importlib
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from amb_dspy.agents.compiled import read_manifest
from amb_dspy.config import AmbConfig
from amb_dspy.errors import UserError, one_line
from amb_dspy.lm import UsageMeter
from amb_dspy.retrieval.embedding import default_embedder
from optimize.eval_reports import EvalReport, QuestionResult, Report
from optimize.metrics import answer_exact_match, answer_f1

# The built-in datasets by name, imported on first use: "module:attribute" of each one's Dataset.
BUILT_IN = {"hotpotqa": "optimize.hotpotqa_eval:HOTPOTQA", "locomo": "optimize.locomo_eval:LOCOMO"}
DEFAULT_DATASET = "hotpotqa"  # an unknown name goes to HotpotQA's loader, which refuses it in one line
_registered: dict[str, Dataset] = {}


class EvalError(UserError, ValueError):
    """The evaluation cannot run as asked; the message is one line."""


@dataclass
class Group:
    """Questions one solver answers, and what they are about (HotpotQA: all the items; LoCoMo: a conversation)."""

    questions: list[Any]
    about: Any = None


@dataclass
class EvalRun:
    """What every solver of one evaluation shares."""

    mode: str
    lm: Any
    config: AmbConfig
    work_dir: Path
    compiled: str | Path | None = None
    embedder: Any = None
    corpus: bool = False  # HotpotQA: search all the questions' paragraphs instead of giving each its own
    lm_name: str = ""
    judge_lm: Any = None
    notices: list[str] = field(default_factory=list)
    costs: list[Any] = field(default_factory=list)  # what preparing a group cost (LoCoMo's ingests)


Solver = Callable[[Any], str]  # a question -> the answer; raises when it cannot answer
SolverFactory = Callable[[Group, EvalRun], Solver]


class Answered(NamedTuple):
    """One question's answer as :func:`measured` saw it."""

    prediction: str
    error: str | None
    usage: dict[str, int]
    seconds: float


class Dataset(Protocol):
    """A question-answering dataset ``amb eval`` can run (:class:`QADataset` has the defaults)."""

    name: str  # its sources are NAME or NAME:PATH
    title: str  # how messages name it
    judged: bool  # whether --judge-lm scores it
    solvers: Mapping[str, SolverFactory]  # by mode, in the order the error for an unknown mode lists them

    def load(self, source: str, n: int | None) -> list[Group]: ...

    def needs_embedder(self, mode: str, corpus: bool, config: AmbConfig) -> bool: ...

    def score(self, question: Any, answered: Answered, run: EvalRun) -> QuestionResult: ...

    def report(self, source: str, run: EvalRun, results: list[QuestionResult]) -> Report: ...


class QADataset:
    """Defaults for a :class:`Dataset` of short-answer questions (each with ``id``, ``question`` and
    ``answer``): scored by HotpotQA's official answer EM and F1, reported as an :class:`EvalReport`, not
    judged, and needing the embedding model in every mode but ``context``. A subclass gives ``name``,
    ``title``, ``solvers`` and :meth:`load`."""

    name: str
    title: str
    judged = False
    solvers: Mapping[str, SolverFactory] = {}

    def load(self, source: str, n: int | None) -> list[Group]:
        raise NotImplementedError

    def needs_embedder(self, mode: str, corpus: bool, config: AmbConfig) -> bool:
        return mode != "context"

    def score(self, question: Any, answered: Answered, run: EvalRun) -> QuestionResult:
        prediction, usage = answered.prediction, answered.usage
        return QuestionResult(
            id=question.id, question=question.question, gold=question.answer, prediction=prediction,
            em=answer_exact_match(prediction, question.answer), f1=round(answer_f1(prediction, question.answer), 4),
            calls=usage["calls"], prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
            seconds=round(answered.seconds, 2), error=answered.error,
        )

    def report(self, source: str, run: EvalRun, results: list[QuestionResult]) -> Report:
        return EvalReport(dataset=source, mode=run.mode, model=run.lm_name,
                          compiled=str(run.compiled) if run.compiled else None, corpus=run.corpus, questions=results)


def register_dataset(dataset: Dataset) -> Dataset:
    """Make ``dataset`` answer ``--dataset NAME[:PATH]`` (it replaces a built-in one of the same name)."""
    _registered[dataset.name.lower()] = dataset
    return dataset


def dataset_for(source: str) -> Dataset:
    """The dataset a source names by its prefix (``locomo:PATH`` -> LoCoMo); HotpotQA when none matches."""
    name = source.partition(":")[0].strip().lower()
    if name in _registered:
        return _registered[name]
    module, _, attribute = BUILT_IN.get(name, BUILT_IN[DEFAULT_DATASET]).partition(":")
    return getattr(importlib.import_module(module), attribute)


def measured(solve: Callable[[Any], str], item: Any) -> Answered:
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
    return Answered(prediction, error, meter.total(), time.monotonic() - started)


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


def check_request(dataset: Dataset, mode: str, judge_lm: Any) -> None:
    """Refuse, in one line, a mode the dataset has no solver for or a judge it does not use."""
    if judge_lm is not None and not dataset.judged:
        raise EvalError(f"--judge-lm is for LoCoMo (locomo:PATH); {dataset.title} is scored by EM and F1")
    if mode not in dataset.solvers:
        raise EvalError(f"unknown mode {mode!r}: choose one of {', '.join(dataset.solvers)}")


def answer_group(dataset: Dataset, group: Group, run: EvalRun, *, num_threads: int,
                 on_result: Callable[[QuestionResult], None] | None) -> list[QuestionResult]:
    """The scored results of one group's questions, answered by the solver of the run's mode."""
    solve = dataset.solvers[run.mode](group, run)
    return answer_all(group.questions, lambda question: dataset.score(question, measured(solve, question), run),
                      num_threads=num_threads, on_result=on_result)


def run_eval(
    dataset: str, *, lm: Any, n: int | None = None, mode: str = "bank", compiled: str | Path | None = None,
    corpus: bool = False, config: AmbConfig | None = None, lm_name: str = "", embedder: Any = None,
    judge_lm: Any = None, on_result: Callable[[QuestionResult], None] | None = None, num_threads: int = 1,
    notices: list[str] | None = None,
) -> Report:
    """Answer the first ``n`` questions of ``dataset`` (``hotpotqa``, ``hotpotqa:PATH``, ``locomo:PATH`` or a
    registered one) in ``mode`` and score them; ``on_result`` sees each question as it is done, ``notices``
    gets what the user should know (a cached bank rebuilt); ``num_threads`` questions run at once."""
    kind = dataset_for(dataset)
    check_request(kind, mode, judge_lm)
    config = config or AmbConfig()
    if compiled is not None:
        read_manifest(compiled)  # a bad directory stops the run before the first question
    groups = kind.load(dataset, n)
    if embedder is None and kind.needs_embedder(mode, corpus, config):
        embedder = default_embedder()
    with tempfile.TemporaryDirectory(prefix="amb-eval-") as work:
        config = config.model_copy(update={"storage_dir": Path(work) / "storage", "temp_dir": Path(work) / "temp"})
        run = EvalRun(mode=mode, lm=uncached(lm), config=config, work_dir=Path(work), compiled=compiled,
                      embedder=embedder, corpus=corpus, lm_name=lm_name, judge_lm=judge_lm,
                      notices=notices if notices is not None else [])
        results = [result for group in groups
                   for result in answer_group(kind, group, run, num_threads=num_threads, on_result=on_result)]
    return kind.report(dataset, run, results)


def uncached(lm: Any) -> Any:
    """``lm`` without DSPy's response cache: cached replies would report no tokens and no time."""
    return lm.copy(cache=False) if getattr(lm, "cache", False) else lm
