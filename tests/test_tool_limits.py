"""Tool responses are bounded for the LM and whole for memory; search holds to k and to its result type.

Search backends here are plain objects returning what a broken or hostile backend would; the ReAct
executor, dspy.Tool, the memory bank, the embedding model and the corpus run for real, and only the
LM's words are scripted (tests/scripted_lm.py).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import dspy
import pytest
from scripted_lm import ScriptedLM

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.task.executor import Executor
from amb_dspy.tools import Observation, SearchResult, SearchTool, build_tools, cap_observation, full_text

REACT = "next_thought,next_tool_name,next_tool_args"
EXTRACT = "reasoning,answer"
HUGE = "tidal " * 1_000_000  # a 6 MB snippet


class Backend:
    """A search backend that answers whatever it was built with."""

    def __init__(self, answer):
        self.answer = answer

    def search(self, query, k=10):
        return self.answer


def result(i: int, snippet: str = "") -> SearchResult:
    return SearchResult(title=f"Result {i}", url=f"https://example.org/{i}", snippet=snippet or f"snippet {i}")


# --- search --------------------------------------------------------------------------------------


def test_search_shows_at_most_k_results_whatever_the_backend_returns():
    out = SearchTool(Backend([result(i) for i in range(10_000)]), k=10)("tides")
    assert out.splitlines()[0] == "Search for 'tides' found 10 results:"
    assert "10. [Result 9]" in out and "Result 10]" not in out


@pytest.mark.parametrize("answer, named", [
    ("a string", "str"), ({"organic": []}, "dict"), (None, "NoneType"), (42, "int"),
    ([{"title": "t", "url": "u", "snippet": "s"}], "dict result"), ([result(1), "text"], "str result"),
])
def test_a_backend_answering_the_wrong_type_gives_an_error_line(answer, named):
    out = SearchTool(Backend(answer))("tides")
    assert out.startswith("Error: search failed: the backend returned a ") and named in out and "\n" not in out


def test_a_huge_snippet_is_cut_for_the_lm_and_kept_whole_for_memory():
    out = SearchTool(Backend([result(1, HUGE), result(2)]))("tides")
    assert isinstance(out, Observation) and len(out) < 2_000
    assert "[... truncated" in out and "2. [Result 2](https://example.org/2)" in out  # the next result still shows
    assert " ".join(HUGE.split()) in full_text(out)


# --- observations --------------------------------------------------------------------------------


def test_cap_observation_says_what_was_cut_and_keeps_the_whole_text():
    text = "word " * 1000
    capped = cap_observation(text, 300)
    assert len(capped) < 300 + 150
    assert f"[... observation cut at 300 of {len(text)} characters:" in capped and "kept in memory]" in capped
    assert full_text(capped) == text
    assert cap_observation("short", 300) == "short" and full_text("short") == "short"
    for copied in (copy.deepcopy(capped), pickle.loads(pickle.dumps(capped))):
        assert str(copied) == str(capped) and full_text(copied) == text
    recapped = cap_observation(SearchTool(Backend([result(1, HUGE)]))("q"), 200)  # a cut of a cut keeps the whole
    assert len(recapped) < 400 and " ".join(HUGE.split()) in full_text(recapped)


def test_the_executor_shows_the_lm_a_capped_observation_and_records_the_whole():
    long_page = "The Calder rises in the Fell hills. " * 3000  # 108,000 characters
    tools = build_tools(search=SearchTool(Backend([result(1, long_page)])), max_observation_chars=2000)
    lm = ScriptedLM(**{
        REACT: [{"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": "Calder"}},
                {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}}],
        EXTRACT: [{"reasoning": "r", "answer": "The Fell hills"}],
    })
    with dspy.context(lm=lm):
        result_ = Executor(tools, max_iters=3)(enhanced_prompt="<task>Where does the Calder rise?</task>")
    after_search = lm.calls_for(REACT)[1].prompt_text
    assert "[... truncated" in after_search  # the snippet, cut for the LM by search itself
    assert after_search.count("The Calder rises") < 40
    [call] = result_.knowledge
    assert call.observation.count("The Calder rises") == 3000  # the record holds every sentence


def test_the_observation_cap_applies_to_any_tool_and_is_stated():
    tools = build_tools(search=lambda query: "x" * 50_000, max_observation_chars=1000)
    out = tools[0](query="q")
    assert len(out) < 1200 and "observation cut at 1000 of 50000 characters" in out
    assert full_text(out) == "x" * 50_000


# --- the whole bank ------------------------------------------------------------------------------

FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
CITY = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."


def test_the_bank_records_the_whole_response_the_lm_saw_cut(tmp_path: Path, embedder):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "festival.md").write_text(f"# Tidewater Lantern Festival\n\n{FESTIVAL}\n")
    (corpus / "city.md").write_text(f"# Port Merrow\n\n{CITY}\n")
    config = AmbConfig(corpus=corpus, storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=2,
                       max_observation_chars=200)
    lm = ScriptedLM(
        classification=[{"should_cluster": False, "clusters": [{"context": "search results", "keywords": ["Calder"],
                                                                 "segments": [1]}]}] * 5,
        structure=lambda call: {"summary": call.inputs["content"][:80]},
        analysis=lambda call: {"relationships": []},
        planning=[{"executed_status": "success", "executed_context": "c", "next_task": t}
                  for t in ("Find the river of Port Merrow", "", "")],
        **{REACT: [{"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": "Port Merrow river"}},
                   {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}},
                   {"next_thought": "answer", "next_tool_name": "finish", "next_tool_args": {}}],
           EXTRACT: [{"reasoning": "r", "answer": "The Calder"}] * 2},
    )
    bank = MemoryBank(config, lm=lm, embedder=embedder)
    store = bank.run("Which river flows through Port Merrow?").store
    shown = lm.calls_for(REACT)[1].prompt_text
    assert "observation cut at 200 of" in shown and "kept in memory" in shown
    [entry] = [e for e in store.tree.entries.values() if e.metadata.get("source") == "executor"]
    assert CITY in entry.text and FESTIVAL in entry.text and "observation cut" not in entry.text
