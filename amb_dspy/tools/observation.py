"""Tool responses as the executor's LM sees them (capped) and as memory records them (whole).

One huge tool response (a 5 MB search snippet, a page of junk) must not fill the executor's
prompt, yet the Interaction Tree keeps every response's raw text. So a response over the cap
becomes an :class:`Observation`: a ``str`` holding the capped text, which is what ``dspy.ReAct``
puts in the trajectory and the prompt, with the whole text riding along in ``.full``. Code that
records tool responses reads them with :func:`full_text`.
"""

from __future__ import annotations

from typing import Any

from amb_dspy.tools.text import truncate

DEFAULT_MAX_OBSERVATION_CHARS = 20_000


class Observation(str):
    """The capped text of a tool response (the ``str`` value) and the whole response (``full``)."""

    full: str

    def __new__(cls, shown: str, full: str):
        observation = super().__new__(cls, shown)
        observation.full = full
        return observation

    def __getnewargs__(self) -> tuple[str, str]:  # copy and pickle keep both texts
        return str(self), self.full


def cap_observation(response: Any, max_chars: int) -> str:
    """``response`` as text, cut to about ``max_chars`` with a note saying how much was cut.

    A cut response is an :class:`Observation` that still holds the whole text.
    """
    text = response if isinstance(response, str) else str(response)
    if len(text) <= max_chars:
        return text
    marker = (f"[... observation cut at {max_chars} of {len(text)} characters: {{n}} characters not shown; "
              "the full text is kept in memory]")
    return Observation(truncate(text, max_chars, marker=marker), full_text(text))


def full_text(observation: Any) -> str:
    """The whole text of a tool response, capped (an :class:`Observation`) or not."""
    if isinstance(observation, Observation):
        return observation.full
    return str(observation)
