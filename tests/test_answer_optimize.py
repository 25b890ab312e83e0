"""``amb optimize --agent answer``: the answer agent compiled on HotpotQA-derived <memory> blocks, scored by
answer F1, saved, and loaded back by a bank (``--compiled``). Only the LM's words are scripted."""

from __future__ import annotations

import json

import dspy
import pytest
from scripted_lm import MEMORY_ANSWER, ScriptedLM
from test_optimize import DATA, SOURCE, TRAIN, has_demos, prompt

from amb_dspy.agents import AnswerAgent
from amb_dspy.agents.compiled import load_agents
from amb_dspy.config import AmbConfig
from optimize.hotpotqa import load_hotpotqa
from optimize.runner import optimize_agents
from optimize.trainsets import build_examples

pytestmark = pytest.mark.skipif(not TRAIN.is_file(), reason=f"HotpotQA samples not found at {DATA}")


def test_answer_examples_hold_the_gold_paragraphs_as_memory_groups():
    items = load_hotpotqa(SOURCE, n=4)
    examples = build_examples("answer", items)
    assert [e.task_goal for e in examples] == [i.question for i in items if i.gold_paragraphs]
    for example, item in zip(examples, items):
        assert example.answer == item.answer and set(example.inputs().keys()) == {"task_goal", "memory"}
        assert example.memory.count("Memory ") == len(item.gold_paragraphs) + 2
        assert all(p.sentences[0].strip() in example.memory for p in item.gold_paragraphs)
    assert build_examples("answer", items) == examples  # deterministic


def test_answer_agent_compiles_on_answer_f1_and_a_loaded_agent_sends_its_demos(tmp_path):
    items = load_hotpotqa(SOURCE, n=6)
    gold = {item.question: item.answer for item in items}

    def reads_the_gold(call):
        return {"answer": gold[call.inputs["task_goal"]], "cited_node_ids": [], "reason": "the notes say so",
                "sufficient": True}

    def lazy(call):
        return reads_the_gold(call) if has_demos(call) else {"answer": "no idea", "cited_node_ids": [],
                                                             "reason": "", "sufficient": False}

    result = optimize_agents("answer", SOURCE, lm=ScriptedLM(**{MEMORY_ANSWER: lazy}),
                             teacher_lm=ScriptedLM(**{MEMORY_ANSWER: reads_the_gold}), n=6, out=tmp_path,
                             config=AmbConfig())
    assert (result.agents, result.metric) == (["answer"], "answer_f1")
    assert result.score_before == 0.0 and result.score_after == 1.0
    demos = json.loads((tmp_path / "answer.json").read_text())["respond"]["demos"]
    assert demos and demos[0]["task_goal"] in gold
    agent = load_agents(tmp_path)["answer"]
    assert isinstance(agent, AnswerAgent)
    lm = ScriptedLM(**{MEMORY_ANSWER: lazy})
    with dspy.context(lm=lm):
        output = agent(task_goal=items[0].question, memory="Memory 1 (node abcdef12):\nsome note")
    assert output.answer == items[0].answer and demos[0]["task_goal"] in prompt(lm.calls[0])
