"""``amb eval``'s runner: the bank, plain ReAct and one long-context call scored side by side.

Only the LM's words are scripted; the bank, ReAct, the tools, the local corpus, the embedding model and
the usage meter run for real.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import dspy
import pytest
from rich.console import Console
from scripted_lm import ScriptedLM
from test_optimize import EXTRACT, REACT, answer_from_prompt, bank_lm, prompt

from amb_dspy.agents.compiled import CompiledError
from amb_dspy.config import AmbConfig
from optimize.evaluate import run_eval
from optimize.hotpotqa import load_hotpotqa
from optimize.hotpotqa_eval import write_corpus

# The shared samples live next to the repository; AMB_HOTPOTQA_DIR points elsewhere.
DATA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa")
DEV = DATA / "dev_distractor_300.jsonl"
pytestmark = pytest.mark.skipif(not DEV.is_file(), reason=f"HotpotQA samples not found at {DATA}")
SOURCE = f"hotpotqa:{DEV}"


@pytest.fixture(scope="module")
def items():
    return load_hotpotqa(SOURCE, n=3)


def reader(items, wrong: int | None = None):
    """Answers the question found in the prompt; the ``wrong``-th question gets a wrong answer."""

    def answer(call):
        text = prompt(call)
        index = next(i for i, item in enumerate(items) if item.question in text)
        return {"reasoning": "read it", "answer": "Paris" if index == wrong else f"The {items[index].answer}."}

    return answer


def test_context_mode_scores_and_measures_each_question(tmp_path, items):
    lm = ScriptedLM(**{EXTRACT: reader(items, wrong=1)})
    seen = []
    report = run_eval(SOURCE, lm=lm, n=3, mode="context", config=AmbConfig(), on_result=seen.append)
    assert [q.id for q in report.questions] == [i.id for i in items] and seen == report.questions
    assert [q.em for q in report.questions] == [1.0, 0.0, 1.0]
    assert [q.f1 for q in report.questions] == [1.0, 0.0, 1.0]
    for question, item in zip(report.questions, items):
        assert question.calls == 1 and question.prompt_tokens > 0 and question.completion_tokens > 0
        assert question.error is None and question.gold == item.answer
    # the whole distractor context went into the one call
    assert all(p.title in prompt(lm.calls[0]) for p in items[0].context)
    means = report.means()
    assert means["n"] == 3 and means["em"] == pytest.approx(2 / 3, abs=1e-4) and means["calls"] == 1.0


def test_react_mode_searches_a_corpus_of_all_paragraphs(items):
    searched = []

    def react(call):
        text = call.messages[-1]["content"]
        if "observation_0" not in text:
            return {"next_thought": "search", "next_tool_name": "search", "next_tool_args": {"query": call.inputs["question"]}}
        searched.append(text)
        return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}

    lm = ScriptedLM(**{REACT: react, EXTRACT: reader(items)})
    report = run_eval(SOURCE, lm=lm, n=2, mode="react", corpus=True, config=AmbConfig(react_max_iters=3))
    assert [q.em for q in report.questions] == [1.0, 1.0] and report.corpus
    assert all(q.calls == 3 for q in report.questions)  # search step, finish step, extract
    # the search went to the real local corpus built from the questions' paragraphs
    assert "Scott Derrickson" in searched[0] and "corpus://" in searched[0]
    assert all("context" not in c.inputs for c in lm.calls)  # in corpus mode nothing is handed over


def test_bank_and_react_search_the_same_corpus_even_with_a_serper_key(items, embedder, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "dummy-key-that-must-not-be-used")
    observations: dict[str, list[str]] = {"bank": [], "react": []}
    mode = "react"

    def react(call):
        text = call.messages[-1]["content"]
        if "observation_0" not in text:
            question = next(item.question for item in items if item.question in prompt(call))
            return {"next_thought": "search", "next_tool_name": "search", "next_tool_args": {"query": question}}
        observations[mode].append(text.split("observation_0 ## ]]", 1)[1].split("[[ ##", 1)[0].strip())
        return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}

    done = {"executed_status": "success", "executed_context": "memory answers it", "next_task": ""}
    lm = bank_lm(items, planning=lambda call: done, react=react)
    config = AmbConfig(react_max_iters=3)
    assert config.serper_api_key  # the key is seen, and still the corpus the user asked for is searched
    run_eval(SOURCE, lm=lm, n=1, mode="react", corpus=True, config=config, embedder=embedder)
    mode = "bank"
    run_eval(SOURCE, lm=lm, n=1, mode="bank", corpus=True, config=config, embedder=embedder)
    assert observations["react"] and observations["bank"]
    for seen in observations["react"] + observations["bank"]:
        assert "corpus://" in seen and "Serper" not in seen and "Error" not in seen
    assert observations["bank"][0] == observations["react"][0]  # the same search, the same results


def test_write_corpus_has_one_passage_per_title(tmp_path, items):
    path = write_corpus(items + items[:1], tmp_path)
    passages = [json.loads(line) for line in path.read_text().splitlines()]
    titles = {p.title for item in items for p in item.context}
    assert sorted(p["title"] for p in passages) == sorted(titles)
    first = items[0].context[0]
    assert {"id": first.title, "title": first.title, "text": first.text} in passages


def test_bank_mode_and_failures_score_zero(tmp_path, items, embedder):
    done = {"executed_status": "success", "executed_context": "memory answers it", "next_task": ""}
    answer = answer_from_prompt(items)

    def failing_for_the_second(call):
        if items[1].question in prompt(call):
            raise RuntimeError("scripted executor failure")
        return answer(call)

    lm = bank_lm(items, planning=lambda call: done, answer=failing_for_the_second)
    report = run_eval(SOURCE, lm=lm, n=3, mode="bank", config=AmbConfig(policy="lm"), embedder=embedder)
    first, second, third = report.questions
    assert first.em == 1.0 and third.em == 1.0 and first.calls > 5  # classification, structure, ..., executor
    assert (second.em, second.f1, second.prediction) == (0.0, 0.0, "")
    assert "scripted executor failure" in second.error and report.means()["errors"] == 1
    # each bank's usage meter belonged to its run: none is left on the shared LM or in DSPy's settings
    assert not any(type(c).__name__ == "UsageMeter" for c in [*lm.callbacks, *dspy.settings.callbacks])


def test_bad_inputs_fail_before_any_question(tmp_path):
    lm = ScriptedLM()
    with pytest.raises(ValueError, match="unknown mode 'chat'"):
        run_eval(SOURCE, lm=lm, n=1, mode="chat")
    with pytest.raises(CompiledError, match="no such directory"):
        run_eval(SOURCE, lm=lm, n=1, compiled=tmp_path / "missing")
    with pytest.raises(ValueError, match="no such file"):
        run_eval("hotpotqa:/nowhere.jsonl", lm=lm, n=1, mode="context")
    assert not lm.calls


def test_eval_command_prints_each_question_and_a_final_json_line(monkeypatch, items):
    import optimize.commands as commands

    lm = ScriptedLM(**{EXTRACT: reader(items, wrong=0)})
    monkeypatch.setattr(commands, "_build_lms", lambda config, teacher: (lm, "scripted/lm", None, None, None))
    out, lines = io.StringIO(), []
    commands.eval_command(dataset=SOURCE, n=2, mode="context", console=Console(file=out, width=200), echo=lines.append)
    text = out.getvalue()
    assert items[0].id in text and items[1].id in text and "EM" in text and "prompt tokens" in text
    final = json.loads(lines[-1])
    assert final["mode"] == "context" and final["n"] == 2 and final["em"] == 0.5 and final["model"] == "scripted/lm"
    assert set(final) >= {"f1", "calls", "prompt_tokens", "completion_tokens", "seconds"}


def test_eval_bypasses_the_response_cache_so_reruns_measure_real_work(items):
    lm = ScriptedLM(**{EXTRACT: reader(items)})
    lm.cache = True  # as built for a hosted or embedded model
    first = run_eval(SOURCE, lm=lm, n=2, mode="context")
    second = run_eval(SOURCE, lm=lm, n=2, mode="context")
    assert len(lm.calls) == 4 and lm.cache  # every question reached the LM twice; the caller's LM is untouched
    assert [q.prompt_tokens for q in second.questions] == [q.prompt_tokens for q in first.questions]
    assert all(q.prompt_tokens > 0 for q in second.questions)


def test_command_errors_are_the_ones_the_cli_reports_in_one_line(tmp_path):
    from optimize.commands import eval_command, expected_errors, optimize_command

    quiet = Console(file=io.StringIO())
    with pytest.raises(expected_errors(), match="no such file"):
        optimize_command(agent="analysis", train="hotpotqa:/nowhere.jsonl", lm="local", out=tmp_path / "o", console=quiet)
    with pytest.raises(expected_errors(), match="unknown mode"):
        eval_command(dataset=SOURCE, n=1, mode="chat", lm="local", console=quiet)
    with pytest.raises(expected_errors(), match="no such directory"):
        eval_command(dataset=SOURCE, n=1, compiled=tmp_path / "missing", lm="local", console=quiet)
    assert not (tmp_path / "o").exists()
