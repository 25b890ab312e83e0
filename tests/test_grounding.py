"""No ungrounded answer passes as an answer, on any path: the fast path, the executor's steps and final answer,
the last answer, the direct strategy. An empty reply, a template placeholder, noise, or text that shares no
word, name or number with what the task holds falls back to the extractive answer (marked), or to none.

Only the LM's words are scripted (tests/scripted_lm.py); the bank, its agents, retrieval (the real embedding
model, real FAISS), ReAct and the corpus run for real.
"""

from __future__ import annotations

import pytest
from scripted_lm import MEMORY_ANSWER, SHORT_ANSWER, ScriptedLM
from test_answer_paths import GOAL, loop_scripts, verdict
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
    unrelated,
)

from amb_dspy.bank import MemoryBank
from amb_dspy.task.grounding import uncopied, ungrounded

MEMORY = f"Memory 1 (node aaaaaaaa11):\n{FESTIVAL}\n{CITY}"
PLACEHOLDER, NOISE, UNRELATED = "{answer}", "XQZVTKWPLMRSTNBDFGHJKLQWRTY 9x9x9x9x9x9x ##@@!!", "Paris is the capital of France."


@pytest.fixture(name="bank_file")
def bank_file_fixture(tmp_path, config, embedder):
    """A bank ingested from the festival and city notes with the deterministic policies (no LM)."""
    bank = MemoryBank(config.model_copy(update={"policy": "heuristic"}), lm=ScriptedLM(), embedder=embedder)
    ingested = bank.ingest(f"{FESTIVAL}\n\n{CITY}", "notes")
    path = tmp_path / "bank.json"
    ingested.export(path)
    return path


@pytest.mark.parametrize("answer, reason", [
    ("", "empty"), ("   ", "empty"), (PLACEHOLDER, "placeholder"), ("{{ answer }}", "placeholder"),
    ("[[ ## answer ## ]]", "placeholder"), ("{response_json}", "placeholder"), (NOISE, "not words"),
    (UNRELATED, "shares no word"),
])
def test_what_is_not_an_answer_says_why(answer, reason):
    assert reason in ungrounded(answer, MEMORY)


@pytest.mark.parametrize("answer", [
    "The second Saturday of July", "Port Merrow.", "the Calder", "Yes", "no", "In July, 2024 (every year)",
])
def test_an_answer_that_rests_on_memory_passes(answer):
    assert ungrounded(answer, MEMORY) == ""


def test_with_nothing_to_rest_on_an_answer_is_judged_by_its_form_alone():
    assert ungrounded(UNRELATED, "") == "" and ungrounded(PLACEHOLDER, "") == "a template placeholder"


def test_a_number_alone_is_grounded_by_the_same_number():
    assert ungrounded("84", "The river is about 84 kilometres long.") == ""
    assert "shares no word" in ungrounded("85", "The river is about 84 kilometres long.")


# --- every answer path goes through the check ------------------------------------------------------------

@pytest.mark.parametrize("bad", [PLACEHOLDER, UNRELATED])
def test_the_fast_path_does_not_end_the_run_on_an_ungrounded_answer(config, embedder, bank_file, bad):
    def sufficient_but_bad(call):
        return {**verdict(True)(call), "answer": bad}

    lm = ScriptedLM(**loop_scripts(**{MEMORY_ANSWER: sufficient_but_bad}))
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, bank=bank_file)
    assert result.termination == "goal_met" and result.answer == "The second Saturday of July"
    assert any("the fast path" in e and "not accepted" in e for e in result.errors)


@pytest.mark.parametrize("bad", [PLACEHOLDER, NOISE, UNRELATED])
def test_an_ungrounded_executor_answer_gives_way_to_the_last_answer(config, embedder, bad):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0],
                    **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers(bad)[0],
                       MEMORY_ANSWER: verdict(False), SHORT_ANSWER: lambda call: {"answer": "the second Saturday of July"}})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=FESTIVAL)
    assert result.answer == "the second Saturday of July" and not result.extractive
    assert any("the executor's answer" in e and "not accepted" in e for e in result.errors)


@pytest.mark.parametrize("bad", [PLACEHOLDER, NOISE, UNRELATED])
def test_an_ungrounded_last_answer_falls_back_to_the_extractive_answer(config, embedder, bad):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0],
                    **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers("")[0],
                       MEMORY_ANSWER: verdict(False), SHORT_ANSWER: lambda call: {"answer": bad}})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.extractive and result.termination == "extractive_answer"
    assert result.answer == FESTIVAL and result.citations
    assert any("the last answer" in e and "not accepted" in e for e in result.errors)


def test_under_policy_lm_an_ungrounded_answer_is_no_answer(config, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=lambda call: plans("")[0],
                    **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers(PLACEHOLDER)[0],
                       MEMORY_ANSWER: verdict(False)})
    result = MemoryBank(config.model_copy(update={"policy": "lm"}), lm=lm, embedder=embedder).run(GOAL, context=FESTIVAL)
    assert result.answer == "" and result.termination == "no_answer" and not result.extractive


@pytest.mark.parametrize("bad", ["", PLACEHOLDER, NOISE, UNRELATED])
def test_the_direct_strategy_falls_back_to_the_extractive_answer(config, embedder, bad):
    lm = ScriptedLM(**{SHORT_ANSWER: lambda call: {"answer": bad} if bad else "[[ ## answer ## ]]\n\n"})
    config = config.model_copy(update={"strategy": "direct"})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=f"{FESTIVAL}\n\n{CITY}")
    assert result.extractive and result.termination == "extractive_answer" and result.answer == FESTIVAL
    assert {call.route for call in lm.calls} == {SHORT_ANSWER} and result.citations  # no planning, no ReAct


def test_a_step_answer_that_is_ungrounded_is_not_kept_as_the_runs_answer(config, embedder):
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=plans("Look up the date", ""),
                    **{REACT: [FINISH, FINISH], EXTRACT: answers(PLACEHOLDER, PLACEHOLDER),
                       MEMORY_ANSWER: verdict(False), SHORT_ANSWER: lambda call: {"answer": PLACEHOLDER}})
    result = MemoryBank(config, lm=lm, embedder=embedder).run(GOAL, context=FESTIVAL)
    assert result.answer == FESTIVAL and result.extractive
    assert sum("not accepted" in e for e in result.errors) == 3  # the step, the executor's answer, the last answer


LINES = ["The River Sennet flows through the middle of Marrowick.",
         "The festival takes place every year on the last Saturday of September."]
TWO_PART_GOAL = "Which river flows through Marrowick, and when does the festival take place?"


@pytest.mark.parametrize("answer, reason", [
    ("The River Sennet flows through Marrowick. It takes place on the last Saturday of September.", ""),
    ("The Sennet flows through Marrowick on the last Saturday of September.", "is not in any one line shown"),
    ("The River Sennet flows through the middle of Marrowick.", "no sentence answers 'when does the festival take place'"),
    # a sentence that only repeats the goal rests on no line, so it answers nothing
    ("The River Sennet flows. When does the festival take place?", "no sentence answers 'when does the festival take place'"),
    ("Every year.", "no sentence answers 'Which river flows through Marrowick'"),
    ("Marrowick", ""),  # only the goal's words: nothing copied, nothing invented (a choice, a yes, a no)
    ("Yes.", ""),
    ("No, it does not.", ""),
])
def test_a_tiny_lms_answer_must_copy_the_lines_it_was_shown_and_answer_every_part(answer, reason):
    said = uncopied(answer, LINES, TWO_PART_GOAL)
    assert said.endswith(reason) if reason else said == ""


@pytest.mark.parametrize("goal, answer, answered", [
    ("How many kilometres long is the Sennet?", "It is about 84 kilometres long.", True),
    ("How many kilometres long is the Sennet?", "It is a slow river.", False),
    ("What year was the festival first held?", "The festival was first held in 1887.", True),
    ("What type of river is the Sennet?", "The Sennet is a tidal river.", True),
    ("What type of river is the Sennet?", "The Sennet rises in the Hallow Fells.", False),
    ("Summarise the notes.", "The Sennet rises in the Hallow Fells.", True),  # asks nothing: no part to answer
])
def test_each_question_wants_what_answers_it(goal, answer, answered):
    assert (uncopied(answer, [answer], goal) == "") is answered
