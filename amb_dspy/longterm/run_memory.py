"""Long-term memory around one ``amb run``: read before planning, write after the answer, as routed.

:func:`recall_for_task` asks :func:`~amb_dspy.longterm.route.route` whether the task reads, recalls
the items over the minimum score and condenses them for the task (:func:`~.summarize.summarize`,
within ``AMB_LONGTERM_MAX_TOKENS``). :func:`remember_run` asks the route, with the task's trace,
what to keep and writes only those kinds. Both open the store through
:func:`~amb_dspy.longterm.registry.open_store_with_fallback` (an unreachable server gives way to the
local SQLite store, one notice says so) and turn every long-term failure into a notice: long-term
memory never fails a run. The long-term section's ``recall`` / ``remember``, given explicitly, still rule:
no recall when ``recall`` is off, no write unless ``remember`` is on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from amb_dspy.config import AmbConfig, LongTermSettings
from amb_dspy.longterm.errors import LongTermError
from amb_dspy.longterm.registry import open_store_with_fallback, store_exists
from amb_dspy.longterm.remember import DEFAULT_RECALL_K, recall, remember_task
from amb_dspy.longterm.route import RouteDecision, Router, route, told_statements
from amb_dspy.longterm.summarize import summarize
from amb_dspy.retrieval.embedding import Embedder

# Recall gathers this many times the block's budget; summarize() condenses it into the budget.
_RECALL_POOL = 3


def lm_router(lm) -> Router:
    """The :class:`~amb_dspy.longterm.route_agent.MemoryRouter` answering with ``lm``."""
    import dspy

    from amb_dspy.longterm.route_agent import MemoryRouter

    router = MemoryRouter()

    def ask(message: str, trace: str) -> Mapping[str, Any]:
        with dspy.context(lm=lm):
            return router(message, trace)

    return ask


def _router(settings: LongTermSettings, lm) -> Router | None:
    return lm_router(lm) if settings.longterm_router == "lm" and lm is not None else None


def _store_notices(store) -> list[str]:
    return list(getattr(store, "notices", ()))


def recall_for_task(config: AmbConfig, embedder: Embedder, task: str, *, lm=None) -> tuple[str, list[str]]:
    """The condensed "From earlier tasks:" block for ``task`` (empty when nothing is recalled), and notices."""
    settings = config.longterm
    if settings.recall is False or (settings.recall is None and not store_exists(config)):
        return "", []
    decision = route(task, namespace=settings.namespace, router=_router(settings, lm))
    if not decision.should_read and settings.recall is None:
        return "", []
    store, notice = open_store_with_fallback(config, embedder=embedder)
    notices = [notice] if notice else []
    if store is None:
        return "", notices
    try:
        items = [found for namespace in decision.namespaces
                 for found in recall(store, namespace=namespace, query=task, k=DEFAULT_RECALL_K,
                                     max_tokens=_RECALL_POOL * settings.longterm_max_tokens)]
        items.sort(key=lambda found: -found.score)
        return summarize(items, task, max_tokens=settings.longterm_max_tokens), notices + _store_notices(store)
    except LongTermError as exc:  # a failing store never breaks the run
        return "", [*notices, f"no long-term memory this run: {exc}"]
    finally:
        store.close()


def remember_run(config: AmbConfig, embedder: Embedder, *, task_id: str, goal: str, answer: str,
                 citations: Iterable[Any] = (), completed_tasks: Sequence[Mapping[str, Any]] = (),
                 hops: Sequence[Mapping[str, Any]] = (), succeeded: bool = True,
                 lm=None) -> tuple[RouteDecision | None, list[str]]:
    """Write what the route keeps of a finished task (when ``config.longterm.remember``); the decision and notices."""
    if not config.longterm.remember:
        return None, []
    trace = {"answer": answer, "hops": hops, "completed_tasks": completed_tasks, "succeeded": succeeded}
    decision = route(goal, trace, namespace=config.longterm.namespace, router=_router(config.longterm, lm))
    if not decision.should_write:
        return decision, []
    store, notice = open_store_with_fallback(config, embedder=embedder)
    notices = [notice] if notice else []
    if store is None:
        return decision, [f"not remembered: {notice}"]
    try:
        told = [(kind, statement) for kind, statement in told_statements(goal) if kind in decision.kinds]
        for namespace in decision.namespaces:
            for kind, statement in told:  # the message's own sentences that are a preference or a fact
                store.write(namespace, statement, kind, task_id=task_id, reason="; ".join(decision.reasons))
            remember_task(store, namespace=namespace, task_id=task_id, goal=goal, answer=answer,
                          citations=citations, completed_tasks=completed_tasks, hops=hops,
                          kinds=decision.kinds)  # the store redacts when config.longterm.redact is on
        return decision, notices + _store_notices(store)
    except LongTermError as exc:  # the answer stands; the memory write is reported
        return decision, [*notices, f"not remembered: {exc}"]
    finally:
        store.close()
