"""``amb eval --dataset hotpotqa[:PATH]``: multi-hop QA over HotpotQA's paragraphs, in the four modes.

By default (the distractor setting) a question's own paragraphs are the context it is given: long-document
QA. With ``corpus=True`` the paragraphs of all the questions become one local search corpus instead, and
the bank and ReAct must find what they need with the search tool (deep research over a local corpus);
the ``context`` mode still reads the question's own paragraphs, as an upper bound, and ``rag`` retrieves
from all of them. Scored by the official HotpotQA answer EM and F1.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.tools import load_corpus
from amb_dspy.tools.corpus import LocalCorpus
from optimize.evaluate import EvalRun, Group, QADataset
from optimize.hotpotqa import HotpotQAItem, load_hotpotqa
from optimize.rag import FlatRetriever, RagAnswerer, paragraph_units
from optimize.solvers import (
    BankSolver,
    ProgramSolver,
    RagSolver,
    ResearchQuestion,
    react_program,
    read_context,
)


class ResearchQuestionWithContext(ResearchQuestion):
    context: str = dspy.InputField(desc="paragraphs given with the question, each headed by its title")


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


def search_corpus(group: Group, run: EvalRun) -> LocalCorpus | None:
    """With ``corpus``: every question's paragraphs as one local corpus; else None (each reads its own)."""
    return LocalCorpus.load(write_corpus(group.questions, run.work_dir), run.embedder) if run.corpus else None


def bank_solver(group: Group, run: EvalRun) -> BankSolver:
    """One bank for every question, given the question's paragraphs or searching the corpus."""
    corpus = search_corpus(group, run)
    return BankSolver(
        lambda: MemoryBank(run.config, lm=run.lm, compiled=run.compiled, embedder=run.embedder, corpus=corpus),
        lambda item: {"context": "" if corpus is not None else item.context_text()},
    )


def react_solver(group: Group, run: EvalRun) -> ProgramSolver:
    """ReAct over the corpus (``corpus``, or the configured one), else given the question's paragraphs."""
    given = search_corpus(group, run)
    corpus = given if given is not None else load_corpus(run.config.tools, run.embedder, cache_dir=run.config.paths.cache_dir)
    signature = ResearchQuestion if corpus is not None else ResearchQuestionWithContext
    if given is not None:
        return ProgramSolver(run.lm, react_program(run, corpus, signature), lambda item: {"question": item.question})
    return ProgramSolver(run.lm, react_program(run, corpus, signature),
                         lambda item: {"question": item.question, "context": item.context_text()})


def rag_solver(group: Group, run: EvalRun) -> RagSolver:
    """The paragraphs of every question indexed once; each question reads its own, or all with ``corpus``."""
    units = paragraph_units([p for item in group.questions for p in item.context])
    rag = RagAnswerer(FlatRetriever(units, run.embedder, alpha=run.config.retrieval_alpha), run.config, run.compiled)
    return RagSolver(run.lm, rag, None if run.corpus else (lambda item: {p.title for p in item.context}))


class HotpotQA(QADataset):
    """HotpotQA's validation questions (Hugging Face) or an official JSON/JSONL file, all in one group."""

    name, title = "hotpotqa", "HotpotQA"
    solvers = {"bank": bank_solver, "react": react_solver, "context": read_context, "rag": rag_solver}

    def load(self, source: str, n: int | None) -> list[Group]:
        return [Group(load_hotpotqa(source, split="validation", n=n))]

    def needs_embedder(self, mode: str, corpus: bool, config: AmbConfig) -> bool:
        return mode in ("bank", "rag") or corpus or config.corpus is not None


HOTPOTQA = HotpotQA()
