"""``amb serve``: the memory bank as MCP tools, on the official ``mcp`` SDK (``MCPServer``).

Task memory (each task its own bank, see :mod:`amb_dspy.task.session`)::

    memory_start_task(goal, namespace?, bank?) -> {"task_id", "notices"}
    memory_observe(task_id, tool, arguments, result, wait?) -> {"entry_id", "node_ids", "repeat", "failure", "message"}
    memory_context(task_id, budget?) -> the <task> and <memory> blocks for the next step
    memory_deep_retrieval(task_id, node_id, sources_only?) -> the node's raw record (JSON)
    memory_plan(task_id, report?) / memory_complete(task_id, description?, status?, answer?) -> the Insight Doc
    memory_export(task_id, path?) -> {"path"};  memory_end_task(task_id, remember?) -> the task's summary

Long-term memory across tasks (:mod:`amb_dspy.longterm`)::

    memory_search(query, namespace?, k?, kind?), memory_write(text, namespace?, kind?),
    memory_update(item_id, text, namespace?), memory_delete(item_id, namespace?)

This module holds the tool schemas (names, arguments, descriptions) and the transport; every tool calls
library code. Expected failures (unknown task or node, oversized text, a bad bank file) come back as a
one-line tool error; anything else too, so one request never takes the server down.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from amb_dspy.bank import MemoryBank
from amb_dspy.errors import InputError, one_line
from amb_dspy.lm import LMCallCapReached
from amb_dspy.longterm import KINDS, LongTermError, open_store
from amb_dspy.serve.registry import TaskRegistry

logger = logging.getLogger("amb_dspy.serve")

INSTRUCTIONS = (
    "A task-scoped memory bank. Start a task with memory_start_task(goal) and keep its task_id. After every "
    "tool call of yours, pass the tool's name, arguments and result to memory_observe. Before each step, read "
    "memory_context: <task> is the plan so far, <memory> the notes relevant to the next step (node ids in "
    "them can be read in full with memory_deep_retrieval). memory_plan asks for the next subtask, "
    "memory_complete records one as done (the goal itself with the final answer). End with memory_end_task."
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _one_line_errors(fn: Callable[..., str]) -> Callable[..., str]:
    """Every failure of a tool as a one-line tool error: the client reads why, the server lives on."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except (InputError, LongTermError, LMCallCapReached, ValueError, FileNotFoundError) as exc:
            raise ToolError(one_line(exc)) from None
        except Exception as exc:  # noqa: BLE001 - a bug in one request must not end the others
            logger.exception("%s failed", fn.__name__)
            raise ToolError(f"{type(exc).__name__}: {one_line(exc)}") from None

    return call


class _OneLineServer(MCPServer):
    """The SDK's server, with arguments that fail a tool's schema reported in one line too."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].lower()}"
                                 for e in exc.__cause__.errors())
            raise ToolError(one_line(f"bad arguments for {name}: {problems}")) from exc.__cause__


def build_server(bank: MemoryBank, registry: TaskRegistry, name: str = "amb-dspy") -> MCPServer:
    """The MCP server over ``registry``'s tasks; ``bank`` gives the configuration and long-term memory."""
    server = _OneLineServer(name, instructions=INSTRUCTIONS)
    config = bank.config

    def tool(fn: Callable[..., str]) -> Callable[..., str]:
        return server.tool(description=" ".join((fn.__doc__ or "").split()))(_one_line_errors(fn))

    @tool
    def memory_start_task(goal: str, namespace: str | None = None, bank: str | None = None) -> str:
        """Start a task with its own empty memory (or a copy of a bank file written by amb ingest or
        memory_export, given as a path on the server). namespace: the long-term memory namespace recalled
        into <memory> and remembered into at the end. Returns the task_id every other tool takes."""
        session = registry.start(goal, bank=bank, namespace=namespace)
        return _json({"task_id": session.task_id, "notices": session.state.notices})

    @tool
    def memory_observe(task_id: str, tool: str, result: str, arguments: dict[str, Any] | None = None,
                       wait: bool = False) -> str:
        """Hand over one tool call of yours and what it returned: it becomes memory (nodes in the Query Graph,
        the raw text in the Interaction Tree) before the task's next request runs. A call already observed
        with the same result is a repeat and is not stored again. wait: return only once it is memory, with
        its entry and node ids."""
        return _json(registry.get(task_id).observe(tool, arguments, result, wait=wait).as_dict())

    @tool
    def memory_context(task_id: str, budget: int | None = None) -> str:
        """The <task> (goal, completed subtasks, the pending one, what was already fetched) and <memory> (the
        notes for the pending subtask, with node ids) blocks to read before your next step. budget: tokens of
        <memory>."""
        return registry.get(task_id).context(budget)

    @tool
    def memory_deep_retrieval(task_id: str, node_id: str, sources_only: bool = False) -> str:
        """The full raw record behind one memory node (every interaction entry, attachments), as JSON;
        sources_only: just the exact source passages the node was built from."""
        return registry.get(task_id).deep_retrieval(node_id, sources_only=sources_only)

    @tool
    def memory_plan(task_id: str, report: str = "") -> str:
        """Ask the planning agent for the next subtask: it judges the pending one by report (what you found)
        and the memory observed since the last plan. Returns the Insight Doc (pending_tasks: the next one, or
        none when the goal is met)."""
        return _json(registry.get(task_id).plan(report).model_dump(mode="json"))

    @tool
    def memory_complete(task_id: str, description: str = "", status: str = "success", answer: str = "") -> str:
        """Record a subtask as done (description: the pending one when empty; status: success or failure;
        answer: what it found). The goal itself, or the last pending subtask, makes answer the task's answer.
        Returns the Insight Doc."""
        return _json(registry.get(task_id).complete(description, status, answer).model_dump(mode="json"))

    @tool
    def memory_export(task_id: str, path: str | None = None) -> str:
        """Write the task's bank file on the server, under STORAGE_DIR/sessions/ (path: a file name or a path
        inside that folder; default <task_id>.json); amb show reads it, memory_start_task(bank=...) starts
        another task from it."""
        return _json({"path": str(registry.get(task_id).export(registry.export_path(task_id, path)))})

    @tool
    def memory_end_task(task_id: str, remember: bool | None = None) -> str:
        """End the task and free its memory. remember: write its answer and trajectory to long-term memory
        (default: the server's --remember)."""
        return _json(registry.end(task_id, remember=remember))

    def longterm(action: Callable[[Any], Any]) -> Any:
        store = open_store(config, embedder=bank.embedder)
        try:
            return action(store)
        finally:
            store.close()

    def item_json(item) -> dict[str, Any]:
        return {"item_id": item.id, "kind": item.kind, "text": item.content, "updated": item.updated.isoformat()}

    @tool
    def memory_search(query: str, namespace: str | None = None, k: int = 5, kind: str | None = None) -> str:
        """Search long-term memory (what earlier tasks concluded, facts, preferences) in a namespace."""
        if not query.strip():
            raise InputError("the search query is empty")
        found = longterm(lambda s: s.search(namespace or config.namespace, query, k=k, kinds=[kind] if kind else None))
        return _json([{**item_json(f.item), "score": round(f.score, 4)} for f in found])

    @tool
    def memory_write(text: str, namespace: str | None = None, kind: str = "fact") -> str:
        """Write one item to long-term memory (kind: fact, preference, conclusion or trajectory); a near
        duplicate of an existing item is merged into it."""
        if kind not in KINDS:
            raise InputError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        outcome = longterm(lambda s: s.write(namespace or config.namespace, text, kind, reason="memory_write"))
        return _json({**item_json(outcome.item), "action": outcome.action})

    @tool
    def memory_update(item_id: str, text: str, namespace: str | None = None) -> str:
        """Replace the text of a long-term memory item."""
        item = longterm(lambda s: s.update(namespace or config.namespace, item_id, content=text, reason="memory_update"))
        return _json(item_json(item))

    @tool
    def memory_delete(item_id: str, namespace: str | None = None) -> str:
        """Delete a long-term memory item (its audit row stays)."""
        item = longterm(lambda s: s.delete(namespace or config.namespace, item_id, reason="memory_delete"))
        return _json({"deleted": item.id})

    return server


def serve(bank: MemoryBank, *, http_port: int | None = None, host: str = "127.0.0.1", idle_s: float = 1800.0,
          max_tasks: int = 256) -> None:
    """Serve ``bank``'s memory over stdio, or streamable HTTP on ``host:http_port`` (path ``/mcp``)."""
    registry = TaskRegistry(bank.start_session, export_dir=bank.config.storage_dir / "sessions",
                            idle_s=idle_s, max_tasks=max_tasks)
    registry.start_reaper()
    server = build_server(bank, registry)
    try:
        if http_port is None:
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=http_port)
    finally:
        registry.stop()
