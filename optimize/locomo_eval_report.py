"""What ``amb eval --dataset locomo:PATH`` returns and prints: a line per question (with its category and the
judge's verdict), the ingest cost of each conversation, a table per category, one JSON line."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from optimize.eval_reports import QuestionResult, mean_of
from optimize.locomo import CATEGORIES

TABLE_COLUMNS = ("category", "n", "F1", "EM", "J", "LM calls", "prompt tokens", "completion tokens", "seconds",
                 "errors")


class LoCoMoResult(QuestionResult):
    category: int
    judge: float | None = None

    def tag(self) -> str:
        return f" c{self.category}"

    def judged(self) -> str:
        return "" if self.judge is None else f"  J {self.judge:.0f}"


class IngestCost(BaseModel):
    conversation: str
    nodes: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    cached: bool

    def line(self) -> str:
        return (f"ingest {self.conversation}: {self.nodes} nodes, {self.calls} LM calls, "
                f"{self.prompt_tokens}+{self.completion_tokens} tokens, {self.seconds:.1f} s"
                f"{' (cached bank reused; cost of the original ingest)' if self.cached else ''}")


class LoCoMoReport(BaseModel):
    dataset: str
    mode: str
    model: str
    compiled: str | None
    questions: list[LoCoMoResult]
    ingest: list[IngestCost]

    def means(self, category: int | None = None) -> dict[str, Any]:
        rows = [q for q in self.questions if category is None or q.category == category]
        means: dict[str, Any] = mean_of(rows)
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

    def by_category(self) -> dict[str, dict[str, Any]]:
        """The means of each category that has questions, by its name, then ``overall``."""
        rows = {name: self.means(category) for category, name in [*CATEGORIES.items(), (None, "overall")]}
        return {name: means for name, means in rows.items() if means["n"]}

    def show(self, console: Any) -> None:
        """Each conversation's ingest cost, then a table of the means per category and overall."""
        from rich.table import Table

        for cost in self.ingest:
            console.print(cost.line())
        table = Table(title=f"{self.mode} on {self.dataset} ({len(self.questions)} questions)")
        for column in TABLE_COLUMNS:
            table.add_column(column, justify="right")
        for name, means in self.by_category().items():
            table.add_row(name, str(means["n"]), f"{means['f1']:.3f}", f"{means['em']:.3f}",
                          "-" if means["judge"] is None else f"{means['judge']:.3f}", f"{means['calls']:.1f}",
                          f"{means['prompt_tokens']:.0f}", f"{means['completion_tokens']:.0f}",
                          f"{means['seconds']:.1f}", str(means["errors"]))
        console.print(table)

    def summary(self, judge: str | None = None) -> dict[str, Any]:
        """The final JSON line's fields: the overall means, the ingest totals and each category's scores."""
        per_category = self.by_category()
        overall = per_category.pop("overall")
        return {"dataset": self.dataset, "mode": self.mode, "model": self.model, "judge": judge,
                "compiled": self.compiled, **overall, **self.ingest_totals(),
                "categories": {name: {k: means[k] for k in ("n", "f1", "em", "judge")}
                               for name, means in per_category.items()}}
