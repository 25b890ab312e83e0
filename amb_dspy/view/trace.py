"""A run's trace: one JSON object per progress event, written as the run goes, read back as a table.

``MemoryBank(progress=...)`` calls its callback at every phase (initialise, memorise, plan, execute,
merge, answer, done) with a :class:`amb_dspy.bank.ProgressEvent`. :class:`TraceWriter` is such a
callback: it adds what a reader wants to know afterwards (what changed since the previous event, and
when) and appends one line to a JSON Lines file, flushed at once, so a run that dies leaves its trace
up to the last event. ``fan_out(show, writer)`` gives both the CLI's progress display and the trace
the same events.

A record holds ``phase``, ``loop``, ``seconds`` (since the writer started) and ``seconds_delta``,
``lm_calls`` and ``tokens`` (cumulative) with their ``_delta``, ``nodes`` and ``edges`` with
``nodes_added`` and ``edges_added`` (net: a merge can make them negative), ``conflicts`` (queued or
being checked), ``message``, and ``agent_calls``: the LM calls each agent made since the previous
event. ``cache_hits`` and ``fallbacks`` are recorded when the event carries them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from amb_dspy.text import printable
from amb_dspy.view.model import ViewError

OPTIONAL_COUNTERS = ("cache_hits", "fallbacks")  # recorded only when the progress event carries them


class TraceError(ViewError):
    """A trace file cannot be written or read; the message is one line."""


def _delta(now: dict[str, Any], before: dict[str, Any] | None, key: str) -> Any:
    return now[key] - before[key] if before and isinstance(before.get(key), (int, float)) else now[key]


def trace_record(event: Any, previous: dict[str, Any] | None, seconds: float) -> dict[str, Any]:
    """The trace line for ``event``, given the previous line (None for the first) and the time since the start."""
    record: dict[str, Any] = {
        "phase": event.phase, "loop": event.loop, "seconds": round(seconds, 3),
        "lm_calls": event.lm_calls, "tokens": event.tokens, "nodes": event.nodes, "edges": event.edges,
        "conflicts": event.conflicts,
    }
    for counter in OPTIONAL_COUNTERS:
        value = getattr(event, counter, None)
        if isinstance(value, dict):  # per agent: the trace keeps the run's total
            value = sum(value.values())
        if value is not None:
            record[counter] = value
    record["seconds_delta"] = round(_delta(record, previous, "seconds"), 3)
    record["lm_calls_delta"] = _delta(record, previous, "lm_calls")
    record["tokens_delta"] = _delta(record, previous, "tokens")
    record["nodes_added"] = _delta(record, previous, "nodes")
    record["edges_added"] = _delta(record, previous, "edges")
    for counter in OPTIONAL_COUNTERS:
        if counter in record:
            record[f"{counter}_delta"] = _delta(record, previous, counter)
    usage = {agent: u.get("calls", 0) for agent, u in (getattr(event, "usage", None) or {}).items()}
    before = (previous or {}).get("_agent_totals", {})
    record["agent_calls"] = {agent: calls - before.get(agent, 0) for agent, calls in usage.items()
                             if calls - before.get(agent, 0)}
    record["message"] = event.message
    record["_agent_totals"] = usage  # kept in memory for the next delta, not written
    return record


class TraceWriter:
    """A progress callback that appends one JSON line per event to ``path`` (replaced at the first event).

    The path is checked when the writer is made, so a bad one fails before a run starts; the file is
    created only when the first event arrives, so a run refused for bad input leaves nothing behind.
    """

    def __init__(self, path: str | Path, clock: Callable[[], float] = time.monotonic):
        self.path = Path(path)
        if self.path.is_dir():
            raise TraceError(f"trace {self.path}: is a folder, not a file")
        if not self.path.parent.is_dir():
            raise TraceError(f"trace {self.path}: folder {self.path.parent} does not exist")
        self._clock = clock
        self._start = clock()
        self._previous: dict[str, Any] | None = None

    def __call__(self, event: Any) -> None:
        record = trace_record(event, self._previous, self._clock() - self._start)
        line = json.dumps({k: v for k, v in record.items() if not k.startswith("_")}, ensure_ascii=False)
        try:
            with self.path.open("a" if self._previous is not None else "w", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as exc:
            raise TraceError(f"trace {self.path}: cannot be written ({exc.strerror or type(exc).__name__})") from None
        self._previous = record


def fan_out(*callbacks: Callable[[Any], None] | None) -> Callable[[Any], None]:
    """One progress callback that calls each given one in turn (None entries are skipped)."""
    targets = [c for c in callbacks if c is not None]

    def call(event: Any) -> None:
        for target in targets:
            target(event)

    return call


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """The records of a trace file; TraceError (one line) if it is missing or a line is not a trace record."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file (binary data)") from None
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise TraceError(f"{path} line {number}: not valid JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("phase"), str) or not isinstance(record.get("loop"), int):
            raise TraceError(f"{path} line {number}: not a trace record (needs a phase and a loop number)")
        records.append(record)
    return records


def _with_delta(record: dict[str, Any], key: str, delta_key: str) -> str:
    value, delta = record.get(key, ""), record.get(delta_key)
    return f"{value} ({delta:+d})" if isinstance(delta, int) and delta else str(value)


def trace_table(records: list[dict[str, Any]], title: str = "Run trace") -> Table:
    """The trace as a table: one row per event, with cumulative counts and what each step changed."""
    optional = [c for c in OPTIONAL_COUNTERS if any(c in r for r in records)]
    table = Table(title=Text(printable(f"{title}: {len(records)} events")), expand=True)
    for column in ("loop", "phase", "s", "Δs", "LM calls", "tokens", "nodes", "edges", "conflicts", *optional):
        table.add_column(column.replace("_", " "), justify="left" if column == "phase" else "right", no_wrap=True)
    table.add_column("agents (calls)", overflow="fold")
    table.add_column("message", overflow="fold", ratio=2)
    for r in records:
        agents = ", ".join(f"{agent} {calls}" for agent, calls in (r.get("agent_calls") or {}).items())
        table.add_row(
            str(r["loop"]), Text(printable(r["phase"])), f"{r.get('seconds', 0):.1f}", f"{r.get('seconds_delta', 0):.1f}",
            _with_delta(r, "lm_calls", "lm_calls_delta"), _with_delta(r, "tokens", "tokens_delta"),
            _with_delta(r, "nodes", "nodes_added"), _with_delta(r, "edges", "edges_added"), str(r.get("conflicts", "")),
            *(_with_delta(r, c, f"{c}_delta") for c in optional), Text(printable(agents)),
            Text(printable(str(r.get("message", "")), lines=True)),
        )
    return table
