"""Routing (``memory.route``): whether a message reads long-term memory, whether it writes, where, and what.

:func:`route` looks at a message (a task, a user's turn) and, after a task, its trace (answer, hops,
completed subtasks) and returns a :class:`RouteDecision`. The heuristic rules:

* **profile write** (``preference``): a statement, not a question, with a lasting cue ("from now on",
  "always", "never", "I prefer", "remember that I", "my name is", "call me") about how the user wants
  things or who they are;
* **domain fact** (``fact``): a stable definition, not a question ("X is a ...", "X means ...", "X
  stands for ...", "remember that the ..."), with no cue that it is passing ("today", "right now",
  "currently", "this time");
* **task trace** (``conclusion``, ``trajectory``) and **tool effects** (``tool_effect``): after a task
  whose trace holds an answer, and tool calls for the effects; a failed or empty task keeps only its
  trajectory (what not to try again);
* **never written**: anything that looks like a secret (a password, an API key), a message that asks
  not to be remembered ("just this once", "don't remember"), and small talk;
* **read**: every request for work (a question, an instruction) reads; small talk and pure statements
  (a preference given, a fact told) do not;
* **mixed messages**: each sentence is routed on its own ("From now on answer in French. What is X?"
  writes the preference and reads for the question); a secret or "don't remember" anywhere in the
  message still keeps all of it out.

A DSPy module (:class:`~amb_dspy.longterm.route_agent.MemoryRouter`, an optimizable agent) can decide
instead: pass it as ``router``; when it fails or its answer is unusable the heuristic decides.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from amb_dspy.longterm.base import KINDS, MEMORY_KINDS, Kind, MemoryKind
from amb_dspy.longterm.statements import sentences

logger = logging.getLogger(__name__)

_FLAGS = re.IGNORECASE
_QUESTION_START = re.compile(
    r"^(who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|can|could|should|would|will|"
    r"has|have|had|shall|may|might|am|isn't|aren't|wasn't|didn't|doesn't|won't|can't)\b", _FLAGS)
_REQUEST_START = re.compile(
    r"^(please\s+)?(find|tell|give|list|name|explain|compare|summari[sz]e|write|draft|show|look\s+up|search|"
    r"check|compute|calculate|translate|describe|identify|recommend|suggest|help|plan|create|make|book|fix|"
    r"debug|analy[sz]e|estimate|convert|outline|review|rank|sort|count|define|what's|whats|remind|recall|"
    r"fetch|get|open|read|run|draw|build|generate|rewrite|answer|figure)\b", _FLAGS)
# "Just this once, give me ...", "I need directions to ...": a request behind a lead clause or a want.
_LATE_REQUEST = re.compile(r"^((?P<lead>[^,]{1,40}),\s*|i (want|need|would like|'d like) (a|an|the|some|to|directions|help|"
                           r"information|advice|ideas|you to (find|tell|give|list|explain|write|show|check))\b)", _FLAGS)
_SMALL_TALK = re.compile(
    r"^(hi|hello|hey|thanks|thank you|thx|ok|okay|cool|great|nice|good (morning|night|evening|afternoon)|bye|"
    r"goodbye|cheers|sure|yes|no|yep|nope|got it|sounds good|perfect|lol|hmm+|wow|awesome|see you)\b[\s!.,:)]*"
    r"(there|again|so much|a lot|for (that|this|the help)|!|\.)*\s*$", _FLAGS)
_PROFILE = re.compile(
    r"\b(from now on|going forward|in (the )?future|from here on|for all future|by default|"
    r"i (always|never|usually|generally|normally)\b|always (use|answer|reply|respond|write|give|include|show|cite|"
    r"format|keep|call|address|put|list|start|end|add|mention|prefer|double|round|sort|quote|spell|translate|"
    r"explain|assume|treat)|never (use|answer|reply|respond|write|give|include|show|call|mention|add|suggest|"
    r"recommend|send|assume|use|put|spell|round)|"
    r"i(?:'d| would)? (really )?(prefer|like|love|hate|dislike|want you to|enjoy|favou?r)|i do ?n[o']t (like|want)|"
    r"my (name|pronouns|timezone|time zone|email|job|role|title|team|company|manager|preferred|favou?rite|"
    r"native language|language|location|home|dietary|diet|budget|goal|level)\b|call me\b|address me\b|"
    r"i(?:'m| am) (a|an|the|based|located|living|vegetarian|vegan|allergic|left-handed|colou?r-?blind|"
    r"learning|new to|studying|working|retired|fluent|not a)\b|i (live|work|study|teach|use|speak|code|write|"
    r"program|run)\b.*\b(in|at|for|with|mostly|mainly|only)\b|"
    r"remember (that )?(i|my|me)\b|keep in mind (that )?(i|my)\b|note that (i|my)\b)", _FLAGS)
_FACT = re.compile(
    r"^(remember( that)?|note( that)?|fyi,?|for the record,?|keep in mind( that)?|for future reference,?|"
    r"just so you know,?)\s|"
    r"^(the |an? )?[\w'().&/-]+(\s[\w'().&/-]+){0,7}\s(is|are) (a|an|the|defined as|short for|called|"
    r"made of|composed of|located in|the capital of|part of)\b|"
    r"\b(means|stands for|refers to|is defined as|is short for|is an abbreviation for|is an acronym for|"
    r"is the name for|consists of|is a synonym of|is measured in|equals|is equivalent to)\b", _FLAGS)
# A one-sentence third-person statement in the present tense ("The capital of Australia is Canberra.",
# "Our standup is at 9:30 every weekday."): a fact told, unless it is passing (checked separately).
_DECLARATIVE = re.compile(
    r"^(?!(it|it's|this|that|these|those|he|she|they|i|i'm|we|you|there|here|so|but|and|yes|no)\b)[A-Z][^?!;]{8,200}?"
    r"\b(is|are|starts|begins|ends|opens|closes|runs|takes place|happens|falls|lasts|belongs|has|have|"
    r"uses|holds|contains|costs|weighs|measures)\b[^?!]*\.$")
_PASSING = re.compile(
    r"\b(today|tonight|right now|at the moment|currently|this (morning|afternoon|evening|week|time|once|session|"
    r"task|conversation)|just this once|for now|temporarily|for this (task|question|answer|one)|only this time|"
    r"yesterday|tomorrow|this time|at present|in this (answer|reply|task)|for the next (hour|few))\b", _FLAGS)
_DO_NOT_KEEP = re.compile(
    r"\b(do ?n[o']t|do not|never|please don't) (remember|save|store|keep|memori[sz]e|record)\b|\bforget (that|this|it)\b|"
    r"\boff the record\b|\bpassword\b|\bpasscode\b|\bpin (code|number)\b|\bapi[ _-]?key\b|\bsecret\b|\btoken is\b|"
    r"\bcredit card\b|\bssn\b|\bsocial security\b|\b(sk|pk|ghp|xox[bp])[-_][A-Za-z0-9]{8,}", _FLAGS)
_FAILED_ANSWER = re.compile(r"^(i (do not|don't|cannot|can't) (know|find|tell)|unknown|no answer|n/?a|not found)\b",
                            _FLAGS)


@dataclass(frozen=True)
class RouteDecision:
    """What to do with long-term memory for one message: read before, write after, where, what.

    ``kinds`` are the item kinds to write (empty when ``should_write`` is off); ``read_kinds`` the
    kinds a read searches; ``reasons`` say which rules fired, for ``amb memory route`` and the audit.
    """

    should_read: bool
    should_write: bool
    namespaces: tuple[str, ...]
    kinds: tuple[Kind, ...] = ()
    read_kinds: tuple[Kind, ...] = KINDS
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def memory_kinds(self) -> tuple[MemoryKind, ...]:
        """The design's kinds (profile, domain, trace, tool) among those written."""
        return tuple(name for name, kinds in MEMORY_KINDS.items() if set(kinds) & set(self.kinds))


@dataclass(frozen=True)
class TaskTrace:
    """What a finished task did, as :func:`route` reads it: its answer, hops, subtasks and whether it succeeded."""

    answer: str = ""
    hops: Sequence[Mapping[str, Any] | str] = ()
    completed_tasks: Sequence[Mapping[str, Any]] = ()
    succeeded: bool = True


def is_question(message: str) -> bool:
    text = message.strip()
    return text.endswith("?") or bool(_QUESTION_START.match(text))


def is_request(message: str) -> bool:
    """A question or an instruction: something to work on."""
    text = message.strip()
    if is_question(text) or _REQUEST_START.match(text):
        return True
    lead = _LATE_REQUEST.match(text)
    return bool(lead) and (not lead.group("lead") or bool(_REQUEST_START.match(text[lead.end():].strip())))


def _statement_rules(message: str) -> tuple[list[Kind], list[str]]:
    """The kinds a message's own words ask to keep, and why (no trace involved)."""
    text = " ".join(message.split())
    if not text:
        return [], ["empty message"]
    if _DO_NOT_KEEP.search(text):
        return [], ["asks not to be kept, or holds a secret"]
    if _SMALL_TALK.match(text):
        return [], ["small talk"]
    kinds: list[Kind] = []
    reasons: list[str] = []
    question = is_question(text) and not re.match(r"^(remember|note|keep in mind|fyi)\b", text, _FLAGS)
    if _PROFILE.search(text) and not question and not _PASSING.search(text):
        kinds.append("preference")
        reasons.append("a lasting preference or profile statement")
    elif ((_FACT.search(text) or _DECLARATIVE.match(text)) and not question and not _PASSING.search(text)
          and not is_request(text)):
        kinds.append("fact")
        reasons.append("a stable definition or fact told")
    return kinds, reasons


def message_parts(message: str) -> list[str]:
    """The sentences of a message, each routed on its own: "From now on answer in French. What is X?" is
    a preference told and a question asked. A message of one sentence is one part."""
    text = " ".join((message or "").split())
    return sentences(text) or ([text] if text else [])


def told_statements(message: str) -> list[tuple[Kind, str]]:
    """The parts of a message to keep, each with its kind (``preference`` or ``fact``): what a write
    stores of the message itself, without the question beside it. Nothing when the message holds a
    secret or asks not to be kept, wherever in it."""
    if _DO_NOT_KEEP.search(message or ""):
        return []
    return [(kind, part) for part in message_parts(message) for kind in _statement_rules(part)[0]]


def statement_kinds(message: str) -> tuple[Kind, ...]:
    """The kinds the message's own words are kept as (``preference`` or ``fact``), trace aside."""
    return tuple(dict.fromkeys(kind for kind, _ in told_statements(message)))


def _reads(part: str, told: bool) -> bool:
    """Whether one part of a message asks for work: a request, not small talk, not a statement told
    (unless it is put as a question)."""
    return is_request(part) and not _SMALL_TALK.match(part) and (not told or is_question(part))


def _trace_rules(trace: TaskTrace) -> tuple[list[Kind], list[str]]:
    answer = (trace.answer or "").strip()
    answered = bool(answer) and trace.succeeded and not _FAILED_ANSWER.match(answer)
    calls = [call for hop in trace.hops if isinstance(hop, Mapping) for call in hop.get("tool_calls") or ()]
    kinds: list[Kind] = []
    reasons: list[str] = []
    if answered:
        kinds.append("conclusion")
        reasons.append("the task's conclusion")
        if any(str(t.get("status", "success")).lower() == "success" and str(t.get("context") or "").strip()
               for t in trace.completed_tasks):
            kinds.append("fact")
            reasons.append("what its subtasks found")
    if trace.hops or trace.completed_tasks:
        kinds.append("trajectory")
        reasons.append("how the task went" + ("" if answered else " (failed: what not to try again)"))
    if calls:
        kinds.append("tool_effect")
        reasons.append(f"{len(calls)} tool call(s)")
    return kinds, reasons


def heuristic_route(message: str, trace: TaskTrace | None = None, *, namespace: str = "default") -> RouteDecision:
    """The rules of this module's docstring, no LM."""
    text = " ".join((message or "").split())
    parts = message_parts(text)
    if len(parts) > 1 and not _DO_NOT_KEEP.search(text):
        ruled = [_statement_rules(part) for part in parts]
        kinds = list(dict.fromkeys(kind for part_kinds, _ in ruled for kind in part_kinds))
        reasons = list(dict.fromkeys(reason for part_kinds, part_reasons in ruled if part_kinds
                                     for reason in part_reasons))
        should_read = any(_reads(part, bool(part_kinds)) for part, (part_kinds, _) in zip(parts, ruled))
    else:
        kinds, reasons = _statement_rules(text)
        should_read = bool(text) and _reads(text, bool(kinds))
    if trace is not None and not _DO_NOT_KEEP.search(text):
        trace_kinds, trace_reasons = _trace_rules(trace)
        kinds += [k for k in trace_kinds if k not in kinds]
        reasons += trace_reasons
    reasons.append("asks for work: read first" if should_read else "nothing to look up" if text else "empty message")
    return RouteDecision(should_read=should_read, should_write=bool(kinds), namespaces=(namespace,),
                         kinds=tuple(kinds), reasons=tuple(reasons))


Router = Callable[[str, str], Mapping[str, Any]]


def route(message: str, trace: TaskTrace | Mapping[str, Any] | None = None, *, namespace: str = "default",
          router: Router | None = None) -> RouteDecision:
    """Decide for ``message`` (and, after a task, its ``trace``) whether to read and write long-term memory.

    ``trace`` is a :class:`TaskTrace` or a dict with ``answer``, ``hops``, ``completed_tasks`` and
    ``succeeded``. ``router(message, trace_text) -> {"should_read", "should_write", "kinds"}`` (the
    :class:`~amb_dspy.longterm.route_agent.MemoryRouter`) decides instead of the rules when given; its
    failure or an unusable answer falls back to them. Secrets are never written, whoever decides.
    """
    if isinstance(trace, Mapping):
        trace = TaskTrace(answer=str(trace.get("answer") or ""), hops=trace.get("hops") or (),
                          completed_tasks=trace.get("completed_tasks") or (),
                          succeeded=bool(trace.get("succeeded", True)))
    rules = heuristic_route(message, trace, namespace=namespace)
    if router is None:
        return rules
    try:
        answer = router(message, describe_trace(trace))
        should_read, should_write = bool(answer["should_read"]), bool(answer["should_write"])
        named = [str(k).strip().lower() for k in answer.get("kinds") or ()]
        kinds = tuple(dict.fromkeys(k for name in named for k in MEMORY_KINDS.get(name, (name,)) if k in KINDS))
    except Exception as exc:  # noqa: BLE001 - an LM failure never blocks the task: the rules decide
        logger.warning("memory router failed (%s); the heuristic rules decide", exc)
        return rules
    if _DO_NOT_KEEP.search(message or "") or (should_write and not kinds):
        should_write, kinds = rules.should_write, rules.kinds
    return RouteDecision(should_read=should_read, should_write=should_write, namespaces=(namespace,),
                         kinds=kinds if should_write else (), reasons=("decided by the memory router",))


def describe_trace(trace: TaskTrace | None) -> str:
    """A few lines for the LM router: the answer, how many hops and tool calls, whether it succeeded."""
    if trace is None:
        return ""
    calls = sum(len(hop.get("tool_calls") or ()) for hop in trace.hops if isinstance(hop, Mapping))
    return (f"answer: {trace.answer.strip()[:300]}\nsucceeded: {trace.succeeded}\nhops: {len(trace.hops)}\n"
            f"tool calls: {calls}\ncompleted subtasks: {len(trace.completed_tasks)}")
