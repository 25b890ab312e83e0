"""Compile agents against HotpotQA-derived examples and save them: the engine of ``amb optimize``.

:func:`optimize_agents` loads the items, splits them into train and held-out dev questions, builds each
side's examples (:mod:`optimize.trainsets`), scores the program on dev with ``dspy.Evaluate``, compiles
it with one of DSPy's optimizers, scores it again, and saves the compiled agents with their manifest
(:mod:`amb_dspy.compiled`). The program is the agent itself for classification, structure, analysis,
integration and answer; for planning and "all" it is the whole bank (:class:`~amb_dspy.program.MemoryBankQA`) with
only the compiled agents' predictors exposed.

Optimizers (DSPy's own):

* ``bootstrap`` -- ``dspy.BootstrapFewShot``: demos from traces the metric passes. No labelled demos: the
  examples' fields are the agent's arguments, not its predictor's, so they would not fit the prompt.
* ``mipro`` -- ``dspy.MIPROv2(auto="light")``: instructions proposed by the teacher (prompt) model, plus
  bootstrapped demos. Needs the optional ``optuna`` package.
* ``gepa`` -- ``dspy.GEPA(auto="light")``: instructions evolved by reflection; the teacher LM reflects,
  on the metrics' written feedback.

The teacher LM (``teacher_lm``) runs the bootstrap traces and proposes instructions; it defaults to the
task LM.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
from pydantic import BaseModel

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.agents.compiled import MANIFEST_FILE, AgentRecord, read_manifest, save_agents
from amb_dspy.config import AGENT_NAMES, AmbConfig
from amb_dspy.errors import UserError
from amb_dspy.lm import adapter_for
from amb_dspy.program import MemoryBankQA
from amb_dspy.retrieval.embedding import default_embedder
from optimize.hotpotqa import load_hotpotqa
from optimize.metrics import METRICS, AgentMetric
from optimize.trainsets import BANK_AGENTS, build_examples, split_items

OPTIMIZERS = ("bootstrap", "mipro", "gepa")
TARGETS = (*AGENT_NAMES, "all")


class OptimizeError(UserError, ValueError):
    """The optimization cannot run as asked; the message is one line."""


class OptimizeResult(BaseModel):
    agents: list[str]
    optimizer: str
    dataset: str
    metric: str
    train_size: int
    dev_size: int
    score_before: float
    score_after: float
    out: Path
    manifest: Path
    seconds: float


class Steps:
    """Progress of one run on a ``rich.progress.Progress`` (or nowhere when there is none)."""

    def __init__(self, progress: Any = None):
        self.progress = progress
        self._task = None

    def start(self, description: str, total: int | None = None) -> Callable[[], None]:
        """Start a step (``total`` None: count without an end); returns the function that advances it."""
        if self.progress is None:
            return lambda: None
        task = self._task = self.progress.add_task(description, total=total)
        return lambda: self.progress.advance(task)

    def finish(self) -> None:
        """Show the current step as done."""
        if self.progress is None or self._task is None:
            return
        task = next(t for t in self.progress.tasks if t.id == self._task)
        done = task.total or max(task.completed, 1)
        self.progress.update(self._task, total=done, completed=done)


def counted(function: Callable, advance: Callable[[], None]) -> Callable:
    """``function`` that also advances a progress step each time it is called (it keeps the signature
    that optimizers inspect)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            advance()

    return wrapper


def evaluate(program: dspy.Module, devset: list[dspy.Example], metric: Callable, advance: Callable[[], None] = lambda: None,
             num_threads: int = 1) -> float:
    """Mean metric over ``devset`` in [0, 1] with ``dspy.Evaluate``, ``num_threads`` examples at a time (the
    embedded model serialises its calls, so more threads help hosted LMs only); an example that raises
    scores 0 and never stops the evaluation."""
    evaluator = dspy.Evaluate(
        devset=devset, metric=counted(metric, advance), num_threads=num_threads, display_progress=False,
        max_errors=len(devset) + 1, failure_score=0.0,
    )
    return round(evaluator(program).score / 100, 4)


def build_program(agent: str, config: AmbConfig, *, embedder=None) -> dspy.Module:
    """The program to compile for ``agent``: the agent itself, or the bank with only it (or all) exposed.
    Agents count tokens with the active LM's tokenizer, as in the bank."""
    agents = {name: cls(config) for name, cls in AGENT_CLASSES.items()}
    if agent not in BANK_AGENTS:
        return agents[agent]
    if embedder is None:
        embedder = default_embedder()
    trainable = dict(agents) if agent == "all" else {agent: agents[agent]}
    fixed = {name: a for name, a in agents.items() if name not in trainable}
    return MemoryBankQA(config, trainable=trainable, fixed=fixed, embedder=embedder)


def compiled_agents(agent: str, program: dspy.Module) -> dict[str, dspy.Module]:
    if agent in BANK_AGENTS:
        return dict(program.trainable)
    return {agent: program}


def make_optimizer(
    name: str, metric: AgentMetric, *, lm: Any, teacher_lm: Any = None, max_demos: int = 2, budget: int | None = None,
    max_errors: int = 1000, seed: int = 0, on_metric: Callable[[], None] = lambda: None, num_threads: int = 1,
):
    """DSPy's optimizer for ``name``, set up for this project (see the module docstring); ``on_metric`` is
    called after every metric call (progress); ``num_threads`` is MIPROv2's and GEPA's evaluation threads
    (BootstrapFewShot bootstraps one example at a time)."""
    teacher = teacher_lm or lm
    teacher_settings = {"lm": teacher_lm, "adapter": adapter_for(teacher_lm)} if teacher_lm is not None else {}
    if name == "bootstrap":
        return dspy.BootstrapFewShot(
            metric=counted(metric, on_metric), teacher_settings=teacher_settings, max_bootstrapped_demos=max_demos,
            max_labeled_demos=0, max_rounds=1, max_errors=max_errors,
        )
    if name == "mipro":
        if importlib.util.find_spec("optuna") is None:
            raise OptimizeError("--optimizer mipro needs the optuna package: pip install optuna (or pip install 'dspy[optuna]')")
        return dspy.MIPROv2(
            metric=counted(metric, on_metric), prompt_model=teacher, task_model=lm, teacher_settings=teacher_settings,
            max_bootstrapped_demos=max_demos, max_labeled_demos=0, auto="light", num_threads=num_threads,
            max_errors=max_errors, seed=seed, verbose=False,
        )
    if name == "gepa":
        budget_args = {"max_metric_calls": budget} if budget is not None else {"auto": "light"}
        return dspy.GEPA(
            metric=counted(metric.feedback, on_metric), reflection_lm=teacher, num_threads=num_threads, seed=seed, track_stats=False,
            **budget_args,
        )
    raise OptimizeError(f"unknown optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}")


def check_request(agent: str, optimizer: str, num_threads: int, out: Path) -> None:
    """Refuse, in one line and before any work, an unknown agent or optimizer, no threads, or an ``out``
    whose manifest is foreign or broken (found out after compiling, it would cost the whole run)."""
    if agent not in TARGETS:
        raise OptimizeError(f"unknown agent {agent!r}: choose one of {', '.join(TARGETS)}")
    if optimizer not in OPTIMIZERS:
        raise OptimizeError(f"unknown optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    if num_threads < 1:
        raise OptimizeError(f"num_threads must be at least 1, got {num_threads}")
    if (out / MANIFEST_FILE).exists():
        read_manifest(out)


def load_examples(agent: str, train: str, *, n: int | None, dev_share: float, seed: int,
                  steps: Steps) -> tuple[list[dspy.Example], list[dspy.Example]]:
    """``agent``'s training and held-out examples from the HotpotQA items of ``train``."""
    steps.start(f"loading {train}", total=1)
    items = load_hotpotqa(train, split="train", n=n)
    if len(items) < 2:
        raise OptimizeError(f"{train}: {len(items)} item(s); need at least 2 to hold some out (raise --n)")
    train_items, dev_items = split_items(items, dev_share, seed=seed)
    trainset, devset = build_examples(agent, train_items, seed=seed), build_examples(agent, dev_items, seed=seed)
    if not trainset or not devset:
        raise OptimizeError(
            f"{agent}: {len(trainset)} train and {len(devset)} dev examples from {len(items)} items; raise --n"
        )
    steps.finish()
    return trainset, devset


def scored(program: dspy.Module, devset: list[dspy.Example], metric: Callable, steps: Steps, label: str,
           num_threads: int) -> float:
    """:func:`evaluate` shown as the progress step ``label``."""
    score = evaluate(program, devset, metric, steps.start(label, total=len(devset)), num_threads)
    steps.finish()
    return score


def save_compiled(out: Path, agent: str, compiled: dspy.Module, record: dict[str, Any],
                  steps: Steps) -> tuple[dict[str, dspy.Module], Path]:
    """The compiled agents of ``compiled`` saved to ``out`` with ``record`` in their manifest entries."""
    steps.start(f"saving to {out}", total=1)
    modules = compiled_agents(agent, compiled)
    manifest = save_agents(out, modules, {name: AgentRecord(file=f"{name}.json", predictors=[], **record) for name in modules})
    steps.finish()
    return modules, manifest


def optimize_agents(
    agent: str,
    train: str,
    *,
    lm: Any,
    teacher_lm: Any = None,
    optimizer: str = "bootstrap",
    n: int | None = None,
    out: str | Path = "compiled",
    config: AmbConfig | None = None,
    lm_name: str = "",
    teacher_name: str | None = None,
    max_demos: int = 2,
    dev_share: float = 0.3,
    budget: int | None = None,
    seed: int = 0,
    embedder: Any = None,
    progress: Any = None,
    num_threads: int = 1,
) -> OptimizeResult:
    """Compile ``agent`` (an agent name or "all") on ``train`` (``hotpotqa`` or ``hotpotqa:PATH``) and
    save it to ``out``. ``n`` caps the HotpotQA items used (train and dev together); ``budget`` caps
    GEPA's metric calls (default: its "light" setting); ``num_threads`` runs the scoring and the
    optimizer's evaluations in parallel."""
    started, out, steps = time.monotonic(), Path(out), Steps(progress)
    check_request(agent, optimizer, num_threads, out)
    # While compiling, the bank asks its agents one item a call, so that the traces (and so the demos) are
    # those of each agent's single-item predictor, the one compiled; a compiled agent asks alone at run time too.
    config = (config or AmbConfig()).model_copy(update={"ingest_batch": 1})
    trainset, devset = load_examples(agent, train, n=n, dev_share=dev_share, seed=seed, steps=steps)
    metric, program = METRICS[agent], build_program(agent, config, embedder=embedder)
    with dspy.context(lm=lm, adapter=adapter_for(lm)):
        before = scored(program, devset, metric, steps, "scoring before", num_threads)
        teleprompter = make_optimizer(
            optimizer, metric, lm=lm, teacher_lm=teacher_lm, max_demos=max_demos, budget=budget,
            max_errors=len(trainset) + len(devset) + 1, seed=seed, num_threads=num_threads,
            on_metric=steps.start(f"compiling {agent} ({optimizer})"),
        )
        compiled = teleprompter.compile(program, trainset=trainset)
        steps.finish()
        after = scored(compiled, devset, metric, steps, "scoring after", num_threads)
    sizes = dict(dataset=train, metric=metric.__name__, train_size=len(trainset), dev_size=len(devset),
                 score_before=before, score_after=after)
    modules, manifest = save_compiled(out, agent, compiled, dict(optimizer=optimizer, model=lm_name,
                                                                 teacher_model=teacher_name, **sizes), steps)
    return OptimizeResult(agents=sorted(modules), optimizer=optimizer, out=out, manifest=manifest,
                          seconds=round(time.monotonic() - started, 1), **sizes)
