"""One bank runs several tasks at once: each task is a session of its own, and the bank holds none of them.

Two tasks run on one bank from two threads must give the same answers and the same memories (graph and
tree contents) as the same two tasks run one after the other. The LM's words are scripted by what each
prompt asks (never by the order of calls, which threads interleave); the embedding model, FAISS, the
corpus, the ReAct executor and the agents' code are real.
"""

from __future__ import annotations

import threading

import dspy
from scripted_lm import ScriptedLM
from test_bank import CITY, EXTRACT, FESTIVAL, REACT, compress, corpus, one_cluster_per_segment, unrelated  # noqa: F401

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig

TASKS = {
    "Which river flows through Port Merrow?": ("river Port Merrow", CITY, "The Calder"),
    "When is the Tidewater Lantern Festival held?": ("Tidewater Lantern Festival", FESTIVAL, "In July"),
}


def _task_of(text: str) -> str:
    return next(goal for goal in TASKS if goal in text)


def planning(call):
    """One search task per goal, then done."""
    goal = call.inputs["task_goal"]
    executed = call.inputs["executed_task"].strip()
    return {"executed_status": "success", "executed_context": f"done: {executed or 'nothing yet'}",
            "next_task": "" if executed else f"Search for {TASKS[_task_of(goal)][0]}"}


def react(call):
    """Search once for the task's subject, then finish."""
    if "observation_0" in call.prompt_text:
        return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
    query = TASKS[_task_of(call.prompt_text)][0]
    return {"next_thought": "look it up", "next_tool_name": "search", "next_tool_args": {"query": query}}


def extract(call):
    return {"reasoning": "from the evidence", "answer": TASKS[_task_of(call.prompt_text)][2]}


def scripted_lm() -> ScriptedLM:
    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                      planning=planning, **{REACT: react, EXTRACT: extract})


def memories(result) -> tuple:
    """A run's answer, memory contents and LM calls per agent (each task meters its own), without the random
    ids, the timings and the token counts (the scripted LM's counts vary with the random node ids it is shown)."""
    nodes = sorted((n["summary"], n["context"], tuple(n["keywords"])) for n in result.query_graph["nodes"])
    entries = sorted(e["text"] for e in result.interaction_tree["entries"])
    tasks = [(t["type"], t["description"], t["status"]) for t in result.insight_doc["completed_tasks"]]
    hops = [(h["kind"], h["task"], h["success"], h["lm_calls"]) for h in result.hops]
    return (result.answer, result.termination, nodes, entries, tasks, len(result.query_graph["edges"]), hops,
            {agent: usage["calls"] for agent, usage in result.usage.items()}, result.fallbacks, result.errors)


def test_two_tasks_on_one_bank_at_once_equal_two_runs_one_after_the_other(tmp_path, corpus, embedder):  # noqa: F811
    config = AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=4,
                       policy="lm", fast_path=False)
    bank = MemoryBank(config, lm=scripted_lm(), embedder=embedder)
    sequential = {goal: memories(bank.run(goal, context=context)) for goal, (_, context, _) in TASKS.items()}

    lm = scripted_lm()
    shared = MemoryBank(config, lm=lm, embedder=embedder)
    concurrent: dict[str, tuple] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(len(TASKS))

    def run(goal: str, context: str) -> None:
        try:
            start.wait()
            with dspy.context():  # each thread its own DSPy settings, as a server's would be
                concurrent[goal] = memories(shared.run(goal, context=context))
        except BaseException as exc:  # noqa: BLE001 - reported below, on the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(goal, context)) for goal, (_, context, _) in TASKS.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not failures, failures
    assert concurrent == sequential
    assert {goal: answer for goal, (answer, *_) in concurrent.items()} == {g: a for g, (_, _, a) in TASKS.items()}
    # both tasks' calls reached the one LM the shared bank holds
    goals_asked = {_task_of(c.prompt_text) for c in lm.calls if c.route == "planning"}
    assert goals_asked == set(TASKS)
