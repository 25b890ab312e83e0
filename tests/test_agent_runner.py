"""The agent runner is the one place that decides LM or policy for an agent call, and counts each policy used.

Real agents and policies over the real embedding model; only the LM's words are scripted (unusable ones
here, to make the policies answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from scripted_lm import SHORT_ANSWER, ScriptedLM

from amb_dspy.agents import AGENT_CLASSES, AgentError
from amb_dspy.agents.runner import AgentRunner
from amb_dspy.config import AmbConfig
from amb_dspy.lm import resolve_lms
from amb_dspy.storage import InsightDoc, PendingTask

GOAL = "Which river flows through Marrowick?"
MEMORY = "Memory 1 (node n1):\nTopic: Marrowick\nKeywords: river\nSummary: The River Sennet flows through Marrowick."


@dataclass
class Record:
    errors: list[str] = field(default_factory=list)
    fallbacks: dict[str, int] = field(default_factory=dict)


def runner(policy: str, lm: ScriptedLM, embedder) -> tuple[AgentRunner, Record]:
    config = AmbConfig(policy=policy)
    record = Record()
    agents = {name: cls(config) for name, cls in AGENT_CLASSES.items()}
    return AgentRunner(agents, resolve_lms(config, lm=lm), embedder, policy=policy, record=lambda: record,
                       task_goal=lambda: GOAL), record


def plan_inputs() -> dict:
    return {"insight_doc": InsightDoc(task_goal=GOAL, pending=[PendingTask(description="search the river")])}


def test_under_the_lm_policy_an_unusable_reply_is_the_agents_error_and_no_policy_stands_in(embedder):
    run, record = runner("lm", ScriptedLM(planning=["not the format at all"] * 4), embedder)
    with pytest.raises(AgentError, match="planning"):
        run.call("planning", **plan_inputs())
    assert record.fallbacks == {} and run.last_answer(GOAL, MEMORY, answered=False) is None
    assert record.fallbacks == {}  # the executor's last answer has no stand-in either


def test_otherwise_the_policy_answers_and_is_counted(embedder):
    run, record = runner("auto", ScriptedLM(planning=["not the format at all"] * 4), embedder)
    out = run.call("planning", **plan_inputs())
    assert out.completed_tasks[-1].description == "search the river" and record.fallbacks == {"planning": 1}
    assert "its deterministic policy was used" in record.errors[-1]


def test_the_heuristic_policy_never_asks_the_lm(embedder):
    lm = ScriptedLM()  # no script: any call would fail
    run, record = runner("heuristic", lm, embedder)
    run.call("planning", **plan_inputs())
    assert lm.calls == [] and record.fallbacks == {"planning": 1} and record.errors == []


def test_the_last_answer_is_the_answer_agent_alone_then_the_extractive_policy_each_counted(embedder):
    run, record = runner("auto", ScriptedLM(**{SHORT_ANSWER: [{"answer": "The Sennet"}]}), embedder)
    output, extractive = run.last_answer(GOAL, MEMORY, answered=False)
    assert (output.answer, extractive) == ("The Sennet", False) and record.fallbacks == {"executor": 1}

    run, record = runner("auto", ScriptedLM(), embedder)  # the answer agent's LM fails too
    output, extractive = run.last_answer(GOAL, MEMORY, answered=False)
    assert extractive and output.extractive and record.fallbacks == {"executor": 1, "answer": 1}
    assert run.last_answer(GOAL, MEMORY, answered=True) is None  # an earlier answer stands


def test_a_batch_the_lm_cannot_answer_is_asked_item_by_item(embedder):
    calls = []

    def alone(item):
        calls.append(item)
        return {"insight_doc": InsightDoc(task_goal=GOAL, pending=[PendingTask(description=item)])}

    run, record = runner("lm", ScriptedLM(planning=["garbage"] * 8), embedder)
    verdicts = run.call_batch("planning", ["a", "b"], alone)  # the planning agent takes no batch: it fails
    assert calls == ["a", "b"] and all(isinstance(v, str) and "planning" in v for v in verdicts)
    assert len(record.errors) == 2 and record.fallbacks == {}
