"""The tools the ReAct executor can call: ``search``, ``visit`` and ``deep_retrieval``.

Each tool is a callable object that returns a string and never raises: expected failures come back
as one ``Error: ...`` line, which the executor shows to the LM as an observation.
:func:`build_tools` wraps them as ``dspy.Tool`` objects whose descriptions teach the executor when
to use each one, and caps what each response shows the LM (see :mod:`amb_dspy.tools.observation`).
"""

from __future__ import annotations

from collections.abc import Callable

import dspy

from amb_dspy.tools.corpus import CorpusError, Document, LocalCorpus
from amb_dspy.tools.deep_retrieval import DeepRetrievalTool
from amb_dspy.tools.observation import DEFAULT_MAX_OBSERVATION_CHARS, Observation, cap_observation, full_text
from amb_dspy.tools.search import SearchTool, SerperSearch, load_corpus, make_search_backend
from amb_dspy.tools.types import SearchBackend, SearchError, SearchResult
from amb_dspy.tools.visit import ExtractForGoal, GoalExtractor, VisitError, VisitTool

SEARCH_DESC = (
    "Search the web (or the local document collection) with a keyword query. Returns up to 10 results, "
    "each with a title, a url and a snippet. Use it first to find sources for a question; ask one thing "
    "per query, in a few keywords. If a snippet answers the question, you may use it; to read a source in "
    "full or to check a fact, call visit with its url."
)
VISIT_DESC = (
    "Read one page or document and get the parts of it that serve your goal (evidence and a summary). "
    "Use it on a url from the search results when a snippet is not enough, or to check a fact at its source."
)
DEEP_RETRIEVAL_DESC = (
    "Read the full raw record behind one memory node: every recorded interaction (text, time, metadata) "
    "and the contents of its attachments (images, documents, code), as JSON. Use it when a memory summary "
    "in your prompt is too short, or you need the original evidence behind it."
)


def build_tools(
    search: Callable[[str], str] | None = None,
    visit: Callable[[str, str], str] | None = None,
    deep_retrieval: Callable[[str], str] | None = None,
    *,
    max_observation_chars: int = DEFAULT_MAX_OBSERVATION_CHARS,
) -> list[dspy.Tool]:
    """``dspy.Tool`` objects named search, visit and deep_retrieval (a tool given as None is left out).

    Each response longer than ``max_observation_chars`` reaches the LM cut, with a note saying so; the
    whole text stays readable with :func:`full_text` (it is what memory records).
    """
    tools = []
    if search is not None:
        tools.append(dspy.Tool(search, name="search", desc=SEARCH_DESC, arg_desc={
            "query": "keywords to search for, e.g. 'Tidewater Lantern Festival date'",
        }))
    if visit is not None:
        tools.append(dspy.Tool(visit, name="visit", desc=VISIT_DESC, arg_desc={
            "url": "the url to read, exactly as a search result gave it (http(s):// or corpus://)",
            "goal": "what you want to learn from this page, e.g. 'the city where the festival is held'",
        }))
    if deep_retrieval is not None:
        tools.append(dspy.Tool(deep_retrieval, name="deep_retrieval", desc=DEEP_RETRIEVAL_DESC, arg_desc={
            "node_id": "the id of a memory node, as shown in the <memory> section of your prompt",
            "sources_only": "true for just the exact source passages the note was built from, false for every record",
        }))
    for tool in tools:
        tool.func = _capped(tool.func, max_observation_chars)  # after dspy.Tool read the signature
    return tools


def _capped(func: Callable[..., str], max_chars: int) -> Callable[..., str]:
    def call(**kwargs) -> str:
        return cap_observation(func(**kwargs), max_chars)

    return call


__all__ = [
    "CorpusError", "DEEP_RETRIEVAL_DESC", "DEFAULT_MAX_OBSERVATION_CHARS", "DeepRetrievalTool", "Document",
    "ExtractForGoal", "GoalExtractor", "LocalCorpus", "Observation", "SEARCH_DESC", "SearchBackend", "SearchError",
    "SearchResult", "SearchTool", "SerperSearch", "VISIT_DESC", "VisitError", "VisitTool", "build_tools",
    "cap_observation", "full_text", "load_corpus", "make_search_backend",
]
