"""What a finished task or ingest hands back: its figures as JSON, and its own memory to save.

:class:`RunResult` is a run's answer, memory and costs (:meth:`RunResult.from_session` reads them off the
task's session); :class:`IngestResult` is one document's ingest. Each keeps the store it was made from (not
part of its JSON), so ``result.export(path)`` saves that task's bank whatever else the bank ran meanwhile.
:class:`RunInterrupted` is Ctrl-C or SIGTERM during a run, with the memory built so far.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, PrivateAttr

from amb_dspy.errors import InputError
from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.task.session import TaskSession

__all__ = ["BankResult", "IngestResult", "RunInterrupted", "RunResult"]


class BankResult(BaseModel):
    """A result that holds the memory it describes (``store``), to save with :meth:`export`."""

    _store: MemoryStore | None = PrivateAttr(default=None)

    @property
    def store(self) -> MemoryStore | None:
        """The task's memory (None for a result read back from JSON)."""
        return self._store

    def kept(self, store: MemoryStore) -> BankResult:
        """This result, holding ``store``."""
        self._store = store
        return self

    def export(self, path: str | Path) -> Path:
        """Write this task's bank to ``path`` (JSON, or a bank database for ``.sqlite``/``.db``); returns the file
        written (another name when a larger bank is at ``path``: an export never replaces more memory with less)."""
        if self._store is None:
            raise InputError("nothing to export: this result holds no bank (it was read back from JSON)")
        return self._store.save(path)


class RunResult(BankResult):
    """A run's answer, how it ended, its memory as JSON, its costs and notes (``amb run``, ``MemoryBank.run``)."""

    answer: str
    termination: str
    loops: int
    insight_doc: dict[str, Any]
    query_graph: dict[str, Any]
    interaction_tree: dict[str, Any]
    usage: dict[str, dict[str, int]]
    errors: list[str]
    notices: list[str] = []
    hops: list[dict[str, Any]] = []  # each executed subtask (amb_dspy.storage.hops.Hop)
    fallbacks: dict[str, int] = {}  # how often each agent's deterministic policy stood in for its LM
    citations: list[dict[str, str]] = []  # {node_id, topic, source: the first raw passage the node came from}
    extractive: bool = False  # the answer quotes memory's best evidence line: no LM answered (amb_dspy.task.answering)
    seconds: float

    @classmethod
    def from_session(cls, session: TaskSession, termination: str, started: float) -> RunResult:
        """The result of ``session``'s run, ended by ``termination`` (reported as the ``done`` phase), which
        began at ``started`` (``time.monotonic()``); it keeps the session's store for :meth:`export`."""
        session.emit("done", termination)
        state, store = session.state, session.store
        return cls(
            answer=state.answer,
            termination=termination,
            loops=state.loops,
            insight_doc=store.insight_doc.model_dump(mode="json"),
            query_graph={"nodes": [n.model_dump(mode="json", exclude={"embedding"}) for n in store.graph.nodes_dict.values()],
                         "edges": [list(e) for e in store.graph.edges()]},
            interaction_tree=store.tree.to_dict(),
            usage=session.meter.usage(),
            errors=state.errors,
            notices=state.notices,
            fallbacks=dict(state.fallbacks),
            hops=[hop.model_dump(mode="json") for hop in store.hops],
            citations=[session.memory.citation(node_id) for node_id in state.citations if node_id in store.graph],
            extractive=state.extractive,
            seconds=round(time.monotonic() - started, 3),
        ).kept(store)


class IngestResult(BankResult):
    """One document's ingest (``MemoryBank.ingest``): the bank's size after it, what it cost, whether it added."""

    nodes: int
    edges: int
    usage: dict[str, dict[str, int]]
    fallbacks: dict[str, int]
    errors: list[str]
    seconds: float
    added: bool = True  # False: the store held the same text already, nothing was added
    replaced: bool = False  # a newer version of a document of the same name: the old one's nodes are superseded


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run, with the memory it had built (``store``), so that the caller can say
    what was kept and save it (``amb run --export``)."""

    def __init__(self, store: MemoryStore):
        super().__init__("interrupted")
        self.store = store
