"""What ``amb memory list|search|show|delete|prune|export|route`` do once their flags are parsed.

Each function opens the configured store, does one thing, closes the store and returns the lines to
print. Problems raise :class:`~amb_dspy.longterm.base.LongTermError` subclasses with one-line messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from amb_dspy.config import AmbConfig
from amb_dspy.files import write_atomically
from amb_dspy.longterm.base import LongTermStore, MemoryItem
from amb_dspy.longterm.errors import LongTermInputError
from amb_dspy.longterm.registry import open_store

PREVIEW_CHARS = 100


@contextmanager
def _store(config: AmbConfig) -> Iterator[LongTermStore]:
    store = open_store(config)
    try:
        yield store
    finally:
        store.close()


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "..."


def _row(item: MemoryItem) -> str:
    task = item.metadata.source_task_id or "-"
    return f"{item.id}  {item.kind:<10}  {item.updated.date().isoformat()}  task {task}  {_preview(item.content)}"


def list_items(config: AmbConfig, namespace: str, *, kind: str | None = None, limit: int | None = 50) -> list[str]:
    """One line per item, most recently updated first."""
    with _store(config) as store:
        items = store.list(namespace, kind=kind)
    lines = [_row(item) for item in items[:limit]]
    shown = f"{len(lines)} of {len(items)}" if limit is not None and len(items) > limit else f"{len(items)}"
    return [*lines, f"{shown} item(s) in namespace {namespace!r}"]


def search_items(config: AmbConfig, namespace: str, query: str, *, k: int = 5, kind: str | None = None) -> list[str]:
    """The best items for ``query``, each with its score ``S``, its similarity and its recency."""
    if not query.strip():
        raise LongTermInputError("the search query is empty")
    with _store(config) as store:
        found = store.search(namespace, query, k=k, kinds=[kind] if kind else None)
    if not found:
        return [f"nothing found in namespace {namespace!r}"]
    return [f"{s.score:.3f} (sim {s.similarity:.3f}, recency {s.recency:.2f})  {_row(s.item)}" for s in found]


def _item_json(item: MemoryItem) -> dict:
    return {**item.model_dump(), "created": item.created.isoformat(), "updated": item.updated.isoformat()}


def show_item(config: AmbConfig, namespace: str, item_id: str) -> list[str]:
    """The item as JSON, with its audit rows."""
    with _store(config) as store:
        item = store.get(namespace, item_id)
        audit = store.audit(namespace, item_id=item_id)
    return [json.dumps({**_item_json(item), "audit": [r.model_dump() for r in audit]}, indent=2, ensure_ascii=False)]


def delete_item(config: AmbConfig, namespace: str, item_id: str, *, reason: str = "") -> list[str]:
    with _store(config) as store:
        item = store.delete(namespace, item_id, reason=reason or "deleted with amb memory delete")
    return [f"deleted {item.id} ({item.kind}): {_preview(item.content)}"]


def prune_items(config: AmbConfig, namespace: str, *, older_than_days: float, kind: str | None = None) -> list[str]:
    with _store(config) as store:
        pruned = store.prune(namespace, older_than_days=older_than_days, kind=kind)
    return [*(f"pruned {_row(item)}" for item in pruned),
            f"pruned {len(pruned)} item(s) not updated for {older_than_days:g} days from namespace {namespace!r}"]


def export_items(config: AmbConfig, namespace: str, out: Path | None = None) -> list[str]:
    """The namespace's items and audit rows as one JSON object, printed or written to ``out``
    (through a temporary file, so a failed export leaves no half-written file)."""
    with _store(config) as store:
        items, audit = store.list(namespace), store.audit(namespace)
    document = json.dumps({"namespace": namespace, "exported_at": time.time(),
                           "items": [_item_json(item) for item in items],
                           "audit": [r.model_dump() for r in audit]}, indent=2, ensure_ascii=False)
    if out is None:
        return [document]
    out = Path(out)
    if out.is_dir():
        raise LongTermInputError(f"export target {out} is a folder, not a file")
    try:
        write_atomically(out, document + "\n")
    except OSError as exc:
        raise LongTermInputError(f"cannot write {out}: {exc.strerror or exc}") from None
    return [f"exported {len(items)} item(s) and {len(audit)} audit row(s) of namespace {namespace!r} to {out}"]


def route_message(config: AmbConfig, namespace: str, message: str, *, answer: str = "") -> list[str]:
    """What :func:`~amb_dspy.longterm.route.route` decides for ``message`` (after a task that answered
    ``answer``, when given): read, write, namespaces, kinds and the rules that fired. Opens no store."""
    from amb_dspy.longterm.route import route

    if not message.strip():
        raise LongTermInputError("the message is empty")
    decision = route(message, {"answer": answer} if answer else None, namespace=namespace)
    return [f"should_read: {str(decision.should_read).lower()}",
            f"should_write: {str(decision.should_write).lower()}",
            f"namespaces: {', '.join(decision.namespaces)}",
            f"kinds: {', '.join(decision.kinds) or '-'} ({', '.join(decision.memory_kinds) or 'nothing kept'})",
            f"why: {'; '.join(decision.reasons) or '-'}"]
