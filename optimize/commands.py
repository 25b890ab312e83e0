"""What ``amb optimize`` and ``amb eval`` do once their flags are parsed: build the LMs, run, print.

The CLI stays a thin layer of typer options over these two functions. LMs are chosen exactly as
``amb run`` chooses them: ``--lm`` (a DSPy model string, ``local`` or ``gguf:PATH``) or the configured
default, falling back to the embedded model with a one-line notice when the default hosted model has no
key. Expected problems (bad data path, unknown agent, foreign manifest, LM that cannot be built) raise
``ValueError`` subclasses or ``CompiledError`` with one-line messages, for the CLI to print.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amb_dspy.config import AmbConfig


def expected_errors() -> tuple[type[BaseException], ...]:
    """The errors ``optimize_command`` and ``eval_command`` raise for bad input or set-up (one-line messages)."""
    from amb_dspy.agents.compiled import CompiledError
    from amb_dspy.lm import LMConfigError
    from amb_dspy.tools.corpus import CorpusError
    from optimize.evaluate import EvalError
    from optimize.hotpotqa import DatasetError
    from optimize.runner import OptimizeError

    return (DatasetError, OptimizeError, EvalError, CompiledError, LMConfigError, CorpusError)


def _build_lms(config: AmbConfig, teacher: str | None) -> tuple[Any, str, Any, str | None, str | None]:
    from amb_dspy.lm import build_lm, resolve_lm_spec

    spec, notice = resolve_lm_spec(config)
    lm = build_lm(spec, config)
    teacher_lm = build_lm(teacher, config) if teacher else None
    return lm, spec, teacher_lm, (teacher.strip() if teacher else None), notice


def optimize_command(
    *,
    agent: str,
    train: str = "hotpotqa",
    optimizer: str = "bootstrap",
    n: int | None = None,
    out: Path = Path("compiled"),
    lm: str | None = None,
    teacher_lm: str | None = None,
    num_threads: int = 1,
    config: AmbConfig | None = None,
    console: Any = None,
) -> Any:
    """``amb optimize``: compile ``agent`` and print the scores before and after; returns the result."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from optimize.runner import optimize_agents

    console = console or Console(stderr=True)
    config = config or AmbConfig(**({"lm": lm} if lm else {}))
    task_lm, spec, teacher, teacher_spec, notice = _build_lms(config, teacher_lm)
    if notice:
        console.print(f"[yellow]{notice}[/]")
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        result = optimize_agents(
            agent, train, lm=task_lm, teacher_lm=teacher, optimizer=optimizer, n=n, out=out, config=config,
            lm_name=spec, teacher_name=teacher_spec, progress=progress, num_threads=num_threads,
        )
    console.print(
        f"{', '.join(result.agents)}: {result.metric} {result.score_before:.3f} -> {result.score_after:.3f} "
        f"on {result.dev_size} held-out examples ({result.train_size} for training); {result.seconds:.0f} s"
    )
    console.print(f"saved to {result.out} (manifest: {result.manifest})")
    return result


def eval_command(
    *,
    dataset: str = "hotpotqa",
    n: int | None = 20,
    mode: str = "bank",
    compiled: Path | None = None,
    corpus: bool = False,
    lm: str | None = None,
    judge_lm: str | None = None,
    num_threads: int = 1,
    config: AmbConfig | None = None,
    console: Any = None,
    echo: Any = print,
) -> Any:
    """``amb eval``: one line per question and the report's table on ``console`` (stdout by default), then a
    final JSON line of the means through ``echo``; returns the report (:func:`optimize.evaluate.run_eval`)."""
    from rich.console import Console

    from optimize.evaluate import run_eval

    console = console or Console()
    config = config or AmbConfig(**({"lm": lm} if lm else {}))
    task_lm, spec, judge, judge_spec, notice = _build_lms(config, judge_lm)
    if notice:
        console.print(f"[yellow]{notice}[/]")
    notices: list[str] = []
    with console.status(f"answering with the {mode} mode..."):
        report = run_eval(
            dataset, lm=task_lm, n=n, mode=mode, compiled=compiled, corpus=corpus, config=config, lm_name=spec,
            judge_lm=judge, num_threads=num_threads, notices=notices,
            on_result=lambda result: console.print(result.line(), markup=True, highlight=False),
        )
    for line in notices:
        console.print(f"[yellow]{line}[/]")
    report.show(console)
    echo(json.dumps(report.summary(judge=judge_spec)))
    return report
