"""Issue 24 item 2: a run killed in the middle of a loop's tool calls and resumed loses no tool response
and calls no tool twice: the calls made before the kill are answered from the checkpoint folder's tool
journal, and the tool cache of the completed loops is rebuilt. Real `amb run` processes, SIGKILLed; the
real corpus search counts the queries that reach it. Only the LM's words are scripted (tests/resume_lm.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from test_provenance import _canonical

ROOT = Path(__file__).resolve().parent.parent
TASK = "When is the Tidewater Lantern Festival?"


def amb(args, tmp_path, log: Path, extra_env=None):
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}:{ROOT}", "AMB_STORAGE_DIR": str(tmp_path / "storage"),
           "AMB_TEMP_DIR": str(tmp_path / "temp"), "AMB_CORPUS": str(ROOT / "datasets" / "demo"),
           "HF_HUB_OFFLINE": "1", "AMB_TEST_SEARCH_LOG": str(log), **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-c", "from cli import app; app()", "run", *args, "--lm",
                             "python:resume_lm:make_lm"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def searches(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("whole")
    log = tmp_path / "searches.log"
    run = amb([TASK, "--checkpoint", str(tmp_path / "cp"), "--export", str(tmp_path / "bank.json")], tmp_path, log)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    return {"bank": _canonical(tmp_path / "bank.json"), "searches": searches(log), "answer": out.strip().splitlines()[-1]}


# in loop 1 before its checkpoint; in loop 2 after loop 1's, before and after the tool cache's repeat
@pytest.mark.parametrize("kill_after", [1, 4, 5])
def test_a_run_killed_mid_loop_resumes_without_losing_or_repeating_a_tool_call(tmp_path, whole, kill_after):
    assert len(whole["searches"]) == 5 and len(set(whole["searches"])) == 5  # the sixth query is a cache repeat
    log, checkpoint = tmp_path / "searches.log", tmp_path / "cp"
    killed = amb([TASK, "--checkpoint", str(checkpoint)], tmp_path, log, {"AMB_TEST_PAUSE_AFTER": str(kill_after)})
    paused = Path(str(log) + ".paused")
    deadline = time.monotonic() + 240
    while not paused.is_file():
        assert killed.poll() is None, killed.stderr.read()
        assert time.monotonic() < deadline, "the run never reached the kill point"
        time.sleep(0.1)
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    assert len(searches(log)) == kill_after
    journal = [json.loads(line) for line in (checkpoint / "tool_calls.jsonl").read_text().splitlines()]
    assert [r["args"]["query"] for r in journal] == searches(log)  # every response on disk before the kill

    resumed = amb(["--resume", str(checkpoint), "--export", str(tmp_path / "resumed.json")], tmp_path, log)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert out.strip().splitlines()[-1] == whole["answer"]
    made = searches(log)
    assert Counter(made) == Counter(whole["searches"])  # no search made twice, none missing
    assert _canonical(tmp_path / "resumed.json") == whole["bank"]  # every response in memory, as uninterrupted


def test_the_journal_drops_a_line_cut_by_the_kill_and_keeps_unasked_responses_in_memory(tmp_path, embedder):
    import dspy

    from amb_dspy.memory.graph_ops import MemoryStore
    from amb_dspy.storage import InsightDoc
    from amb_dspy.task.journal import JOURNAL_FILE, ToolJournal, keep_unasked
    from amb_dspy.task.tool_cache import ToolCache

    backend: list[str] = []

    def search(query: str) -> str:
        backend.append(query)
        return f"results for {query}"

    first = ToolJournal(tmp_path)
    tool = first.wrap(dspy.Tool(search, name="search"))
    assert tool(query="a") == "results for a" and tool(query="b") == "results for b"
    with (tmp_path / JOURNAL_FILE).open("a") as out:
        out.write('{"name": "search", "args": {"query": "c"}, "sho')  # the kill cut this line short

    again = ToolJournal(tmp_path, replay_after=0)  # resumed from a checkpoint written before both calls
    assert again.lines == 2 and len((tmp_path / JOURNAL_FILE).read_text().splitlines()) == 2
    tool = again.wrap(dspy.Tool(search, name="search"))
    assert tool(query="b") == "results for b" and backend == ["a", "b"]  # replayed, not called
    store = MemoryStore(embedder, InsightDoc(task_goal="g"))
    cache = ToolCache(store)
    keep_unasked(again, store, cache)  # "a" was not asked again: kept as an entry the cache answers from
    (entry,) = store.tree.entries.values()
    assert entry.text == "results for a" and "conversion_failed" in entry.metadata
    cached = cache.wrap(dspy.Tool(search, name="search"))
    assert "results for a" in cached(query="A") and backend == ["a", "b"]
    assert again.unasked() == []
