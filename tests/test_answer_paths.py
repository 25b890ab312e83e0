"""The answer agent's places in a run, with their LM-call counts: the fast path (memory first), the loop
when memory does not suffice or is empty, and the last answer that never fails (lenient, then extractive).

Only the LM's words are scripted; the bank, the answer agent, the extractive policy, retrieval (real
model, real FAISS), ReAct, the tools and the local corpus run for real.
"""

from __future__ import annotations

import re

import dspy
import pytest
from scripted_lm import MEMORY_ANSWER, SHORT_ANSWER, ScriptedLM
from test_bank import (
    CITY,
    EXTRACT,
    FESTIVAL,
    FINISH,
    REACT,
    answers,
    compress,
    one_cluster_per_segment,
    plans,
    search_then_finish,
    unrelated,
)
from typer.testing import CliRunner

from amb_dspy.agents import MEMORY_CHECK_TASK, AnswerAgent
from amb_dspy.agents.answer import lenient_answer
from amb_dspy.agents.fallback import extract_answer
from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.task.answering import fast_path_on
from cli import app

GOAL = "When is the Tidewater Lantern Festival held?"
_GROUP_ID = re.compile(r"^Memory \d+ \(node ([0-9a-f]+)\):$", re.M)


@pytest.fixture
def bank_file(tmp_path, config, embedder):
    """A bank ingested from the festival and city notes with the deterministic policies (no LM)."""
    bank = MemoryBank(config.model_copy(update={"policy": "heuristic"}), lm=ScriptedLM(), embedder=embedder)
    ingested = bank.ingest(f"{FESTIVAL}\n\n{CITY}", "notes")
    path = tmp_path / "bank.json"
    ingested.export(path)
    return path


def cited_group(call, word: str) -> list[str]:
    """The id of the <memory> group whose lines mention ``word``, as the LM would copy it."""
    memory = call.inputs["memory"]
    for block in memory.split("\n\n"):
        match = _GROUP_ID.search(block)
        if match and word in block:
            return [match.group(1)]
    return []


def verdict(sufficient: bool, cite: str | None = "July"):
    def answer(call):
        return {"answer": "the second Saturday of July", "cited_node_ids": cited_group(call, cite) if cite else [],
                "reason": "the festival note gives the date" if sufficient else "the year is not in memory",
                "sufficient": sufficient}
    return answer


def loop_scripts(**extra):
    return dict(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                planning=plans("Search for the festival date", ""),
                **{REACT: search_then_finish("Tidewater Lantern Festival date") + [FINISH],
                   EXTRACT: answers("July", "The second Saturday of July")}, **extra)


def total_calls(result) -> int:
    return sum(u["calls"] for u in result.usage.values())


# --- the fast path -------------------------------------------------------------------------------------

def test_memory_that_suffices_answers_in_one_call_with_citations_and_one_hop(config, embedder, bank_file):
    lm = ScriptedLM(**{MEMORY_ANSWER: verdict(True)})  # any other call would fail: no script for it
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, bank=bank_file)
    assert result.termination == "answered_from_memory"
    assert result.answer == "the second Saturday of July" and not result.extractive
    assert total_calls(result) == 1 and len(lm.calls) == 1 and result.usage["answer"]["calls"] == 1
    assert [hop["kind"] for hop in result.hops] == ["MEMORY"] and result.hops[0]["success"]
    assert len(result.citations) == 1 and "July" in result.citations[0]["source"]
    [check] = result.insight_doc["completed_tasks"]
    assert check["description"] == MEMORY_CHECK_TASK and check["context"].startswith("Answered from memory")
    assert "<memory>" not in lm.calls[0].inputs["memory"] and "second Saturday of July" in lm.calls[0].inputs["memory"]


def test_memory_that_does_not_suffice_runs_the_loop_at_one_call_more(config, embedder, bank_file):
    slow = ScriptedLM(**loop_scripts())
    without = MemoryBank(config.model_copy(update={"fast_path": False}), lm=slow, embedder=embedder).run(GOAL, bank=bank_file)
    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: verdict(False)}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, bank=bank_file)

    assert result.termination == without.termination == "goal_met"
    assert result.answer == without.answer == "The second Saturday of July"
    assert total_calls(result) == total_calls(without) + 1
    assert len(lm.calls_for("planning")) == 2 and len(lm.calls_for(REACT)) == 3  # planned, searched, answered
    assert [hop["kind"] for hop in result.hops] == ["MEMORY", "NORMAL", "ANSWER"]
    assert result.hops[1]["tool_calls"][0]["name"] == "search"
    # the verdict and the draft are in the Insight Doc, and planning was shown them
    check = result.insight_doc["completed_tasks"][0]
    assert check["description"] == MEMORY_CHECK_TASK
    assert "the year is not in memory" in check["context"] and "Draft answer: the second Saturday of July" in check["context"]
    assert "the year is not in memory" in lm.calls_for("planning")[0].inputs["completed_tasks"]


def test_a_sufficient_verdict_that_cites_no_node_of_memory_does_not_end_the_run(config, embedder, bank_file):
    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: verdict(True, cite=None)}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, bank=bank_file)
    assert result.termination == "goal_met" and len(lm.calls_for(REACT)) == 3
    assert "cites no node of memory" in result.insight_doc["completed_tasks"][0]["context"]


def test_a_failing_answer_call_leaves_the_loop_to_answer(config, embedder, bank_file):
    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: lambda call: "not the format at all"}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, bank=bank_file)
    assert result.termination == "goal_met" and result.answer == "The second Saturday of July"
    assert any("answer agent" in e and "the loop runs" in e for e in result.errors)
    assert len(lm.calls_for(MEMORY_ANSWER)) == 1  # not asked again in JSON: one call at most
    assert [t["description"] for t in result.insight_doc["completed_tasks"]][0] != MEMORY_CHECK_TASK


def test_empty_memory_makes_no_answer_call_and_searches(config, embedder):
    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: verdict(True)}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL)
    assert lm.calls_for(MEMORY_ANSWER) == [] and "answer" not in result.usage
    assert len(lm.calls_for("planning")) == 2 and result.hops[0]["tool_calls"][0]["name"] == "search"
    assert result.termination == "goal_met"


def test_a_context_is_converted_first_then_answered_from(config, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    **{MEMORY_ANSWER: verdict(True)})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.termination == "answered_from_memory" and lm.calls[-1].route == MEMORY_ANSWER
    assert lm.calls_for("planning") == [] and lm.calls_for(REACT) == []


@pytest.mark.parametrize("off", [{"fast_path": False}, {"policy": "heuristic"}])
def test_the_fast_path_off_or_without_an_lm_policy_makes_no_answer_call(config, embedder, bank_file, off):
    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: verdict(True)}))
    MemoryBank(config.model_copy(update=off), lm=lm, embedder=embedder).run(GOAL, bank=bank_file)
    assert lm.calls_for(MEMORY_ANSWER) == [] and lm.calls_for(REACT)


def test_amb_fast_path_0_in_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setenv("AMB_FAST_PATH", "0")
    assert AmbConfig().fast_path is False


def test_by_default_the_bundled_135m_model_does_not_judge_memory_unless_asked():
    from amb_dspy.lm import build_lm

    config = AmbConfig()
    local = build_lm("local", config)  # the model file is opened on the first call only
    assert fast_path_on(config, ScriptedLM()) and not fast_path_on(config, local)
    assert fast_path_on(config.model_copy(update={"fast_path": True}), local)
    assert not fast_path_on(config.model_copy(update={"fast_path": False}), ScriptedLM())
    assert not fast_path_on(config.model_copy(update={"policy": "heuristic"}), ScriptedLM())


# --- the last answer ------------------------------------------------------------------------------------

def garbage_executor(**extra):
    """The executor's last pass reads memory, then its answer never parses."""
    return dict(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                planning=lambda call: plans("")[0],
                **{REACT: lambda call: FINISH, EXTRACT: lambda call: "@@ no fields here @@",
                   MEMORY_ANSWER: verdict(False)}, **extra)


def test_an_unparseable_single_field_answer_is_read_leniently(config, embedder):
    lm = ScriptedLM(**garbage_executor(**{SHORT_ANSWER: lambda call: "Answer: the second Saturday of July\n\nI hope this helps"}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=FESTIVAL)
    assert result.answer == "the second Saturday of July" and not result.extractive
    assert result.termination == "goal_met"
    assert any("read from its text" in e for e in result.errors)


def test_with_no_lm_answer_at_all_the_best_evidence_line_is_the_answer_marked_extractive(config, embedder):
    lm = ScriptedLM(**garbage_executor(**{SHORT_ANSWER: lambda call: "[[ ## answer ## ]]\n\n[[ ## completed ## ]]"}))
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run(GOAL, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.extractive and result.termination == "extractive_answer"  # never goal_met
    assert result.answer == FESTIVAL
    [cited] = result.citations
    assert cited["source"] == FESTIVAL and cited["node_id"] in result.store.graph
    assert result.fallbacks["answer"] == 1 and "answer" not in {c.route for c in lm.calls if c.route == "answer"} - {"answer"}


def test_the_cli_prints_an_extractive_answer_with_its_mark_and_exits_0(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    monkeypatch.setenv("AMB_CORPUS", str(corpus))
    context = tmp_path / "notes.md"
    context.write_text(f"{FESTIVAL}\n\n{CITY}\n")
    dspy.configure(lm=ScriptedLM(**garbage_executor(**{SHORT_ANSWER: lambda call: ""})))
    try:
        result = CliRunner().invoke(app, ["run", GOAL, "--context-file", str(context), "--max-loops", "1"])
    finally:
        dspy.configure(lm=None)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"[extractive] {FESTIVAL}"
    assert "termination: extractive_answer" in result.stderr


def test_no_memory_and_no_lm_answer_is_still_no_answer(config, embedder):
    lm = ScriptedLM(**garbage_executor(**{SHORT_ANSWER: lambda call: ""}))
    result = MemoryBank(config.model_copy(update={"max_loops": 1}), lm=lm, embedder=embedder).run(GOAL)
    assert result.answer == "" and not result.extractive and result.termination == "no_answer"


# --- the agent and its policy alone ----------------------------------------------------------------------

def test_lenient_answer_reads_json_markers_and_labels():
    assert lenient_answer('{"answer": "Paris"}') == "Paris"
    assert lenient_answer("[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]") == "Paris"
    assert lenient_answer("Final answer:   the  Seine\n\nmore text") == "the Seine"
    assert lenient_answer("[[ ## answer ## ]]") == ""


def test_the_extractive_policy_quotes_the_best_line_of_a_group_and_never_recalled_lines(embedder):
    memory = ("Memory 1 (node aaaaaaaa11):\nPort Merrow is a harbour city.\nThe festival is on the second Saturday of July.\n\n"
              "Memory 2 (node bbbbbbbb22):\nTopic: the river\nKeywords: river, Calder\nSummary: The Calder flows into the bay.\n\n"
              "From earlier tasks:\n- The festival date is always in July (task 1)")
    output = extract_answer(AnswerAgent(), embedder, task_goal="What date is the festival?", memory=memory)
    assert output.answer == "The festival is on the second Saturday of July."
    assert output.cited_node_ids == ["aaaaaaaa11"] and output.extractive and not output.sufficient
    river = extract_answer(AnswerAgent(), embedder, task_goal="Which river flows into the bay?", memory=memory)
    assert river.answer == "The Calder flows into the bay." and river.cited_node_ids == ["bbbbbbbb22"]
    assert extract_answer(AnswerAgent(), embedder, task_goal="x", memory="No related memory yet.").answer == ""


def test_no_fast_on_the_cli_plans_and_executes_over_a_bank(tmp_path, corpus, bank_file, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    monkeypatch.setenv("AMB_CORPUS", str(corpus))
    runs = {}
    for flags in ([], ["--no-fast"]):
        lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: verdict(True)}))
        dspy.configure(lm=lm)
        try:
            result = CliRunner().invoke(app, ["run", GOAL, "--bank", str(bank_file), *flags])
        finally:
            dspy.configure(lm=None)
        assert result.exit_code == 0, result.stderr
        runs[bool(flags)] = (lm, result)
    fast, slow = runs[False], runs[True]
    assert "termination: answered_from_memory" in fast[1].stderr and fast[1].stdout.strip().endswith("second Saturday of July")
    assert len(fast[0].calls) == 1
    assert slow[0].calls_for(MEMORY_ANSWER) == [] and "termination: goal_met" in slow[1].stderr
    assert len(slow[0].calls_for(REACT)) == 3
