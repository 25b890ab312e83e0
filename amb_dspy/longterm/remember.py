"""The seam between a bank run and long-term memory: remember a finished task, recall before a task.

Inputs are plain data (strings, lists, dicts), not the bank's types, so that this module does not
move when they do:

* :func:`remember_task` writes what a finished task produced: its goal and answer with citations as a
  ``conclusion``, what each successful subtask found as a ``fact`` (its question with its answer, so that
  it reads alone), and how the task went (subtasks and
  hops, success or failure) as a ``trajectory``, and what each tool call of the hop record did (the
  query run, the page read) as a ``tool_effect``, everything redacted first when asked;
* :func:`recall` finds the items worth showing for a new task, over a minimum score and within a
  token budget, and :func:`format_recalled` writes them as the "from earlier tasks" lines that the
  adapter puts in ``<memory>``, each with the task it came from and its date.

Either may raise :class:`~amb_dspy.longterm.base.LongTermError` (a server that went away); the bank
catches it, shows the one-line message and goes on without long-term memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from amb_dspy.longterm.base import (
    ItemMetadata,
    LongTermStore,
    MemoryItem,
    SourceSpan,
    WriteOutcome,
)
from amb_dspy.longterm.checks import fit_content
from amb_dspy.longterm.merge import Merger
from amb_dspy.longterm.redact import redact as redact_text
from amb_dspy.retrieval.keyword import tokenize

# From bench/longterm.py on HotpotQA dev: 90% of paraphrased or follow-up questions score their own
# earlier conclusion at 0.62 or more, and 90% of questions never asked get no item over 0.51.
DEFAULT_MIN_SCORE = 0.55
DEFAULT_MAX_TOKENS = 600
DEFAULT_RECALL_K = 8
RECALL_HEADER = "From earlier tasks:"
_HOP_CHARS = 300


@dataclass(frozen=True)
class RecalledItem:
    """An item recalled for a task, with its score and the line shown for it."""

    item: MemoryItem
    score: float

    @property
    def task_id(self) -> str:
        """The last task that wrote or merged into the item (its date is :attr:`date`)."""
        metadata = self.item.metadata
        return (metadata.task_ids[-1] if metadata.task_ids else metadata.source_task_id) or "unknown task"

    @property
    def date(self) -> str:
        return self.item.updated.date().isoformat()

    @property
    def tag(self) -> str:
        return f"[task {self.task_id}, {self.date}, {self.item.kind}]"

    def line(self) -> str:
        body = "\n  ".join(part.strip() for part in self.item.content.splitlines() if part.strip())
        return f"- {self.tag} {body}"


def _citation_sources(citations: Iterable[str | Mapping[str, Any]],
                      clean: Callable[[str], str]) -> tuple[list[SourceSpan], list[str], list[str]]:
    """Source spans, node ids and plain citations from citations given as strings or dicts
    (``source``/``url``, ``quote``/``text``, ``start``, ``end``, ``node_id``)."""
    spans, node_ids, plain = [], [], []
    for citation in citations:
        if isinstance(citation, str):
            if citation.strip():
                plain.append(clean(citation.strip()))
            continue
        if citation.get("node_id"):
            node_ids.append(str(citation["node_id"]))
        source = str(citation.get("source") or citation.get("url") or "").strip()
        if source:
            spans.append(SourceSpan(source=clean(source), quote=clean(str(citation.get("quote") or citation.get("text") or "")),
                                    start=citation.get("start"), end=citation.get("end")))
    return spans, node_ids, plain


def _hop_line(number: int, hop: Mapping[str, Any] | str) -> str:
    if isinstance(hop, str):
        text = hop
    else:
        text = "; ".join(f"{key}: {value}" for key, value in hop.items()
                         if isinstance(value, (str, int, float, bool)) and str(value).strip())
    text = " ".join(text.split())
    return f"hop {number}. {text[:_HOP_CHARS]}{'...' if len(text) > _HOP_CHARS else ''}"


def tool_effects(hops: Sequence[Mapping[str, Any] | str]) -> list[str]:
    """One line per distinct tool call of a hop record (``tool_calls`` of each hop, as
    :class:`amb_dspy.storage.Hop` dumps it): the call, the subtask it served and what came of it.
    Calls answered from the task's own cache are repeats, not effects, and are left out."""
    effects = []
    for hop in hops:
        if not isinstance(hop, Mapping):
            continue
        task = " ".join(str(hop.get("task") or "").split())[:_HOP_CHARS]
        answer = " ".join(str(hop.get("answer") or "").split())[:_HOP_CHARS]
        outcome = f"found: {answer}" if hop.get("success") and answer else "found nothing usable"
        for call in hop.get("tool_calls") or ():
            if not isinstance(call, Mapping) or call.get("cached"):
                continue
            args = ", ".join(f"{key}={value!r}" for key, value in (call.get("args") or {}).items())
            effects.append(f"{call.get('name', 'tool')}({args[:_HOP_CHARS]}) for \"{task}\": {outcome}")
    return list(dict.fromkeys(effects))


def self_contained(question: str, answer: str) -> str:
    """A fact that reads alone: an answer that does not say what it answers gets its question in front
    ("Which river flows through Marrowick? The Sennet."); one holding most of the question's words
    ("The Seine flows through Paris.") is kept as it is."""
    question, answer = " ".join(question.split()), answer.strip()
    asked = set(tokenize(question))
    if not asked or len(asked & set(tokenize(answer))) * 2 >= len(asked):
        return answer
    if answer[-1] not in ".!?":
        answer += "."
    return f"{question}{'' if question[-1] in '.!?:' else ':'} {answer}"


def _succeeded(answer: str, completed_tasks: Sequence[Mapping[str, Any]]) -> bool:
    return bool(answer.strip()) and all(str(t.get("status", "success")).lower() == "success" for t in completed_tasks)


def _subtask_fact(task: Mapping[str, Any], goal: str, clean: Callable[[str], str]) -> tuple[str, ItemMetadata] | None:
    """The fact a successful subtask found, in words that stand alone, with its metadata; None when it found none."""
    context = clean(str(task.get("context") or "").strip())
    if not context or str(task.get("status", "success")).lower() != "success":
        return None
    description = clean(str(task.get("description") or ""))
    fact = fit_content(self_contained(description if description.endswith("?") else goal, context))
    return fact, ItemMetadata(extra={"subtask": description})


def _trajectory(goal: str, status: str, completed_tasks: Sequence[Mapping[str, Any]],
                hops: Sequence[Mapping[str, Any] | str], clean: Callable[[str], str]) -> str:
    """A finished task's trajectory as one text: goal, outcome, its subtasks and its tool calls, a line each."""
    lines = [f"Task: {goal}", f"Outcome: {status}"]
    lines += [f"subtask {i}. [{t.get('status', 'success')}] {clean(str(t.get('description') or ''))}"
              for i, t in enumerate(completed_tasks, 1)]
    lines += [clean(_hop_line(i, hop)) for i, hop in enumerate(hops, 1)]
    return fit_content("\n".join(lines))


def remember_task(store: LongTermStore, *, namespace: str, task_id: str, goal: str, answer: str,
                  citations: Iterable[str | Mapping[str, Any]] = (),
                  completed_tasks: Sequence[Mapping[str, Any]] = (),
                  hops: Sequence[Mapping[str, Any] | str] = (), redact: bool = False,
                  merge: Merger | None = None, region: str = "US",
                  kinds: Iterable[str] | None = None) -> list[WriteOutcome]:
    """Write a finished task into long-term memory; returns one outcome per item written or merged.

    ``completed_tasks`` are dicts with ``description``, ``status`` (``success``/``failure``) and
    ``context`` (what the subtask found), as in the Insight Doc; ``hops`` are the tool calls of the
    task, dicts of scalars or lines. ``merge`` writes one statement from two near-duplicate facts or
    conclusions (the integration agent); ``redact`` removes e-mails, phone numbers and secrets first.
    Each item is written (or merged) on its own, all or nothing: a store that fails midway keeps the
    items already written, each whole and with its audit row. ``kinds`` limits what is written (the
    kinds a :func:`~amb_dspy.longterm.route.route` decision names); ``None`` writes every kind.
    """
    wanted = set(kinds) if kinds is not None else {"conclusion", "fact", "trajectory", "tool_effect"}

    def clean(text: str) -> str:
        return redact_text(text, region=region).text if redact else text

    goal, answer = clean(goal.strip()), clean(answer.strip())
    spans, node_ids, plain = _citation_sources(citations, clean)
    outcomes = []
    if goal and answer and "conclusion" in wanted:
        metadata = ItemMetadata(node_ids=tuple(dict.fromkeys(node_ids)), source_spans=tuple(spans),
                                citations=tuple(dict.fromkeys(plain)))
        outcomes.append(store.write(namespace, fit_content(f"Question: {goal}\nAnswer: {answer}"), "conclusion",
                                    metadata=metadata, task_id=task_id, reason="conclusion of a finished task",
                                    merge=merge))
    for task in completed_tasks if "fact" in wanted else ():
        fact = _subtask_fact(task, goal, clean)
        if fact is not None:
            outcomes.append(store.write(namespace, fact[0], "fact", metadata=fact[1], task_id=task_id,
                                        reason="finding of a completed subtask", merge=merge))
    if (completed_tasks or hops) and "trajectory" in wanted:
        status = "success" if _succeeded(answer, completed_tasks) else "failure"
        metadata = ItemMetadata(extra={"status": status})
        outcomes.append(store.write(namespace, _trajectory(goal, status, completed_tasks, hops, clean), "trajectory",
                                    metadata=metadata, task_id=task_id, reason=f"trajectory of a finished task ({status})"))
    for effect in tool_effects(hops) if "tool_effect" in wanted else ():
        outcomes.append(store.write(namespace, clean(effect), "tool_effect", task_id=task_id,
                                    reason="a tool call of a finished task"))
    return outcomes


def recall(store: LongTermStore, *, namespace: str, query: str, min_score: float = DEFAULT_MIN_SCORE,
           max_tokens: int = DEFAULT_MAX_TOKENS, k: int = DEFAULT_RECALL_K,
           count_tokens: Callable[[str], int] | None = None) -> list[RecalledItem]:
    """The best items for ``query`` scoring at least ``min_score``, best first, whose lines fit in
    ``max_tokens`` together (an item too long for what is left is skipped, a shorter one may follow)."""
    if count_tokens is None:
        from amb_dspy.agents.chunking import estimate_tokens as count_tokens
    recalled, budget = [], max_tokens - count_tokens(RECALL_HEADER)
    for scored in store.search(namespace, query, k=k, min_score=min_score):
        candidate = RecalledItem(scored.item, scored.score)
        cost = count_tokens(candidate.line())
        if cost <= budget:
            recalled.append(candidate)
            budget -= cost
    return recalled


def format_recalled(items: Sequence[RecalledItem]) -> str:
    """The lines for ``<memory>``: a header, then one entry per item with its task id and date; empty
    when nothing was recalled."""
    if not items:
        return ""
    return "\n".join([RECALL_HEADER, *(item.line() for item in items)])
