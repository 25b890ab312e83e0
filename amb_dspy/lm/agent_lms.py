"""Which LM each agent of a run uses (:func:`resolve_lms`, the one documented order), and ``AgentLMs``: the
main LM plus per-agent LMs, with the block that makes one agent's LM active."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import dspy

from amb_dspy.lm.build import build_lm
from amb_dspy.lm.grammar_adapter import adapter_for
from amb_dspy.lm.introspect import is_embedded
from amb_dspy.lm.specs import resolve_lm_spec
from amb_dspy.lm.usage import metered_as

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig


class AgentLMs:
    """The main LM plus optional per-agent LMs (``config.agent_lms``), built once and shared."""

    def __init__(self, main: dspy.BaseLM, per_agent: Mapping[str, dspy.BaseLM] | None = None, *,
                 notice: str | None = None, adapter: dspy.Adapter | None = None):
        self.main = main
        self.per_agent = dict(per_agent or {})
        self.notice = notice
        self.adapter = adapter  # the user's choice for hosted models; None means DSPy's ChatAdapter

    @classmethod
    def from_config(cls, config: AmbConfig) -> AgentLMs:
        """The LMs ``config`` names, ignoring DSPy's settings (see :func:`resolve_lms`)."""
        with dspy.context(lm=None, adapter=None):
            return resolve_lms(config)

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
        adapter = adapter_for(lm, tools) if is_embedded(lm) or self.adapter is None else self.adapter
        with dspy.context(lm=lm, adapter=adapter), metered_as(agent):
            yield lm


def resolve_lms(config: AmbConfig, *, lm: dspy.BaseLM | None = None,
                agent_lms: Mapping[str, dspy.BaseLM] | None = None) -> AgentLMs:
    """The LMs of a run, read when it starts. The main LM is the first of:

    1. ``lm``, given to the bank;
    2. the LM active in DSPy's settings (``dspy.context(lm=...)`` around the run, or ``dspy.configure(lm=...)``);
    3. ``config.lm`` (``--lm``, ``AMB_LM``): a DSPy model string, ``local`` or ``gguf:PATH``;
    4. the spec's default (``deepseek/deepseek-chat``) when its key is set, else the embedded model, with a
       one-line notice.

    Per agent, ``agent_lms`` (LM objects, from Python) and then ``config.agent_lms`` (``AMB_AGENT_LMS``
    specs) override the main LM. The adapter DSPy is configured with is kept for hosted models; an
    embedded model always gets its grammar adapter (see :meth:`AgentLMs.use`).
    """
    notice = None
    built: dict[str, dspy.BaseLM] = {}
    main = lm if lm is not None else dspy.settings.lm
    if main is None:
        spec, notice = resolve_lm_spec(config)
        main = built[spec] = build_lm(spec, config)
    per_agent: dict[str, dspy.BaseLM] = {}
    for agent, spec in config.models.agent_lms.items():
        spec = spec.strip()
        if spec not in built:
            built[spec] = build_lm(spec, config)
        per_agent[agent] = built[spec]
    per_agent.update(agent_lms or {})
    return AgentLMs(main, per_agent, notice=notice, adapter=dspy.settings.adapter)
