"""Policy answers computed ahead of the call that asks for them.

An ingest that runs as a pipeline (:mod:`amb_dspy.memory.ingest_ahead`) works out, in a thread of its own, what
the deterministic policies (``--policy heuristic``) will answer for the next documents' classification and
structure: their answers depend on the text, the task goal and the agent's settings alone, never on the bank.
The answers wait here, keyed by the agent and its exact inputs; :meth:`~amb_dspy.agents.runner.AgentRunner.call`
takes one (:func:`prepared_answer`) instead of computing it again, within :func:`answers_prepared`. Inputs that
differ in anything (another task goal, other text) find nothing and are computed as before, so a bank is the
same whether its answers were prepared or not.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic_core import PydanticSerializationError, to_json


class PreparedAnswers:
    """Policy answers by ``(agent, inputs)``, each taken once; filled from one thread, taken from another."""

    def __init__(self) -> None:
        self._answers: dict[str, Any] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(agent: str, inputs: Mapping[str, Any]) -> str:
        """The answer's key: a hash of the agent's name and its inputs (strings and pydantic models) as JSON, every
        field of them; pydantic writes it in Rust, where a ``repr`` of a structure batch's models took a tenth of
        an ingest's commits. An input JSON cannot hold is keyed by its ``repr``."""
        try:
            serial = to_json([agent, sorted(inputs.items())])
        except PydanticSerializationError:
            serial = repr((agent, sorted(inputs.items()))).encode("utf-8", "surrogatepass")
        return hashlib.sha1(serial).hexdigest()

    def put(self, agent: str, inputs: Mapping[str, Any], answer: Any) -> str:
        """Keep ``answer`` for ``agent`` called with ``inputs``; returns its key (see :meth:`discard`)."""
        key = self.key(agent, inputs)
        with self._lock:
            self._answers[key] = answer
        return key

    def take(self, agent: str, inputs: Mapping[str, Any]) -> Any | None:
        """The answer prepared for this call, removed; None when there is none."""
        with self._lock:
            return self._answers.pop(self.key(agent, inputs), None)

    def discard(self, keys: Iterable[str]) -> None:
        """Forget answers no call took (a document the bank already held): memory stays bounded."""
        with self._lock:
            for key in keys:
                self._answers.pop(key, None)

    def __len__(self) -> int:
        return len(self._answers)


_ACTIVE: ContextVar[PreparedAnswers | None] = ContextVar("prepared_answers", default=None)


@contextmanager
def answers_prepared(answers: PreparedAnswers) -> Iterator[PreparedAnswers]:
    """Within the block (in this thread), the runner's policy calls take their answers from ``answers`` first."""
    token = _ACTIVE.set(answers)
    try:
        yield answers
    finally:
        _ACTIVE.reset(token)


def prepared_answer(agent: str, inputs: Mapping[str, Any]) -> Any | None:
    """The answer prepared for ``agent`` called with ``inputs`` within :func:`answers_prepared`, or None."""
    answers = _ACTIVE.get()
    return answers.take(agent, inputs) if answers is not None else None
