"""The parts every dataset's solvers are made of, one per mode: the bank, a DSPy program (ReAct, a reader),
flat retrieval. A dataset's solver factory (``(group, run) -> solver``, see :mod:`optimize.evaluate`) builds
one of these with what its questions are asked about; a solver answers one question and raises when it
cannot.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.bank import MemoryBank
from amb_dspy.lm import adapter_for
from amb_dspy.tools import SearchTool, VisitTool, build_tools, make_search_backend
from amb_dspy.tools.corpus import LocalCorpus
from optimize.evaluate import EvalRun, Group
from optimize.rag import RagAnswerer

Inputs = Callable[[Any], dict[str, Any]]  # a question -> the keyword arguments its solver passes on


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


class BankSolver:
    """``bank`` mode: the memory bank runs each question as a task of its own. The bank is built at the first
    question (agents, LMs and window checks once, measured with that question, as a user's first run is)."""

    def __init__(self, make_bank: Callable[[], MemoryBank], inputs: Inputs):
        self.make_bank, self.inputs = make_bank, inputs

    @functools.cached_property
    def memory_bank(self) -> MemoryBank:
        return self.make_bank()

    def __call__(self, question: Any) -> str:
        result = self.memory_bank.run(task=question.question, **self.inputs(question))
        if not result.answer and result.errors:
            raise RuntimeError(result.errors[-1])
        return result.answer


class ProgramSolver:
    """``react`` and ``context`` modes: a DSPy program with an ``answer`` output, asked under the run's LM."""

    def __init__(self, lm: Any, program: dspy.Module, inputs: Inputs):
        self.lm, self.program, self.inputs = lm, program, inputs

    def __call__(self, question: Any) -> str:
        with dspy.context(lm=self.lm, adapter=adapter_for(self.lm)):
            return str(self.program(**self.inputs(question)).answer or "")


class RagSolver:
    """``rag`` mode: the flat block for the question, then the answer agent's one call; ``within`` (a
    question -> the passages it may draw on) narrows the retrieval when given."""

    def __init__(self, lm: Any, rag: RagAnswerer, within: Callable[[Any], set[str]] | None = None):
        self.lm, self.rag, self.within = lm, rag, within

    def __call__(self, question: Any) -> str:
        with dspy.context(lm=self.lm, adapter=adapter_for(self.lm)):
            if self.within is None:
                return self.rag(question.question)
            return self.rag(question.question, within=self.within(question))


def react_program(run: EvalRun, corpus: Any, signature: type[dspy.Signature]) -> dspy.ReAct:
    """Plain ``dspy.ReAct`` over ``corpus`` with the search and visit tools and no memory."""
    tools = build_tools(search=SearchTool(make_search_backend(run.config.tools, corpus)),
                        visit=VisitTool(run.config.tools, corpus=corpus))
    return dspy.ReAct(signature, tools=tools, max_iters=run.config.react_max_iters)


def passage_corpus(run: EvalRun, name: str, passages: list[dict[str, str]]) -> LocalCorpus:
    """A local search corpus of ``passages`` (``id``, ``title``, ``text``), written under the run's folder."""
    path = Path(run.work_dir) / name
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return LocalCorpus.load(path, run.embedder)


def read_context(group: Group, run: EvalRun) -> ProgramSolver:
    """``context`` mode for questions with a ``context_text()``: one chain-of-thought call over it."""
    return ProgramSolver(run.lm, dspy.ChainOfThought(AnswerFromContext),
                         lambda item: {"context": item.context_text(), "question": item.question})
