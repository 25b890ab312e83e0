"""Issue 21: the memory-conversion agents' windows follow the LM (LiteLLM's model table), the others stay at
the documented default; classification also keeps each chunk's answer within the LM's max_tokens.
Scripted LM words only; a hosted LM is named, never called."""

from __future__ import annotations

import dspy
import pytest
from scripted_lm import ScriptedLM
from test_agents import run

from amb_dspy.agents import AnalysisAgent, ClassificationAgent, PlanningAgent, StructureAgent
from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.agents.classification import ANSWER_SHARE
from amb_dspy.config import DEFAULT_WINDOW, AmbConfig
from amb_dspy.lm import input_window


@pytest.mark.parametrize("agent_type", [ClassificationAgent, StructureAgent, AnalysisAgent])
def test_an_ingest_agents_window_follows_the_lm_unless_configured(agent_type):
    hosted = dspy.LM("deepseek/deepseek-chat")
    assert input_window(hosted) == 131072  # LiteLLM's bundled table, no network
    agent = agent_type(AmbConfig(), lm=hosted)
    assert agent.window == 131072
    assert agent_type(AmbConfig(), lm=ScriptedLM()).window == DEFAULT_WINDOW  # a model the table does not know
    name = agent_type.name
    assert agent_type(AmbConfig(**{f"{name}_window": 5000}), lm=hosted).window == 5000


def test_an_agent_that_cuts_its_input_to_its_window_keeps_the_default():
    assert PlanningAgent(AmbConfig(), lm=dspy.LM("deepseek/deepseek-chat")).window == DEFAULT_WINDOW


def test_classification_chunks_leave_room_for_the_answer_within_max_tokens():
    text = "\n\n".join(f"Paragraph {i} on subject {i % 7}: " + "measured values rise and fall " * 12 for i in range(120))
    lm = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    unlimited = run(ClassificationAgent(AmbConfig(classification_window=60_000)), lm, context=text)
    assert len(lm.calls) == 1 and unlimited.clusters

    capped = ScriptedLM(classification=lambda call: {"should_cluster": False, "clusters": []})
    capped.kwargs["max_tokens"] = 1000  # 800 tokens of answer: about 4,000 tokens of segments a call
    out = run(ClassificationAgent(AmbConfig(classification_window=60_000)), capped, context=text)
    sizes = [estimate_tokens(call.inputs["segments"]) for call in capped.calls]
    assert len(sizes) > 1 and max(sizes) <= int(1000 * 0.8 / ANSWER_SHARE)
    assert sorted(" ".join(c.content for c in out.clusters).split()) == sorted(text.split())  # nothing lost


@pytest.mark.parametrize("agent_type", [StructureAgent, AnalysisAgent])
def test_ingest_batches_follow_the_lm_unless_configured(agent_type):
    from amb_dspy.agents.base import HOSTED_INGEST_BATCH
    from amb_dspy.lm import build_lm

    embedded = build_lm("local", AmbConfig())  # built, not loaded
    assert agent_type(AmbConfig(), lm=embedded).ingest_batch() == 1  # its batch answers seldom parse
    assert agent_type(AmbConfig(), lm=dspy.LM("deepseek/deepseek-chat")).ingest_batch() == HOSTED_INGEST_BATCH
    assert agent_type(AmbConfig(ingest_batch=3), lm=embedded).ingest_batch() == 3
