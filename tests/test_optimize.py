"""``amb optimize``'s runner with scripted LMs: DSPy's optimizers change the saved state, the saved state
reaches the prompt of a loaded agent or bank, and bad requests fail before any work.

The scripted LMs here answer well only when the prompt carries what an optimizer adds (demos, or an
instruction), so the scores before and after show the optimization at work. Everything but the LM's
words -- the agents, DSPy's optimizers and Evaluate, the bank, retrieval -- runs for real.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dspy
import pytest
from scripted_lm import MEMORY_ANSWER, ScriptedLM

from amb_dspy.agents.compiled import CompiledError, load_agents, read_manifest
from amb_dspy.config import AmbConfig
from optimize.hotpotqa import load_hotpotqa
from optimize.runner import OptimizeError, build_program, optimize_agents
from optimize.trainsets import build_examples, entity_words

# The shared samples live next to the repository; AMB_HOTPOTQA_DIR points elsewhere.
DATA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa")
TRAIN = DATA / "train_100.jsonl"
pytestmark = pytest.mark.skipif(not TRAIN.is_file(), reason=f"HotpotQA samples not found at {DATA}")
SOURCE = f"hotpotqa:{TRAIN}"
RULE = "RULE-7: the same text with one changed date, number or name is a conflict."


def judge(call) -> dict:
    """What a good analysis LM would say: near-copies conflict, shared entities relate, others do not."""
    new = call.input_json("new_node")
    verdicts = []
    for candidate in call.input_json("candidates"):
        a, b = set(new["summary"].split()), set(candidate["summary"].split())
        if len(a & b) >= 0.8 * max(len(a), len(b)):
            kind = "conflict"
        elif entity_words(new["summary"]) & entity_words(candidate["summary"]):
            kind = "related"
        else:
            kind = "unrelated"
        verdicts.append({"candidate": candidate["number"], "relationship": kind, "reasoning": "scripted"})
    return {"relationships": verdicts}


def lazy(call) -> dict:
    return {"relationships": [{"candidate": c["number"], "relationship": "unrelated", "reasoning": "scripted"}
                              for c in call.input_json("candidates")]}


def has_demos(call) -> bool:
    return len(call.messages) > 2  # system, then demo turns, then the question


def prompt(call) -> str:
    return "\n".join(m["content"] for m in call.messages)


def test_bootstrap_writes_demos_that_a_loaded_agent_sends(tmp_path):
    teacher = ScriptedLM(analysis=judge)
    student = ScriptedLM(analysis=lambda call: judge(call) if has_demos(call) else lazy(call))
    result = optimize_agents(
        "analysis", SOURCE, lm=student, teacher_lm=teacher, n=12, out=tmp_path, lm_name="scripted/student",
        teacher_name="scripted/teacher",
    )
    assert (result.train_size, result.dev_size) == (8, 4)
    assert result.score_after > result.score_before
    assert teacher.calls and all(not has_demos(c) for c in teacher.calls)  # the teacher made the traces

    state = json.loads((tmp_path / "analysis.json").read_text())
    demos = state["analyze"]["demos"]
    assert len(demos) == 2 and all(d["augmented"] for d in demos)  # the defaults have none
    record = read_manifest(tmp_path).agents["analysis"]
    assert (record.optimizer, record.model, record.teacher_model) == ("bootstrap", "scripted/student", "scripted/teacher")
    assert (record.train_size, record.dev_size, record.metric) == (8, 4, "analysis_relation_accuracy")
    assert (record.score_before, record.score_after) == (result.score_before, result.score_after)

    agent = load_agents(tmp_path)["analysis"]
    example = build_examples("analysis", load_hotpotqa(SOURCE, n=20)[15:])[0]
    lm = ScriptedLM(analysis=judge)
    with dspy.context(lm=lm):
        agent(**example.inputs())
    shown = json.dumps(demos[0]["new_node"]["summary"], ensure_ascii=False)  # as the adapter renders it
    assert has_demos(lm.calls[0]) and shown in prompt(lm.calls[0])


def test_gepa_evolves_an_instruction_that_a_loaded_agent_sends(tmp_path):
    student = ScriptedLM(analysis=lambda call: judge(call) if RULE in prompt(call) else lazy(call))
    reflection = ScriptedLM(new_instruction=lambda call: {"new_instruction": f"Judge every candidate. {RULE}"})
    result = optimize_agents(
        "analysis", SOURCE, lm=student, teacher_lm=reflection, optimizer="gepa", n=10, out=tmp_path, budget=40,
    )
    assert reflection.calls, "GEPA never reflected"
    assert "Wrong:" in prompt(reflection.calls[0])  # the metric's feedback reached the reflection LM
    assert result.score_after > result.score_before

    state = json.loads((tmp_path / "analysis.json").read_text())
    assert RULE in state["analyze"]["signature"]["instructions"]
    agent = load_agents(tmp_path)["analysis"]
    example = build_examples("analysis", load_hotpotqa(SOURCE, n=3))[0]
    lm = ScriptedLM(analysis=judge)
    with dspy.context(lm=lm):
        agent(**example.inputs())
    assert RULE in prompt(lm.calls[0])


def test_mipro_proposes_an_instruction_that_is_saved(tmp_path):
    pytest.importorskip("optuna", reason="MIPROv2 needs the optional optuna package")
    student = ScriptedLM(analysis=lambda call: judge(call) if RULE in prompt(call) else lazy(call))
    # the teacher bootstraps demos and, as MIPRO's prompt model, proposes instructions
    teacher = ScriptedLM(analysis=judge, default=lambda call: {f: f"Judge every candidate. {RULE}" for f in call.output_fields})
    result = optimize_agents("analysis", SOURCE, lm=student, teacher_lm=teacher, optimizer="mipro", n=16, out=tmp_path)
    assert result.score_after > result.score_before
    assert RULE in json.loads((tmp_path / "analysis.json").read_text())["analyze"]["signature"]["instructions"]
    assert teacher.calls_for("default")  # instruction proposals came from the teacher


def test_mipro_without_optuna_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "optuna" else real(name, *a))
    with pytest.raises(OptimizeError, match=r"mipro needs the optuna package: pip install optuna"):
        optimize_agents("analysis", SOURCE, lm=ScriptedLM(analysis=judge), optimizer="mipro", n=4, out=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"agent": "executor"}, OptimizeError, r"unknown agent 'executor': choose one of classification, .*, all"),
        ({"optimizer": "copro"}, OptimizeError, r"unknown optimizer 'copro': choose one of bootstrap, mipro, gepa"),
        ({"n": 1}, OptimizeError, r"1 item\(s\); need at least 2"),
        ({"train": "hotpotqa:/nowhere/x.jsonl"}, ValueError, r"no such file; download"),
    ],
)
def test_bad_requests_fail_before_any_lm_call(tmp_path, kwargs, error, message):
    lm = ScriptedLM(analysis=judge)
    arguments = {"agent": "analysis", "train": SOURCE, "n": 4, **kwargs}
    with pytest.raises(error, match=message):
        optimize_agents(arguments.pop("agent"), arguments.pop("train"), lm=lm, out=tmp_path / "out", **arguments)
    assert not lm.calls and not (tmp_path / "out").exists()


def test_a_foreign_manifest_in_out_stops_the_run_first(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 0}))
    lm = ScriptedLM(analysis=judge)
    with pytest.raises(CompiledError, match="schema version 0"):
        optimize_agents("analysis", SOURCE, lm=lm, n=4, out=tmp_path)
    assert not lm.calls


# --- planning: compiled through the whole bank ---------------------------------------------------------

REACT = "next_thought,next_tool_name,next_tool_args"
EXTRACT = "reasoning,answer"


def answer_from_prompt(items):
    """The final-answer script: the gold answer of the question found in the prompt."""
    answers = {item.question: item.answer for item in items}

    def answer(call):
        text = prompt(call)
        return {"reasoning": "memory", "answer": next((a for q, a in answers.items() if q in text), "unknown")}

    return answer


def bank_lm(items, *, planning, answer=None, react=None) -> ScriptedLM:
    """A scripted LM for whole bank runs: one cluster per segment, 40% summaries, nothing related, the
    executor finishing at once, and the final answer read off the question in the prompt. Answering from
    memory first finds that memory does not suffice, so the whole loop runs."""

    def clusters(call):
        count = call.inputs["segments"].count("\n\n[") + 1
        return {"should_cluster": count > 1,
                "clusters": [{"context": f"topic {i}", "keywords": [f"k{i}"], "segments": [i]} for i in range(1, count + 1)]}

    return ScriptedLM(
        classification=clusters, structure=lambda call: {"summary": call.inputs["content"][: len(call.inputs["content"]) * 2 // 5]},
        analysis=lazy, planning=planning,
        **{REACT: react or (lambda call: {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}),
           EXTRACT: answer or answer_from_prompt(items),
           MEMORY_ANSWER: lambda call: {"answer": "unknown", "cited_node_ids": [], "reason": "not in memory", "sufficient": False}},
    )


def test_each_target_exposes_only_its_own_predictors():
    config = AmbConfig()
    assert [n for n, _ in build_program("analysis", config).named_predictors()] == ["analyze"]
    planning = build_program("planning", config, embedder=object())
    assert [n for n, _ in planning.named_predictors()] == ["trainable['planning'].plan"]
    assert sorted(planning.agents) == ["analysis", "answer", "classification", "integration", "planning", "structure"]
    everything = build_program("all", config, embedder=object())
    assert sorted(n.split("'")[1] for n, _ in everything.named_predictors()) == sorted(planning.agents)
    copy = everything.deepcopy()
    assert copy.trainable["analysis"] is not everything.trainable["analysis"]
    assert copy._embedder is everything._embedder  # the embedding model is shared, not copied


def test_planning_compiles_through_the_bank_and_a_compiled_bank_uses_it(tmp_path, embedder):
    from amb_dspy.bank import MemoryBank

    items = load_hotpotqa(SOURCE, n=4)
    done = {"executed_status": "success", "executed_context": "the memory answers it", "next_task": ""}
    lm = bank_lm(items, planning=lambda call: done)
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp")
    result = optimize_agents("planning", SOURCE, lm=lm, n=4, out=tmp_path / "compiled", config=config, embedder=embedder)
    assert (result.agents, result.metric) == (["planning"], "answer_f1")
    assert result.score_before == result.score_after == 1.0
    assert sorted(p.name for p in (tmp_path / "compiled").iterdir()) == ["manifest.json", "planning.json"]
    demos = json.loads((tmp_path / "compiled" / "planning.json").read_text())["plan"]["demos"]
    assert demos and demos[0]["task_goal"] in {i.question for i in items}

    seen = []
    lm = bank_lm(items, planning=lambda call: seen.append(call) or done)
    bank = MemoryBank(config, lm=lm, compiled=tmp_path / "compiled", embedder=embedder)
    run = bank.run(items[0].question, context=items[0].context_text())
    assert run.answer == items[0].answer
    assert has_demos(seen[0]) and demos[0]["task_goal"] in prompt(seen[0])
    assert all(not has_demos(c) for c in lm.calls_for("analysis"))  # the other agents stayed as they were


def test_all_compiles_every_agent_through_the_bank(tmp_path, embedder):
    items = load_hotpotqa(SOURCE, n=3)
    done = {"executed_status": "success", "executed_context": "the memory answers it", "next_task": ""}
    result = optimize_agents("all", SOURCE, lm=bank_lm(items, planning=lambda call: done), n=3, out=tmp_path,
                             config=AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t"), embedder=embedder)
    names = ["analysis", "answer", "classification", "integration", "planning", "structure"]
    assert result.agents == names and sorted(read_manifest(tmp_path).agents) == names
    demos = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in names}
    # agents the bank called got demos from the bootstrapped traces; integration (no conflict) kept its defaults
    assert all(demos[name][predictor]["demos"] for name, predictor in
               [("classification", "classify"), ("structure", "summarize"), ("planning", "plan"), ("answer", "respond")])
    assert demos["integration"]["merge"]["demos"] == []
    assert sorted(load_agents(tmp_path)) == names
