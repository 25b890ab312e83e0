"""What a finished task leaves in long-term memory: a long answer is cut to fit with a marker (the task's
memory is not dropped whole), and a fact reads alone (the question with its answer)."""

from __future__ import annotations

from amb_dspy.longterm.checks import MAX_CONTENT_CHARS
from amb_dspy.longterm.remember import remember_task
from amb_dspy.longterm.sqlite import SQLiteStore


def test_a_5_mb_answer_is_cut_to_fit_and_the_task_is_remembered(tmp_path, embedder):
    answer = "The Sennet. " + "x" * 5_000_000
    with SQLiteStore(tmp_path / "lt.sqlite3", embedder) as store:
        outcomes = remember_task(store, namespace="ns", task_id="t", goal="Which river flows through Marrowick?",
                                 answer=answer, completed_tasks=[{"description": "find the river", "status": "success",
                                                                  "context": answer}])
        kinds = {o.item.kind: o.item.content for o in outcomes}
    assert set(kinds) == {"conclusion", "fact", "trajectory"}
    for content in (kinds["conclusion"], kinds["fact"]):
        assert len(content) <= MAX_CONTENT_CHARS and "The Sennet" in content and "more characters cut]" in content


def test_a_remembered_fact_is_its_question_with_its_answer(tmp_path, embedder):
    goal = "Which river flows through Marrowick?"
    with SQLiteStore(tmp_path / "lt.sqlite3", embedder) as store:
        outcomes = remember_task(store, namespace="ns", task_id="t", goal=goal, answer="The Sennet",
                                 completed_tasks=[{"description": goal, "status": "success", "context": "The Sennet"}])
    [fact] = [o.item.content for o in outcomes if o.item.kind == "fact"]
    assert fact == "Which river flows through Marrowick? The Sennet."
