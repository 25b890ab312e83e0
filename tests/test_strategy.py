"""A strategy that fits the LM: a tiny LM gets the direct strategy (the memory agents' policies, a search when
memory falls short, one answer call), a capable one the full loop; ``--strategy`` / ``AMB_STRATEGY`` decide
otherwise, and a bad value fails in one line before any work.

Only the LM's words are scripted; a ScriptedLM named like a tiny model stands for one. Memory, retrieval (the
real embedding model, real FAISS) and the local corpus run for real.
"""

from __future__ import annotations

import pytest
from scripted_lm import SHORT_ANSWER, ScriptedLM
from test_bank import CITY, FESTIVAL
from typer.testing import CliRunner

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.errors import ConfigError
from amb_dspy.lm import build_lm, is_tiny, task_strategy
from amb_dspy.lm.specs import checked_config
from amb_dspy.task.direct import focused_memory
from cli import app

RIVER_GOAL = "Which river flows through the city where the Tidewater Lantern Festival is held?"


def tiny_lm(**scripts) -> ScriptedLM:
    lm = ScriptedLM(**scripts)
    lm.model = "openai/smollm2-135m-instruct"  # what a user of Ollama or llama.cpp's server would name it
    return lm


@pytest.mark.parametrize("model, tiny", [
    ("openai/smollm2", True), ("ollama_chat/qwen2.5:0.5b", True), ("ollama_chat/gemma3:270m", True),
    ("openai/tinyllama-1.1b-chat", True), ("deepseek/deepseek-chat", False), ("openai/gpt-4o-mini", False),
    ("ollama_chat/llama3.1:8b", False), ("anthropic/claude-3-5-sonnet-20240620", False),
])
def test_tiny_models_are_known_by_name(model, tiny):
    lm = ScriptedLM()
    lm.model = model
    assert is_tiny(lm) is tiny


def test_the_embedded_model_is_tiny_and_auto_gives_it_the_direct_strategy():
    local = build_lm("local", AmbConfig())  # the model file is opened on the first call only
    direct, line = task_strategy(AmbConfig(), local)
    assert is_tiny(local) and direct.strategy == "direct" and direct.policy == "heuristic"
    assert line.startswith("strategy: direct (the embedded SmolLM2-135M is a tiny model")
    capable, line = task_strategy(AmbConfig(), ScriptedLM())
    assert capable.strategy == "loop" and capable.policy == "auto" and line.startswith("strategy: loop (")


def test_a_strategy_that_is_set_wins_and_an_lm_policy_stays():
    forced, line = task_strategy(AmbConfig(strategy="loop"), tiny_lm())
    assert forced.strategy == "loop" and forced.policy == "auto" and "as set" in line
    direct, _ = task_strategy(AmbConfig(strategy="direct", policy="lm"), ScriptedLM())
    assert direct.strategy == "direct" and direct.policy == "lm"


def test_a_strategy_that_does_not_exist_fails_in_one_line(monkeypatch, tmp_path):
    with pytest.raises(ConfigError) as raised:
        checked_config(strategy="fastest")
    assert "\n" not in str(raised.value) and "strategy" in str(raised.value)
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path))
    result = CliRunner().invoke(app, ["run", "a question", "--strategy", "fastest"])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    monkeypatch.setenv("AMB_STRATEGY", "fastest")
    assert CliRunner().invoke(app, ["eval", "--n", "1"]).exit_code == 2


COPIED = ("Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay. "
          "The Tidewater Lantern Festival is held in Port Merrow.")


def test_a_tiny_lm_answers_in_one_call_after_searching_what_memory_lacks(config, embedder):
    lm = tiny_lm(**{SHORT_ANSWER: lambda call: {"answer": COPIED}})  # any other call fails: no script
    events = []
    bank = MemoryBank(config, lm=lm, embedder=embedder, progress=events.append)
    result = bank.run(RIVER_GOAL, context=FESTIVAL)
    assert result.answer == COPIED and result.termination == "goal_met" and not result.extractive
    assert [call.route for call in lm.calls] == [SHORT_ANSWER] and result.usage["answer"]["calls"] == 1
    assert events[0].phase == "notice" and events[0].message == bank.strategy  # said first, before any work
    assert bank.strategy.startswith("strategy: direct (openai/smollm2-135m-instruct is a tiny model")
    assert result.fallbacks["classification"] >= 1  # the memory agents' policies, no LM
    kinds = [hop["kind"] for hop in result.hops]
    assert kinds[0] == "NORMAL" and kinds[-1] == "ANSWER" and result.hops[-1]["lm_calls"] == 1
    assert result.hops[0]["tool_calls"][0] == {"name": "search", "args": {"query": RIVER_GOAL}, "cached": False}
    store = result.store
    assert any("Calder" in " ".join(text for *_, text in store.source_texts(cited["node_id"])) for cited in result.citations)
    assert "Calder" in lm.calls[0].inputs["memory"]  # the search result became memory before the answer
    assert not any(cited["source"].startswith("Search for") for cited in result.citations)  # the results, not the query


def test_memory_that_covers_the_goal_is_answered_without_a_search(config, embedder):
    lm = tiny_lm(**{SHORT_ANSWER: lambda call: {"answer": COPIED}})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(RIVER_GOAL, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.answer == COPIED and [hop["kind"] for hop in result.hops] == ["ANSWER"]
    assert result.loops == 0 and len(lm.calls) == 1


TWO_PARTS = f"{RIVER_GOAL[:-1]}, and when does the festival take place?"


@pytest.mark.parametrize("answer, why", [
    ("The Calder flows through Port Merrow on the second Saturday of July.", "is not in any one line shown"),
    ("The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year.",
     "no sentence answers 'Which river flows"),
    ("The Calder", "no sentence answers 'when does the festival take place'"),
])
def test_a_tiny_lms_answer_that_recombines_or_leaves_out_lines_gives_way_to_the_lines_quoted(config, embedder,
                                                                                         answer, why):
    lm = tiny_lm(**{SHORT_ANSWER: lambda call: {"answer": answer}})
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    result = bank.run(TWO_PARTS, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.extractive and len(lm.calls) == 1
    assert "river Calder flows" in result.answer and "second Saturday of July" in result.answer
    assert "Port Merrow Port Merrow" not in result.answer  # a title that the line repeats is quoted once
    assert any(why in error and "was not accepted" in error for error in result.errors)
    cited = " ".join(text for c in result.citations for *_, text in result.store.source_texts(c["node_id"]))
    assert "river Calder" in cited and "second Saturday of July" in cited  # each quoted line cites its node


def test_a_capable_lm_keeps_the_full_loop_and_says_so(config, embedder):
    lm = ScriptedLM(default=lambda call: "not scripted")  # planning, ReAct... fail; the loop still runs
    bank = MemoryBank(config.model_copy(update={"max_loops": 1}), lm=lm, embedder=embedder)
    result = bank.run(RIVER_GOAL)
    assert bank.strategy.startswith("strategy: loop (scripted/lm runs the full loop")
    assert lm.calls and any(error.startswith("planning agent") for error in result.errors)  # it was asked to plan


def test_every_door_gets_the_strategy_an_outside_agents_session_included(config, embedder):
    bank = MemoryBank(config, lm=tiny_lm(), embedder=embedder)
    session = bank.start_session(RIVER_GOAL)
    assert session.config.strategy == "direct" and session.memory.runner.policy == "heuristic"
    assert MemoryBank(config, lm=ScriptedLM(), embedder=embedder).start_session(RIVER_GOAL).memory.runner.policy == "auto"


def test_a_tiny_lm_is_shown_the_lines_that_cover_every_part_of_the_goal():
    memory = ("Memory 1 (node aaaaaa01):\nThe Tidewater Lantern Festival is held in Marrowick, a port city.\n"
              "Lanterns are floated on the harbour.\n\n"
              "Memory 2 (node bbbbbb02):\nSearch for 'river Marrowick' found 2 results:\n"
              "The river then flows through the city of Marrowick.\nThe River Sennet flows through Marrowick.\n\n"
              "Memory 3 (node cccccc03):\nThe festival takes place on the last Saturday of September.")
    focused = focused_memory(memory, "Which river flows through the city where the Tidewater Lantern Festival "
                                     "is held, and when does it take place?")
    assert focused == ("Memory 1 (node aaaaaa01):\nThe Tidewater Lantern Festival is held in Marrowick, a port city.\n\n"
                       "Memory 2 (node bbbbbb02):\nThe River Sennet flows through Marrowick.\n\n"
                       "Memory 3 (node cccccc03):\nThe festival takes place on the last Saturday of September.")
    assert focused_memory(memory, "What colour is the sky?") == ""


def test_a_citation_shows_the_line_the_answer_rests_on(config, embedder):
    harbour = "\n".join(f"In {1900 + n} the harbour of Port Merrow built {n + 3} new moorings for the fleet." for n in range(12))
    lm = tiny_lm(**{SHORT_ANSWER: lambda call: {"answer": "The Calder"}})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(RIVER_GOAL, context=f"{FESTIVAL}\n{harbour}\n{CITY}")
    assert result.answer == "The Calder" and not result.extractive
    assert any(cited["source"].startswith(CITY[:40]) for cited in result.citations), result.citations
