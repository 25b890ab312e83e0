"""How an error becomes the one line a user or an LM is shown."""

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
    name = ".".join(str(part) for part in first["loc"]) or "settings"
    flag, variable = f"--{name.replace('_', '-')}", f"AMB_{name.upper()}"
    return f"bad setting {name}={first.get('input')!r} ({flag} or {variable}): {first['msg']}"


class InputError(ValueError):
    """User input that cannot be used; the message is one line saying why."""


class ConfigError(ValueError):
    """A setting that cannot work (for example an agent window too small for its own instructions); one line."""
