"""Memory tools for agent frameworks, on a real task session (real embedding model, heuristic policy):
a dspy.ReAct with a scripted LM, PydanticAI with its own FunctionModel and TestModel, and a LangGraph
graph with a scripted chat model. Only the models' words are scripted."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest
from cli_lm import make_lm
from scripted_lm import ScriptedLM

from amb_dspy.bank import MemoryBank
from amb_dspy.config import AmbConfig

FESTIVAL = "The Tidewater Lantern Festival is held in Port Merrow on the second Saturday of July every year."
CITY = "Port Merrow is a harbour city on the Gull Coast, and the river Calder flows through it into the bay."
GOAL = "Which river flows through the city where the Tidewater Lantern Festival is held?"
PAGES = {"festival": FESTIVAL, "port merrow": CITY}


def search(query: str) -> str:
    """Search the notes for a query."""
    return next((text for key, text in PAGES.items() if key in query.lower()), "No results.")


@pytest.fixture
def session(tmp_path: Path, embedder):
    config = AmbConfig(storage_dir=tmp_path / "s", temp_dir=tmp_path / "t", policy="heuristic", recall=False)
    return MemoryBank(config, lm=make_lm(), embedder=embedder).start_session(GOAL)


def test_dspy_react_observes_its_tools_and_reads_memory_back(session):
    from amb_dspy.integrations.dspy_react import memory_tools, observe_tools

    steps = iter([
        {"next_thought": "find the festival", "next_tool_name": "search", "next_tool_args": {"query": "festival"}},
        {"next_thought": "find the city", "next_tool_name": "search", "next_tool_args": {"query": "Port Merrow"}},
        {"next_thought": "read memory", "next_tool_name": "memory_context", "next_tool_args": {}},
        {"next_thought": "done", "next_tool_name": "finish", "next_tool_args": {}},
    ])
    lm = ScriptedLM(**{"next_thought,next_tool_name,next_tool_args": lambda call: next(steps),
                       "reasoning,answer": lambda call: {"reasoning": "memory", "answer": "The Calder"}})
    react = dspy.ReAct("question -> answer", tools=[*observe_tools([search], session), *memory_tools(session)])
    with dspy.context(lm=lm):
        prediction = react(question=GOAL)
    assert prediction.answer == "The Calder"
    assert [e.text for e in session.store.tree.entries.values()] == [FESTIVAL, CITY]
    memory = prediction.trajectory["observation_2"]
    assert memory.startswith("<task>") and "Calder" in memory and "search 'Port Merrow'" in memory
    tools = {t.name: t for t in memory_tools(session)}
    assert tools["memory_deep_retrieval"].func(node_id="nope").startswith("Error: no memory node")
    assert tools["memory_complete"].func(description="x", status="maybe", answer="y").startswith("Error:")


def test_pydantic_ai_function_model_sees_memory_in_its_instructions(session):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from amb_dspy.integrations.pydantic_ai_agent import memory_agent

    seen: list[str] = []

    def model(messages, info):
        seen.append(messages[-1].instructions)
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart(tool_name="search", args={"query": "festival"}),
                                        ToolCallPart(tool_name="search", args={"query": "Port Merrow"})])
        node = next(iter(session.store.graph.nodes_dict))
        if len(seen) == 2:
            return ModelResponse(parts=[ToolCallPart(tool_name="memory_deep_retrieval", args={"node_id": node})])
        return ModelResponse(parts=[TextPart("The Calder")])

    agent = memory_agent(FunctionModel(model), session, tools=[search], instructions="Answer briefly.")
    result = agent.run_sync(GOAL)
    assert result.output == "The Calder"
    assert seen[0].startswith("Answer briefly.") and "No related memory yet." in seen[0]
    assert "Calder" in seen[1] and "search 'festival'" in seen[1]  # the next request sees what the tools found
    assert sorted(e.text for e in session.store.tree.entries.values()) == sorted([FESTIVAL, CITY])
    returned = [p.content for m in result.all_messages() for p in m.parts if getattr(p, "tool_name", "") ==
                "memory_deep_retrieval" and p.part_kind == "tool-return"]
    assert json.loads(returned[0])["entries"]


def test_pydantic_ai_test_model_calls_every_tool_and_each_result_is_observed(session):
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.test import TestModel

    from amb_dspy.integrations.pydantic_ai_agent import memory_agent

    def visit(url: str) -> str:
        """Read a page."""
        return f"The page at {url} says the river Calder flows through Port Merrow."

    agent = memory_agent(TestModel(), session, tools=[search, visit])
    agent.run_sync(GOAL)
    observed = [e.metadata["tool_calls"][0]["name"] for e in session.store.tree.entries.values()]
    assert sorted(observed) == ["search", "visit"]  # memory_deep_retrieval reads memory, is not observed
    assert not session.state.errors


def test_langgraph_observe_node_and_memory_tools_with_a_scripted_model(session):
    pytest.importorskip("langgraph")
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from amb_dspy.integrations.langgraph_memory import context_message, memory_tools, observe_node

    model = GenericFakeChatModel(messages=iter([
        AIMessage("", tool_calls=[{"id": "1", "name": "search", "args": {"query": "festival"}},
                                  {"id": "2", "name": "search", "args": {"query": "Port Merrow"}}]),
        AIMessage("", tool_calls=[{"id": "3", "name": "memory_plan", "args": {"report": "found the city"}}]),
        AIMessage("The Calder"),
    ]))
    prompts: list[str] = []

    def agent(state):
        system = context_message(session)
        prompts.append(system.content)
        return {"messages": [model.invoke([system, *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([search, *memory_tools(session)]))
    graph.add_node("memory", observe_node(session))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    graph.add_edge("tools", "memory")
    graph.add_edge("memory", "agent")
    out = graph.compile().invoke({"messages": [HumanMessage(GOAL)]})

    assert out["messages"][-1].content == "The Calder"
    assert [e.text for e in session.store.tree.entries.values()] == [FESTIVAL, CITY]  # memory_plan not observed
    assert "Calder" in prompts[1] and "Calder" not in prompts[0]
    assert "Answer the task goal from memory" in prompts[2]  # memory_plan set the next subtask


def test_every_door_wraps_the_one_tool_table(session):
    pytest.importorskip("langgraph")
    pytest.importorskip("pydantic_ai")
    from amb_dspy.integrations import dspy_react, langgraph_memory, pydantic_ai_agent
    from amb_dspy.task.tools import AGENT_TOOLS, TOOLS

    doors = {"dspy": {t.name: t.desc for t in dspy_react.memory_tools(session)},
             "langgraph": {t.name: t.description for t in langgraph_memory.memory_tools(session)}}
    for door, tools in doors.items():
        assert tools == {name: TOOLS[name].description for name in AGENT_TOOLS}, door
    agent = pydantic_ai_agent.memory_agent("test", session, memory_tools=AGENT_TOOLS)
    assert set(AGENT_TOOLS) <= set(agent._function_toolset.tools)
    langgraph = {t.name: t for t in langgraph_memory.memory_tools(session)}
    assert all(langgraph[name].args_schema is TOOLS[name].arguments for name in AGENT_TOOLS)  # the same rules
    context = dspy_react.memory_tools(session)[0]
    assert context.func(budget=10) == "Error: bad arguments for memory_context: budget: input should be greater than or equal to 50"
    assert context.func(budget=50).startswith("<task>")
