"""What `amb serve`'s tools declare and return, seen by the mcp SDK's own client over stdio: each tool's
real output schema and annotations (read-only, destructive, idempotent), and each result as structured
content with its text form beside it. The server is the real `amb serve` subprocess of test_serve.py."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest
from test_serve import GOAL, RESULTS, SERVE, _env

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from amb_dspy.task.tools import TOOLS  # noqa: E402

READ_ONLY = {"memory_context", "memory_deep_retrieval", "memory_search"}
DESTRUCTIVE = {"memory_end_task", "memory_write", "memory_update", "memory_delete"}
IDEMPOTENT = {"memory_observe", "memory_export", "memory_end_task", "memory_update", "memory_delete"}


def _run(tmp_path, scenario) -> None:
    async def go():
        params = StdioServerParameters(command=sys.executable, args=SERVE, env=_env(tmp_path), cwd=str(tmp_path))
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await scenario(session)

    asyncio.run(go())


async def structured(session: ClientSession, tool_name: str, /, **arguments) -> dict:
    """The tool's structured content, after checking that its text content is the same JSON."""
    result = await session.call_tool(tool_name, arguments)
    assert not result.is_error, result.content[0].text
    assert isinstance(result.structured_content, dict), (tool_name, result)
    assert len(result.content) == 1 and json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def test_every_tool_declares_its_fields_and_hints(tmp_path):
    async def scenario(session: ClientSession):
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(listed) == set(TOOLS)
        fields = {name: set(tool.output_schema["properties"]) for name, tool in listed.items()}
        assert fields["memory_start_task"] == {"task_id", "notices"}
        assert fields["memory_observe"] == {"entry_id", "node_ids", "repeat", "failure", "message"}
        assert fields["memory_context"] == {"task_id", "pending_task", "task", "memory", "text"}
        assert {"node_id", "summary", "entries", "sources"} <= fields["memory_deep_retrieval"]
        assert {"task_goal", "completed_tasks", "pending_tasks"} <= fields["memory_plan"] == fields["memory_complete"]
        assert fields["memory_search"] == {"items"} and fields["memory_delete"] == {"deleted"}
        assert listed["memory_observe"].output_schema["required"] == ["entry_id", "node_ids", "repeat", "failure",
                                                                       "message"]
        for name, tool in listed.items():
            hints = tool.annotations
            assert hints is not None, name
            assert hints.read_only_hint is (name in READ_ONLY), name
            assert hints.destructive_hint is (name in DESTRUCTIVE), name
            assert hints.idempotent_hint is (name in IDEMPOTENT or name in READ_ONLY), name
            assert hints.open_world_hint is False, name
            assert tool.output_schema == TOOLS[name].returns.model_json_schema(), name  # the table's result type

    _run(tmp_path, scenario)


def test_each_result_is_structured_content_with_its_text_beside_it(tmp_path):
    async def scenario(session: ClientSession):
        started = await structured(session, "memory_start_task", goal=GOAL)
        task_id = started["task_id"]
        assert started["notices"] == []
        seen = await structured(session, "memory_observe", task_id=task_id, tool="search", wait=True,
                                arguments={"query": "Port Merrow"}, result=RESULTS[1])
        assert seen["entry_id"] and seen["node_ids"] and seen["repeat"] is False

        # the context: its blocks as fields, and as text the prompt block itself, unchanged
        result = await session.call_tool("memory_context", {"task_id": task_id})
        context = result.structured_content
        assert result.content[0].text == context["text"] and context["text"].startswith("<task>\n")
        assert context["task_id"] == task_id and GOAL in context["task"] and "Calder" in context["memory"]
        assert f"<task>\n{context['task']}\n</task>\n\n<memory>\n{context['memory']}\n</memory>" in context["text"]

        record = await structured(session, "memory_deep_retrieval", task_id=task_id, node_id=seen["node_ids"][0])
        assert record["entries"][0]["text"] == RESULTS[1] and record["sources"] is None
        doc = await structured(session, "memory_complete", task_id=task_id, status="success", answer="The Calder")
        assert doc["doc_id"] == task_id and doc["completed_tasks"][-1]["status"] == "success"
        summary = await structured(session, "memory_end_task", task_id=task_id, remember=False)
        assert summary["answer"] == "The Calder" and summary["entries"] == 1

        written = await structured(session, "memory_write", text="Alice prefers short answers.", kind="preference",
                                   namespace="alice")
        assert written["action"] == "added"
        found = await structured(session, "memory_search", query="what does Alice prefer", namespace="alice")
        assert [item["item_id"] for item in found["items"]] == [written["item_id"]] and found["items"][0]["score"] > 0
        assert (await structured(session, "memory_delete", item_id=written["item_id"], namespace="alice")) == {
            "deleted": written["item_id"]}

        failed = await session.call_tool("memory_delete", {"item_id": written["item_id"], "namespace": "alice"})
        assert failed.is_error and failed.structured_content is None
        assert "no long-term item" in failed.content[0].text and "\n" not in failed.content[0].text

    _run(tmp_path, scenario)
