"""An LM for `amb run --lm python:resume_lm:make_lm` in kill-and-resume tests: like ``cli_lm`` (words decided
by what each prompt says, so a resumed process answers as an uninterrupted one), but each task makes
three searches, and the local corpus's searches are counted.

* ``AMB_TEST_SEARCH_LOG=FILE``: every query the corpus answered is appended to FILE (one line each, as
  the real corpus search returns), so a test can tell a search made twice.
* ``AMB_TEST_PAUSE_AFTER=N``: the executor step that follows the N-th search of the process writes
  ``FILE.paused`` and sleeps, so a test can kill the run there, mid-loop, after N responses returned.
* ``AMB_TEST_LM_DELAY=S`` / ``AMB_TEST_SEARCH_DELAY=S``: every LM call / search waits S seconds first (a
  bench spreads random kill moments over a run, and over its tool calls).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from cli_lm import TASKS, _clusters, _plan
from scripted_lm import ScriptedLM

from amb_dspy.tools.corpus import LocalCorpus

QUERIES = {TASKS[0]: ["festival", "lantern festival month", "Tidewater harbour"],
           TASKS[1]: ["Port Merrow river", "Calder river", "Festival"]}  # a repeat: the tool cache answers it
_searched = 0
_search = LocalCorpus.search


def _counted_search(self, query, k=10):
    """The real search, its query logged once it has returned (a search killed in flight returned nothing)."""
    global _searched
    time.sleep(float(os.environ.get("AMB_TEST_SEARCH_DELAY", "0")))  # a hosted search's round trip
    results = _search(self, query, k)
    log = os.environ.get("AMB_TEST_SEARCH_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(query + "\n")
    _searched += 1
    return results


LocalCorpus.search = _counted_search


def _delayed(script):
    def call(c):
        time.sleep(float(os.environ.get("AMB_TEST_LM_DELAY", "0")))
        return script(c)
    return call


def _react(call):
    text = call.messages[-1]["content"]
    pause, log = os.environ.get("AMB_TEST_PAUSE_AFTER"), os.environ.get("AMB_TEST_SEARCH_LOG")
    if pause and log and _searched == int(pause):
        Path(log + ".paused").write_text("paused")
        time.sleep(120)
    pending = text.split("Pending task:")[-1]
    task = next((t for t in TASKS if t in pending), None)
    done = sum(f"observation_{i}" in text for i in range(3))
    if task is None or "Pending task:\n(none" in text or done >= 3:
        return {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}
    return {"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": QUERIES[task][done]}}


def make_lm() -> ScriptedLM:
    return ScriptedLM(
        classification=_delayed(_clusters),
        structure=_delayed(lambda call: {"summary": call.inputs["content"][: max(1, len(call.inputs["content"]) * 2 // 5)]}),
        analysis=_delayed(lambda call: {"relationships": [{"candidate": c["number"], "relationship": "unrelated",
                                                           "reasoning": "-"} for c in call.input_json("candidates")]}),
        planning=_delayed(_plan),
        **{"next_thought,next_tool_name,next_tool_args": _delayed(_react),
           "reasoning,answer": _delayed(lambda call: {"reasoning": "memory", "answer": "July, on the Calder"})},
    )
