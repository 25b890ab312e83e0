"""`amb run --trace`: one JSON line per progress event, read back by `amb show --trace`.

The whole-run test drives a real MemoryBank (real embeddings, FAISS, corpus, ReAct executor) in which
only the LM's words are scripted, and checks the trace against the run's own result.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest
from scripted_lm import ScriptedLM
from typer.testing import CliRunner

from amb_dspy.bank import MemoryBank, ProgressEvent
from amb_dspy.config import AmbConfig
from amb_dspy.view.trace import (
    TraceError,
    TraceWriter,
    fan_out,
    read_trace,
    trace_record,
)
from cli import app

WIDE = {"COLUMNS": "220"}
REACT = "next_thought,next_tool_name,next_tool_args"
EXTRACT = "reasoning,answer"
FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
CITY = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."


def show(*args: str):
    return CliRunner().invoke(app, ["show", *args], env=WIDE)


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_a_whole_run_traced_agrees_with_its_result(tmp_path, embedder):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    config = AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=3)

    def one_cluster_per_segment(call):
        count = len(re.findall(r"^\[\d+\]", call.inputs["segments"], re.M))
        return {"should_cluster": count > 1, "clusters": [
            {"context": f"topic {i}", "keywords": [f"kw{i}"], "segments": [i]} for i in range(1, count + 1)]}

    lm = ScriptedLM(
        classification=one_cluster_per_segment,
        structure=lambda call: {"summary": call.inputs["content"][: len(call.inputs["content"]) // 2]},
        analysis=lambda call: {"relationships": [
            {"candidate": c["number"], "relationship": "related", "reasoning": "same festival"}
            for c in call.input_json("candidates")]},
        planning=[{"executed_status": "success", "executed_context": "planned", "next_task": t}
                  for t in ("Find the river through Port Merrow", "")],
        **{REACT: [{"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": "river Port Merrow"}},
                   {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}},
                   {"next_thought": "answer", "next_tool_name": "finish", "next_tool_args": {}}],
           EXTRACT: [{"reasoning": "found", "answer": "The Calder"}, {"reasoning": "memory", "answer": "The Calder, in July"}]},
    )
    seen: list[ProgressEvent] = []
    path = tmp_path / "run.jsonl"
    started = time.monotonic()  # the writer's clock starts here, before the bank is made and the run's own clock
    bank = MemoryBank(config, lm=lm, embedder=embedder, progress=fan_out(seen.append, TraceWriter(path)))
    result = bank.run("Which river flows through the festival city?", context=FESTIVAL)
    elapsed = time.monotonic() - started
    assert result.termination == "goal_met", result.errors

    records = read_trace(path)
    assert len(records) == len(seen) and [r["phase"] for r in records] == [e.phase for e in seen]
    assert records[0]["phase"] == "notice" and records[0]["message"].startswith("strategy: loop")  # said first
    assert records[1]["phase"] == "initialise" and records[-1]["phase"] == "done"
    assert {"memorise", "plan", "execute", "answer"} <= {r["phase"] for r in records}
    last = records[-1]
    assert last["lm_calls"] == sum(u["calls"] for u in result.usage.values())
    assert last["tokens"] == sum(u["prompt_tokens"] + u["completion_tokens"] for u in result.usage.values())
    assert (last["nodes"], last["edges"]) == (len(result.query_graph["nodes"]), len(result.query_graph["edges"])) == (2, 1)
    # the deltas add up to the totals, per agent too
    assert sum(r["lm_calls_delta"] for r in records) == last["lm_calls"]
    assert sum(r["tokens_delta"] for r in records) == last["tokens"]
    assert sum(r["nodes_added"] for r in records) == 2 and sum(r["edges_added"] for r in records) == 1
    per_agent: dict[str, int] = {}
    for r in records:
        for agent, calls in r["agent_calls"].items():
            per_agent[agent] = per_agent.get(agent, 0) + calls
    assert per_agent == {agent: u["calls"] for agent, u in result.usage.items()}
    assert [r["loop"] for r in records] == sorted(r["loop"] for r in records)
    assert all(r["seconds_delta"] >= 0 for r in records) and last["seconds"] <= elapsed + 0.5
    assert any(r["phase"] == "execute" and "Find the river" in r["message"] for r in records)

    table = show("--trace", str(path))
    assert table.exit_code == 0, table.output
    assert f"{path}: {len(records)} events" in table.stdout
    assert re.search(r"0\s+│\s+initialise\s", table.stdout) and re.search(r"│\s+done\s", table.stdout)
    assert "planning 1" in table.stdout and "goal_met" in table.stdout


def event(phase: str, loop: int, lm_calls: int, tokens: int, nodes: int, edges: int, **extra):
    usage = extra.pop("usage", {})
    return ProgressEvent(phase=phase, loop=loop, nodes=nodes, edges=edges, conflicts=extra.pop("conflicts", 0),
                         lm_calls=lm_calls, tokens=tokens, message=extra.pop("message", ""), usage=usage)


def test_trace_records_what_changed_since_the_previous_event(tmp_path):
    ticks = iter([100.0, 100.5, 102.0, 103.25])
    writer = TraceWriter(tmp_path / "run.jsonl", clock=lambda: next(ticks))
    writer(event("initialise", 0, 0, 0, 0, 0))
    writer(event("plan", 0, 3, 900, 2, 1, usage={"classification": {"calls": 1}, "structure": {"calls": 2}}))
    writer(event("merge", 1, 5, 1500, 1, 0, conflicts=1, message="merging",
                 usage={"classification": {"calls": 1}, "structure": {"calls": 2}, "integration": {"calls": 2}}))
    records = read_trace(tmp_path / "run.jsonl")
    assert [(r["phase"], r["loop"], r["seconds"], r["seconds_delta"]) for r in records] == [
        ("initialise", 0, 0.5, 0.5), ("plan", 0, 2.0, 1.5), ("merge", 1, 3.25, 1.25)]
    assert [(r["lm_calls"], r["lm_calls_delta"], r["tokens"], r["tokens_delta"]) for r in records] == [
        (0, 0, 0, 0), (3, 3, 900, 900), (5, 2, 1500, 600)]
    assert [(r["nodes"], r["nodes_added"], r["edges"], r["edges_added"]) for r in records] == [
        (0, 0, 0, 0), (2, 2, 1, 1), (1, -1, 0, -1)]
    assert [r["agent_calls"] for r in records] == [{}, {"classification": 1, "structure": 2}, {"integration": 2}]
    assert records[2]["conflicts"] == 1 and records[2]["message"] == "merging"
    assert not any(k.startswith("_") or k == "cache_hits" for r in records for k in r)
    assert [r["fallbacks"] for r in records] == [0, 0, 0]  # the bank's events carry their fallback counts


def test_trace_keeps_cache_hits_and_fallbacks_when_events_carry_them(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class LaterEvent(ProgressEvent):  # what a later issue's ProgressEvent may look like
        cache_hits: int = 0
        fallbacks: int = 0

    counts = {"nodes": 1, "edges": 0, "conflicts": 0}
    first = trace_record(LaterEvent("plan", 0, lm_calls=2, tokens=10, cache_hits=1, fallbacks=0, **counts), None, 1.0)
    second = trace_record(LaterEvent("execute", 1, lm_calls=4, tokens=30, cache_hits=4, fallbacks=1, **counts), first, 2.0)
    assert (second["cache_hits"], second["cache_hits_delta"], second["fallbacks"], second["fallbacks_delta"]) == (4, 3, 1, 1)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) for r in (first, second)))
    result = show("--trace", str(path))
    assert result.exit_code == 0, result.output
    assert re.search(r"conflicts\s+┃\s+cache hits\s+┃\s+fallbacks", result.stdout)
    assert re.search(r"execute\s.*\s4 \(\+3\)\s.*\s1 \(\+1\)", result.stdout)


def test_trace_path_is_checked_before_the_run_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("AMB_STORAGE_DIR", str(tmp_path / "storage"))
    with pytest.raises(TraceError, match="does not exist"):
        TraceWriter(tmp_path / "missing" / "run.jsonl")
    with pytest.raises(TraceError, match="is a folder"):
        TraceWriter(tmp_path)
    result = CliRunner().invoke(app, ["run", "a task", "--trace", str(tmp_path / "missing" / "run.jsonl")])
    assert "folder" in one_line_error(result) and not (tmp_path / "missing").exists()
    # a valid path with a refused task (empty): the writer was made, but no event came, so no file
    result = CliRunner().invoke(app, ["run", "  ", "--lm", "local", "--trace", str(tmp_path / "run.jsonl")])
    assert "the task is empty" in one_line_error(result) and not (tmp_path / "run.jsonl").exists()


@pytest.mark.parametrize("content, expected", [
    ('{"phase": "plan", "loop": 0}\n{"phase": "pl', "line 2: not valid JSON"),
    ('{"phase": "plan"}\n', "line 1: not a trace record"),
    ('[1, 2]\n', "line 1: not a trace record"),
])
def test_bad_trace_files_are_one_line(tmp_path, content, expected):
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    assert expected in one_line_error(show("--trace", str(path)))
    assert "no such trace file" in one_line_error(show("--trace", str(tmp_path / "none.jsonl")))
