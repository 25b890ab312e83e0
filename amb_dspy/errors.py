"""One root for every error amb_dspy raises on purpose, and how an error becomes one line.

    AmbError                 anything amb_dspy raises by design (catch this to catch ours, and only ours)
    └── UserError            what the user can fix (input, a setting, a file, a store): one line, exit 1

Classes keep the built-in base callers relied on before the root existed (``InputError`` is still a
``ValueError``, ``EmbeddingError`` a ``RuntimeError``...), so ``except ValueError`` keeps working.

One signal stays outside on purpose: :class:`amb_dspy.lm.LMCallCapReached` is a ``BaseException``,
like ``KeyboardInterrupt``, because it must pass through the ``except Exception`` of DSPy's callback
runner, ReAct's tool loop and the agents to stop a run; it is a stop, not an error, and the bank turns
it into the run's termination. Doors that run library code (the tool table) catch it by name.
So does :class:`amb_dspy.task.result.RunInterrupted`, a ``KeyboardInterrupt`` that carries an interrupted run's
memory: every ``except KeyboardInterrupt`` still sees Ctrl-C.
"""

from __future__ import annotations


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """``error``'s message with its whitespace (newlines included) folded, cut to ``limit`` characters;
    an exception with no message is named by its type."""
    text = " ".join(str(error).split())
    if not text and isinstance(error, BaseException):
        text = type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def invalid_setting(error) -> str:
    """One line for a setting pydantic refused (a ``pydantic.ValidationError``): which setting, the value
    given and what it takes, without pydantic's multi-line text and its documentation URL."""
    first = error.errors()[0]
    where = [str(part) for part in first["loc"]] or ["settings"]  # a section's field (its flat name), then a value in it
    flag, variable = f"--{where[0].replace('_', '-')}", f"AMB_{where[0].upper()}"
    return f"bad setting {'.'.join(where)}={first.get('input')!r} ({flag} or {variable}): {first['msg']}"


class AmbError(Exception):
    """The root of every exception class amb_dspy defines."""


class UserError(AmbError):
    """A problem the user can fix (bad input, a setting, a missing or damaged file, a store that cannot
    be reached); its message is the one line shown, without a traceback, and the command exits 1."""


class InputError(UserError, ValueError):
    """User input that cannot be used; the message is one line saying why."""


class ConfigError(UserError, ValueError):
    """A setting that cannot work (for example an agent window too small for its own instructions); one line."""
