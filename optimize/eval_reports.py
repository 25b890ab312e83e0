"""What ``amb eval`` returns and prints: a result per question and a report per run.

A report prints itself (:meth:`Report.show`: a table of means on a rich console) and gives the final JSON
line's fields (:meth:`Report.summary`); a result gives the line printed as its question is done. The
HotpotQA shapes here are every dataset's defaults; LoCoMo's (per category, with ingest costs) extend them
in :mod:`optimize.locomo_eval_report`.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

MEAN_FIELDS = ("em", "f1", "calls", "prompt_tokens", "completion_tokens", "seconds")


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

    def line(self) -> str:
        """The line printed when the question is done (rich markup)."""
        status = f" [red]{self.error}[/]" if self.error else ""
        return (f"{self.id}{self.tag()}  EM {self.em:.0f}  F1 {self.f1:.2f}{self.judged()}  calls {self.calls:>3}  "
                f"prompt {self.prompt_tokens:>6}  completion {self.completion_tokens:>5}  {self.seconds:6.1f} s  "
                f"[dim]{self.prediction[:40]!r} vs {self.gold[:40]!r}[/]{status}")

    def tag(self) -> str:
        """What the line says after the id (LoCoMo: the category)."""
        return ""

    def judged(self) -> str:
        """What the line says after F1 (LoCoMo: the judge's verdict)."""
        return ""


def mean_of(rows: list[Any]) -> dict[str, float]:
    """The mean of each of :data:`MEAN_FIELDS` over ``rows``, rounded to 4 places (0.0 for no rows)."""
    return {f: round(sum(getattr(q, f) for q in rows) / len(rows), 4) if rows else 0.0 for f in MEAN_FIELDS}


class Report(Protocol):
    """A run's results, as ``amb eval`` prints them."""

    dataset: str
    mode: str
    compiled: str | None
    questions: list[Any]

    def show(self, console: Any) -> None: ...

    def summary(self, judge: str | None = None) -> dict[str, Any]: ...


class EvalReport(BaseModel):
    dataset: str
    mode: str
    model: str
    compiled: str | None
    corpus: bool
    questions: list[QuestionResult]

    def means(self) -> dict[str, Any]:
        count = len(self.questions)
        return {"mode": self.mode, "n": count, **mean_of(self.questions),
                "errors": sum(q.error is not None for q in self.questions)}

    def show(self, console: Any) -> None:
        """A one-row table of the means."""
        from rich.table import Table

        means = self.means()
        table = Table(title=f"{self.mode} on {self.dataset} ({means['n']} questions)")
        for column in ("EM", "F1", "LM calls", "prompt tokens", "completion tokens", "seconds", "errors"):
            table.add_column(column, justify="right")
        table.add_row(
            f"{means['em']:.3f}", f"{means['f1']:.3f}", f"{means['calls']:.1f}", f"{means['prompt_tokens']:.0f}",
            f"{means['completion_tokens']:.0f}", f"{means['seconds']:.1f}", str(means["errors"]),
        )
        console.print(table)

    def summary(self, judge: str | None = None) -> dict[str, Any]:
        """The final JSON line's fields (``judge`` is unused: these datasets are not judged)."""
        return {"dataset": self.dataset, "model": self.model, "compiled": self.compiled, "corpus": self.corpus,
                **self.means()}
