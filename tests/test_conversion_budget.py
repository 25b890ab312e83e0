"""Issue 32: one observation costs a bounded number of LM calls, and text that is not language is kept raw.

The bank, ReAct, the search tool, the memory writer, the real embedding model and FAISS run as they are;
only the LM's words are scripted (tests/scripted_lm.py). See bench/observe_cost.py for the 5 MB case.
"""

from __future__ import annotations

import base64
import random
from pathlib import Path

import dspy
import pytest
from cli_lm import make_lm
from scripted_lm import ScriptedLM
from test_bank import REACT, compress, one_cluster_per_segment, unrelated

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig
from amb_dspy.memory.conversion_budget import budget_observation, is_language, language_lines
from amb_dspy.tools import SearchResult

GOAL = "When is the Tidewater Lantern Festival held?"
NEEDLE = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
FILLER = ("The harbour of Kestrel Bay was dredged in the spring, and the fishing fleet moved to the north quay "
          "while the work went on. Shops along the front stayed open late for the summer visitors. ")
MEMORY_AGENTS = ("classification", "structure", "analysis")


def junk(size: int, seed: int = 3) -> str:
    """Random bytes read as Latin-1, then base64 in 76-character lines: what a binary download looks like."""
    rng = random.Random(seed)
    raw = bytes(rng.getrandbits(8) for _ in range(size // 2)).decode("latin-1")
    encoded = base64.b64encode(bytes(rng.getrandbits(8) for _ in range(size * 3 // 8))).decode("ascii")
    return raw + "\n" + "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))


def long_page(chars: int) -> str:
    paragraphs = [f"{FILLER} Notice {i}." for i in range(chars // len(FILLER))]
    paragraphs.insert(len(paragraphs) // 2, NEEDLE)
    return "\n\n".join(paragraphs)


class OneAnswer:
    """A search backend answering every query with one result holding ``snippet``."""

    def __init__(self, snippet: str):
        self.snippet = snippet

    def search(self, query, k=10):
        return [SearchResult(title="Result", url="https://example.org/result", snippet=self.snippet)]


def search_once(call):
    if "observation_0" in call.messages[-1]["content"]:
        return {"next_thought": "enough", "next_tool_name": "finish", "next_tool_args": {}}
    return {"next_thought": "look", "next_tool_name": "search", "next_tool_args": {"query": "lantern festival"}}


def plan_one_search(call):
    """One subtask, then nothing."""
    seen = {t["description"] for t in call.input_json("completed_tasks")} | {call.inputs.get("executed_task", "")}
    return {"executed_status": "success", "executed_context": "done",
            "next_task": "" if "Find the date" in seen else "Find the date"}


def run_with_search(tmp_path: Path, embedder, snippet: str):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", max_loops=2, max_lm_calls=150,
                       recall=False)
    lm = ScriptedLM(
        classification=one_cluster_per_segment, structure=compress, analysis=unrelated,
        planning=plan_one_search,
        default=lambda call: {"reasoning": "r", "answer": "the second Saturday of July"},
        **{REACT: search_once},
    )
    with dspy.context(lm=lm):
        bank = MemoryBank(config, lm=lm, embedder=embedder, search=OneAnswer(snippet))
        result = bank.run(GOAL)
    return result


def memory_calls(result) -> int:
    return sum(result.usage.get(agent, {}).get("calls", 0) for agent in MEMORY_AGENTS)


# --- the language test ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    NEEDLE, FILLER, "Caroline: Hey Mel! Good to see you! How have you been?",
    "| Year | Visitors |\n| 2021 | 12,400 |\n| 2022 | 15,100 |",
    "Search for 'festival' found 1 results:\n1. [Festival](https://example.org/f)\n   Held on 14 July 2024.",
    "東京は日本の首都であり、世界最大の都市圏の一つです。人口は約1400万人です。",
    "    def loop(self, state: RunState) -> str:\n        if state.loops >= self.config.max_loops:\n"
    "            return self._termination(state, reason='loop_cap')  # capped\n",
])
def test_prose_dialogue_tables_results_cjk_and_code_are_language(text):
    assert is_language(text) and language_lines(text) == (text, 0)


@pytest.mark.parametrize("text", [
    junk(4000), base64.b64encode(random.Random(1).randbytes(3000)).decode(),
    "var a=function(b,c){return b.map(function(d){return d*c})};" * 40, "4f2a00ff9c1e" * 400,
])
def test_binary_base64_minified_and_hex_are_not_language(text):
    assert not is_language(text)
    assert budget_observation(text, GOAL, 20_000).text == ""


def test_a_page_with_an_inlined_blob_loses_only_the_blob():
    blob = base64.b64encode(random.Random(2).randbytes(6000)).decode()
    page = f"{FILLER}\n{blob}\n{NEEDLE}"
    budgeted = budget_observation(page, GOAL, 20_000)
    assert FILLER in budgeted.text and NEEDLE in budgeted.text and blob not in budgeted.text
    assert "not language" in budgeted.notice


def test_over_the_budget_the_passages_matching_the_goal_are_read():
    budgeted = budget_observation(long_page(200_000), GOAL, 5_000)
    assert len(budgeted.text) <= 5_000 and NEEDLE in budgeted.text and "AMB_MAX_CONVERT_CHARS" in budgeted.notice
    assert budget_observation(NEEDLE, GOAL, 5_000) == (NEEDLE, "")  # within it: the whole, no notice


# --- the bank's loop -----------------------------------------------------------------------------


def test_a_huge_search_result_costs_a_bounded_number_of_calls_and_is_kept_whole(tmp_path, embedder):
    page = long_page(300_000)
    result = run_with_search(tmp_path, embedder, page)
    assert result.termination == "goal_met" and sum(u["calls"] for u in result.usage.values()) <= 30
    entries = result.store.tree.entries
    assert any(" ".join(page.split()) in e.text for e in entries.values())  # all of it in the tree
    sources = [entries[s.entry_id].text[a:b] for n in result.store.graph.nodes_dict.values() for s in n.sources
               for a, b in s.spans]
    assert any(NEEDLE in text for text in sources)  # the relevant passage became a node
    assert any("conversion budget" in notice for notice in result.notices)
    result.store.check()


def test_a_junk_search_result_is_kept_raw_with_a_notice_and_makes_no_node(tmp_path, embedder):
    blob = junk(60_000)
    result = run_with_search(tmp_path, embedder, blob)
    assert memory_calls(result) == 0 and result.query_graph["nodes"] == []
    [raw] = [e for e in result.store.tree.entries.values() if e.metadata.get("source") == "executor"]
    assert " ".join(blob.split()) in raw.text and "not language" in raw.metadata["kept_raw"]
    assert any("not language" in notice for notice in result.notices)


# --- outside agents go through the same rule -----------------------------------------------------


def test_an_observed_junk_result_is_kept_raw_and_not_converted(tmp_path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "storage", temp_dir=tmp_path / "temp", policy="heuristic", recall=False)
    session = MemoryBank(config, lm=make_lm(), embedder=embedder).start_session(GOAL)
    blob = junk(20_000)
    observed = session.observe("read_file", {"path": "logo.png"}, blob)
    assert observed.node_ids == [] and session.store.tree.entries[observed.entry_id].text == blob
    assert "classification" not in session.state.fallbacks and any("not language" in n for n in session.state.notices)
    assert "not language" in observed.message  # the outside agent is told too, not only the run's notices
    assert session.observe("read_file", {"path": "logo.png"}, blob).repeat  # answered from the tree, not again
    page = session.observe("search", {"query": "festival"}, long_page(100_000))
    text = session.store.tree.entries[page.entry_id].text
    assert len(text) > 100_000 and page.node_ids
    converted = {s.entry_id for n in page.node_ids for s in session.store.graph.node(n).sources}
    assert all(len(session.store.tree.entries[e].text) <= 20_000 for e in converted)  # the budget, not the page
