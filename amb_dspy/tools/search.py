"""The ``search`` tool: Serper (Google) when a key is set, else the local corpus, same output either way.

The output follows spec §6.4: a header line, then numbered results with title, url and snippet.
Every expected failure (no backend, HTTP error, timeout, bad JSON) comes back as one ``Error: ...``
line, never as an exception, because the executor shows tool output to the LM as an observation.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import requests

from amb_dspy.errors import one_line
from amb_dspy.tools.corpus import LocalCorpus
from amb_dspy.tools.observation import Observation
from amb_dspy.tools.text import truncate
from amb_dspy.tools.types import DEFAULT_K, SearchBackend, SearchError, SearchResult

if TYPE_CHECKING:
    from pathlib import Path

    from amb_dspy.config import ToolSettings
    from amb_dspy.retrieval.embedding import Embedder

SERPER_ENDPOINT = "https://google.serper.dev/search"
NO_BACKEND = ("Error: no search backend is configured; set SERPER_API_KEY or give a local corpus "
              "(amb run --corpus PATH or AMB_CORPUS).")
# What one result shows the LM: real titles and snippets are far shorter. A longer one is cut in the
# LM's view only; memory records it whole (see amb_dspy.tools.observation).
MAX_TITLE_CHARS = 300
MAX_SNIPPET_CHARS = 1_000


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


def load_corpus(settings: ToolSettings, embedder: Embedder, *, cache_dir: Path) -> LocalCorpus | None:
    """The local corpus the tools' settings name (``settings.corpus``; None when there is none), cached under
    ``cache_dir`` (``config.paths.cache_dir``); :class:`CorpusError` if it cannot be loaded."""
    return LocalCorpus.from_config(settings, embedder, cache_dir=cache_dir) if settings.corpus is not None else None


def make_search_backend(settings: ToolSettings, corpus: LocalCorpus | None = None) -> SearchBackend | None:
    """The one place that decides what ``search`` searches.

    A local corpus when one is given (``corpus``, loaded with :func:`load_corpus`), even with
    ``SERPER_API_KEY`` set: a user who names a corpus means it, and the bank and its baselines must
    search the same thing. Else Serper when ``SERPER_API_KEY`` is set. Else None, which the search tool
    answers with a clear "no search backend" observation.
    """
    if corpus is not None:
        return corpus
    if settings.serper_api_key:
        return SerperSearch(settings.serper_api_key, timeout=settings.http_timeout_s)
    return None


_ECHO = re.compile(r"^\s*Search for '.*?' found \d+ results?:\s*")


def without_echo(text: str) -> str:
    """``text`` without the line :func:`format_results` opens with, which repeats the query (what a reader of
    a cited search response needs is the results)."""
    return _ECHO.sub("", text, count=1)


def format_results(query: str, results: list[SearchResult], *, cut: bool = False) -> str:
    """Results as numbered lines; with ``cut``, titles, urls and snippets are cut to what a result may show."""
    def line(text: str, max_chars: int) -> str:
        text = " ".join(text.split())
        return truncate(text, max_chars) if cut else text

    if not results:
        return f"No results for '{query}'. Try other or fewer keywords."
    lines = [f"Search for '{query}' found {len(results)} results:"]
    for i, result in enumerate(results, 1):
        lines.append(f"{i}. [{line(result.title, MAX_TITLE_CHARS)}]({line(result.url, MAX_TITLE_CHARS)})")
        if result.date:
            lines.append(f"   Date: {line(result.date, MAX_TITLE_CHARS)}")
        lines.append(f"   {line(result.snippet, MAX_SNIPPET_CHARS)}")
    return "\n".join(lines)


class SearchTool:
    """``search(query) -> str``: the formatted top ``k`` results of the backend, or one ``Error:`` line.

    At most ``k`` results are shown whatever the backend returns, and an answer that is not a list
    of :class:`SearchResult` is reported as an error line, like any other backend failure. Overlong
    titles and snippets are cut in what the LM sees; the returned
    :class:`~amb_dspy.tools.observation.Observation` keeps them whole for memory.
    """

    def __init__(self, backend: SearchBackend | None, k: int = DEFAULT_K):
        self.backend = backend
        self.k = k

    def __call__(self, query: str) -> str:
        query = " ".join(str(query).split())
        if not query:
            return "Error: the search query is empty; pass a few keywords."
        if self.backend is None:
            return NO_BACKEND
        try:
            results = self.backend.search(query, k=self.k)
        except SearchError as exc:
            return f"Error: search failed: {exc}"
        except Exception as exc:  # noqa: BLE001 - a tool reports, it never raises into the agent loop
            return f"Error: search failed: {type(exc).__name__}: {one_line(exc)}"
        if not isinstance(results, (list, tuple)):
            return f"Error: search failed: the backend returned a {type(results).__name__}, not a list of results"
        results = list(results[: self.k])
        wrong = next((r for r in results if not isinstance(r, SearchResult)), None)
        if wrong is not None:
            return f"Error: search failed: the backend returned a {type(wrong).__name__} result, not a SearchResult"
        shown, full = format_results(query, results, cut=True), format_results(query, results)
        return shown if shown == full else Observation(shown, full)
