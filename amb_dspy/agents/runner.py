"""The one place that decides, for every agent call of a task, whether its LM or its deterministic policy
answers, and counts each use of a policy in the task's run state.

``config.policy`` says how: ``"lm"`` the agent's LM only (a failure is the agent's :class:`AgentError`),
``"heuristic"`` the policy only, anything else the LM first and the policy when the LM's answer is
unusable. Every agent call of a task goes through its :class:`AgentRunner`:

* the five memory agents (:meth:`AgentRunner.call`, :meth:`AgentRunner.call_batch` when a batch is asked
  again item by item, :meth:`AgentRunner.try_call` when a failure is an answer too);
* the answer agent's verdict on memory before the loop (:meth:`AgentRunner.judge_memory`, the fast path);
* the executor's last answer (:meth:`AgentRunner.last_answer`): the answer agent alone, then the
  extractive policy; the direct strategy's one answer (:meth:`AgentRunner.answer`, :meth:`AgentRunner.extract`).

The runner holds no task state of its own: it reads and writes the ``errors`` and ``fallbacks`` of the
run record it is given, and the agents, their LMs and the embedder are shared by every task of a bank.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import dspy

from amb_dspy.agents.base import AgentError
from amb_dspy.agents.fallback import POLICIES
from amb_dspy.agents.prepared import prepared_answer
from amb_dspy.errors import one_line
from amb_dspy.lm import AgentLMs

__all__ = ["AgentRunner", "RunRecord", "one_attempt"]


class RunRecord(Protocol):
    """What the runner writes to: the task's errors and how often each agent's policy stood in."""

    errors: list[str]
    fallbacks: dict[str, int]


@contextmanager
def one_attempt() -> Iterator[None]:
    """No JSONAdapter retry after a ChatAdapter reply that does not parse: the fast path costs one call at most."""
    if type(dspy.settings.adapter) is dspy.ChatAdapter:
        with dspy.context(adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
            yield
    else:
        yield


class AgentRunner:
    """Calls one task's agents with their LMs or their policies (see the module docstring)."""

    def __init__(self, agents: dict[str, dspy.Module], lms: AgentLMs, embedder: Any, *, policy: str,
                 record: Callable[[], RunRecord], task_goal: Callable[[], str]):
        self.agents, self.lms, self.embedder, self.policy = agents, lms, embedder, policy
        self._record, self._task_goal = record, task_goal  # read at each call: a resumed task swaps its record
        self._count_lock = threading.Lock()  # agents' calls may run in threads (amb_dspy.parallel)

    @property
    def record(self) -> RunRecord:
        return self._record()

    def call(self, name: str, **inputs: Any) -> Any:
        """Call agent ``name`` as the policy says: with its LM (anything it raises but the LM-call cap
        becomes its AgentError), its deterministic policy, or the LM and then the policy when the LM's
        answer is unusable. Every use of a policy is counted in the run's ``fallbacks``."""
        if self.policy != "heuristic":
            try:
                return self._with_lm(name, **inputs)
            except AgentError as exc:
                if self.policy == "lm":
                    raise
                self.record.errors.append(f"{exc} (its deterministic policy was used)")
        if name == "structure":  # the policy favours the sentences the task asks about
            inputs = {**inputs, "task_goal": self._task_goal()}
        return self._with_policy(name, **inputs)

    def try_call(self, name: str, **inputs: Any) -> Any:
        """:meth:`call`, or the failure's reason (recorded in the run's errors) as a string."""
        try:
            return self.call(name, **inputs)
        except AgentError as exc:
            self.record.errors.append(str(exc))
            return str(exc)

    def call_batch(self, name: str, items: Sequence[Any], alone: Callable[[Any], dict[str, Any]]) -> list[Any]:
        """One call for a batch; when its answer is unusable (policy ``"lm"``), each item is asked in a
        call of its own (``alone(item)``: that call's inputs), a failure giving its reason (see :meth:`try_call`)."""
        try:
            return self.call(name, batch=list(items))
        except AgentError:
            return [self.try_call(name, **alone(item)) for item in items]

    def judge_memory(self, task_goal: str, memory: str) -> Any | None:
        """The fast path: the answer agent's one verdict on whether ``memory`` answers the goal, or None
        (the failure recorded). No retry and no policy: a failed call teaches the loop nothing."""
        try:
            with self.lms.use("answer"), one_attempt():
                return self.agents["answer"](task_goal=task_goal, memory=memory)
        except Exception as exc:  # noqa: BLE001 - the loop answers instead (the LM-call cap passes through)
            message = str(exc) if isinstance(exc, AgentError) else f"answer agent: {type(exc).__name__}: {one_line(exc)}"
            self.record.errors.append(f"{message} (memory not judged; the loop runs)")
            return None

    def last_answer(self, task_goal: str, memory: str, *, answered: bool) -> tuple[Any, bool] | None:
        """The executor's final pass gave no answer: ``(output, extractive)`` of the answer agent alone
        (one output field, counted as the executor's fallback), else, when no earlier step ``answered``,
        of the extractive policy (counted as the answer agent's); None under policy ``"lm"`` or when the
        earlier answer stands."""
        if self.policy == "lm":
            return None
        self._count("executor")
        output = self.answer(task_goal, memory)
        if output is not None:
            return output, False
        if answered:
            return None
        return self.extract(task_goal, memory), True

    def answer(self, task_goal: str, memory: str) -> Any | None:
        """The answer agent alone (one output field, read leniently when it does not parse), or None with the
        failure recorded: the direct strategy's one call, and the executor's last answer."""
        try:
            with self.lms.use("answer"):
                output = self.agents["answer"](task_goal=task_goal, memory=memory, judge=False)
        except Exception as exc:  # noqa: BLE001 - a failing LM leaves the earlier or the extractive answer
            message = str(exc) if isinstance(exc, AgentError) else f"{type(exc).__name__}: {one_line(exc)}"
            self.record.errors.append(f"answer from memory failed: {message}")
            return None
        if output.lenient:
            self.record.errors.append(
                f"answer agent: its reply did not parse; the answer was read from its text ({output.reason})")
        return output

    def extract(self, task_goal: str, memory: str, cover: bool = False) -> Any:
        """The extractive answer (the answer agent's policy, counted): memory's best evidence line, or with
        ``cover`` the lines that together cover the goal, cited."""
        return self._with_policy("answer", task_goal=task_goal, memory=memory, cover=cover)

    def _with_lm(self, name: str, **inputs: Any) -> Any:
        with self.lms.use(name):
            try:
                return self.agents[name](**inputs)
            except AgentError:
                raise
            except Exception as exc:  # noqa: BLE001 - an agent's failure fails the task, never the run
                raise AgentError(name, f"{type(exc).__name__}: {one_line(exc)}") from exc

    def _with_policy(self, name: str, **inputs: Any) -> Any:
        self._count(name)
        answer = prepared_answer(name, inputs)  # worked out ahead by an ingest pipeline, from the same inputs
        if answer is not None:
            return answer
        with self.lms.use(name):  # token counting and window caps follow the agent's LM; no LM call is made
            return POLICIES[name](self.agents[name], self.embedder, **inputs)

    def _count(self, name: str) -> None:
        with self._count_lock:
            fallbacks = self.record.fallbacks
            fallbacks[name] = fallbacks.get(name, 0) + 1
