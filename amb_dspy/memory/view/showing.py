"""How a view shows what it ranked: node blocks and headers with short ids, and source lines with their relative
dates resolved and a day's stamp shown once, costed so that a block never runs over its budget."""

from __future__ import annotations

import os
from collections.abc import Callable

from amb_dspy.memory.bank_cache import shared_layout
from amb_dspy.memory.dates import resolve_dates
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.memory.view.lines import Evidence, day_stamp
from amb_dspy.storage import QueryGraphNode

SHORT_ID = 6  # the shortest id prefix shown: the executor resolves prefixes of six or more characters


def format_node(node: QueryGraphNode, number: int, node_id: str = "") -> str:
    """The spec's node block; ``node_id``: the id as shown (a unique prefix; the whole id by default)."""
    return (f"Memory {number} (node {node_id or node.id}):\nTopic: {node.context}\nKeywords: {', '.join(node.keywords)}"
            f"\nSummary: {node.summary}")


def _header(node_id: str, number: int = 10) -> str:
    """A group's header, as the summary view's (the executor cites ``[node ID]``, and citations and
    ``deep_retrieval`` take a unique id prefix); for costing, number 10 is the dearest form up to 99 groups."""
    return f"Memory {number} (node {node_id}):"


def _dearest_id(node_id: str) -> str:
    """A hex id of the same length that costs the most tokens: digits and letters alternating ("0a0a..."),
    as a lone digit costs 2 under :func:`estimate_tokens` and a lone letter 1."""
    return ("0a" * len(node_id))[:len(node_id)]


def _header_cost(node_id: str, count: Callable[[str], int]) -> int:
    """What a header may cost, whatever the characters of the (random) id: its dearest form's count, so that
    the same lines are chosen whatever ids the nodes drew."""
    return count(_header(_dearest_id(node_id))) + 2


def short_ids(ids: list[str], least: int = SHORT_ID) -> dict[str, str]:
    """Each id's shortest prefix of at least ``least`` characters that no other id starts with."""
    ordered = sorted(ids)
    short = {}
    for i, node_id in enumerate(ordered):
        shared = max((len(os.path.commonprefix([node_id, other])) for other in ordered[max(i - 1, 0):i + 2]
                      if other != node_id), default=0)
        short[node_id] = node_id[:max(least, shared + 1)]
    return short


class LineShow:
    """Lines of ``store``'s entries as a view shows them, and what they cost under ``count``; what it works out
    (a line's dated text and cost, the nodes' short ids) is kept, as entries are append-only. On a store lent by a
    bank's shared store (:mod:`amb_dspy.memory.bank_cache`), what it works out for the bank's own entries is kept
    for every task on that bank (it depends on nothing else), the rest for this view alone."""

    def __init__(self, store: MemoryStore, count: Callable[[str], int]):
        self.store, self.count = store, count
        self._short: tuple = (None, {})  # (the store's revision, the nodes' short ids)
        # entry id -> its resolved relative dates; (entry id, start, end) -> the line as shown, and (its stamp, its
        # cost without, the stamp's cost): this view's, and those shared by the tasks on the lender's entries
        self._own: tuple[dict, dict, dict] = ({}, {}, {})
        self._lent = {} if store.lender is None else store.lender.tree.entries  # the lender's: never changed
        self._shared: tuple[dict, dict, dict] = ({}, {}, {}) if store.lender is None else shared_layout(
            store.lender, ("shown", getattr(count, "__wrapped__", count)), lambda: ({}, {}, {}))

    def _kept(self, table: int, key, entry_id: str, make: Callable[[], object]):
        """``make()``, worked out once for ``key`` (of entry ``entry_id``) in memo ``table`` (0: dates, 1: dated
        lines, 2: costs): in the shared memo for a lender's entry (what it holds never changes), else this view's."""
        shared, own = self._shared[table], self._own[table]
        if key in shared:
            return shared[key]
        if key not in own:
            value = make()
            if entry_id in self._lent:
                shared[key] = value
                return value
            own[key] = value
        return own[key]

    def short_ids(self) -> dict[str, str]:
        """:func:`short_ids` of the store's nodes, worked out once per change of the store (once for every task on a
        shared bank while its store is the bank's)."""
        lender = self.store.lender
        if lender is not None:
            return shared_layout(lender, "short ids", lambda: short_ids(list(lender.graph.nodes_dict)))
        revision = (self.store.revision, len(self.store.graph))
        if self._short[0] != revision:
            self._short = (revision, short_ids(list(self.store.graph.nodes_dict)))
        return self._short[1]

    def id_cost(self, node_id: str) -> int:
        """What showing ``node_id`` may cost beyond its own count: ids are random, so each is costed in its
        dearest form."""
        return self.count(_dearest_id(node_id)) - self.count(node_id)

    def _dates_of(self, entry_id: str) -> list[tuple[int, int, str]]:
        """The entry's relative dates resolved: as ingest recorded them, else worked out now (older banks)."""
        return self._kept(0, entry_id, entry_id, lambda: self._resolved(entry_id))

    def _resolved(self, entry_id: str) -> list[tuple[int, int, str]]:
        entry = self.store.tree.entries[entry_id]
        recorded = entry.metadata.get("dates")
        return ([tuple(d) for d in recorded] if recorded is not None
                else resolve_dates(entry.text, str(entry.metadata.get("date", ""))))

    def dated(self, line: Evidence) -> str:
        """The line's text with each relative date followed by its absolute date: "yesterday (7 May 2023)"."""
        # entries are append-only: a line's dated text never changes
        return self._kept(1, (line.entry_id, line.start, line.end), line.entry_id, lambda: self._with_dates(line))

    def _with_dates(self, line: Evidence) -> str:
        text = line.text
        for start, end, absolute in reversed(self._dates_of(line.entry_id)):
            if line.start <= start and end <= line.end:
                cut = end - line.start
                text = f"{text[:cut]} ({absolute}){text[cut:]}"
        return text

    def render(self, lines: list[Evidence]) -> list[str]:
        """Lines as shown (text order is the caller's): dated, a run of lines with one stamp under it once."""
        out, stamp = [], None
        for line in lines:
            text = self.dated(line)
            own = day_stamp(text)
            if own:
                if own != stamp:
                    out.append(f"[{own}]")
                text = text[text.index("]") + 1:].lstrip()
            stamp = own or stamp  # a long turn's later sentences carry no stamp: still under the same one
            out.append(text)
        return out

    def _cost(self, line: Evidence, stamps: set) -> int:
        """Tokens a line adds to a group whose shown stamps are ``stamps`` (updated)."""
        own, cost, stamp_cost = self._kept(2, (line.entry_id, line.start, line.end), line.entry_id,
                                           lambda: self._costs_of(line))
        if own and own not in stamps:
            stamps.add(own)
            cost += stamp_cost
        return cost

    def _costs_of(self, line: Evidence) -> tuple[str, int, int]:
        """The line's stamp, its cost without it and the stamp's cost (for a line without one: "", its cost, 0)."""
        text = self.dated(line)
        own = day_stamp(text)
        return ((own, self.count(text[text.index("]") + 1:].lstrip()) + 1, self.count(f"[{own}]") + 1)
                if own else ("", self.count(text) + 1, 0))

    def fill(self, ranked: list[Evidence], budget: int, header: Callable[[str], int]) -> list[Evidence]:
        """Lines in rank order while they fit, each group's header (``header(node_id)`` tokens) and stamps
        costed once."""
        shown, used, stamps = [], 0, {}
        for line in ranked:
            fresh = line.node_id not in stamps
            seen = set(stamps.get(line.node_id, ()))
            cost = self._cost(line, seen) + (header(line.node_id) if fresh else 0)
            if used + cost <= budget:
                shown.append(line)
                stamps[line.node_id] = seen
                used += cost
        return shown

    def header_cost(self, node_id: str) -> int:
        """What the header of ``node_id``'s group may cost (:func:`_header_cost` of its short id)."""
        return _header_cost(self.short_ids()[node_id], self.count)

    def grouped(self, shown: list[Evidence]) -> str:
        """``shown`` in the text's order, under a header per node (its short id, for ``deep_retrieval`` and
        citations)."""
        short = self.short_ids()
        order = {entry_id: i for i, entry_id in enumerate(self.store.tree.entries)}
        groups: dict[str, list[Evidence]] = {}
        for line in sorted(shown, key=lambda line: (order.get(line.entry_id, 0), line.start)):
            groups.setdefault(line.node_id, []).append(line)
        blocks = [f"{_header(short[node_id], i)}\n" + "\n".join(self.render(group))
                  for i, (node_id, group) in enumerate(groups.items(), 1)]
        return "\n\n".join(blocks)
