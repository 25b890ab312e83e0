"""``AgentLMs``: the main LM plus optional per-agent LMs, and the block that makes one agent's LM active."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import dspy

from amb_dspy.lm.build import build_lm
from amb_dspy.lm.grammar_adapter import adapter_for
from amb_dspy.lm.specs import resolve_lm_spec
from amb_dspy.lm.usage import metered_as

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig


class AgentLMs:
    """The main LM plus optional per-agent LMs (``config.agent_lms``), built once and shared."""

    def __init__(self, main: dspy.BaseLM, per_agent: Mapping[str, dspy.BaseLM] | None = None, *,
                 notice: str | None = None):
        self.main = main
        self.per_agent = dict(per_agent or {})
        self.notice = notice

    @classmethod
    def from_config(cls, config: AmbConfig) -> AgentLMs:
        spec, notice = resolve_lm_spec(config)
        built = {spec: build_lm(spec, config)}
        per_agent = {}
        for agent, agent_spec in config.agent_lms.items():
            agent_spec = agent_spec.strip()
            if agent_spec not in built:
                built[agent_spec] = build_lm(agent_spec, config)
            per_agent[agent] = built[agent_spec]
        return cls(built[spec], per_agent, notice=notice)

    def for_agent(self, agent: str) -> dspy.BaseLM:
        return self.per_agent.get(agent, self.main)

    def all(self) -> list[dspy.BaseLM]:
        unique: dict[int, dspy.BaseLM] = {id(self.main): self.main}
        unique.update((id(lm), lm) for lm in self.per_agent.values())
        return list(unique.values())

    @contextlib.contextmanager
    def use(self, agent: str, tools: Iterable[Callable | dspy.Tool] = ()) -> Iterator[dspy.BaseLM]:
        """Run the block with ``agent``'s LM and adapter as DSPy's defaults, its calls metered as ``agent``.

        ``tools``: a ReAct's tools, so that an embedded model's tool calls are held to their arguments.
        """
        lm = self.for_agent(agent)
        with dspy.context(lm=lm, adapter=adapter_for(lm, tools)), metered_as(agent):
            yield lm
