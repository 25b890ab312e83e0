"""What a session accepts from an outside agent, checked at the door, and what it answers an observation with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amb_dspy.errors import InputError
from amb_dspy.memory.bank_cache import DEFAULT_SIZE, shared_banks
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage import InsightDoc

__all__ = ["MAX_NAME_CHARS", "Observed", "checked_text", "start_store"]

MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class Observed:
    """What became of an observed tool result: its entry and nodes, or the earlier ones it repeats."""

    entry_id: str | None
    node_ids: list[str] = field(default_factory=list)
    repeat: bool = False
    failure: str = ""  # why no node was made (the raw text is still kept in the tree)
    message: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"entry_id": self.entry_id, "node_ids": self.node_ids, "repeat": self.repeat,
                "failure": self.failure, "message": self.message}


def checked_text(what: str, text: Any, limit: int, *, empty_ok: bool = False) -> str:
    """``text`` if it is text, not empty (unless ``empty_ok``) and at most ``limit`` bytes; else InputError."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be text, not {type(text).__name__}")
    if not empty_ok and not text.strip():
        raise InputError(f"{what} is empty")
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InputError(f"{what} is {size} bytes, over the {limit}-byte limit (AMB_MAX_CONTEXT_BYTES)")
    return text


def checked_context(context: str, max_bytes: int) -> str:
    """A task's context or a document to ingest (empty when None), or InputError when it is over ``max_bytes``."""
    context = context or ""
    size = len(context.encode("utf-8"))
    if size > max_bytes:
        raise InputError(f"the context is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit "
                         "(AMB_MAX_CONTEXT_BYTES)")
    return context


def start_store(embedder, bank: str | Path | MemoryStore | None, doc: InsightDoc,
                cached: int = DEFAULT_SIZE) -> tuple[MemoryStore, list[str]]:
    """A new task's store, empty or a copy of a bank's graph and tree (BankFileError if the file is bad),
    and notices about the loading (a bank embedded with another model is embedded again). A bank file is read
    once per version for the tasks of this process, ``cached`` versions kept (:mod:`amb_dspy.memory.bank_cache`)."""
    notices: list[str] = []
    if bank is None:
        return MemoryStore(embedder, doc), notices
    if not isinstance(bank, MemoryStore):  # lent from the bank's shared store: its first change copies it
        return shared_banks(cached).store_for_task(bank, embedder, doc, notices), notices
    return bank.copy(doc), notices
