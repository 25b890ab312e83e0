"""What every search backend returns and raises, shared by the search tool and the local corpus."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from amb_dspy.errors import AmbError

DEFAULT_K = 10


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str
    url: str
    snippet: str
    date: str | None = None


class SearchError(AmbError, RuntimeError):
    """A search backend could not answer; the message is one line."""


@runtime_checkable
class SearchBackend(Protocol):
    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]: ...
