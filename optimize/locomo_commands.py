"""What ``amb eval --dataset locomo:PATH`` prints: a line per question, a table per category, one JSON line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amb_dspy.config import AmbConfig
from optimize.locomo import CATEGORIES


def locomo_eval_command(*, dataset: str, n: int | None, mode: str, compiled: Path | None, lm: Any, lm_name: str,
                        judge_lm: Any, judge_name: str | None, num_threads: int, config: AmbConfig, console: Any,
                        echo: Any) -> Any:
    from rich.table import Table

    from optimize.locomo_eval import run_locomo_eval

    def show(result) -> None:
        status = f" [red]{result.error}[/]" if result.error else ""
        judged = "" if result.judge is None else f"  J {result.judge:.0f}"
        console.print(
            f"{result.id} c{result.category}  EM {result.em:.0f}  F1 {result.f1:.2f}{judged}  calls {result.calls:>3}  "
            f"prompt {result.prompt_tokens:>6}  completion {result.completion_tokens:>5}  {result.seconds:6.1f} s  "
            f"[dim]{result.prediction[:40]!r} vs {result.gold[:40]!r}[/]{status}",
            markup=True, highlight=False,
        )

    notices: list[str] = []
    with console.status(f"answering with the {mode} mode..."):
        report = run_locomo_eval(dataset, lm=lm, n=n, mode=mode, compiled=compiled, config=config, lm_name=lm_name,
                                 judge_lm=judge_lm, num_threads=num_threads, on_result=show, notices=notices)
    for notice in notices:
        console.print(f"[yellow]{notice}[/]")
    for cost in report.ingest:
        console.print(f"ingest {cost.conversation}: {cost.nodes} nodes, {cost.calls} LM calls, "
                      f"{cost.prompt_tokens}+{cost.completion_tokens} tokens, {cost.seconds:.1f} s"
                      f"{' (cached bank reused; cost of the original ingest)' if cost.cached else ''}")
    table = Table(title=f"{mode} on {dataset} ({len(report.questions)} questions)")
    columns = ("category", "n", "F1", "EM", "J", "LM calls", "prompt tokens", "completion tokens", "seconds", "errors")
    for column in columns:
        table.add_column(column, justify="right")
    per_category = {}
    for category, name in [*CATEGORIES.items(), (None, "overall")]:
        means = report.means(category)
        if not means["n"]:
            continue
        per_category[name] = means
        table.add_row(name, str(means["n"]), f"{means['f1']:.3f}", f"{means['em']:.3f}",
                      "-" if means["judge"] is None else f"{means['judge']:.3f}", f"{means['calls']:.1f}",
                      f"{means['prompt_tokens']:.0f}", f"{means['completion_tokens']:.0f}", f"{means['seconds']:.1f}",
                      str(means["errors"]))
    console.print(table)
    overall = per_category.pop("overall")
    echo(json.dumps({"dataset": dataset, "mode": mode, "model": lm_name, "judge": judge_name, "compiled": report.compiled,
                     **overall, **report.ingest_totals(),
                     "categories": {name: {k: means[k] for k in ("n", "f1", "em", "judge")} for name, means in per_category.items()}}))
    return report
