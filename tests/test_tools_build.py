"""build_tools: dspy.Tool objects the executor's dspy.ReAct can call, on the demo corpus."""

from __future__ import annotations

from pathlib import Path

import dspy
import pytest
from dspy.utils import DummyLM

from amb_dspy.config import ToolSettings
from amb_dspy.memory.graph_ops import MemoryStore, NodeContent
from amb_dspy.storage import InteractionEntry
from amb_dspy.tools import DeepRetrievalTool, LocalCorpus, SearchTool, VisitTool, build_tools

DEMO = Path(__file__).resolve().parent.parent / "datasets" / "demo"


@pytest.fixture(scope="module")
def demo_corpus(embedder):
    return LocalCorpus.load(DEMO, embedder)


@pytest.fixture
def tools(demo_corpus, embedder, tmp_path):
    store = MemoryStore(embedder)
    node = store.add_node(NodeContent("festival city", "the festival is held in Marrowick", ["festival", "Marrowick"]))
    store.record_entry(InteractionEntry(text="search said the festival is in Marrowick"), [node.id])
    settings = ToolSettings(jina_api_key="", serper_api_key="")
    return node, build_tools(
        search=SearchTool(demo_corpus),
        visit=VisitTool(settings, corpus=demo_corpus),
        deep_retrieval=DeepRetrievalTool(store, tmp_path),
    )


def test_tools_have_names_arguments_and_teaching_descriptions(tools):
    _node, built = tools
    by_name = {t.name: t for t in built}
    assert list(by_name) == ["search", "visit", "deep_retrieval"]
    assert set(by_name["search"].args) == {"query"}
    assert set(by_name["visit"].args) == {"url", "goal"}
    assert set(by_name["deep_retrieval"].args) == {"node_id", "sources_only"}
    assert by_name["deep_retrieval"].args.pop("sources_only")["type"] == "boolean"
    for tool in built:
        assert all(spec["type"] == "string" and spec["description"] for spec in tool.args.values())
    assert "visit" in by_name["search"].desc and "url" in by_name["visit"].desc
    assert "memory" in by_name["deep_retrieval"].desc
    assert build_tools(search=None, visit=None, deep_retrieval=None) == []


def test_tools_answer_through_dspy_tool_calls_and_never_raise(tools):
    node, built = tools
    search, visit, deep = built
    assert search(query="Tidewater Lantern Festival").splitlines()[1] == (
        "1. [Tidewater Lantern Festival](corpus://tidewater-lantern-festival.md)")
    page = visit(url="corpus://marrowick.md", goal="which river flows through the city")
    assert "The River Sennet flows through the middle of Marrowick" in page
    assert node.id in deep(node_id=node.id)
    assert visit(url="file:///etc/passwd", goal="x").startswith("Error: cannot visit")
    assert deep(node_id="missing").startswith("Error: no memory node 'missing'")


def test_react_runs_the_two_hop_demo_question_over_the_tools(tools):
    _node, built = tools
    lm = DummyLM([
        {"next_thought": "Find the festival's city.", "next_tool_name": "search",
         "next_tool_args": {"query": "Tidewater Lantern Festival city"}},
        {"next_thought": "Read the city article.", "next_tool_name": "visit",
         "next_tool_args": {"url": "corpus://marrowick.md", "goal": "which river flows through Marrowick"}},
        {"next_thought": "Done.", "next_tool_name": "finish", "next_tool_args": {}},
        {"reasoning": "From the observations.", "answer": "The River Sennet; the last Saturday of September."},
    ])
    react = dspy.ReAct("question -> answer", tools=built, max_iters=4)
    with dspy.context(lm=lm):
        result = react(question="Which river flows through the city where the Tidewater Lantern Festival is held?")
    trajectory = result.trajectory
    assert "held in Marrowick" in trajectory["observation_0"]
    assert "last Saturday of September" in trajectory["observation_0"]
    assert "River Sennet" in trajectory["observation_1"]
    assert result.answer == "The River Sennet; the last Saturday of September."
