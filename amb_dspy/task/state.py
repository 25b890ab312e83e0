"""What one run of the bank carries from step to step, what it reports, and the input it accepts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amb_dspy.errors import InputError
from amb_dspy.memory.written import Conflict
from amb_dspy.storage import CompletedTask, InsightDoc, PendingTask
from amb_dspy.text import is_binary


@dataclass(frozen=True)
class ProgressEvent:
    phase: str
    loop: int
    nodes: int
    edges: int
    conflicts: int
    lm_calls: int
    tokens: int
    message: str = ""
    usage: dict[str, dict[str, int]] = field(default_factory=dict)  # per agent, as UsageMeter.usage()
    fallbacks: dict[str, int] = field(default_factory=dict)  # per agent, deterministic policies used so far
    done: int = 0  # an add of documents: how many are done (committed, added or unchanged) ...
    total: int = 0  # ... of how many expected (0: not an add's count)
    text_tokens: int = 0  # ... and the estimated tokens of the documents done


@dataclass
class RunState:
    doc_id: str
    conflicts: list[Conflict] = field(default_factory=list)
    active: Conflict | None = None
    answer: str = ""
    loops: int = 0
    retried: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    fallbacks: dict[str, int] = field(default_factory=dict)
    answered_from_memory: bool = False  # the fast path's answer sufficed (amb_dspy.task.answering)
    extractive: bool = False  # the answer is the extractive policy's
    tool_calls: int = 0  # searches and visits that reached their tool (amb_dspy.task.tool_failures)
    tool_failures: int = 0  # of which failed


def read_context_file(path: str | Path, max_bytes: int) -> str:
    """The text of a context file, or InputError (one line) if it is missing, binary or too large."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"context file {path}: no such file")
    if not path.is_file():
        raise InputError(f"context file {path}: not a regular file")
    size = path.stat().st_size
    if size > max_bytes:
        raise InputError(f"context file {path}: {size / 1e6:.1f} MB is over the {max_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)")
    try:  # read at most max_bytes + 1: a /proc file says size 0 and may hold more
        with path.open("rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:  # /proc/self/mem, a file on a failing disk, a permission denied
        raise InputError(f"context file {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise InputError(f"context file {path}: over the {max_bytes / 1e6:.1f} MB limit (AMB_MAX_CONTEXT_BYTES)")
    if is_binary(data):
        raise InputError(f"context file {path}: binary data, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"context file {path}: not UTF-8 text") from None


def revised(doc: InsightDoc, *, completed: list[CompletedTask] | None = None,
            pending: list[PendingTask] = ()) -> InsightDoc:
    """The same task's Insight Doc with new task lists, built anew so its rules (<= 1 pending) are checked."""
    return InsightDoc(doc_id=doc.doc_id, task_goal=doc.task_goal,
                      completed_tasks=doc.completed_tasks if completed is None else completed, pending=list(pending))
