"""The checks every long-term write and read makes on its input: namespace, kind and content."""

from __future__ import annotations

from typing import Literal

from amb_dspy.longterm.errors import LongTermInputError

Kind = Literal["conclusion", "trajectory", "preference", "fact", "tool_effect"]
KINDS: tuple[Kind, ...] = ("conclusion", "trajectory", "preference", "fact", "tool_effect")
MAX_CONTENT_CHARS = 32_000
MAX_NAMESPACE_CHARS = 200


def check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not namespace.strip():
        raise LongTermInputError("the namespace is empty")
    if len(namespace) > MAX_NAMESPACE_CHARS or not namespace.isprintable():
        raise LongTermInputError(f"namespace {namespace[:40]!r}: at most {MAX_NAMESPACE_CHARS} printable characters")
    return namespace


def check_kind(kind: str) -> Kind:
    if kind not in KINDS:
        raise LongTermInputError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    return kind  # type: ignore[return-value]


def check_content(content: str) -> str:
    content = (content or "").strip()
    if not content:
        raise LongTermInputError("the content is empty")
    if len(content) > MAX_CONTENT_CHARS:
        raise LongTermInputError(f"the content has {len(content)} characters, over the {MAX_CONTENT_CHARS} limit")
    return content


# Room left for redaction, whose placeholders can be longer than what they replace ("a@b.co" -> "[EMAIL]").
_FIT_MARGIN = 2_000


def fit_content(text: str, limit: int = MAX_CONTENT_CHARS - _FIT_MARGIN) -> str:
    """``text`` cut to ``limit`` characters with a marker saying how much was cut, so that a long answer
    is remembered in part instead of refused whole."""
    text = text.strip()
    if len(text) <= limit:
        return text
    marker = f" [... {len(text) - limit:,} more characters cut]"
    return text[: limit - len(marker)].rstrip() + marker
