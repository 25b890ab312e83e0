"""One settings object for the whole bank, in sections: environment, an optional file, and flags.

:class:`AmbConfig` composes the sections of :mod:`amb_dspy.config.sections` (``config.models``,
``config.embedding``, ``config.loops``...); a module receives the section it reads (the embedder gets
``config.embedding``). Environment variables use the ``AMB_`` prefix (``AMB_LM``, ``AMB_RETRIEVAL_K``...).
The spec's unprefixed names are honoured too where users already have them set: ``LLM_API_KEY``,
``LLM_BASE_URL``, ``SERPER_API_KEY`` and ``JINA_API_KEY``.

Compatibility: the settings were one flat object before they had sections, and every field kept its flat
name, so the flat spelling still works everywhere and means the same field:

    AmbConfig(max_loops=2, policy="heuristic")            # keyword arguments
    config.max_loops                                       # == config.loops.max_loops
    config.model_copy(update={"checkpoint_dir": path})     # copies the paths section with the change

This package is also the only code that touches ``os.environ`` (:mod:`amb_dspy.config.environment`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from amb_dspy.config.environment import user_cache_dir

if TYPE_CHECKING:
    from amb_dspy.config.sections import (
        AGENT_NAMES,
        DEFAULT_LM,
        DEFAULT_WINDOW,
        AgentName,
        AgentSettings,
        EmbeddingSettings,
        ExecutorSettings,
        LimitSettings,
        LongTermSettings,
        LoopSettings,
        ModelSettings,
        PathSettings,
        RankWeights,
        RetrievalSettings,
        Section,
        ToolSettings,
        ViewSettings,
    )
    from amb_dspy.config.settings import FLAT_NAMES, SECTIONS, AmbConfig

# Loaded on first use, so that ``import amb_dspy`` (which sets the environment defaults) does not import pydantic.
_LAZY = {"AmbConfig": "settings", "FLAT_NAMES": "settings", "SECTIONS": "settings"}

__all__ = ["AGENT_NAMES", "DEFAULT_LM", "DEFAULT_WINDOW", "FLAT_NAMES", "SECTIONS", "AgentName", "AgentSettings",
           "AmbConfig", "EmbeddingSettings", "ExecutorSettings", "LimitSettings", "LongTermSettings", "LoopSettings",
           "ModelSettings", "PathSettings", "RankWeights", "RetrievalSettings", "Section", "ToolSettings", "ViewSettings",
           "user_cache_dir"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"amb_dspy.config.{_LAZY.get(name, 'sections')}")
    return getattr(module, name)
