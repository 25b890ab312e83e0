"""``GrammarJSONAdapter``: DSPy's JSONAdapter with a schema for every field, for grammar-held models."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dspy

from amb_dspy.internals import json_adapter_prepare_response_format
from amb_dspy.lm.introspect import is_embedded


def adapter_for(lm: dspy.BaseLM, tools: Iterable[Callable | dspy.Tool] = ()) -> dspy.Adapter:
    """``GrammarJSONAdapter`` for an embedded model (its schema becomes a grammar); ChatAdapter otherwise.

    Pass a ``dspy.ReAct``'s tools to have an embedded model's tool calls constrained to their arguments.
    """
    return GrammarJSONAdapter(tools) if is_embedded(lm) else dspy.ChatAdapter()


class GrammarJSONAdapter(dspy.JSONAdapter):
    """A JSONAdapter that sends a JSON schema even when an output field is an open-ended mapping.

    DSPy falls back to plain JSON mode for ``dict[str, Any]`` fields (ReAct's ``next_tool_args``)
    because hosted structured outputs need every property declared. A grammar can allow any object
    in that one field and still pin the field names, their order and the other fields' types, which a
    small model needs: in plain JSON mode SmolLM2 invents its own keys. Given the tools, a ReAct step
    is further constrained to one tool's name followed by that tool's own arguments.
    """

    def __init__(self, tools: Iterable[Callable | dspy.Tool] = (), **kwargs: Any):
        super().__init__(**kwargs)
        tools = [tool if isinstance(tool, dspy.Tool) else dspy.Tool(tool) for tool in tools]
        self.tool_args: dict[str, dict[str, Any]] = {tool.name: tool.args for tool in tools}

    def _prepare_response_format(self, lm, lm_kwargs, signature):
        json_adapter_prepare_response_format(super(), lm, lm_kwargs, signature)
        if is_embedded(lm) and lm_kwargs.get("response_format") == {"type": "json_object"}:
            schema = open_output_schema(signature, self.tool_args)
            if schema is not None:
                lm_kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "DSPyProgramOutputs", "schema": schema},
                }


def open_output_schema(signature, tool_args: Mapping[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The JSON schema of ``signature``'s outputs with open mappings allowed; for ReAct, one
    alternative per tool holding that tool's own arguments. None when pydantic cannot describe it."""
    import pydantic

    fields = {name: (field.annotation, ...) for name, field in signature.output_fields.items()}
    try:
        schema = pydantic.create_model("DSPyProgramOutputs", **fields).model_json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticInvalidForJsonSchema, TypeError, ValueError):
        return None
    properties = schema.get("properties", {})
    schema["required"] = list(properties)
    schema["additionalProperties"] = False
    tool_names = properties.get("next_tool_name", {}).get("enum")
    if not tool_args or not tool_names or "next_tool_args" not in properties:
        return schema
    # One alternative per tool: its name, then its own arguments (ReAct's "finish" takes none).
    steps = []
    for name in tool_names:
        if name in tool_args or name == "finish":
            args = tool_args.get(name, {})
            args_schema = {"type": "object", "properties": args, "required": list(args), "additionalProperties": False}
        else:
            args_schema = properties["next_tool_args"]
        step_properties = {**properties, "next_tool_name": {"enum": [name]}, "next_tool_args": args_schema}
        steps.append({**schema, "properties": step_properties, "title": f"Call {name}"})
    for step in steps:
        step.pop("$defs", None)
    return {"anyOf": steps, **({"$defs": schema["$defs"]} if "$defs" in schema else {})}
