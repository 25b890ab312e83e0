"""A scripted LM for tests: each DSPy signature gets its own script, answered in the adapter's format.

Only an LM's words are scripted; everything around them (DSPy's adapters and parsing, the agents'
code, the bank) runs for real. A call is routed by the output fields its prompt asks for, which every
DSPy adapter lists in the system message ("Your output fields are: ..."):

* an agent name (``"classification"``, ``"structure"``, ``"analysis"``, ``"integration"``,
  ``"planning"``) routes that agent's signature;
* any other key is a comma-separated list of output field names, e.g.
  ``"next_thought,next_tool_name,next_tool_args"`` for a ``dspy.ReAct`` step;
* ``MEMORY_ANSWER`` and ``SHORT_ANSWER`` route the answer agent's two predictors;
* ``default=`` answers whatever no key matches (otherwise such a call fails loudly).

The agents' batch signatures (several clusters for structure, several new nodes for analysis) are
answered item by item by the agent's own script, unless ``structure_batch=`` / ``analysis_batch=`` are
scripted: a deterministic LM answers an item in a batch as it would answer it alone (an analysis batch
leaves out the unrelated judgements, as its signature asks). Such a call is one
entry of ``lm.calls`` (its ``items`` are the per-item calls), and ``calls_for("structure")`` lists the
items of batch calls with the single calls, in order.

A script is a list of answers, used in order, or a callable ``(ScriptedCall) -> answer``. An answer is
a dict of output field values (pydantic models and lists welcome), rendered as the prompt's adapter
expects (``[[ ## field ## ]]`` sections for ChatAdapter, a JSON object for JSONAdapter), or a ``str``
sent verbatim (malformed output, for instance).

    lm = ScriptedLM(
        classification=[{"should_cluster": False, "clusters": [{"context": "c", "keywords": ["k"], "segments": [1]}]}],
        structure=lambda call: {"summary": call.inputs["content"][: len(call.inputs["content"]) // 3]},
    )
    with dspy.context(lm=lm):
        ...
    lm.calls_for("structure")[0].inputs["content"]

Every call is recorded in ``lm.calls`` (route, rendered inputs, the full messages and the reply).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.adapters.utils import serialize_for_json
from dspy.lm15 import Message, Response, TextPart, Usage

from amb_dspy.agents.analysis import AnalyzeRelationships
from amb_dspy.agents.analysis_batch import AnalyzeRelationshipsBatch
from amb_dspy.agents.answer import AnswerFromMemory
from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.agents.classification import ClassifySegments
from amb_dspy.agents.integration import MergeConflictingNodes
from amb_dspy.agents.planning import PlanNextTask
from amb_dspy.agents.structure import SummarizeCluster, SummarizeClusters

Answer = dict[str, Any] | str
Script = list[Answer] | Callable[["ScriptedCall"], Answer]

AGENT_SIGNATURES: dict[str, type[dspy.Signature]] = {
    "classification": ClassifySegments,
    "structure": SummarizeCluster,
    "analysis": AnalyzeRelationships,
    "integration": MergeConflictingNodes,
    "planning": PlanNextTask,
    "structure_batch": SummarizeClusters,
    "analysis_batch": AnalyzeRelationshipsBatch,
}
# batch route -> its single route
BATCHES: dict[str, str] = {"structure_batch": "structure", "analysis_batch": "analysis"}
# The answer agent's routes: its answer with the verdict on memory (``respond``), and the answer alone
# (``short``, the single output field "answer").
MEMORY_ANSWER = ",".join(AnswerFromMemory.output_fields)
SHORT_ANSWER = "answer"

_OUTPUT_SECTION = re.compile(r"Your output fields are:\n(.*?)(?:\nAll interactions will be structured|\Z)", re.S)
_FIELD_LINE = re.compile(r"^\d+\. `(\w+)`", re.M)
_INPUT_HEADER = re.compile(r"^\[\[ ## (\w+) ## \]\]\n?", re.M)
_OUTPUT_REMINDER = re.compile(r"\n\n(?:Respond with the corresponding output fields|Respond with a JSON object).*\Z", re.S)


class ScriptError(AssertionError):
    """The scripted LM was asked something its scripts do not cover."""


@dataclass
class ScriptedCall:
    route: str
    output_fields: tuple[str, ...]
    inputs: dict[str, str]
    messages: list[dict[str, str]]
    json_mode: bool
    reply: str = ""
    prompt_text: str = field(default="", repr=False)
    items: list[ScriptedCall] = field(default_factory=list)  # a batch call's per-item calls
    batch: str = ""  # for such an item: the batch route it is part of

    def input_json(self, name: str) -> Any:
        """An input field parsed from its rendered JSON (lists, pydantic models)."""
        return json.loads(self.inputs[name])


class _ScriptedEngine:
    """The dspy 3.4 engine contract: complete(Request) -> Response."""

    def __init__(self, owner: ScriptedLM):
        self.owner = owner

    def complete(self, request):
        messages = []
        if request.system is not None:
            system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
            messages.append({"role": "system", "content": system})
        messages.extend({"role": m.role, "content": _message_text(m)} for m in request.messages)
        reply, prompt_text = self.owner._respond(messages)
        return Response(
            id=None, model="scripted", message=Message.assistant([TextPart(reply)]), finish_reason="stop",
            usage=Usage(input_tokens=estimate_tokens(prompt_text), output_tokens=estimate_tokens(reply),
                        total_tokens=estimate_tokens(prompt_text) + estimate_tokens(reply)),
        )

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self):
        pass


class ScriptedLM(dspy.LM):
    def __init__(self, scripts: Mapping[str, Script] | None = None, *, default: Script | None = None,
                 wrap_batches: Callable[[Script], Script] | None = None, **by_name: Script):
        """``wrap_batches``: applied to the item-by-item script of each batch route not given (a bench that
        times calls wraps the batch call once; its items carry ``batch``)."""
        super().__init__("scripted/lm", engine=_ScriptedEngine(self), cache=False, num_retries=0)
        self._routes: list[tuple[str, frozenset[str], Script]] = []
        self._positions: dict[str, int] = {}
        for key, script in {**(scripts or {}), **by_name}.items():
            fields = AGENT_SIGNATURES[key].output_fields if key in AGENT_SIGNATURES else key.split(",")
            self._routes.append((key, frozenset(f.strip() for f in fields), script))
            self._positions[key] = 0
        given = {key for key, _, _ in self._routes}
        for batch, single in BATCHES.items():
            if single in given and batch not in given:
                fields = frozenset(AGENT_SIGNATURES[batch].output_fields)
                script = self._item_by_item(batch)
                self._routes.append((batch, fields, wrap_batches(script) if wrap_batches else script))
                self._positions[batch] = 0
        self._default = default
        self._positions["default"] = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []

    def calls_for(self, route: str) -> list[ScriptedCall]:
        batch = next((b for b, single in BATCHES.items() if single == route), None)
        found = []
        for call in self.calls:
            if call.route == route:
                found.append(call)
            elif batch is not None and call.route == batch:
                found.extend(call.items)
        return found

    def _item_by_item(self, batch: str) -> Callable[[ScriptedCall], Answer]:
        """A batch call answered item by item by the single route's script (see the module docstring)."""
        single = BATCHES[batch]

        def ask(call: ScriptedCall, inputs: dict[str, Any], output: str) -> Any:
            sub = ScriptedCall(route=single, output_fields=(output,), messages=call.messages, json_mode=call.json_mode,
                               batch=batch,
                               inputs={k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                                       for k, v in inputs.items()})
            script = next(s for k, _, s in self._routes if k == single)
            if isinstance(script, list):
                with self._lock:
                    position = self._positions[single]
                    if position >= len(script):
                        raise ScriptError(f"script {single!r} ran out after {len(script)} answers")
                    self._positions[single] = position + 1
                reply = script[position]
            else:
                reply = script(sub)
            if isinstance(reply, str):
                raise ScriptError(f"a verbatim {single!r} answer cannot be part of a batch answer")
            call.items.append(sub)
            return reply[output]

        def structure(call: ScriptedCall) -> Answer:
            return {"summaries": [{"number": topic.pop("number"), "summary": ask(call, topic, "summary")}
                                  for topic in call.input_json("topics")], "complete": True}

        def analysis(call: ScriptedCall) -> Answer:
            notes = {note.pop("number"): note for note in call.input_json("notes")}
            verdicts = []
            for new in call.input_json("new_notes"):
                candidates = [{"number": k, **notes[c]} for k, c in enumerate(new["candidates"], 1)]
                judged = ask(call, {"new_node": notes[new["note"]], "candidates": candidates}, "relationships")
                verdicts.append({"note": new["note"], **_batch_form(judged, new["candidates"])})
            return {"verdicts": verdicts, "complete": True}

        return structure if single == "structure" else analysis

    def remaining(self, route: str) -> int:
        """Answers of a list script not used yet."""
        script = self._default if route == "default" else next(s for k, _, s in self._routes if k == route)
        return len(script) - self._positions[route] if isinstance(script, list) else 0

    def _respond(self, messages: list[dict[str, str]]) -> tuple[str, str]:
        system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
        section = _OUTPUT_SECTION.search(system)
        output_fields = tuple(_FIELD_LINE.findall(section.group(1))) if section else ()
        route, script = self._route(frozenset(output_fields))
        call = ScriptedCall(
            route=route, output_fields=output_fields, inputs=_parse_inputs(messages[-1]["content"]),
            messages=messages, json_mode="Outputs will be a JSON object" in system,
            prompt_text="\n".join(m["content"] for m in messages),
        )
        with self._lock:
            if isinstance(script, list):
                position = self._positions[route]
                if position >= len(script):
                    raise ScriptError(f"script {route!r} ran out after {len(script)} answers")
                self._positions[route] = position + 1
                answer = script[position]
            else:
                answer = None
        if answer is None:
            answer = script(call)
        call.reply = answer if isinstance(answer, str) else _render(answer, output_fields, call.json_mode)
        with self._lock:
            self.calls.append(call)
        return call.reply, call.prompt_text

    def _route(self, output_fields: frozenset[str]) -> tuple[str, Script]:
        for key, fields, script in self._routes:
            if fields == output_fields:
                return key, script
        if self._default is not None:
            return "default", self._default
        raise ScriptError(f"no script for a prompt asking for {sorted(output_fields)}")


def _batch_form(judged: list[dict], numbers: list[int]) -> dict[str, Any]:
    """A call-alone analysis answer (judgements on candidates 1, 2...) as AnalyzeRelationshipsBatch asks for it:
    the candidates that conflict or relate, by note number, and the new note's rewrite once, from the related
    judgement the bank applies last (the last candidate's: a call alone keeps the new node's last rewrite)."""
    kept = sorted((j for j in judged if 1 <= j["candidate"] <= len(numbers) and j.get("relationship") != "unrelated"),
                  key=lambda j: j["candidate"])
    related = [j for j in kept if j["relationship"] == "related"]
    own = {"context_update": related[-1].get("context_update_new", ""),
           "keywords_update": related[-1].get("keywords_update_new", [])} if related else {}
    return {**own, "relationships": [{k: v for k, v in j.items() if not k.endswith("_new")}
                                     | {"candidate": numbers[j["candidate"] - 1]} for j in kept]}


def _message_text(message) -> str:
    """A message's text, with each image part shown as ``[image: <media type>]`` so tests can see it."""
    pieces = []
    for part in message.parts:
        if getattr(part, "type", "") == "image":
            pieces.append(f"[image: {part.media_type}]")
        else:
            pieces.append(getattr(part, "text", "") or "")
    return "".join(pieces)


def _parse_inputs(user_message: str) -> dict[str, str]:
    text = _OUTPUT_REMINDER.sub("", user_message)
    headers = list(_INPUT_HEADER.finditer(text))
    return {
        h.group(1): text[h.end() : headers[i + 1].start() if i + 1 < len(headers) else len(text)].strip()
        for i, h in enumerate(headers)
    }


def _render(values: dict[str, Any], output_fields: tuple[str, ...], json_mode: bool) -> str:
    if json_mode:
        return json.dumps(serialize_for_json(values), ensure_ascii=False)
    sections = []
    for name, value in values.items():
        text = value if isinstance(value, str) else json.dumps(serialize_for_json(value), ensure_ascii=False)
        sections.append(f"[[ ## {name} ## ]]\n{text}")
    return "\n\n".join(sections) + "\n\n[[ ## completed ## ]]"
