"""``amb serve``: the memory bank as MCP tools, on the official ``mcp`` SDK (``MCPServer``).

Task memory (each task its own bank, see :mod:`amb_dspy.task.session`)::

    memory_start_task(goal, namespace?, bank?) -> {"task_id", "notices"}
    memory_observe(task_id, tool, arguments, result, wait?) -> {"entry_id", "node_ids", "repeat", "failure", "message"}
    memory_context(task_id, budget?) -> {"task_id", "pending_task", "task", "memory", "text"}: the <task> and
        <memory> blocks for the next step (its text content: the blocks themselves)
    memory_deep_retrieval(task_id, node_id, sources_only?) -> the node's raw record
    memory_plan(task_id, report?) / memory_complete(task_id, description?, status?, answer?) -> the Insight Doc
    memory_export(task_id, path?) -> {"path"};  memory_end_task(task_id, remember?) -> the task's summary

Long-term memory across tasks (:mod:`amb_dspy.longterm`)::

    memory_search(query, namespace?, k?, kind?) -> {"items"}, memory_write(text, namespace?, kind?),
    memory_update(item_id, text, namespace?) -> the item, memory_delete(item_id, namespace?) -> {"deleted"}

The tools themselves, their argument rules, result types, hints and error policy are the one table of
:mod:`amb_dspy.task.tools`; this module binds each to a task id (the registry's open tasks) or to the
bank, and carries them over stdio or streamable HTTP. A result is the tool's structured content (its
declared output schema) with its text form beside it; the hints are the tools' annotations. A failure
comes back as a one-line tool error, and one request never takes the server down.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from amb_dspy.bank import MemoryBank
from amb_dspy.errors import InputError
from amb_dspy.serve import access
from amb_dspy.serve.keys import KeyStore
from amb_dspy.serve.registry import TaskRegistry
from amb_dspy.serve.stopping import InFlight, drain_on_sigterm, run_http
from amb_dspy.serve.task_store import TASKS_FOLDER, SqliteTaskStore, TaskStore
from amb_dspy.task.session import TaskSession
from amb_dspy.task.tool_results import ToolResult
from amb_dspy.task.tools import SESSIONS_FOLDER, TOOLS, MemoryTool, ToolFailure, ToolHost, validation_line

INSTRUCTIONS = (
    "A task-scoped memory bank. Start a task with memory_start_task(goal) and keep its task_id. After every "
    "tool call of yours, pass the tool's name, arguments and result to memory_observe. Before each step, read "
    "memory_context: <task> is the plan so far, <memory> the notes relevant to the next step (node ids in "
    "them can be read in full with memory_deep_retrieval). memory_plan asks for the next subtask, "
    "memory_complete records one as done (the goal itself with the final answer). End with memory_end_task."
)


TASK_ID = inspect.Parameter("task_id", inspect.Parameter.KEYWORD_ONLY, annotation=str)


def _tool_error(failure: ToolFailure) -> str:
    raise ToolError(str(failure)) from None


def _reply(result: ToolResult) -> CallToolResult:
    """A tool's result as MCP sends it: its fields as structured content, its text form as text content."""
    return CallToolResult(content=[TextContent(type="text", text=result.as_text())],
                          structured_content=result.model_dump(mode="json"))


def _annotations(tool: MemoryTool) -> ToolAnnotations:
    hints = tool.hints
    return ToolAnnotations(read_only_hint=hints.read_only, destructive_hint=hints.destructive,
                           idempotent_hint=hints.idempotent, open_world_hint=hints.open_world)


class _OneLineServer(MCPServer):
    """The SDK's server, with arguments that fail a tool's schema reported in one line too, and the tool calls
    in flight counted (a stop waits for them: :mod:`amb_dspy.serve.stopping`)."""

    in_flight: InFlight

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            with self.in_flight.call():
                return await super().call_tool(name, arguments, context)
        except InputError as exc:  # refused: the server is stopping
            raise ToolError(str(exc)) from None
        except ToolError as exc:
            if not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(validation_line(name, exc.__cause__)) from exc.__cause__


def build_server(bank: MemoryBank, registry: TaskRegistry, name: str = "amb-dspy", *,
                 allowed_dirs: Sequence[str | Path] = (), keys: KeyStore | None = None) -> MCPServer:
    """The MCP server: every tool of the table, a task's on the open task its ``task_id`` names, the
    others on ``bank`` (configuration, long-term memory; bank files from its storage folder or
    ``allowed_dirs``). With ``keys``, every HTTP call needs one, and reaches only what its key does
    (:mod:`amb_dspy.serve.access`)."""
    auth = {"token_verifier": access.KeyVerifier(keys), "auth": access.auth_settings()} if keys is not None else {}
    server = _OneLineServer(name, instructions=INSTRUCTIONS, **auth)
    server.in_flight = InFlight()
    host = ToolHost(bank.config, bank.embedder, registry.start, tuple(Path(d) for d in allowed_dirs))

    def host_for_caller() -> ToolHost:
        key = access.caller()
        if key is None:
            if keys is not None:  # never reached behind the SDK's RequireAuthMiddleware; refused if it were
                raise InputError("this server needs a key: Authorization: Bearer KEY")
            return host
        start = functools.partial(_start_owned, registry, key)
        return access.KeyedHost(host.config, host.embedder, start, host.allowed_dirs, namespaces=key.namespaces)

    def owned_task(task_id: str) -> TaskSession:
        key = access.caller()
        return registry.get(task_id, owner=None if key is None else key.key_id)

    for tool in TOOLS.values():
        # the SDK's hook: a CallToolResult annotated with the type its structured content is checked against
        reply = {"on_failure": _tool_error, "reply": _reply, "returns": Annotated[CallToolResult, tool.returns]}
        if tool.on_task:
            door = tool.bound(owned_task, key=TASK_ID, **reply)
        else:
            door = tool.bound(host_for_caller, **reply)
        server.tool(name=tool.name, description=tool.description, annotations=_annotations(tool),
                    structured_output=True)(door)
    return server


def _start_owned(registry: TaskRegistry, key: access.Caller, goal: str, *, bank: Path | None = None,
                 namespace: str | None = None) -> TaskSession:
    """A task ``key`` starts and alone reaches, in one of its namespaces (its first unless it names one)."""
    return registry.start(goal, bank=bank, namespace=access.reached_namespace(key.namespaces, namespace),
                          owner=key.key_id)


def task_store(bank: MemoryBank) -> TaskStore:
    """Where the server keeps its tasks: the configured PostgreSQL database, else files under STORAGE_DIR/tasks."""
    url = bank.config.paths.database_url
    if url:
        from amb_dspy.serve.task_store_pg import PostgresTaskStore

        return PostgresTaskStore(url, bank.open_session, bank.embedder)
    return SqliteTaskStore(bank.config.paths.storage_dir / TASKS_FOLDER, bank.open_session, bank.embedder)


def warm_up(bank: MemoryBank) -> None:
    """Load the embedding model before the server listens, so that a replica that has just started answers its first
    call as fast as its later ones (the model's session takes about half a second to load on two cores) and a proxy
    that waits for the port sends it nothing before then."""
    bank.embedder.embed_one("amb serve is ready")


def serve(bank: MemoryBank, *, http_port: int | None = None, host: str = "127.0.0.1", idle_s: float = 1800.0,
          max_tasks: int = 256, allowed_dirs: Sequence[str | Path] = (), keys: KeyStore | None = None,
          allow_hosts: Sequence[str] = ()) -> None:
    """Serve ``bank``'s memory over stdio, or streamable HTTP on ``host:http_port`` (path ``/mcp``);
    ``allowed_dirs``: folders beyond the storage folder that memory_start_task may read bank files from;
    ``keys``: the keys every HTTP call must carry one of (None: no key asked); ``allow_hosts``: Host header
    values accepted beyond loopback names and ``host``. Tasks are kept in ``STORAGE_DIR/tasks`` as they change
    (:mod:`amb_dspy.serve.task_store`), or in the PostgreSQL database of ``AMB_DATABASE_URL`` (``--database``,
    :mod:`amb_dspy.serve.task_store_pg`): a restarted server, or another replica on that database, goes on with
    them."""
    storage = bank.config.paths.storage_dir
    store = task_store(bank)
    registry = TaskRegistry(bank.start_session, export_dir=storage / SESSIONS_FOLDER, idle_s=idle_s,
                            max_tasks=max_tasks, store=store)
    registry.start_reaper()
    server = build_server(bank, registry, allowed_dirs=allowed_dirs, keys=keys if http_port else None)

    def drain() -> None:  # on SIGTERM or Ctrl-C: the calls in flight and every task's queued work finish first
        server.in_flight.drain(registry.settled)

    try:
        if http_port is None:
            drain_on_sigterm(drain)
            server.run("stdio")
        else:
            # stateless: every request is a session of its own, which the SDK logs the end of at INFO (through rich):
            # a line per call, and a few per cent of a loaded server's CPU; warnings and errors still show
            logging.getLogger("mcp.server.streamable_http").setLevel(logging.WARNING)
            # stateless: no MCP session lives in one process, so a client's next request may reach any replica
            # (a proxy without sticky sessions) or this one restarted; tasks live in the task store, not sessions
            # json_response: a call's reply is one JSON body, not an event stream of one event (no tool here streams
            # progress or log messages during a call): about 0.7 ms less CPU per call on the server, 1.3 on the client
            app = server.streamable_http_app(host=host, stateless_http=True, json_response=True,
                                             transport_security=access.transport_security(host, list(allow_hosts)))
            run_http(app, host=host, port=http_port, log_level=server.settings.log_level.lower(), drain=drain)
    finally:
        registry.stop()
