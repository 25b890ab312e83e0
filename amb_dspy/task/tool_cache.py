"""No tool call twice: a task's searches and visits, answered from the Interaction Tree when repeated.

A ``search`` whose normalised query was already run in this task, or a ``visit`` of a URL already read,
does not reach its backend: the earlier response is read back from the entry that recorded it, marked
as a repeat naming the node(s) it became, and it is not converted to memory again. Failed calls are not
remembered. The executor's ``<task>`` lists what was already fetched, so it can plan around it.

An agent outside the built-in loop hands its tool results over after the fact (:meth:`ToolCache.observed`,
used by :class:`~amb_dspy.task.session.TaskSession`): a result already observed, same call and same text, is
not converted again; any other tool than search and visit is keyed by its name and exact arguments.

Queries are compared as bags of words (case, punctuation, spacing and word order ignored): keyword
search, local BM25 and web engines alike, rank the same words in another order the same way, and a
small executor often reorders its keywords. URLs are compared with scheme and host lower-cased, http
and https alike, the fragment dropped and a trailing slash ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import dspy

from amb_dspy.agents.chunking import estimate_tokens
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.keyword import words
from amb_dspy.tools.observation import Observation, cap_observation, full_text


def search_key(query: str) -> str:
    """A search query as a bag of lower-cased words."""
    return "search:" + " ".join(sorted(set(words(str(query)))))


def url_key(url: str) -> str:
    """A URL with scheme and host lower-cased, http(s) alike, no fragment and no trailing slash."""
    text = str(url).strip()
    parts = urlsplit(text)
    if not parts.scheme or not parts.netloc:
        return "visit:" + text.rstrip("/")
    scheme = "http" if parts.scheme.lower() in ("http", "https") else parts.scheme.lower()
    path = parts.path.rstrip("/")
    return f"visit:{scheme}://{parts.netloc.lower()}{path}" + (f"?{parts.query}" if parts.query else "")


def call_key(name: str, args: dict[str, Any]) -> str | None:
    """The cache key of a tool call, or None for tools that are never cached (deep_retrieval reads memory)."""
    if name == "search":
        return search_key(args.get("query", ""))
    if name == "visit":
        return url_key(args.get("url", ""))
    return None


# Tools that read memory back, or end a ReAct loop: what they return is never new knowledge.
NEVER_CACHED = frozenset({"deep_retrieval", "finish"})


def observed_key(name: str, args: dict[str, Any]) -> str | None:
    """The key of any tool's call: :func:`call_key` for search and visit, else the name and exact arguments."""
    key = call_key(name, args)
    if key is not None or name in NEVER_CACHED:
        return key
    return f"{name}:" + json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


class Repeat(Observation):
    """The observation of a repeated call: answered from memory, never converted to memory again."""

    cached = True


@dataclass
class _Fetched:
    label: str  # what the executor is told was fetched, e.g. "search 'festival date'"
    text: str  # the whole response, until its entry holds it
    entry_id: str | None = None
    span: tuple[int, int] | None = None


@dataclass
class ToolCache:
    """One task's fetched searches and pages (see module docstring); ``enabled=False`` passes every call on."""

    store: MemoryStore
    enabled: bool = True
    max_observation_chars: int = 20_000
    _fetched: dict[str, _Fetched] = field(default_factory=dict)
    _order: list[str] = field(default_factory=list)  # keys, oldest first

    def wrap(self, tool: dspy.Tool) -> dspy.Tool:
        """``tool`` answering repeated calls from memory (tools that are never cached are left as they are)."""
        func = tool.func

        def call(**kwargs: Any) -> Any:
            key = call_key(tool.name, kwargs) if self.enabled else None
            if key is not None and key in self._fetched:
                return self._repeat(key)
            observation = func(**kwargs)
            text = full_text(observation)
            if key is not None and not text.startswith(("Error:", "Execution error")):
                self._fetched[key] = _Fetched(self._label(tool.name, kwargs), text)
                self._order.append(key)
            return observation

        if call_key(tool.name, {}) is not None:
            tool.func = call
        return tool

    def observed(self, name: str, args: dict[str, Any], text: str) -> Repeat | None:
        """An outside agent's result of ``name(**args)``: a :class:`Repeat` when this task already holds the
        same call with the same text in memory, else None, the call noted as fetched (see :meth:`recorded`)."""
        key = observed_key(name, args) if self.enabled else None
        if key is None:
            return None
        fetched = self._fetched.get(key)
        if fetched is not None and fetched.text == text:
            return self._repeat(key)
        if fetched is not None:  # the same call answered anew: the newer text is the one to keep
            self._order.remove(key)
        self._fetched[key] = _Fetched(self._label(name, args), text)
        self._order.append(key)
        return None

    def entry_of(self, name: str, args: dict[str, Any]) -> str | None:
        """The Interaction Tree entry that holds the response of ``name(**args)``, if it became memory."""
        key = observed_key(name, args)
        fetched = self._fetched.get(key) if key else None
        return fetched.entry_id if fetched is not None else None

    def recorded(self, calls: Iterable[Any], entry_id: str) -> None:
        """The responses of ``calls`` now live in entry ``entry_id``: later repeats read them from there."""
        text = self.store.tree.entries[entry_id].text
        cursor = 0
        for call in calls:
            key = observed_key(call.name, call.args)
            fetched = self._fetched.get(key) if key else None
            start = text.find(call.observation, cursor)
            if fetched is None or fetched.entry_id is not None or start < 0:
                continue
            fetched.entry_id, fetched.span = entry_id, (start, start + len(call.observation))
            cursor = start + len(call.observation)

    def forget(self, calls: Iterable[Any]) -> None:
        """Drop ``calls`` from the cache (their responses did not become memory), so a repeat runs again."""
        for call in calls:
            key = observed_key(call.name, call.args)
            if key in self._fetched and self._fetched[key].entry_id is None:
                del self._fetched[key]
                self._order.remove(key)

    def state(self) -> list[dict[str, Any]]:
        """What the cache holds, oldest first, for a checkpoint: where each response lives (its entry and
        span), or its text while no entry holds it yet."""
        return [{"key": key, "label": f.label, "entry_id": f.entry_id, "span": list(f.span) if f.span else None,
                 "text": f.text if f.entry_id is None else ""} for key, f in ((k, self._fetched[k]) for k in self._order)]

    def restore(self, state: Iterable[dict[str, Any]]) -> None:
        """The cache as :meth:`state` described it (a resumed run); entries no longer in the tree are skipped."""
        for item in state:
            entry_id = item.get("entry_id")
            if entry_id is not None and entry_id not in self.store.tree.entries:
                continue
            text = self.store.tree.entries[entry_id].text if entry_id else str(item.get("text", ""))
            span = tuple(item["span"]) if item.get("span") else None
            self._fetched[str(item["key"])] = _Fetched(str(item["label"]), text, entry_id, span)
            self._order.append(str(item["key"]))

    def remember(self, name: str, args: dict[str, Any], entry_id: str, span: tuple[int, int]) -> None:
        """A response that lives in ``span`` of entry ``entry_id`` (kept there without this run's executor
        having asked for it): later calls with these arguments are answered from there."""
        key = call_key(name, args) if self.enabled else None
        if key is not None and key not in self._fetched:
            text = self.store.tree.entries[entry_id].text
            self._fetched[key] = _Fetched(self._label(name, args), text, entry_id, span)
            self._order.append(key)

    def already_fetched(self, max_tokens: int = 150) -> list[str]:
        """What was fetched in this task, most recent first, within about ``max_tokens`` tokens."""
        lines, used = [], 0
        for key in reversed(self._order):
            label = self._fetched[key].label
            used += estimate_tokens(label) + 2
            if used > max_tokens:
                break
            lines.append(label)
        return lines

    def _repeat(self, key: str) -> Repeat:
        fetched = self._fetched[key]
        text, where = fetched.text, "this task's memory"
        if fetched.entry_id is not None and fetched.entry_id in self.store.tree.entries:
            start, end = fetched.span
            text = self.store.tree.entries[fetched.entry_id].text[start:end]
            nodes = [n for n, entries in self.store.tree.node_to_entries.items() if fetched.entry_id in entries]
            where = f"memory node(s) {', '.join(nodes)}" if nodes else f"interaction entry {fetched.entry_id}"
        header = (f"(Repeat: {fetched.label} was already done in this task; its result is in {where}. "
                  "Answered from memory, no need to call it again.)\n")
        shown = cap_observation(header + text, self.max_observation_chars)
        return Repeat(str(shown), header + text)

    @staticmethod
    def _label(name: str, args: dict[str, Any]) -> str:
        if name == "search":
            return f"search '{' '.join(str(args.get('query', '')).split())[:80]}'"
        if name == "visit":
            return f"visit {str(args.get('url', '')).strip()[:120]}"
        return f"{name} {json.dumps(args, ensure_ascii=False, default=str)[:100]}"
