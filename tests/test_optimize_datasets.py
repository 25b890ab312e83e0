"""``amb eval``'s one evaluator: a third dataset is one small class, registered by name, and runs through the
same evaluator and command as HotpotQA and LoCoMo (its modes, scoring, per-question line, table, JSON line).

The dataset reads a real JSONL file; only the LM's words are scripted.
"""

from __future__ import annotations

import io
import json

import pytest
from pydantic import BaseModel
from rich.console import Console
from scripted_lm import ScriptedLM
from test_optimize import EXTRACT

import optimize.commands as commands
from optimize import evaluate
from optimize.evaluate import EvalError, Group, QADataset, register_dataset, run_eval
from optimize.solvers import read_context

RIDDLES = [
    {"id": "r1", "question": "Which city is the capital of Arland?", "answer": "Brimsby",
     "facts": ["Arland lies north of the Vell.", "The capital of Arland is Brimsby"]},
    {"id": "r2", "question": "Who built the Korr bridge?", "answer": "Tessa Varn",
     "facts": ["The Korr bridge was built by Tessa Varn.", "It opened in 1901"]},
    {"id": "r3", "question": "What colour is the Osk flag?", "answer": "green",
     "facts": ["The Osk flag is green"]},
]


class Riddle(BaseModel):
    id: str
    question: str
    answer: str
    facts: list[str]

    def context_text(self) -> str:
        return "\n".join(self.facts)


class Riddles(QADataset):
    """Short questions, each with the facts that answer it: read in one call."""

    name, title = "riddles", "Riddles"
    solvers = {"context": read_context}

    def load(self, source, n):
        lines = open(source.partition(":")[2], encoding="utf-8").read().splitlines()
        return [Group([Riddle.model_validate_json(line) for line in lines][:n])]


@pytest.fixture
def riddles(tmp_path, monkeypatch):
    """The source of a riddles file, with the dataset registered for this test only."""
    monkeypatch.setattr(evaluate, "_registered", {})
    register_dataset(Riddles())
    path = tmp_path / "riddles.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RIDDLES), encoding="utf-8")
    return f"riddles:{path}"


def last_word_of_the_context(call):
    """A reader that answers with the last words of the context: right for r1 and r3, wrong for r2."""
    last = call.inputs["context"].splitlines()[-1].split(" is ")[-1]
    return {"reasoning": "the last fact says it", "answer": last}


def test_a_registered_dataset_runs_through_the_same_evaluator(riddles):
    lm = ScriptedLM(**{EXTRACT: last_word_of_the_context})
    seen = []
    report = run_eval(riddles, lm=lm, n=3, mode="context", lm_name="scripted/lm", on_result=seen.append)
    assert [q.prediction for q in report.questions] == ["Brimsby", "It opened in 1901", "green"]
    assert [q.em for q in report.questions] == [1.0, 0.0, 1.0] and seen == report.questions
    assert all(q.calls == 1 and q.prompt_tokens > 0 and q.error is None for q in report.questions)
    assert "The Korr bridge was built by Tessa Varn." in lm.calls[1].inputs["context"]
    means = report.means()
    assert means["n"] == 3 and means["em"] == pytest.approx(2 / 3, abs=1e-4) and report.dataset == riddles


def test_a_registered_dataset_refuses_modes_it_has_no_solver_for_and_a_judge(riddles):
    lm = ScriptedLM()
    with pytest.raises(EvalError, match=r"^unknown mode 'bank': choose one of context$"):
        run_eval(riddles, lm=lm, n=1, mode="bank")
    with pytest.raises(EvalError, match=r"--judge-lm is for LoCoMo \(locomo:PATH\); Riddles is scored by EM and F1"):
        run_eval(riddles, lm=lm, n=1, mode="context", judge_lm=lm)
    assert not lm.calls


def test_amb_eval_prints_a_registered_dataset_like_the_others(riddles, monkeypatch):
    lm = ScriptedLM(**{EXTRACT: last_word_of_the_context})
    monkeypatch.setattr(commands, "_build_lms", lambda config, judge: (lm, "scripted/lm", None, None, None))
    out, lines = io.StringIO(), []
    commands.eval_command(dataset=riddles, n=2, mode="context", console=Console(file=out, width=200), echo=lines.append)
    text = out.getvalue()
    assert "r1  EM 1  F1 1.00  calls   1" in text and "r2  EM 0  F1 0.00" in text
    assert "context on riddles:" in " ".join(text.split()) and "2 questions" in text and "prompt tokens" in text
    final = json.loads(lines[-1])
    assert (final["dataset"], final["mode"], final["n"], final["em"]) == (riddles, "context", 2, 0.5)
