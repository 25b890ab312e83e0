"""A run's checkpoint: everything needed to continue a killed run from its last completed loop.

One JSON file, ``DIR/checkpoint.json``, replaced atomically after the context is memorised and after
every loop: the run state (loops, conflicts, retries, answer so far and how it was made: from memory on the fast
path, or extractive; errors), the usage so far, the
whole bank, and the tool journal's length and tool cache (:mod:`amb_dspy.task.journal`: the tool calls
of a loop killed mid-way are not lost with it). A run resumed from it does no completed loop again and loses nothing they produced.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.storage.bank_file import BankFileError, write_json_atomically
from amb_dspy.task.state import Conflict, RunState

CHECKPOINT_FILE = "checkpoint.json"
FORMAT_NAME = "amb-dspy-checkpoint"
VERSION = 1


def write_checkpoint(directory: str | Path, state: RunState, usage: dict[str, dict[str, int]],
                     store: MemoryStore, tools: dict[str, Any] | None = None) -> Path:
    """``tools``: the tool journal's line count and the tool cache's state (see :mod:`amb_dspy.task.journal`)."""
    payload = {"format": FORMAT_NAME, "version": VERSION, "run": run_record(state), "usage": usage, "bank": store.payload(),
               "tools": tools or {}}
    return write_json_atomically(Path(directory) / CHECKPOINT_FILE, payload)


def read_checkpoint(directory: str | Path, embedder: Embedder, notices: list[str] | None = None
                    ) -> tuple[RunState, dict[str, dict[str, int]], MemoryStore]:
    """The run state, usage and store of a checkpoint; BankFileError (one line) if it cannot be used."""
    path = Path(directory) / CHECKPOINT_FILE
    if not path.is_file():
        raise BankFileError(f"{path}: no checkpoint here (amb run --checkpoint DIR writes one)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise BankFileError(f"{path}: unreadable checkpoint ({type(exc).__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME or raw.get("version") != VERSION:
        raise BankFileError(f"{path}: not an amb-dspy checkpoint of version {VERSION}")
    store = MemoryStore.from_payload(raw.get("bank"), embedder, path, notices)
    try:
        state = run_state(raw["run"])
        usage = usage_counts(raw["usage"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BankFileError(f"{path}: invalid checkpoint run state ({type(exc).__name__}: {exc})") from None
    if store.insight_doc is None or store.insight_doc.doc_id != state.doc_id:
        raise BankFileError(f"{path}: the run state and the bank belong to different tasks")
    return state, usage, store


def read_tool_record(directory: str | Path) -> dict[str, Any]:
    """The ``tools`` record of a checkpoint read by :func:`read_checkpoint` ({} in one written before it existed)."""
    raw = json.loads((Path(directory) / CHECKPOINT_FILE).read_text(encoding="utf-8"))
    tools = raw.get("tools") if isinstance(raw, dict) else None
    return tools if isinstance(tools, dict) else {}


def run_record(state: RunState) -> dict[str, Any]:
    """The run state as JSON (:func:`run_state` reads it back): a checkpoint's, a server task's record."""
    run = asdict(state)
    run["retried"] = sorted(state.retried)
    return run


def usage_counts(usage: dict[str, Any]) -> dict[str, dict[str, int]]:
    """LM usage by agent as a record holds it (``UsageMeter.usage()`` written as JSON), its counts whole numbers
    (TypeError, ValueError or AttributeError when it is not one)."""
    return {str(agent): {str(k): int(v) for k, v in counts.items()} for agent, counts in usage.items()}


def run_state(run: dict[str, Any]) -> RunState:
    """The run state :func:`run_record` wrote (KeyError, TypeError or ValueError when it is not one)."""
    def conflict(data: dict[str, Any] | None) -> Conflict | None:
        return None if data is None else Conflict([str(i) for i in data["node_ids"]], str(data["description"]),
                                                  int(data["round"]))

    return RunState(
        doc_id=str(run["doc_id"]), conflicts=[conflict(c) for c in run["conflicts"]], active=conflict(run["active"]),
        answer=str(run["answer"]), loops=int(run["loops"]), retried=set(map(str, run["retried"])),
        errors=list(map(str, run["errors"])), notices=list(map(str, run["notices"])),
        citations=list(map(str, run["citations"])),
        fallbacks={str(agent): int(n) for agent, n in run.get("fallbacks", {}).items()},
        # how the answer was made: a fast-path answer ends the run on resume, an extractive one stays marked
        answered_from_memory=_flag(run, "answered_from_memory"), extractive=_flag(run, "extractive"),
        tool_calls=int(run.get("tool_calls", 0)), tool_failures=int(run.get("tool_failures", 0)),
    )


def _flag(run: dict[str, Any], name: str) -> bool:
    """A boolean of the run state (False in a checkpoint written before it was recorded)."""
    value = run.get(name, False)
    if not isinstance(value, bool):
        raise ValueError(f"{name} is {value!r}, not true or false")
    return value
