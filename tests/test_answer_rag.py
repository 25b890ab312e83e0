"""``amb eval --mode rag`` on HotpotQA and LoCoMo: flat hybrid retrieval into the bank's <memory> budget and
the answer agent's signature, one LM call per question. Only the LM's words are scripted; the embedding
model, the hybrid index and the scoring run for real."""

from __future__ import annotations

import pytest
from scripted_lm import MEMORY_ANSWER, ScriptedLM
from test_locomo import DATA as LOCOMO_DATA
from test_optimize_eval import DEV

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.config import AmbConfig
from optimize.evaluate import run_eval
from optimize.hotpotqa import load_hotpotqa
from optimize.locomo import load_locomo

HOTPOTQA = f"hotpotqa:{DEV}"
LOCOMO = f"locomo:{LOCOMO_DATA / '30.json'}"


def answers_when_the_evidence_is_shown(gold: dict[str, tuple[str, list[str]]]):
    """The gold answer when one of its evidence lines is in <memory>, else a wrong one."""

    def answer(call):
        text, evidence = gold[call.inputs["task_goal"]]
        shown = any(line in call.inputs["memory"] for line in evidence)
        return {"answer": text if shown else "Paris", "cited_node_ids": [], "reason": "", "sufficient": shown}

    return answer


@pytest.mark.skipif(not DEV.is_file(), reason="HotpotQA samples not found")
def test_hotpotqa_rag_answers_each_question_in_one_call_from_its_own_paragraphs(embedder):
    items = load_hotpotqa(HOTPOTQA, n=3)
    gold = {i.question: (i.answer, i.supporting_sentences) for i in items}
    lm = ScriptedLM(**{MEMORY_ANSWER: answers_when_the_evidence_is_shown(gold)})
    config = AmbConfig(memory_tokens=300)
    report = run_eval(HOTPOTQA, lm=lm, n=3, mode="rag", config=config, embedder=embedder)
    assert [q.calls for q in report.questions] == [1, 1, 1] and len(lm.calls) == 3
    assert report.means()["f1"] > 0 and all(q.error is None for q in report.questions)
    for call, item in zip(lm.calls, items):
        memory = call.inputs["memory"]
        assert estimate_tokens(memory) <= 300 + 40  # the budget, plus its headers' numbering
        headers = [line for line in memory.splitlines() if line.startswith("Memory ")]
        titles = {p.title for p in item.context}
        assert headers and all(h[h.index("(") + 1:-2] in titles for h in headers)


@pytest.mark.skipif(not (LOCOMO_DATA / "30.json").is_file(), reason="LoCoMo samples not found")
def test_locomo_rag_answers_from_the_best_turns_in_one_call(embedder):
    conversation = load_locomo(LOCOMO, n=4)[0]
    turns = {t.dia_id: t.line() for t in conversation.turns}
    gold = {q.question: (q.answer, [turns[e] for e in q.evidence]) for q in conversation.questions}
    lm = ScriptedLM(**{MEMORY_ANSWER: answers_when_the_evidence_is_shown(gold)})
    report = run_eval(LOCOMO, lm=lm, n=4, mode="rag", config=AmbConfig(), embedder=embedder)
    assert [q.calls for q in report.questions] == [1, 1, 1, 1] and report.ingest == []
    for call in lm.calls:
        lines = [line for line in call.inputs["memory"].splitlines() if line and not line.startswith("Memory ")]
        assert lines and all(line in turns.values() for line in lines)
        assert estimate_tokens(call.inputs["memory"]) <= 1000 + 60
    assert report.means()["f1"] > 0
