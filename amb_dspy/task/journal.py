"""Resume loses nothing: every tool response is written to the checkpoint folder the moment it returns.

``DIR/tool_calls.jsonl`` gets one line per backend call of ``search`` and ``visit`` (the tools the tool
cache keys: :func:`amb_dspy.task.tool_cache.call_key`): the tool, its arguments, the whole response and what
the executor's LM was shown; the line is flushed and fsynced before the response reaches the executor.
Each checkpoint records how many lines the journal held when it was written, and the tool cache's
state. A run resumed from it:

* rebuilds the tool cache from the checkpoint, so a repeat of a search or visit of a completed loop is
  answered from memory, as it would have been without the interruption;
* replays the lines written after the checkpoint (the interrupted loop's calls): a call with the same
  tool and arguments is answered from its line, in order, once each, instead of reaching the backend;
* at its first checkpoint, keeps any replayable response the resumed run did not ask for again as an
  interaction entry of its own (and in the tool cache), so no response is lost.

A line cut short by the kill is dropped (the call it recorded never reached the executor).
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import Any

import dspy

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InteractionEntry
from amb_dspy.task.tool_cache import ToolCache, call_key
from amb_dspy.tools.observation import Observation, full_text

JOURNAL_FILE = "tool_calls.jsonl"


class ToolJournal:
    """The journal of one run's tool calls in ``directory`` (see module docstring).

    ``replay_after``: the line count a checkpoint recorded, when resuming from it (the lines after it are
    replayed); None for a new run, which starts an empty journal.
    """

    def __init__(self, directory: str | Path, replay_after: int | None = None):
        self.path = Path(directory) / JOURNAL_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        records = _read_lines(self.path) if replay_after is not None else []
        self.lines = len(records)
        self._replay: dict[tuple[str, str], deque[dict[str, Any]]] = {}
        for record in records[replay_after or 0:]:
            self._replay.setdefault(_key(record["name"], record["args"]), deque()).append(record)
        # rewritten whole: a new run starts empty, a resumed one drops a line cut short by the kill
        with self.path.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            out.flush()
            os.fsync(out.fileno())
        self.replayed = 0

    def wrap(self, tool: dspy.Tool) -> dspy.Tool:
        """``tool`` with each backend call journaled, or answered from the journal when it is being replayed."""
        if call_key(tool.name, {}) is None:
            return tool
        func = tool.func

        def call(**kwargs: Any) -> Any:
            waiting = self._replay.get(_key(tool.name, kwargs))
            if waiting:
                record = waiting.popleft()
                self.replayed += 1
                return record["full"] if record["shown"] == record["full"] else Observation(record["shown"], record["full"])
            observation = func(**kwargs)
            self._append({"name": tool.name, "args": dict(kwargs), "shown": str(observation),
                          "full": full_text(observation)})
            return observation

        tool.func = call
        return tool

    def unasked(self) -> list[dict[str, Any]]:
        """The replayable calls the resumed run has not asked for again (oldest first); forgets them."""
        left = sorted((r for waiting in self._replay.values() for r in waiting), key=lambda r: r["line"])
        self._replay.clear()
        return left

    def _append(self, record: dict[str, Any]) -> None:
        record = {"line": self.lines, **record}
        with self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        self.lines += 1


def keep_unasked(journal: ToolJournal, store: MemoryStore, cache: ToolCache) -> None:
    """The replayable responses the resumed run did not ask for again, kept as one interaction entry (not
    converted: that would take LM calls the run did not plan) that the tool cache answers repeats from."""
    left = journal.unasked()
    if not left:
        return
    text = "\n\n".join(record["full"] for record in left)
    entry = store.record_entry(InteractionEntry(text=text, metadata={
        "source": "executor", "tool_calls": [{"name": r["name"], "args": r["args"]} for r in left],
        "conversion_failed": "fetched before the run was interrupted; the resumed run did not ask for it again"}))
    cursor = 0
    for record in left:
        start = text.find(record["full"], cursor)
        cache.remember(record["name"], record["args"], entry.entry_id, (start, start + len(record["full"])))
        cursor = start + len(record["full"])


def _key(name: str, args: dict[str, Any]) -> tuple[str, str]:
    return name, json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """The whole records of ``path`` in order; reading stops at a line cut short or unreadable."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        try:
            record = json.loads(line)
            record["name"], record["args"], record["shown"], record["full"]  # noqa: B018 - all four present
        except (ValueError, TypeError, KeyError):
            break
        records.append({**record, "line": len(records)})
    return records
