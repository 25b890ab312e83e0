"""The ``search`` tool: Serper (Google) when a key is set, else the local corpus, same output either way.

The output follows spec §6.4: a header line, then numbered results with title, url and snippet.
Every expected failure (no backend, HTTP error, timeout, bad JSON) comes back as one ``Error: ...``
line, never as an exception, because the executor shows tool output to the LM as an observation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import requests
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from amb_dspy.config import AmbConfig
    from amb_dspy.retrieval.embedding import Embedder

SERPER_ENDPOINT = "https://google.serper.dev/search"
DEFAULT_K = 10


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str
    url: str
    snippet: str
    date: str | None = None


class SearchError(RuntimeError):
    """A search backend could not answer; the message is one line."""


@runtime_checkable
class SearchBackend(Protocol):
    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]: ...


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one short line (requests' messages can span lines and repeat the URL)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class SerperSearch:
    """Google results through serper.dev: ``POST {endpoint}`` with ``{"q": query, "num": k}``."""

    def __init__(self, api_key: str, timeout: float = 20.0, endpoint: str = SERPER_ENDPOINT,
                 session: requests.Session | None = None):
        if not api_key:
            raise ValueError("SerperSearch needs an API key (SERPER_API_KEY)")
        self.api_key = api_key
        self.timeout = timeout
        self.endpoint = endpoint
        self.session = session or requests.Session()

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]:
        try:
            response = self.session.post(
                self.endpoint,
                headers={"X-API-KEY": self.api_key, "Content-Type": "application/json"},
                json={"q": query, "num": k},
                timeout=self.timeout,
            )
        except requests.Timeout:
            raise SearchError(f"Serper did not answer within {self.timeout:g} s") from None
        except requests.RequestException as exc:
            raise SearchError(f"cannot reach Serper: {one_line(exc)}") from None
        if response.status_code != 200:
            raise SearchError(f"Serper answered HTTP {response.status_code}: {' '.join(response.text.split())[:200]}")
        try:
            organic = response.json().get("organic", [])
        except (ValueError, AttributeError):
            raise SearchError("Serper's answer is not a JSON object") from None
        results = []
        for item in organic[:k]:
            if not isinstance(item, dict) or not item.get("link"):
                continue
            results.append(SearchResult(
                title=str(item.get("title") or item["link"]),
                url=str(item["link"]),
                snippet=str(item.get("snippet") or ""),
                date=str(item["date"]) if item.get("date") else None,
            ))
        return results


def make_search_backend(config: AmbConfig, embedder: Embedder | None = None) -> SearchBackend | None:
    """Serper when ``SERPER_API_KEY`` is set, else the local corpus at ``config.corpus``, else None.

    Raises :class:`amb_dspy.tools.corpus.CorpusError` (one line) when the corpus cannot be loaded.
    """
    if config.serper_api_key:
        return SerperSearch(config.serper_api_key, timeout=config.http_timeout_s)
    if config.corpus is not None:
        from amb_dspy.tools.corpus import LocalCorpus

        if embedder is None:
            from amb_dspy.retrieval.embedding import default_embedder

            embedder = default_embedder()
        return LocalCorpus.from_config(config, embedder)
    return None


def format_results(query: str, results: list[SearchResult]) -> str:
    if not results:
        return f"No results for '{query}'. Try other or fewer keywords."
    lines = [f"Search for '{query}' found {len(results)} results:"]
    for i, result in enumerate(results, 1):
        lines.append(f"{i}. [{' '.join(result.title.split())}]({result.url})")
        if result.date:
            lines.append(f"   Date: {result.date}")
        lines.append(f"   {' '.join(result.snippet.split())}")
    return "\n".join(lines)


class SearchTool:
    """``search(query) -> str``: the formatted top results of the backend, or one ``Error:`` line."""

    def __init__(self, backend: SearchBackend | None, k: int = DEFAULT_K):
        self.backend = backend
        self.k = k

    def __call__(self, query: str) -> str:
        query = " ".join(str(query).split())
        if not query:
            return "Error: the search query is empty; pass a few keywords."
        if self.backend is None:
            return ("Error: no search backend is configured; set SERPER_API_KEY or give a local corpus "
                    "(amb run --corpus PATH or AMB_CORPUS).")
        try:
            results = self.backend.search(query, k=self.k)
        except SearchError as exc:
            return f"Error: search failed: {exc}"
        except Exception as exc:  # noqa: BLE001 - a tool reports, it never raises into the agent loop
            return f"Error: search failed: {type(exc).__name__}: {one_line(exc)}"
        return format_results(query, results)
