"""The DSPy and llama.cpp internals amb-dspy relies on (see amb_dspy/internals.py), checked against the
installed versions. A failure here names the function to update after an upgrade."""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
from typing import Any

import dspy
import pytest
from test_lm import ScriptedEngine

from amb_dspy.internals import json_adapter_prepare_response_format, reported_usage

UPGRADE = "the installed {lib} changed {what}: update amb_dspy/{where}"


class OpenMapping(dspy.Signature):
    """Like ReAct's step: an open-ended mapping among the outputs."""

    question: str = dspy.InputField()
    args: dict[str, Any] = dspy.OutputField()


def test_json_adapter_hook_writes_the_response_format():
    hook = getattr(dspy.JSONAdapter, "_prepare_response_format", None)
    assert callable(hook), UPGRADE.format(lib="DSPy", what="JSONAdapter._prepare_response_format",
                                          where="internals.py and lm/grammar_adapter.py (GrammarJSONAdapter)")
    assert list(inspect.signature(hook).parameters) == ["self", "lm", "lm_kwargs", "signature"], UPGRADE.format(
        lib="DSPy", what="the arguments of JSONAdapter._prepare_response_format", where="internals.py")
    class StructuredEngine(ScriptedEngine):  # what the embedded engine declares
        supports_response_schema = True
        supported_params = frozenset({"response_format", "temperature", "max_tokens"})

    lm = dspy.LM("scripted/words", engine=StructuredEngine(['{"answer": "x"}']), cache=False)
    kwargs: dict = {}
    json_adapter_prepare_response_format(dspy.JSONAdapter(), lm, kwargs, OpenMapping)
    assert kwargs.get("response_format") == {"type": "json_object"}, UPGRADE.format(
        lib="DSPy", what="how JSONAdapter chooses a response format for an open mapping", where="lm/grammar_adapter.py")


def test_usage_of_a_call_is_found_from_its_outputs():
    engine = ScriptedEngine(["three words here"])
    lm = dspy.LM("scripted/words", engine=engine, cache=False)
    outputs = lm("one two")
    prompt_tokens, completion_tokens = reported_usage(lm, outputs)
    assert (prompt_tokens, completion_tokens) == (engine.reported[0].input_tokens, 3), UPGRADE.format(
        lib="DSPy", what="the LM history entries (outputs, usage)", where="internals.py reported_usage")


@pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="the 'local' extra is not installed")
def test_llama_cpp_public_api_used_by_the_embedded_engine():
    import llama_cpp
    from llama_cpp import llama_cpp as llama_c

    where = "lm/llama_models.py"
    for name in ("llama_model_get_vocab", "llama_vocab_get_text", "llama_sampler_init_grammar",
                 "llama_sampler_free", "llama_model_default_params"):
        assert hasattr(llama_c, name), UPGRADE.format(lib="llama-cpp-python", what=f"the C binding {name}", where=where)
    assert isinstance(inspect.getattr_static(llama_cpp.Llama, "model"), property), UPGRADE.format(
        lib="llama-cpp-python", what="Llama.model", where=where)
    assert "use_extra_bufts" in dict(llama_c.llama_model_params._fields_), UPGRADE.format(
        lib="llama-cpp-python", what="llama_model_params.use_extra_bufts", where=where)
    assert isinstance(llama_c.llama_tokenize, ctypes._CFuncPtr) and len(llama_c.llama_tokenize.argtypes) == 7, \
        UPGRADE.format(lib="llama-cpp-python", what="llama_tokenize as a ctypes function (called holding the GIL)",
                       where=where)
