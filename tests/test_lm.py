"""LM backends without a model: spec resolution, hosted LM construction, bad specs, usage metering.

A scripted engine stands in for the LM's words; it reports usage as whitespace-separated words so
that the meter's token counts can be checked against what the engine actually reported.
"""

import uuid

import dspy
import pytest
from dspy import lm15
from dspy.utils import DummyLM

from amb_dspy.agents.chunking import estimate_tokens, token_counter_for
from amb_dspy.config import DEFAULT_LM, AmbConfig
from amb_dspy.lm import (
    LOCAL_NOTICE,
    AgentLMs,
    LMCallCapReached,
    LMConfigError,
    UsageMeter,
    adapter_for,
    build_lm,
    prompt_budget,
    resolve_lm_spec,
)

LM_ENV = (
    "AMB_LM", "AMB_AGENT_LMS", "LLM_API_KEY", "AMB_LLM_API_KEY", "LLM_BASE_URL", "AMB_LLM_BASE_URL",
    "DEEPSEEK_API_KEY", "OPENAI_API_KEY",
)


@pytest.fixture(autouse=True)
def clean_lm_env(monkeypatch):
    for name in LM_ENV:
        monkeypatch.delenv(name, raising=False)


class ScriptedEngine:
    """Answers from a script, one per request, and records the usage it reports."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []
        self.reported = []

    def complete(self, request):
        self.requests.append(request)
        text = self.answers[(len(self.requests) - 1) % len(self.answers)]
        system = request.system if isinstance(request.system, str) else ""
        prompt_words = len(system.split()) + sum(len((m.text or "").split()) for m in request.messages)
        usage = lm15.Usage(input_tokens=prompt_words, output_tokens=len(text.split()))
        self.reported.append(usage)
        return lm15.Response(id=None, model=request.model, message=lm15.Message.assistant(text),
                             finish_reason="stop", usage=usage)

    def stream(self, request):
        return lm15.response_to_events(self.complete(request))

    def close(self):
        pass


def scripted_lm(*answers, cache=False):
    engine = ScriptedEngine(answers)
    return dspy.LM("scripted/words", engine=engine, cache=cache), engine


def ask(question):
    return dspy.Predict("question -> answer")(question=question)


# --- spec resolution ----------------------------------------------------------------------------


def test_default_lm_without_a_key_falls_back_to_local_with_a_one_line_notice():
    config = AmbConfig()
    assert config.lm == DEFAULT_LM
    spec, notice = resolve_lm_spec(config)
    assert spec == "local"
    assert notice == LOCAL_NOTICE and "\n" not in notice and "weak" in notice


@pytest.mark.parametrize("env", [
    {"DEEPSEEK_API_KEY": "sk-deepseek"},
    {"LLM_API_KEY": "sk-generic"},
    {"AMB_LLM_API_KEY": "sk-generic"},
    {"LLM_BASE_URL": "http://localhost:8000/v1"},
])
def test_default_lm_with_credentials_is_kept(monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert resolve_lm_spec(AmbConfig()) == (DEFAULT_LM, None)


@pytest.mark.parametrize("chosen", ["openai/gpt-4o-mini", "ollama_chat/llama3", "local", "gguf:/models/x.gguf"])
def test_a_chosen_lm_is_used_as_given(monkeypatch, chosen):
    monkeypatch.setenv("AMB_LM", chosen)
    assert resolve_lm_spec(AmbConfig()) == (chosen, None)


# --- hosted LMs ---------------------------------------------------------------------------------


def test_hosted_lm_takes_key_base_url_and_sampling_from_config(monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-generic")
    monkeypatch.setenv("LLM_BASE_URL", "https://llm.example/v1")
    config = AmbConfig(temperature=0.2, max_tokens=777)
    lm = build_lm("openai/gpt-4o-mini", config)
    assert isinstance(lm, dspy.LM) and lm.model == "openai/gpt-4o-mini"
    assert lm.kwargs["api_key"] == "sk-generic"
    assert lm.kwargs["api_base"] == "https://llm.example/v1"
    assert lm.kwargs["temperature"] == 0.2 and lm.kwargs["max_tokens"] == 777
    assert "api_key" not in lm.dump_state()
    assert isinstance(adapter_for(lm), dspy.ChatAdapter) and not isinstance(adapter_for(lm), dspy.JSONAdapter)
    assert token_counter_for(lm) is estimate_tokens and prompt_budget(lm) is None


def test_deepseek_uses_its_own_key_when_no_generic_key_is_set(monkeypatch):
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-deepseek")
    lm = build_lm(DEFAULT_LM, AmbConfig())
    assert lm.kwargs["api_key"] == "sk-deepseek"
    monkeypatch.setenv("LLM_API_KEY", "sk-generic")
    assert build_lm(DEFAULT_LM, AmbConfig()).kwargs["api_key"] == "sk-generic"


def test_hosted_lm_without_settings_passes_no_connection_options():
    lm = build_lm("ollama_chat/llama3", AmbConfig())
    assert "api_key" not in lm.kwargs and "api_base" not in lm.kwargs


# --- bad specs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, message", [
    ("", "empty LM spec"),
    ("   ", "empty LM spec"),
    ("gguf:", "needs a path"),
    ("gguf:/no/such/model.gguf", "GGUF file not found: /no/such/model.gguf"),
    ("openai/", "cannot use LM 'openai/'"),
])
def test_bad_specs_fail_with_one_line(spec, message):
    with pytest.raises(LMConfigError) as info:
        build_lm(spec, AmbConfig())
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    with pytest.raises(LMConfigError, match=r"^not a GGUF file: .*model\.gguf$"):
        build_lm(f"gguf:{fake}", AmbConfig())


# --- usage metering -----------------------------------------------------------------------------


def test_meter_counts_calls_and_reported_tokens_per_agent():
    lm, engine = scripted_lm('{"answer": "Paris is the capital"}', '{"answer": "Rome"}')
    meter = UsageMeter()
    with meter.counting():
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            with meter.track("analysis"):
                assert ask("Capital of France?").answer == "Paris is the capital"
                assert ask("Capital of Italy?").answer == "Rome"
            ask("Anything else?")

        reported = engine.reported
        assert len(reported) == 3
        assert meter.usage() == {
            "analysis": {
                "calls": 2,
                "prompt_tokens": reported[0].input_tokens + reported[1].input_tokens,
                "completion_tokens": reported[0].output_tokens + reported[1].output_tokens,
            },
            "executor": {"calls": 1, "prompt_tokens": reported[2].input_tokens, "completion_tokens": reported[2].output_tokens},
        }
        assert reported[0].output_tokens == 5  # the engine's count, carried through DSPy unchanged
        total = meter.total()
        assert total["calls"] == 3 == meter.calls
        assert total["prompt_tokens"] == sum(u.input_tokens for u in reported) > 0
        assert meter.report() == {"agents": meter.usage(), "total": total}


def test_nested_tracking_attributes_to_the_innermost_agent_and_restores():
    lm, _ = scripted_lm('{"answer": "x"}')
    meter = UsageMeter()
    with meter.counting():
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            with meter.track("planning"):
                with meter.track("structure"):
                    ask("one")
                ask("two")
        assert {agent: u["calls"] for agent, u in meter.usage().items()} == {"planning": 1, "structure": 1}


def test_meter_attached_and_configured_globally_counts_each_call_once():
    lm, _ = scripted_lm('{"answer": "x"}')
    meter = UsageMeter()
    lm.callbacks.append(meter)  # a user may register it on the LM too
    with meter.counting(), meter.counting():
        assert dspy.settings.callbacks.count(meter) == 1
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            ask("one")
    assert meter.calls == 1


def test_explicit_request_calls_are_metered_from_the_response():
    lm, engine = scripted_lm("three words here")
    meter = UsageMeter()
    with meter.counting():
        request = lm15.Request(model=lm.model, messages=(lm15.Message.user("a b c d"),))
        with meter.track("integration"):
            response = lm(request)
        assert response.text == "three words here"
        assert meter.usage() == {"integration": {"calls": 1, "prompt_tokens": 4, "completion_tokens": 3}}


def test_cache_hits_count_as_calls_without_tokens():
    lm, engine = scripted_lm('{"answer": "cached"}', cache=True)
    meter = UsageMeter()
    with meter.counting():
        question = f"unique question {uuid.uuid4()}"  # never in DSPy's disk cache from an earlier run
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            ask(question)
            ask(question)
        assert len(engine.requests) == 1
        usage = meter.usage()["executor"]
        assert usage["calls"] == 2
        assert usage["prompt_tokens"] == engine.reported[0].input_tokens


def test_meter_works_with_dspy_dummy_lm():
    lm = DummyLM([{"answer": "a"}, {"answer": "b"}])
    meter = UsageMeter()
    with meter.counting():
        with dspy.context(lm=lm):
            with meter.track("classification"):
                ask("q1")
            ask("q2")
        assert {agent: u["calls"] for agent, u in meter.usage().items()} == {"classification": 1, "executor": 1}


    # --- the cap on LM calls ------------------------------------------------------------------------


def test_cap_stops_the_call_after_the_last_allowed_one_before_it_is_sent():
    lm, engine = scripted_lm('{"answer": "x"}')
    meter = UsageMeter(max_calls=2)
    with meter.counting():
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            ask("one")
            assert meter.calls == 1 < meter.max_calls
            ask("two")
            assert meter.calls == meter.max_calls
            with pytest.raises(LMCallCapReached, match="LM call cap reached: 2 calls") as info:
                ask("three")
        assert info.value.cap == 2
        assert len(engine.requests) == 2
        assert meter.calls == 2


def test_cap_passes_through_code_that_catches_exception():
    lm, engine = scripted_lm('{"answer": "x"}')
    meter = UsageMeter(max_calls=1)
    with meter.counting():

        def agent_that_swallows_errors(question):
            try:
                return ask(question)
            except Exception:  # an agent turning LM trouble into its own error must not hide the cap
                return None

        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            assert agent_that_swallows_errors("one") is not None
            with pytest.raises(LMCallCapReached):
                agent_that_swallows_errors("two")
        assert len(engine.requests) == 1


    # --- per-agent LMs ------------------------------------------------------------------------------


def test_agent_lms_from_config_share_one_lm_per_spec(monkeypatch):
    monkeypatch.setenv("LLM_API_KEY", "sk-generic")
    config = AmbConfig(agent_lms={"analysis": "openai/gpt-4o-mini", "integration": "openai/gpt-4o-mini",
                                  "planning": DEFAULT_LM})
    lms = AgentLMs.from_config(config)
    assert lms.notice is None
    assert lms.main.model == DEFAULT_LM
    assert lms.for_agent("analysis").model == "openai/gpt-4o-mini"
    assert lms.for_agent("analysis") is lms.for_agent("integration")
    assert lms.for_agent("planning") is lms.main and lms.for_agent("structure") is lms.main
    assert len(lms.all()) == 2


def test_counting_meters_every_lm_called_in_its_block_and_no_other():
    main, _ = scripted_lm('{"answer": "main"}')
    special, _ = scripted_lm('{"answer": "special"}')
    lms = AgentLMs(main, {"analysis": special})
    run, other_run = UsageMeter(), UsageMeter()
    with run.counting():
        with lms.use("analysis"), dspy.context(adapter=dspy.JSONAdapter()):
            ask("q1")
        with lms.use("structure"), dspy.context(adapter=dspy.JSONAdapter()):
            ask("q2")
    with other_run.counting(), lms.use("analysis"), dspy.context(adapter=dspy.JSONAdapter()):
        ask("q3")  # the same LM object, another run: counted there only
    assert {agent: u["calls"] for agent, u in run.usage().items()} == {"analysis": 1, "structure": 1}
    assert other_run.calls == 1 and not main.callbacks and not special.callbacks


def test_agent_lms_use_sets_lm_adapter_and_meters_as_the_agent():
    main, main_engine = scripted_lm('{"answer": "from main"}')
    special, special_engine = scripted_lm('{"answer": "from special"}')
    meter = UsageMeter()
    lms = AgentLMs(main, {"analysis": special})
    with meter.counting(), lms.use("analysis") as lm:
        assert lm is special and dspy.settings.lm is special
        assert isinstance(dspy.settings.adapter, dspy.ChatAdapter)
        special_engine.answers = ["[[ ## answer ## ]]\nfrom special\n\n[[ ## completed ## ]]"]
        assert ask("q").answer == "from special"
    with lms.use("structure"):
        assert dspy.settings.lm is main
    assert dspy.settings.lm is not special
    assert meter.usage()["analysis"]["calls"] == 1 and len(main_engine.requests) == 0
