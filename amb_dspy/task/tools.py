"""The memory tools, defined once: the table the MCP server, ``dspy.Tool``, PydanticAI and LangGraph wrap.

Each tool is a typed function. Its first parameter is what it works on, a task's
:class:`~amb_dspy.task.session.TaskSession` or the :class:`ToolHost` (starting tasks, long-term memory); the
others are its arguments, whose types and ``Field`` bounds are the schema every door shows; its
docstring is its description. A door binds the first parameter (:meth:`MemoryTool.bound`): the MCP
server from a ``task_id`` argument, a framework to the one session it was given.

Every call goes through :meth:`MemoryTool.run`, so every door has the same rules:

* **input**: the arguments are validated against their types and bounds (``k`` from 1 to 100, names
  and namespaces of 1 to 200 characters: an omitted namespace is the configured one, an empty one is
  refused), every text or object argument fits in ``max_context_bytes`` (``AMB_MAX_CONTEXT_BYTES``),
  and a bank file is read only inside the storage folder or a folder the operator allows
  (``amb serve --allow-dir DIR``); exports stay in ``STORAGE_DIR/sessions``;
* **errors**: whatever fails becomes one :class:`ToolFailure` line (ours say what and why; anything
  else is logged and named by its type); a door shows it its own way (an MCP tool error, an ``Error:``
  line for an agent);
* **output**: a :class:`~amb_dspy.task.tool_results.ToolResult`, the function's return annotation: its
  fields are the tool's output schema (the MCP server's structured content), its text form what a
  text-reading agent is given (:meth:`MemoryTool.run`);
* **hints**: how the tool treats what it works on (:class:`ToolHints`: read-only, destructive,
  idempotent), given to the table with the function; the MCP server shows them as tool annotations.
"""

import inspect
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from amb_dspy.config import AmbConfig
from amb_dspy.errors import AmbError, InputError, UserError, one_line
from amb_dspy.lm import LMCallCapReached
from amb_dspy.longterm import LongTermStore, StoreUnavailableError, open_store_with_fallback
from amb_dspy.storage.bank_names import database_bank, is_bank_name, named_bank
from amb_dspy.task.session import TaskSession
from amb_dspy.task.tool_results import (
    Deleted,
    ExportedBank,
    FoundItem,
    InsightDocResult,
    LongTermItem,
    MemoryContext,
    NodeRecord,
    Observation,
    SearchResult,
    TaskStarted,
    TaskSummary,
    ToolResult,
    WrittenItem,
)

logger = logging.getLogger("amb_dspy.tools")

MAX_NAME_CHARS = 200
MAX_K = 100
SESSIONS_FOLDER = "sessions"

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
Namespace = Annotated[str | None, Field(min_length=1, max_length=MAX_NAME_CHARS, description=(
    "the long-term memory namespace (a user, an agent, a task type); omitted: the configured default"))]


class ToolFailure(UserError):
    """A memory tool's failure, as the one line its caller (an agent, an MCP client) is shown."""


@dataclass(frozen=True)
class ToolHost:
    """What the tools outside one task work on: the bank's configuration and embedding model, how a
    task starts (``MemoryBank.start_session``, or a registry that keeps it), and the folders beyond
    ``config.storage_dir`` that bank files may be read from."""

    config: AmbConfig
    embedder: Any
    start_session: Callable[..., TaskSession]
    allowed_dirs: tuple[Path, ...] = ()

    def bank_file(self, bank: str | None):
        """``bank`` as a readable bank file inside the storage folder or an allowed one (a relative path
        is taken from the storage folder, a bare name that is no file there from its ``banks/``, as ``amb
        ingest --bank NAME`` writes it, or from the configured PostgreSQL database when there is one);
        InputError otherwise, before the file is even looked at."""
        if bank is None:
            return None
        database = self.config.paths.database_url
        if database and is_bank_name(bank) and not (self.config.paths.storage_dir.expanduser() / bank).is_file():
            return database_bank(database, bank)
        roots = [self.config.paths.storage_dir.expanduser().resolve(),
                 *(Path(d).expanduser().resolve() for d in self.allowed_dirs)]
        path = Path(bank).expanduser()
        path = (path if path.is_absolute() else roots[0] / path).resolve()
        if is_bank_name(bank) and not path.is_file():
            path = named_bank(bank, roots[0])
        if not any(path.is_relative_to(root) for root in roots):
            raise InputError(f"bank file {bank}: outside the folders this server reads bank files from "
                             f"({', '.join(map(str, roots))}; the operator adds one with amb serve --allow-dir DIR)")
        if not path.is_file():
            raise InputError(f"bank file {bank}: no such file")
        return path

    @contextmanager
    def longterm(self) -> Iterator[LongTermStore]:
        """The long-term store, opened as a run opens it: the local SQLite store when the configured
        server cannot be reached (a notice in the log), closed after use."""
        store, notice = open_store_with_fallback(self.config, embedder=self.embedder)
        if store is None:
            raise StoreUnavailableError(notice or "no long-term store")
        if notice:
            logger.warning("%s", notice)
        try:
            yield store
        finally:
            store.close()

    def namespace(self, namespace: str | None) -> str:
        return self.config.longterm.namespace if namespace is None else namespace


def validation_line(name: str, error: ValidationError) -> str:
    """A tool's arguments that fail its schema, as one line naming each bad argument."""
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg'].lower()}"
                         for e in error.errors())
    return one_line(f"bad arguments for {name}: {problems}")


def _check_sizes(arguments: BaseModel, limit: int) -> None:
    """Every text or object argument fits in ``limit`` bytes (its UTF-8 text, or its JSON)."""
    for name, value in arguments:
        if isinstance(value, str):
            size = len(value.encode("utf-8"))
        elif isinstance(value, dict | list):
            size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
        else:
            continue
        if size > limit:
            raise InputError(f"the {name} is {size} bytes, over the {limit}-byte limit (AMB_MAX_CONTEXT_BYTES)")


@contextmanager
def _one_line_failures(name: str) -> Iterator[None]:
    """The one error policy: every failure leaves as a :class:`ToolFailure` line."""
    try:
        yield
    except ToolFailure:
        raise
    except (AmbError, LMCallCapReached) as exc:  # ours: the message says what and why
        raise ToolFailure(one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a bug in one call must not end the caller's others
        logger.exception("%s failed", name)
        raise ToolFailure(f"{type(exc).__name__}: {one_line(exc)}") from None


@dataclass(frozen=True)
class ToolHints:
    """How a tool treats what it works on, as MCP's tool annotations say it (a client reads them, e.g., to
    ask before a destructive call). ``read_only``: changes nothing; ``destructive``: may replace or remove
    what is there (else it only adds); ``idempotent``: a second identical call changes nothing more;
    ``open_world``: reaches outside the memory (none does)."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False


READS = ToolHints(read_only=True, idempotent=True)
ADDS = ToolHints()


class MemoryTool:
    """One memory tool: ``function(target, **arguments) -> ToolResult`` with its rules and ``hints`` (see
    the module docstring)."""

    def __init__(self, function: Callable[..., ToolResult], hints: ToolHints):
        self.function, self.hints = function, hints
        self.name = function.__name__
        self.description = " ".join((function.__doc__ or "").split())
        self.returns: type[ToolResult] = get_type_hints(function)["return"]
        if not issubclass(self.returns, ToolResult):
            raise TypeError(f"memory tool {self.name} must return a ToolResult, not {self.returns!r}")
        target, *self.parameters = inspect.signature(function).parameters.values()
        self.on_task = target.annotation is TaskSession
        self.arguments = create_model(
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"),
            **{p.name: (p.annotation, ... if p.default is p.empty else p.default) for p in self.parameters})

    def call(self, target: Any, /, **arguments: Any) -> ToolResult:
        """Check ``arguments``, call the tool on ``target`` and return its result; ToolFailure otherwise."""
        with _one_line_failures(self.name):
            try:
                checked = self.arguments.model_validate(arguments)
            except ValidationError as exc:
                raise ToolFailure(validation_line(self.name, exc)) from None
            _check_sizes(checked, target.config.limits.max_context_bytes)
            return self.function(target, **dict(checked))

    def run(self, target: Any, /, **arguments: Any) -> str:
        """:meth:`call`, as the text a text-reading agent is given (:meth:`ToolResult.as_text`)."""
        return self.call(target, **arguments).as_text()

    def bound(self, resolve: Callable[..., Any], *, key: inspect.Parameter | None = None,
              on_failure: Callable[[ToolFailure], Any] | None = None,
              reply: Callable[[ToolResult], Any] | None = None, returns: Any = str) -> Callable[..., Any]:
        """This tool as a plain function for a door: named and described as the tool, keyword arguments
        (``key`` first, e.g. ``task_id``), ``resolve(key)`` (or ``resolve()``) giving what it works on;
        its result given to ``reply`` (default: its text; ``returns``: what ``reply`` gives, the function's
        return annotation); a failure goes to ``on_failure`` (default: raised)."""
        def door(**arguments: Any) -> Any:
            try:
                with _one_line_failures(self.name):
                    target = resolve(arguments.pop(key.name, None)) if key is not None else resolve()
                result = self.call(target, **arguments)
                return result.as_text() if reply is None else reply(result)
            except ToolFailure as failure:
                if on_failure is None:
                    raise
                return on_failure(failure)

        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in ([key] if key else []) + self.parameters]
        door.__signature__ = inspect.Signature(parameters, return_annotation=returns)
        door.__annotations__ = {**{p.name: p.annotation for p in parameters}, "return": returns}
        door.__name__ = door.__qualname__ = self.name
        door.__doc__ = self.description
        return door


TOOLS: dict[str, MemoryTool] = {}


def memory_tool(hints: ToolHints) -> Callable[[Callable[..., ToolResult]], Callable[..., ToolResult]]:
    """Put the decorated function in the table (:data:`TOOLS`), with its ``hints``."""
    def register(function: Callable[..., ToolResult]) -> Callable[..., ToolResult]:
        TOOLS[function.__name__] = MemoryTool(function, hints)
        return function

    return register


def export_path(session: TaskSession, name: str | None) -> Path:
    """Where a task's bank may be written: a file inside ``STORAGE_DIR/sessions`` only; a task a key started
    (``session.owner``), inside that key's own folder there, so that no key replaces another's export."""
    root = (session.config.paths.storage_dir / SESSIONS_FOLDER / (session.owner or "")).expanduser().resolve()
    path = (root / (name or f"{session.task_id}.json")).resolve()
    if not path.is_relative_to(root) or path == root:
        raise InputError(f"the export path must be a file inside {root}, not {name!r}")
    return path


# --- the table: a task's tools (first parameter: its session; to start one, the host) -------------------------------------------
@memory_tool(ADDS)
def memory_start_task(host: ToolHost, goal: str, namespace: Namespace = None, bank: str | None = None) -> TaskStarted:
    """Start a task with its own empty memory, or a copy of a bank file (written by amb ingest or
    memory_export; a path inside the server's storage folder, or a folder its operator allows).
    namespace: the long-term memory namespace recalled into <memory> and remembered into at the end.
    Returns the task_id every other tool takes."""
    session = host.start_session(goal, bank=host.bank_file(bank), namespace=namespace)
    return TaskStarted(task_id=session.task_id, notices=session.state.notices)


@memory_tool(ToolHints(idempotent=True))  # a repeat is recognised and not stored again
def memory_observe(session: TaskSession, tool: Name, result: str, arguments: dict[str, Any] | None = None,
                   wait: bool = False) -> Observation:
    """Hand over one tool call of yours and what it returned: it becomes memory (nodes in the Query Graph,
    the raw text in the Interaction Tree) before the task's next request runs. A call already observed
    with the same result is a repeat and is not stored again. wait: return only once it is memory, with
    its entry and node ids."""
    return Observation(**session.observe(tool, arguments, result, wait=wait).as_dict())


@memory_tool(READS)
def memory_context(session: TaskSession,
                   budget: Annotated[int | None, Field(ge=50, le=100_000)] = None) -> MemoryContext:
    """The <task> (goal, completed subtasks, the pending one, what was already fetched) and <memory> (the
    notes for the pending subtask, with node ids) blocks to read before your next step. budget: tokens of
    <memory>."""
    blocks = session.context_blocks(budget)
    return MemoryContext(task_id=session.task_id, pending_task=blocks.pending_task, task=blocks.task,
                         memory=blocks.memory, text=blocks.text)


@memory_tool(READS)
def memory_deep_retrieval(session: TaskSession, node_id: Name, sources_only: bool = False) -> NodeRecord:
    """The full raw record behind one memory node (every interaction entry, attachments);
    sources_only: just the exact source passages the node was built from. Use it when a note in
    <memory> is too short to answer from."""
    return NodeRecord.model_validate_json(session.deep_retrieval(node_id, sources_only=sources_only))


@memory_tool(ADDS)
def memory_plan(session: TaskSession, report: str = "") -> InsightDocResult:
    """Ask the planning agent for the next subtask: it judges the pending one by report (what you found)
    and the memory observed since the last plan. Returns the Insight Doc (pending_tasks: the next one, or
    none when the goal is met)."""
    return InsightDocResult.of(session.plan(report))


@memory_tool(ADDS)
def memory_complete(session: TaskSession, description: str = "", status: str = "success",
                    answer: str = "") -> InsightDocResult:
    """Record a subtask as done (description: the pending one when empty; status: success or failure;
    answer: what it found). The goal itself, or the last pending subtask, makes answer the task's answer.
    Returns the Insight Doc."""
    return InsightDocResult.of(session.complete(description, status, answer))


@memory_tool(ToolHints(idempotent=True))  # a bank file is never replaced by a smaller bank
def memory_export(session: TaskSession, path: str | None = None) -> ExportedBank:
    """Write the task's bank file on the server, under STORAGE_DIR/sessions/ (path: a file name or a path
    inside that folder; default <task_id>.json); amb show reads it, memory_start_task(bank=...) starts
    another task from it."""
    return ExportedBank(path=str(session.export(export_path(session, path))))


@memory_tool(ToolHints(destructive=True, idempotent=True))  # the task's memory is gone unless exported
def memory_end_task(session: TaskSession, remember: bool | None = None) -> TaskSummary:
    """End the task and free its memory. remember: write its answer and trajectory to long-term memory
    (default: the configured remember setting)."""
    return TaskSummary(**session.close(remember=remember))


# --- long-term memory across tasks (first parameter: the host) ---------------------------------------------
def _item(item: Any) -> dict[str, Any]:
    """A stored long-term item as the fields of :class:`LongTermItem`."""
    return {"item_id": item.id, "kind": item.kind, "text": item.content, "updated": item.updated.isoformat()}


@memory_tool(READS)
def memory_search(host: ToolHost, query: str, namespace: Namespace = None,
                  k: Annotated[int, Field(ge=1, le=MAX_K)] = 5, kind: str | None = None) -> SearchResult:
    """Search long-term memory (what earlier tasks concluded, facts, preferences) in a namespace."""
    if not query.strip():
        raise InputError("the search query is empty")
    with host.longterm() as store:
        found = store.search(host.namespace(namespace), query, k=k, kinds=[kind] if kind else None)
    return SearchResult(items=[FoundItem(**_item(f.item), score=round(f.score, 4)) for f in found])


@memory_tool(ToolHints(destructive=True))  # a merge rewrites the item merged into (a preference: replaced)
def memory_write(host: ToolHost, text: str, namespace: Namespace = None, kind: str = "fact") -> WrittenItem:
    """Write one item to long-term memory (kind: fact, preference, conclusion or trajectory); a near
    duplicate of an existing item is merged into it."""
    with host.longterm() as store:
        outcome = store.write(host.namespace(namespace), text, kind, reason="memory_write")
    return WrittenItem(**_item(outcome.item), action=outcome.action)


@memory_tool(ToolHints(destructive=True, idempotent=True))
def memory_update(host: ToolHost, item_id: Name, text: str, namespace: Namespace = None) -> LongTermItem:
    """Replace the text of a long-term memory item."""
    with host.longterm() as store:
        return LongTermItem(**_item(store.update(host.namespace(namespace), item_id, content=text,
                                                 reason="memory_update")))


@memory_tool(ToolHints(destructive=True, idempotent=True))
def memory_delete(host: ToolHost, item_id: Name, namespace: Namespace = None) -> Deleted:
    """Delete a long-term memory item (its audit row stays)."""
    with host.longterm() as store:
        return Deleted(deleted=store.delete(host.namespace(namespace), item_id, reason="memory_delete").id)


AGENT_TOOLS = ("memory_context", "memory_deep_retrieval", "memory_plan", "memory_complete")
"""The tools an agent working inside one task gets (its own tool results are observed for it)."""
