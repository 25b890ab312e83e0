"""Issue 32: tool failures are errors of the run. When every search and visit of a task failed, the run
does not end goal_met, and each failure is listed in its errors and in the CLI's last lines.

Search backends here are plain objects that fail as a broken backend would; the bank, ReAct, the search
tool, the memory writer and the embedding model run as they are; only the LM's words are scripted.
"""

from __future__ import annotations

import re
from pathlib import Path

import dspy
import pytest
from scripted_lm import ScriptedLM
from test_bank import REACT, compress, one_cluster_per_segment, unrelated
from test_conversion_budget import plan_one_search
from typer.testing import CliRunner

from amb_dspy.bank import MemoryBank
from amb_dspy.cli import app
from amb_dspy.config import AmbConfig
from amb_dspy.tools import SearchResult

GOAL = "When is the Tidewater Lantern Festival held?"
FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."


class Raising:
    def search(self, query, k=10):
        raise RuntimeError("backend exploded")


class Dicts:
    def search(self, query, k=10):
        return [{"title": "t", "url": "https://example.org", "snippet": FESTIVAL}]


class FailsOnce:
    """Fails the first query, answers the second."""

    def __init__(self):
        self.calls = 0

    def search(self, query, k=10):
        self.calls += 1
        if self.calls == 1:
            raise TimeoutError("no answer in 20 s")
        return [SearchResult(title="Festival", url="https://example.org/festival", snippet=FESTIVAL)]


def searches(*queries: str):
    """A ReAct script: each query in turn, one a step, then finish."""
    def react(call):
        done = len(set(re.findall(r"observation_(\d+)", call.messages[-1]["content"])))
        if done >= len(queries):
            return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
        return {"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": queries[done]}}
    return react


def run(tmp_path: Path, embedder, backend, *queries: str):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=2, recall=False)
    lm = ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                    planning=plan_one_search, default=lambda call: {"reasoning": "r", "answer": "in July"},
                    **{REACT: searches(*queries)})
    with dspy.context(lm=lm):
        return MemoryBank(config, lm=lm, embedder=embedder, search=backend).run(GOAL)


@pytest.mark.parametrize("backend, named", [(Raising(), "RuntimeError: backend exploded"), (Dicts(), "dict result")])
def test_a_run_whose_every_search_failed_does_not_end_goal_met(tmp_path, embedder, backend, named):
    result = run(tmp_path, embedder, backend, "lantern festival date")
    assert result.termination == "tools_failed"
    failures = [e for e in result.errors if e.startswith("search(")]
    assert failures and all(named in e for e in failures)
    assert "every search and visit of this task failed" in result.errors[-1]


def test_one_failed_search_among_good_ones_is_listed_and_the_goal_can_be_met(tmp_path, embedder):
    result = run(tmp_path, embedder, FailsOnce(), "lantern festival", "lantern festival date")
    assert result.termination == "goal_met" and result.query_graph["nodes"]
    assert any("TimeoutError: no answer in 20 s" in e for e in result.errors)


def test_a_tool_that_raises_is_recorded_as_a_failed_call(embedder):
    from amb_dspy.task.executor import Executor

    def search(query: str) -> str:
        raise ValueError("broken tool")

    lm = ScriptedLM(**{REACT: searches("festival"), "reasoning,answer": [{"reasoning": "r", "answer": "?"}]})
    with dspy.context(lm=lm):
        result = Executor([dspy.Tool(search, name="search")], max_iters=3)(enhanced_prompt="<task>q</task>")
    [call] = result.tool_calls
    assert call.is_error and "ValueError: broken tool" in call.observation


def test_the_cli_lists_the_failures_in_its_last_lines(tmp_path, monkeypatch):
    for name, value in {"AMB_STORAGE_DIR": tmp_path / "storage", "AMB_TEMP_DIR": tmp_path / "temp",
                        "AMB_RECALL": "0"}.items():
        monkeypatch.setenv(name, str(value))
    for name in ("SERPER_API_KEY", "AMB_SERPER_API_KEY", "AMB_CORPUS"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, ["run", "Which river flows through Port Merrow?", "--lm", "python:cli_lm:make_lm"])
    assert "termination: tools_failed" in result.output
    last_lines = " ".join(result.output.split())  # the console wraps long lines
    assert 'note: search({"query": "festival"}) failed: Error: no search backend is configured' in last_lines
    assert "note: every search and visit of this task failed" in last_lines


def test_a_resumed_run_keeps_the_count_of_its_failed_calls(tmp_path, embedder):
    from amb_dspy.memory.graph_ops import MemoryStore
    from amb_dspy.storage import InsightDoc
    from amb_dspy.task.checkpoint import read_checkpoint, write_checkpoint
    from amb_dspy.task.state import RunState
    from amb_dspy.task.tool_failures import tool_termination

    store = MemoryStore(embedder, InsightDoc(task_goal=GOAL))
    state = RunState(doc_id=store.insight_doc.doc_id, tool_calls=2, tool_failures=2)
    write_checkpoint(tmp_path, state, {}, store)
    resumed, _usage, _store = read_checkpoint(tmp_path, embedder)
    assert (resumed.tool_calls, resumed.tool_failures) == (2, 2)
    assert tool_termination(resumed, "goal_met") == "tools_failed"
