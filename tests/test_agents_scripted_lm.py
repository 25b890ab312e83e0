"""The scripted LM that drives agent and bank tests: routing, formats, recording and loud failures."""

from __future__ import annotations

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.agents import AgentError, ClassificationAgent, PlanningAgent, StructureAgent
from amb_dspy.storage import InsightDoc, PendingTask


def test_routes_each_agent_to_its_own_script_and_records_calls():
    lm = ScriptedLM(
        structure=lambda call: {"summary": call.inputs["content"][: len(call.inputs["content"]) * 2 // 5]},
        planning=[{"executed_status": "success", "executed_context": "", "next_task": "search rivers"}],
    )
    text = "The Amazon river carries more water than any other river on Earth. " * 3
    with dspy.context(lm=lm):
        summary = StructureAgent()(content=text, context="Amazon", keywords=["Amazon"])
        plan = PlanningAgent()(insight_doc=InsightDoc(task_goal="rivers?"))
    assert summary.summary == text.strip()[: len(text.strip()) * 2 // 5].strip()
    assert plan.pending_tasks == [PendingTask(description="search rivers")]
    assert [c.route for c in lm.calls] == ["structure", "planning"]
    assert lm.calls[0].output_fields == ("summary",)
    assert lm.remaining("planning") == 0


@pytest.mark.parametrize("adapter", [dspy.ChatAdapter(), dspy.JSONAdapter()], ids=["chat", "json"])
def test_routes_any_signature_by_output_field_names(adapter):
    lm = ScriptedLM({"answer,confidence": [{"answer": "Paris", "confidence": 0.9}]}, default=[{"other": "x"}])
    predict = dspy.Predict("question -> answer: str, confidence: float")
    with dspy.context(lm=lm, adapter=adapter):
        result = predict(question="Capital of France?")
        other = dspy.Predict("question -> other")(question="?")
    assert (result.answer, result.confidence) == ("Paris", 0.9)
    assert other.other == "x"
    assert lm.calls[0].inputs == {"question": "Capital of France?"}
    assert [c.route for c in lm.calls] == ["answer,confidence", "default"]


def test_drives_a_react_loop():
    def search(query: str) -> str:
        """Search the corpus."""
        return f"results for {query}"

    lm = ScriptedLM({
        "next_thought,next_tool_name,next_tool_args": [
            {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": "Amazon"}},
            {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}},
        ],
        "reasoning,answer": lambda call: {"reasoning": "seen", "answer": "found" if "results for Amazon" in call.prompt_text else "?"},
    })
    with dspy.context(lm=lm):
        result = dspy.ReAct("question -> answer", tools=[search], max_iters=3)(question="Amazon?")
    assert result.answer == "found"
    assert [c.route for c in lm.calls].count("next_thought,next_tool_name,next_tool_args") == 2


def test_unscripted_or_exhausted_calls_fail_loudly():
    lm = ScriptedLM(structure=[])
    with dspy.context(lm=lm), pytest.raises(AgentError, match="no script for a prompt"):
        ClassificationAgent()(context="Some text to classify.")
    with dspy.context(lm=lm), pytest.raises(AgentError, match="ran out after 0 answers"):
        StructureAgent()(content="word " * 100, context="c", keywords=[])
