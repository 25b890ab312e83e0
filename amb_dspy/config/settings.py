"""AmbConfig: the sections composed, with the flat names of the settings kept (see :mod:`amb_dspy.config`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from amb_dspy.config.sections import (
    AgentName,
    AgentSettings,
    EmbeddingSettings,
    ExecutorSettings,
    LimitSettings,
    LongTermSettings,
    LoopSettings,
    ModelSettings,
    PathSettings,
    RetrievalSettings,
    Section,
    ToolSettings,
    ViewSettings,
)

SECTIONS: dict[str, type[Section]] = {
    "models": ModelSettings, "retrieval": RetrievalSettings, "embedding": EmbeddingSettings, "view": ViewSettings,
    "tools": ToolSettings, "executor": ExecutorSettings, "agents": AgentSettings, "limits": LimitSettings,
    "loops": LoopSettings, "longterm": LongTermSettings, "paths": PathSettings,
}
# Every flat setting name -> the section that holds it.
FLAT_NAMES: dict[str, str] = {name: section for section, cls in SECTIONS.items() for name in cls.model_fields}


def _by_section(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Flat ``values`` grouped by section; a name no section holds is left out."""
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name in FLAT_NAMES:
            grouped.setdefault(FLAT_NAMES[name], {})[name] = value
    return grouped


class AmbConfig(BaseModel):
    """All the settings, one section per part of the bank (see the module docstring for the flat names)."""

    model_config = ConfigDict(extra="ignore")

    models: ModelSettings = Field(default_factory=ModelSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    view: ViewSettings = Field(default_factory=ViewSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    loops: LoopSettings = Field(default_factory=LoopSettings)
    longterm: LongTermSettings = Field(default_factory=LongTermSettings)
    paths: PathSettings = Field(default_factory=PathSettings)

    @model_validator(mode="before")
    @classmethod
    def _sections_from_flat_names(cls, data: Any) -> Any:
        """Builds each section from its flat keyword arguments over the section given (object or dict); the
        section reads the environment for the rest, so ``AmbConfig(max_loops=2)`` keeps ``AMB_MAX_LM_CALLS``."""
        if not isinstance(data, dict):
            return data
        flat = _by_section(data)
        built = {key: value for key, value in data.items() if key not in FLAT_NAMES}
        for section, section_cls in SECTIONS.items():
            given = built.get(section)
            if section not in flat and isinstance(given, section_cls):
                continue
            if isinstance(given, BaseModel):
                given = given.model_dump()
            built[section] = section_cls(**{**(given or {}), **flat.get(section, {})})
        return built

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails: a flat name reads its section's field.
        section = FLAT_NAMES.get(name)
        if section is None:
            return super().__getattr__(name)  # pydantic's own (private attributes), else AttributeError
        return getattr(getattr(self, section), name)

    def __setattr__(self, name: str, value: Any) -> None:
        section = FLAT_NAMES.get(name)
        if section is None:
            super().__setattr__(name, value)
        else:  # copy on write: copies made by model_copy share their untouched sections
            super().__setattr__(section, getattr(self, section).model_copy(update={name: value}))

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> AmbConfig:
        """A copy with ``update`` applied, its keys section names or flat names (as
        ``pydantic.BaseModel.model_copy``: the new values are not validated)."""
        update = dict(update or {})
        for section, changes in _by_section(update).items():
            base = update.get(section, getattr(self, section))
            update[section] = base.model_copy(update=changes)
        for name in FLAT_NAMES.keys() & update.keys():
            del update[name]
        return super().model_copy(update=update, deep=deep)

    def window(self, agent: AgentName) -> int | None:
        """The configured window of ``agent``; None: it follows the LM (see :class:`AgentSettings`)."""
        return self.agents.window(agent)
