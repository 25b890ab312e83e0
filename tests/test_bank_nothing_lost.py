"""Issue 15's bank defects, each reproduced: raw text kept whatever happens after a tool answered, no
false success, per-run accounting with a shared LM, settings checked up front, and the CLI's exits.

Only the LM's words are scripted (a scripted LM that raises stands for an LM call that fails or is
interrupted); the bank, ReAct, the tools, the corpus, retrieval and storage run for real.
"""

from __future__ import annotations

import threading

import dspy
import pytest
from scripted_lm import MEMORY_ANSWER, ScriptedLM
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

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import ConfigError
from amb_dspy.tools import CorpusError
from cli import app


@pytest.fixture
def config(tmp_path, corpus):
    return AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=3,
                     policy="lm")  # what the LM path itself guarantees; the fallback policies add to it


NOT_SUFFICIENT = {"answer": "July?", "cited_node_ids": [], "reason": "the year is not in memory", "sufficient": False}


def texts(result) -> list[str]:
    return [e.text for e in result.store.tree.entries.values()]


def test_tool_calls_of_the_final_answer_are_recorded(config, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=plans(""), **{REACT: search_then_finish("river Port Merrow"),
                                           EXTRACT: answers("The Calder")})
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("Which river flows through Port Merrow?")
    assert result.answer == "The Calder" and result.loops == 0
    assert any("river Calder flows through it" in t for t in texts(result))  # the final pass's search
    result.store.check()


def test_an_executor_that_fails_after_its_tool_calls_keeps_what_they_returned(config, embedder):
    def extract(call):
        raise RuntimeError("the LM went away")

    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0],
                    **{REACT: lambda call: (search_then_finish("festival date") if "observation_0" not in
                                            call.messages[-1]["content"] else [FINISH])[0], EXTRACT: extract})
    bank = MemoryBank(config.model_copy(update={"max_loops": 1}), lm=lm, embedder=embedder)
    result = bank.run("When is the festival?")
    assert any("final answer failed" in e for e in result.errors)
    assert any("second Saturday of July" in t for t in texts(result))
    assert result.termination == "no_answer" and result.answer == ""


def test_a_failed_merge_keeps_the_whole_cross_validation(config, embedder):
    def analysis(call):
        new = call.input_json("new_node")
        return {"relationships": [
            {"candidate": c["number"], "relationship": "conflict", "reasoning": "dates",
             "conflict_description": "July versus August"} if "August" in new["summary"] and "July" in c["summary"]
            else {"candidate": c["number"], "relationship": "unrelated", "reasoning": "-"}
            for c in call.input_json("candidates")]}

    long_answer = "The official page says July. " * 600  # about 17,000 characters, over the 12,000 shown
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=analysis,
                    integration=lambda call: "not the fields the adapter asked for",
                    planning=plans("", "", "", ""),
                    **{REACT: lambda call: FINISH, EXTRACT: answers(long_answer, "July", "July")})
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?", context=f"{FESTIVAL}\n\nA blog says the festival is in late August.")
    assert any("integration agent" in e for e in result.errors)
    kept = [e for e in result.store.tree.entries.values() if e.metadata.get("source") == "cross_validation"]
    assert kept and kept[0].text.count("The official page says July.") == 600  # whole, not cut at 12,000
    assert "conversion_failed" in kept[0].metadata
    result.store.check()


def test_the_lm_call_cap_during_a_conversion_still_records_the_text(config, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0], **{REACT: lambda call: FINISH,
                                                           EXTRACT: lambda call: answers("x")[0]})
    bank = MemoryBank(config.model_copy(update={"max_lm_calls": 1}), lm=lm, embedder=embedder)
    context = f"{FESTIVAL} {CITY} {FESTIVAL}\n\n{CITY} {FESTIVAL} {CITY}"  # long enough to need structure calls
    result = bank.run("When is the festival?", context=context)
    assert result.termination == "lm_call_cap" and len(lm.calls) == 1  # classification, then the cap
    assert texts(result) == [context]
    result.store.check()


def test_a_failed_first_plan_is_no_success_the_executor_still_tries(config, embedder):
    planning_calls = []

    def planning(call):
        planning_calls.append(call)
        return "garbage" if len(planning_calls) <= 2 else plans("")[0]  # ChatAdapter and JSON fallback fail

    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=planning, **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers("July")[0]})
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run("When is the festival?", context=FESTIVAL)
    assert result.loops >= 1  # not "goal_met after 0 loops"
    assert result.store.insight_doc.completed_tasks[0].description.startswith("Answer the task goal")
    assert any("planning agent" in e for e in result.errors)


def test_two_banks_sharing_one_lm_count_and_cap_only_their_own_calls(tmp_path, corpus, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0], **{REACT: lambda call: FINISH,
                                                           EXTRACT: lambda call: answers("July")[0],
                                                           MEMORY_ANSWER: lambda call: NOT_SUFFICIENT})
    results = {}

    def run(name: str, cap: int) -> None:
        cfg = AmbConfig(corpus=corpus, storage_dir=tmp_path / name, temp_dir=tmp_path / f"t-{name}", max_lm_calls=cap)
        results[name] = MemoryBank(cfg, lm=lm, embedder=embedder).run("When is the festival?",
                                                                      context=f"{FESTIVAL}\n\n{CITY}")

    threads = [threading.Thread(target=run, args=(name, cap)) for name, cap in (("a", 400), ("b", 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    calls = {name: sum(u["calls"] for u in r.usage.values()) for name, r in results.items()}
    assert results["b"].termination == "lm_call_cap" and calls["b"] == 3
    assert results["a"].termination == "goal_met"  # b's cap did not stop a
    assert calls["a"] + calls["b"] == len(lm.calls)  # nobody counted anybody else's call


def test_a_window_too_small_for_its_prompt_fails_before_any_lm_call(config, embedder, monkeypatch):
    monkeypatch.setenv("AMB_CLASSIFICATION_WINDOW", "600")
    lm = ScriptedLM(default=lambda call: {})
    with pytest.raises(ConfigError, match="classification window of 600 tokens"):
        MemoryBank(AmbConfig(storage_dir=config.storage_dir), lm=lm, embedder=embedder)
    assert lm.calls == []


def test_any_error_inside_an_agent_fails_the_task_not_the_run(config, embedder):
    class Broken(dspy.Module):
        def forward(self, **inputs):
            raise KeyError("a bug, not the LM's doing")

    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress,
                    planning=lambda call: plans("")[0], **{REACT: lambda call: FINISH,
                                                           EXTRACT: lambda call: answers("July")[0]})
    bank = MemoryBank(config, lm=lm, embedder=embedder, agents={"analysis": Broken()})
    result = bank.run("When is the festival?", context=f"{FESTIVAL}\n\n{CITY}")
    assert result.answer == "July"
    assert any(e.startswith("analysis agent: KeyError") for e in result.errors)


def test_a_bad_corpus_fails_before_any_lm_call(config, embedder, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not JSON\n")
    lm = ScriptedLM(default=lambda call: {})
    bank = MemoryBank(config.model_copy(update={"corpus": bad}), lm=lm, embedder=embedder)
    with pytest.raises(CorpusError):
        bank.run("When is the festival?", context=FESTIVAL)
    assert lm.calls == []


# --- the CLI, with DSPy configured the way a user's program would --------------------------------------

@pytest.fixture
def cli_env(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    monkeypatch.setenv("AMB_TEMP_DIR", str(tmp_path / "temp"))
    monkeypatch.setenv("AMB_CORPUS", str(corpus))
    yield
    dspy.configure(lm=None)


def test_cli_prints_the_answer_then_a_one_line_export_error(cli_env, tmp_path):
    dspy.configure(lm=ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                                 planning=plans(""), **{REACT: [FINISH], EXTRACT: answers("July")}))
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("in the way")
    result = CliRunner().invoke(app, ["run", "When is the festival?", "--export", str(not_a_folder / "x.json")])
    assert result.exit_code == 1 and result.stdout.strip().endswith("July")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot export the bank to" in errors[0]


def test_cli_without_an_answer_says_why_and_exits_non_zero(cli_env):
    def extract(call):
        raise RuntimeError("the LM went away")

    dspy.configure(lm=ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                                 planning=lambda call: plans("")[0], **{REACT: lambda call: FINISH, EXTRACT: extract}))
    result = CliRunner().invoke(app, ["run", "When is the festival?", "--max-loops", "1"])
    assert result.exit_code == 1 and "(no answer)" in result.stdout
    assert "error: no answer (no_answer)" in result.stderr


def test_cli_interrupted_says_so_and_what_was_kept(cli_env, tmp_path):
    def planning(call):
        raise KeyboardInterrupt  # Ctrl-C while the planning call is in flight

    dspy.configure(lm=ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                                 planning=planning))
    out = tmp_path / "partial.json"
    result = CliRunner().invoke(app, ["run", "When is the festival?", "--context-file", str(_notes(tmp_path)),
                                      "--export", str(out)])
    assert result.exit_code == 130
    assert "interrupted: memory kept 2 nodes and 1 entries" in result.stderr and out.is_file()


def _notes(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text(f"{FESTIVAL}\n\n{CITY}\n")
    return path
