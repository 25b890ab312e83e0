"""Compiled agents on disk: one DSPy state file per agent plus a manifest that says what they are.

A compiled-programs directory holds

* ``<agent>.json`` -- the agent's DSPy state as ``module.save(path)`` writes it (instructions and demos
  per predictor; JSON, never pickle);
* ``manifest.json`` -- a :class:`Manifest`: schema version, the dspy and amb-dspy versions, and for each
  agent in the directory how it was compiled (optimizer, model, dataset, split sizes, metric and
  scores before and after) and the names of its predictors.

Agents compiled at different times can share a directory: saving one agent updates its own entry and
keeps the others. Loading checks everything before it changes anything: the manifest's schema version,
that every agent is one this version knows with the predictors it has now, that every file is there,
inside the directory, and holds only what DSPy writes for these predictors (no ``lm``, no other
attribute; see :mod:`amb_dspy.agents.compiled_state`); any problem is a :class:`CompiledError` with a
one-line message.

Pickles (``<agent>.pkl`` state, or a directory saved with ``save_program=True``) can run arbitrary code
when read. They are never written here, and read only when the caller passes ``allow_pickle=True``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

import dspy
from pydantic import BaseModel, Field, ValidationError, field_validator

from amb_dspy.agents import AGENT_CLASSES
from amb_dspy.agents.compiled_state import checked_state
from amb_dspy.errors import UserError, one_line
from amb_dspy.files import PRIVATE_MODE, new_temp_beside, replace_with

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig

SCHEMA_VERSION = 1
MANIFEST_FILE = "manifest.json"
MAX_STATE_BYTES = 20_000_000  # a state file is instructions and a few demos; far less than this


class CompiledError(UserError):
    """A compiled-programs directory cannot be used as asked; the message is one line."""


class AgentRecord(BaseModel):
    """How one agent in the directory was compiled."""

    file: str = Field(description="the state file, relative to the directory")
    predictors: list[str] = Field(description="the agent's predictor names when it was compiled")
    optimizer: str = ""
    model: str = ""
    teacher_model: str | None = None
    dataset: str = ""
    train_size: int = 0
    dev_size: int = 0
    metric: str = ""
    score_before: float | None = None
    score_after: float | None = None
    compiled_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @field_validator("file")
    @classmethod
    def _a_name_in_the_directory(cls, value: str) -> str:
        if value in ("", ".", "..") or Path(value).name != value or "\\" in value:
            raise ValueError(f"{value[:100]!r} is not a file name inside the directory")
        return value


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    amb_dspy_version: str
    dspy_version: str
    agents: dict[str, AgentRecord] = Field(default_factory=dict)

    @classmethod
    def current(cls, agents: dict[str, AgentRecord] | None = None) -> Manifest:
        return cls(amb_dspy_version=package_version(), dspy_version=dspy.__version__, agents=agents or {})


def package_version() -> str:
    """amb-dspy's installed version, from the package metadata (a source tree that was never installed has
    none: "unknown")."""
    try:
        return version("amb-dspy")
    except PackageNotFoundError:
        return "unknown"


# --- reading ---------------------------------------------------------------------------------------


def read_manifest(directory: str | Path) -> Manifest:
    """The manifest of ``directory``, checked against this version's schema and agent set."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CompiledError(f"{directory}: no such directory; compile agents into it with `amb optimize --out {directory}`")
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise CompiledError(f"{path}: missing; {directory} is not a compiled-programs directory (see `amb optimize`)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompiledError(f"{path}: unreadable ({one_line(exc, 200)})") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if type(version) is not int or version != SCHEMA_VERSION:  # JSON's true equals 1 in Python
        raise CompiledError(
            f"{path}: schema version {version!r}, but this amb-dspy reads version {SCHEMA_VERSION}; recompile with `amb optimize`"
        )
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise CompiledError(f"{path}: invalid manifest ({where}: {error['msg']})") from None
    unknown = sorted(set(manifest.agents) - set(AGENT_CLASSES))
    if unknown:
        raise CompiledError(f"{path}: unknown agent(s) {', '.join(unknown)}; this amb-dspy has {', '.join(AGENT_CLASSES)}")
    if not manifest.agents:
        raise CompiledError(f"{path}: lists no agents")
    return manifest


def apply_compiled(
    agents: dict[str, dspy.Module], directory: str | Path, *, allow_pickle: bool = False
) -> dict[str, dspy.Module]:
    """``agents`` with the compiled state of ``directory`` applied to those it holds.

    State files load into the given instances (so an agent keeps the LM and token counter it was built
    with); a whole pickled program replaces its instance in the returned dict. Every agent of the
    manifest must be in ``agents``. Nothing is changed unless every agent loads.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    missing = sorted(set(manifest.agents) - set(agents))
    if missing:
        raise CompiledError(f"{directory}: holds {', '.join(missing)}, which the bank was not given")

    loaded: dict[str, dspy.Module] = {}
    for name, record in manifest.agents.items():
        module = agents[name]
        _check_predictors(directory, name, record, module)
        path = _inside(directory, record.file)
        loaded[name] = _load_one(path, name, module.deepcopy(), allow_pickle)  # trial run on a copy
    result = dict(agents)
    for name, record in manifest.agents.items():
        path = _inside(directory, record.file)
        result[name] = loaded[name] if _is_program_dir(path) else _load_one(path, name, agents[name], allow_pickle)
    return result


def load_agents(
    directory: str | Path, *, config: AmbConfig | None = None, allow_pickle: bool = False
) -> dict[str, dspy.Module]:
    """The compiled agents of ``directory``, by name, built fresh with ``config`` and their saved state."""
    manifest = read_manifest(directory)
    fresh = {name: AGENT_CLASSES[name](config) for name in manifest.agents}
    return apply_compiled(fresh, directory, allow_pickle=allow_pickle)


def _check_predictors(directory: Path, name: str, record: AgentRecord, module: dspy.Module) -> None:
    have = sorted(n for n, _ in module.named_predictors())
    if sorted(record.predictors) != have:
        raise CompiledError(
            f"{directory / record.file}: compiled for predictors {sorted(record.predictors)} but "
            f"{type(module).__name__} has {have}; recompile with `amb optimize --agent {name}`"
        )


def _inside(directory: Path, file: str) -> Path:
    """``directory / file``, refused if it leads outside ``directory`` (a symlink pointing out)."""
    path = directory / file
    if not path.resolve().is_relative_to(directory.resolve()):
        raise CompiledError(f"{path}: leads outside {directory}; compiled state is read only from inside it")
    return path


def _is_program_dir(path: Path) -> bool:
    return path.is_dir() and (path / "program.pkl").is_file()


def _load_one(path: Path, name: str, module: dspy.Module, allow_pickle: bool) -> dspy.Module:
    refuse = (
        f"{path}: a pickle, which can run arbitrary code when loaded; pass allow_pickle=True only for "
        "files from a trusted source"
    )
    if _is_program_dir(path):
        if not allow_pickle:
            raise CompiledError(refuse)
        try:
            program = dspy.load(str(path), allow_pickle=True)
        except Exception as exc:  # noqa: BLE001 -- unpickling fails in too many ways to list
            raise CompiledError(f"{path}: cannot load ({one_line(exc, 200)})") from None
        if not isinstance(program, type(module)):
            raise CompiledError(f"{path}: holds a {type(program).__name__}, not a {type(module).__name__}")
        return program
    if not path.is_file():
        raise CompiledError(f"{path}: missing, though {path.parent / MANIFEST_FILE} lists agent {name}")
    if path.suffix == ".pkl" and not allow_pickle:
        raise CompiledError(refuse)
    if path.suffix not in (".json", ".pkl"):
        raise CompiledError(f"{path}: not a .json state file")
    if path.suffix == ".pkl":
        try:
            module.load(str(path), allow_pickle=True)
        except Exception as exc:  # noqa: BLE001 -- unpickling fails in too many ways to list
            raise CompiledError(f"{path}: does not fit the {name} agent ({one_line(exc, 200)}); recompile it") from None
        return module
    try:
        state = checked_state(_read_state(path), module)
        module.load_state(state)
    except Exception as exc:  # noqa: BLE001 -- checked_state's one-line reasons, or DSPy refusing the state
        raise CompiledError(f"{path}: does not fit the {name} agent ({one_line(exc, 200)}); recompile it") from None
    return module


def _read_state(path: Path) -> object:
    """The parsed JSON of a state file; ValueError (one line) if it is too big or not JSON."""
    size = path.stat().st_size
    if size > MAX_STATE_BYTES:
        raise ValueError(f"{size} bytes, over the {MAX_STATE_BYTES}-byte limit for a state file")
    try:
        return json.loads(path.read_bytes())
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON: {one_line(exc, 200)}") from None


# --- writing ---------------------------------------------------------------------------------------


def save_agents(directory: str | Path, modules: dict[str, dspy.Module], records: dict[str, AgentRecord] | None = None) -> Path:
    """Write ``modules`` as ``<name>.json`` state files and record them in the manifest; return its path.

    Other agents already in the directory keep their files and entries. Files are written under
    temporary names and renamed into place, the manifest last, so a failure leaves the directory as it was.
    """
    directory = Path(directory)
    unknown = sorted(set(modules) - set(AGENT_CLASSES))
    if unknown:
        raise CompiledError(f"unknown agent(s) {', '.join(unknown)}; known: {', '.join(AGENT_CLASSES)}")
    directory.mkdir(parents=True, exist_ok=True)
    existing = read_manifest(directory).agents if (directory / MANIFEST_FILE).exists() else {}

    records = records or {}
    entries = dict(existing)
    staged: list[tuple[Path, Path]] = []
    try:
        for name, module in modules.items():
            target = directory / f"{name}.json"
            temp = new_temp_beside(target, mode=PRIVATE_MODE, suffix=".json")  # Module.save reads the suffix
            staged.append((temp, target))
            module.save(str(temp))
            record = records.get(name) or AgentRecord(file=target.name, predictors=[])
            entries[name] = record.model_copy(
                update={"file": target.name, "predictors": sorted(n for n, _ in module.named_predictors())}
            )
        manifest = Manifest.current(entries)
        temp = new_temp_beside(directory / MANIFEST_FILE, mode=PRIVATE_MODE, suffix=".json")
        staged.append((temp, directory / MANIFEST_FILE))
        temp.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
        for temp, target in staged:
            replace_with(temp, target)
    finally:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
    return directory / MANIFEST_FILE


def save_agent(directory: str | Path, name: str, module: dspy.Module, record: AgentRecord | None = None) -> Path:
    """Write one agent's state as ``<name>.json`` and its manifest entry (see :func:`save_agents`)."""
    return save_agents(directory, {name: module}, {name: record} if record else None)


__all__ = [
    "MANIFEST_FILE", "SCHEMA_VERSION", "AgentRecord", "CompiledError", "Manifest", "apply_compiled", "load_agents",
    "package_version", "read_manifest", "save_agent", "save_agents",
]

