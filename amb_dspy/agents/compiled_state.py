"""What a compiled agent's JSON state may hold: exactly what DSPy writes for the agent's predictors.

``dspy.Predict.load_state`` sets every key of a predictor's state as an attribute, and builds an LM
from an ``lm`` entry. So a state file from elsewhere could replace ``forward`` or ``config``, turn
the instructions into a list, or send the agent's calls to another model, unmetered. Before any
state is applied, :func:`checked_state` holds it to the shape ``agent.dump_state()`` produces for
each predictor of these agents:

    {"<predictor>": {"traces": [...], "train": [...], "demos": [{...}, ...],
                     "signature": {"instructions": str, "fields": [{"prefix": str, "description": str}, ...]},
                     "lm": null},
     ...,
     "metadata": {"dependency_versions": {"python": str, "dspy": str, ...}}}

with no other key anywhere that DSPy applies, strict types, ``lm`` always null (the bank gives each
agent its LM), and one signature field entry for each field the predictor has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

if TYPE_CHECKING:
    import dspy


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FieldState(_Strict):
    prefix: str
    description: str


class SignatureState(_Strict):
    instructions: str
    fields: list[FieldState]


class PredictorState(_Strict):
    """One ``dspy.Predict``'s saved state; ``lm`` must be null."""

    traces: list[JsonValue] = []
    train: list[JsonValue] = []
    demos: list[dict[str, JsonValue]] = []
    signature: SignatureState
    lm: None


class Metadata(_Strict):
    dependency_versions: dict[str, str]


def checked_state(state: Any, module: dspy.Module) -> dict[str, dict[str, Any]]:
    """The state of ``module``'s predictors from a parsed state file, or ValueError (one line) saying what is wrong.

    The result holds only checked data, ready for ``module.load_state``.
    """
    if not isinstance(state, dict):
        raise ValueError(f"the state is a JSON {type(state).__name__}, not an object")
    predictors = dict(module.named_predictors())
    keys = set(state) - {"metadata"}
    if keys != set(predictors):
        raise ValueError(f"holds {sorted(keys)}, but the agent's predictors are {sorted(predictors)}")
    checked = {}
    for name in sorted(predictors) + (["metadata"] if "metadata" in state else []):
        model = Metadata if name == "metadata" else PredictorState
        try:
            checked[name] = model.model_validate(state[name])
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in (name, *error["loc"]))
            raise ValueError(f"{where}: {error['msg']}") from None
    checked.pop("metadata", None)
    for name, predictor_state in checked.items():
        have, saved = len(predictors[name].signature.fields), len(predictor_state.signature.fields)
        if saved != have:
            raise ValueError(f"{name}.signature.fields: {saved} fields, but the predictor has {have}")
    return {name: predictor_state.model_dump() for name, predictor_state in checked.items()}
