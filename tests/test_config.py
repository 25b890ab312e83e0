"""Configuration in sections: every name users set today still works, and only the config package touches
the environment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from amb_dspy.config import AmbConfig, EmbeddingSettings, LoopSettings, RankWeights

# Every setting of the flat AmbConfig of the previous release: its name, a value as an environment variable
# would hold it, the value it must read back as, and the section that now holds it. Written out by hand, so
# that a setting dropped or moved by mistake fails here.
SETTINGS = [
    ("lm", "openai/gpt-4o-mini", "openai/gpt-4o-mini", "models"),
    ("agent_lms", '{"answer": "openai/gpt-4o"}', {"answer": "openai/gpt-4o"}, "models"),
    ("llm_api_key", "sk-1", "sk-1", "models"),
    ("llm_base_url", "http://localhost:1", "http://localhost:1", "models"),
    ("temperature", "0.1", 0.1, "models"),
    ("max_tokens", "512", 512, "models"),
    ("lm_threads", "3", 3, "models"),
    ("policy", "heuristic", "heuristic", "models"),
    ("ingest_batch", "4", 4, "agents"),
    ("ingest_analysis", "ordered", "ordered", "agents"),
    ("retrieval_k", "7", 7, "retrieval"),
    ("retrieval_alpha", "0.25", 0.25, "retrieval"),
    ("memory_view", "summary", "summary", "view"),
    ("memory_tokens", "700", 700, "view"),
    ("bank_cache", "2", 2, "view"),
    ("rank_weights", '{"node_weight": 0.4, "spread_seeds": 2}', RankWeights(node_weight=0.4, spread_seeds=2), "view"),
    ("embedding_batch_size", "5", 5, "embedding"),
    ("embedder", "openai/text-embedding-3-small", "dspy:openai/text-embedding-3-small", "embedding"),
    ("embedding_backend", "onnx", "onnx", "embedding"),
    ("embedding_precision", "float32", "float32", "embedding"),
    ("embedding_workers", "1", 1, "embedding"),
    ("embedding_node_vectors", "whole", "whole", "embedding"),
    ("serper_api_key", "serp", "serp", "tools"),
    ("jina_api_key", "jina", "jina", "tools"),
    ("tool_cache", "0", False, "tools"),
    ("search_k", "3", 3, "tools"),
    ("corpus", "data/corpus", Path("data/corpus"), "tools"),
    ("http_timeout_s", "2.5", 2.5, "tools"),
    ("visit_max_chars", "1000", 1000, "tools"),
    ("allow_private_urls", "1", True, "tools"),
    ("max_observation_chars", "900", 900, "tools"),
    ("max_convert_chars", "900", 900, "tools"),
    ("corpus_cache", "0", False, "tools"),
    ("react_max_iters", "2", 2, "executor"),
    ("max_context_tokens", "9000", 9000, "executor"),
    ("fast_path", "0", False, "executor"),
    ("strategy", "direct", "direct", "executor"),
    ("classification_window", "4000", 4000, "agents"),
    ("structure_window", "4100", 4100, "agents"),
    ("analysis_window", "4200", 4200, "agents"),
    ("integration_window", "4300", 4300, "agents"),
    ("planning_window", "4400", 4400, "agents"),
    ("answer_window", "4500", 4500, "agents"),
    ("chunk_ratio", "0.5", 0.5, "agents"),
    ("topic_min_tokens", "40", 40, "agents"),
    ("topic_max_tokens", "200", 200, "agents"),
    ("max_context_bytes", "2000", 2000, "limits"),
    ("max_loops", "2", 2, "loops"),
    ("max_lm_calls", "40", 40, "loops"),
    ("max_merge_rounds", "1", 1, "loops"),
    ("longterm_backend", "qdrant", "qdrant", "longterm"),
    ("longterm_url", "http://localhost:6333", "http://localhost:6333", "longterm"),
    ("longterm_api_key", "qk", "qk", "longterm"),
    ("longterm_dual_write", "1", True, "longterm"),
    ("longterm_max_tokens", "300", 300, "longterm"),
    ("longterm_router", "lm", "lm", "longterm"),
    ("remember", "1", True, "longterm"),
    ("recall", "0", False, "longterm"),
    ("redact", "1", True, "longterm"),
    ("namespace", "alice", "alice", "longterm"),
    ("storage_dir", "s", Path("s"), "paths"),
    ("database_url", "postgresql://amb@db/memory", "postgresql://amb@db/memory", "paths"),
    ("checkpoint_dir", "c", Path("c"), "paths"),
    ("temp_dir", "t", Path("t"), "paths"),
    ("cache_dir", "k", Path("k"), "paths"),
]
IDS = [name for name, *_ in SETTINGS]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """No AMB_* variable (or spec name) of the machine running the tests leaks into them."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("AMB_") or name.upper() in {"LLM_API_KEY", "LLM_BASE_URL", "SERPER_API_KEY",
                                                                "JINA_API_KEY"}:
            monkeypatch.delenv(name)


def test_the_table_covers_every_setting():
    from amb_dspy.config import FLAT_NAMES

    assert sorted(FLAT_NAMES) == sorted(IDS)


@pytest.mark.parametrize(("name", "raw", "value", "section"), SETTINGS, ids=IDS)
def test_each_environment_variable_reads_back_from_its_section(monkeypatch, name, raw, value, section):
    monkeypatch.setenv(f"AMB_{name.upper()}", raw)
    config = AmbConfig()
    assert getattr(getattr(config, section), name) == value
    assert getattr(config, name) == value  # the flat spelling reads the same field


@pytest.mark.parametrize(("name", "raw", "value", "section"), SETTINGS, ids=IDS)
def test_each_keyword_argument_lands_in_its_section(name, raw, value, section):
    config = AmbConfig(**{name: value})
    assert getattr(getattr(config, section), name) == value
    assert getattr(config, name) == value


@pytest.mark.parametrize("name", ["llm_api_key", "llm_base_url", "serper_api_key", "jina_api_key"])
def test_the_specs_unprefixed_names_work_and_the_prefixed_one_wins(monkeypatch, name):
    monkeypatch.setenv(name.upper(), "plain")
    assert getattr(AmbConfig(), name) == "plain"
    monkeypatch.setenv(f"AMB_{name.upper()}", "prefixed")
    assert getattr(AmbConfig(), name) == "prefixed"


def test_a_keyword_argument_beats_the_environment_and_leaves_the_rest_of_its_section_to_it(monkeypatch):
    monkeypatch.setenv("AMB_MAX_LOOPS", "3")
    monkeypatch.setenv("AMB_MAX_LM_CALLS", "30")
    config = AmbConfig(max_loops=2, policy="heuristic")
    assert (config.loops.max_loops, config.loops.max_lm_calls, config.models.policy) == (2, 30, "heuristic")


def test_a_section_given_whole_or_in_part(monkeypatch):
    monkeypatch.setenv("AMB_EMBEDDING_BATCH_SIZE", "6")
    assert EmbeddingSettings().embedding_batch_size == 6  # a section alone reads its variables too
    config = AmbConfig(embedding=EmbeddingSettings(embedding_backend="onnx"), embedding_batch_size=2)
    assert (config.embedding.embedding_backend, config.embedding.embedding_batch_size) == ("onnx", 2)
    assert AmbConfig(loops={"max_loops": 4}).loops == LoopSettings(max_loops=4)


def test_model_copy_with_flat_names_changes_a_copy_of_the_section_only():
    config = AmbConfig()
    copy = config.model_copy(update={"checkpoint_dir": Path("ck"), "max_loops": 1})
    assert (copy.checkpoint_dir, copy.paths.checkpoint_dir, copy.loops.max_loops) == (Path("ck"), Path("ck"), 1)
    assert (config.checkpoint_dir, config.max_loops) == (None, 8)
    assert copy.models is config.models  # untouched sections are shared, as model_copy always did


def test_setting_a_flat_name_does_not_reach_a_copy():
    config = AmbConfig()
    copy = config.model_copy(update={"namespace": "bob"})
    copy.retrieval_k = 9
    assert (copy.retrieval.retrieval_k, config.retrieval_k) == (9, 5)


def test_bad_values_and_unknown_names():
    with pytest.raises(ValueError, match="lm_threads"):
        AmbConfig(lm_threads=0)
    with pytest.raises(ValueError, match="unknown agent"):
        AmbConfig(agent_lms={"nobody": "x"})
    with pytest.raises(AttributeError):
        _ = AmbConfig().no_such_setting
    assert AmbConfig(ingest_analysis="exact").ingest_analysis == "ordered"  # the previous release's name
    assert AmbConfig(answer_window=1234).window("answer") == 1234


def test_the_rank_weights_default_to_the_tuned_values_and_refuse_an_unknown_or_negative_weight(monkeypatch):
    weights = AmbConfig().view.rank_weights
    assert (weights.node_weight, weights.hop_weight, weights.context_weight, weights.spread_weight, weights.spread_seeds,
            weights.flat_share, weights.ask_weight, weights.bridge_weight, weights.other_weight,
            weights.summary_lines) == (0.3, 0.5, 0.5, 0.3, 3, 0.3, 0.5, 1.0, 0.7, 3)
    assert all(field.description for field in RankWeights.model_fields.values())  # each weight documented, once
    with pytest.raises(ValueError, match="node_wieght"):
        AmbConfig(rank_weights={"node_wieght": 0.4})
    monkeypatch.setenv("AMB_RANK_WEIGHTS", '{"flat_share": -0.1}')
    with pytest.raises(ValueError, match="flat_share"):
        AmbConfig()


# What touches the process environment: os.environ, os.getenv, os.putenv, os.unsetenv (and `from os import ...`).
_ENVIRONMENT_ACCESS = re.compile(r"\b(?:environ|getenv|putenv|unsetenv)\b")


def test_only_the_config_package_touches_the_environment():
    package = Path(__file__).resolve().parent.parent / "amb_dspy"
    allowed = package / "config"
    offenders = [f"{path.relative_to(package.parent)}:{number}: {line.strip()}"
                 for path in sorted(package.rglob("*.py")) if allowed not in path.parents
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _ENVIRONMENT_ACCESS.search(line)]
    assert not offenders, "the environment is read or written outside amb_dspy/config:\n" + "\n".join(offenders)
