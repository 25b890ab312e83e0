"""An LM for `amb run --lm python:cli_lm:make_lm` in subprocess tests: scripted words, decided by what
each prompt says (not by call order), so a resumed process answers exactly as an uninterrupted one.

``AMB_TEST_PAUSE_IN_LOOP=N`` makes the executor of loop N wait, so a test can kill the process there.
"""

from __future__ import annotations

import os
import re
import time

from scripted_lm import ScriptedLM

TASKS = ["Search the festival", "Search the city"]


def _clusters(call):
    count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
    return {"should_cluster": count > 1,
            "clusters": [{"context": f"topic {i}", "keywords": [f"kw{i}"], "segments": [i]} for i in range(1, count + 1)]}


def _plan(call):
    """The next of TASKS that is neither done nor the one just executed; nothing when all are."""
    seen = {t["description"] for t in call.input_json("completed_tasks")} | {call.inputs.get("executed_task", "")}
    upcoming = [task for task in TASKS if task not in seen]
    return {"executed_status": "success", "executed_context": "found", "next_task": upcoming[0] if upcoming else ""}


def _react(call):
    text = call.messages[-1]["content"]
    pause = os.environ.get("AMB_TEST_PAUSE_IN_LOOP")
    if pause and f"1. {TASKS[int(pause) - 1]}" in text and "observation_0" not in text:
        time.sleep(120)
    if "observation_0" in text or "Pending task:\n(none" in text:
        return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
    query = "festival" if TASKS[0] in text.split("Pending task:")[-1] else "Port Merrow river"
    return {"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": query}}


def make_lm() -> ScriptedLM:
    return ScriptedLM(
        classification=_clusters,
        structure=lambda call: {"summary": call.inputs["content"][: max(1, len(call.inputs["content"]) * 2 // 5)]},
        analysis=lambda call: {"relationships": [{"candidate": c["number"], "relationship": "unrelated", "reasoning": "-"}
                                                 for c in call.input_json("candidates")]},
        planning=_plan,
        **{"next_thought,next_tool_name,next_tool_args": _react,
           "reasoning,answer": lambda call: {"reasoning": "memory", "answer": "July, on the Calder"}},
    )
