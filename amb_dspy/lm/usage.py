"""Usage metering: LM calls and prompt/completion tokens per agent, and the cap on calls of one run.

A :class:`UsageMeter` is a DSPy callback. It is attached for the span of a run with DSPy's own
mechanism, ``with meter.counting():`` (``dspy.context(callbacks=[..., meter])``), so it counts every
LM called inside that span, per-agent LMs included, and no call of another run that shares the same
LM objects. Calls count for the agent named by the innermost ``with metered_as(agent):``, else for
``"executor"``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import asdict, dataclass
from typing import Any

import dspy
from dspy import lm15
from dspy.utils.callback import BaseCallback

from amb_dspy.internals import reported_usage

DEFAULT_AGENT = "executor"

_current_agent: ContextVar[str | None] = ContextVar("amb_lm_agent", default=None)


@contextlib.contextmanager
def metered_as(agent: str) -> Iterator[None]:
    """LM calls made inside the block count for ``agent`` in every meter that sees them."""
    token = _current_agent.set(agent)
    try:
        yield
    finally:
        _current_agent.reset(token)


class LMCallCapReached(BaseException):  # noqa: N818 - named for what happened, like KeyboardInterrupt
    """The run made as many LM calls as its cap allows; raised before the next call is sent.

    A BaseException, like KeyboardInterrupt: DSPy's callback runner, ReAct's tool loop and agents
    catch ``Exception``, and a stop signal must reach the bank through all of them.
    """

    def __init__(self, cap: int):
        super().__init__(f"LM call cap reached: {cap} calls made (max_lm_calls={cap})")
        self.cap = cap


@dataclass
class AgentUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class UsageMeter(BaseCallback):
    """Counts LM calls and prompt/completion tokens per agent, and enforces a cap on calls.

    Every call counts, cache hits included (with no tokens); tokens come from the provider's usage
    report, exact for the embedded model.
    """

    def __init__(self, max_calls: int | None = None, default_agent: str = DEFAULT_AGENT):
        self.max_calls = max_calls
        self.default_agent = default_agent
        self._usage: dict[str, AgentUsage] = {}
        self._pending: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def counting(self) -> Iterator[UsageMeter]:
        """Meter every LM call made inside the block (other active callbacks, outer meters included, stay)."""
        active = list(dspy.settings.get("callbacks", None) or [])
        if any(callback is self for callback in active):
            yield self
            return
        with dspy.context(callbacks=[*active, self]):
            yield self

    def restore(self, usage: dict[str, dict[str, int]]) -> None:
        """Continue from ``usage`` (as :meth:`usage` returned it): a resumed run counts on, and its cap holds."""
        with self._lock:
            for agent, counts in usage.items():
                self._usage[agent] = AgentUsage(**counts)

    def track(self, agent: str):
        """Same as :func:`metered_as`: calls inside the block count for ``agent``."""
        return metered_as(agent)

    @property
    def calls(self) -> int:
        with self._lock:
            return sum(usage.calls for usage in self._usage.values())

    def usage(self) -> dict[str, dict[str, int]]:
        """``{agent: {"calls", "prompt_tokens", "completion_tokens"}}`` for every agent that called an LM."""
        with self._lock:
            return {agent: asdict(usage) for agent, usage in sorted(self._usage.items())}

    def total(self) -> dict[str, int]:
        total = AgentUsage()
        for usage in self.usage().values():
            total.calls += usage["calls"]
            total.prompt_tokens += usage["prompt_tokens"]
            total.completion_tokens += usage["completion_tokens"]
        return asdict(total)

    def report(self) -> dict[str, Any]:
        return {"agents": self.usage(), "total": self.total()}

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        agent = _current_agent.get() or self.default_agent
        with self._lock:
            if call_id in self._pending:  # registered twice for one call (on the LM and in the context): count once
                return
            made = sum(usage.calls for usage in self._usage.values())
            if self.max_calls is not None and made >= self.max_calls:
                raise LMCallCapReached(self.max_calls)
            self._usage.setdefault(agent, AgentUsage()).calls += 1
            self._pending[call_id] = (agent, instance)

    def on_lm_end(self, call_id: str, outputs: Any | None, exception: BaseException | None = None) -> None:
        with self._lock:
            agent, lm = self._pending.pop(call_id, (None, None))
        if agent is None or outputs is None:
            return
        if isinstance(outputs, lm15.Response):
            prompt_tokens, completion_tokens = outputs.usage.input_tokens or 0, outputs.usage.output_tokens or 0
        else:
            prompt_tokens, completion_tokens = reported_usage(lm, outputs)
        with self._lock:
            usage = self._usage[agent]
            usage.prompt_tokens += prompt_tokens
            usage.completion_tokens += completion_tokens
