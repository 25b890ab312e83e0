"""``amb show``: a bank in the terminal, drawn with rich.

:func:`render_bank` gives the whole bank at a glance (Insight Doc, a table of nodes, merge events,
totals); :func:`render_node` gives one node in full (summary, neighbours, the raw text of its entries
with source spans highlighted where the bank stores them, merge history). Both return rich renderables,
so the caller decides where they are printed. Bank text is wrapped in ``Text`` objects, never parsed
as console markup, so a summary with ``[bold]`` in it prints as written.
"""

from __future__ import annotations

import json
from datetime import datetime

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from amb_dspy.storage import InteractionEntry, TaskStatus
from amb_dspy.text import printable
from amb_dspy.view.model import BankView, NodeView

SHORT_ID = 8  # characters of a node id shown in tables; `--node` accepts any unambiguous prefix
SPAN_STYLE = "black on yellow"


def short(node_id: str) -> str:
    return printable(node_id[:SHORT_ID])


def shown(text: str, style: str = "") -> Text:
    """Text from a bank as the terminal shows it: control characters escaped (:func:`~amb_dspy.text.printable`),
    never read as markup."""
    return Text(printable(text, lines=True), style=style)


def clock(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def totals(view: BankView) -> dict[str, int]:
    doc = view.insight_doc
    return {"nodes": len(view.nodes), "edges": len(view.edges), "entries": len(view.entries),
            "merges": len(view.merge_events), "completed tasks": len(doc.completed_tasks) if doc else 0,
            "pending tasks": len(doc.pending_tasks) if doc else 0}


def _insight_doc(view: BankView) -> Panel:
    doc = view.insight_doc
    if doc is None:
        return Panel(Text("(this bank has no Insight Doc)", style="dim"), title="Insight Doc")
    tasks = Table(show_header=True, header_style="bold", expand=True, box=None)
    for column in ("#", "type", "status"):
        tasks.add_column(column, no_wrap=True)
    tasks.add_column("task", overflow="fold", ratio=2)
    tasks.add_column("what it found", overflow="fold", ratio=3)
    for i, task in enumerate(doc.completed_tasks, 1):
        ok = task.status is TaskStatus.SUCCESS
        tasks.add_row(str(i), task.type.value, Text(task.status.value, style="green" if ok else "red"),
                      shown(task.description), shown(task.context))
    for pending in doc.pending_tasks:
        tasks.add_row("next", "", Text("pending", style="yellow"), shown(pending), "")
    parts = [Text.assemble(("goal: ", "bold"), shown(doc.task_goal))]
    parts.append(tasks if doc.completed_tasks or doc.pending_tasks else Text("no tasks yet", style="dim"))
    return Panel(Group(*parts), title="Insight Doc")


def _nodes_table(view: BankView) -> Table:
    table = Table(title=f"Query Graph: {len(view.nodes)} nodes, {len(view.edges)} edges", expand=True)
    table.add_column("id", no_wrap=True)
    table.add_column("topic", overflow="fold", ratio=3)
    table.add_column("keywords", overflow="fold", ratio=2)
    for column in ("degree", "entries", "step"):
        table.add_column(column, justify="right")
    table.add_column("created", no_wrap=True)
    for node in view.nodes.values():
        node_id = Text(short(node.id), style="bold magenta" if node.is_merged else "")
        if node.is_merged:
            node_id.append(" M", style="magenta")
        table.add_row(node_id, shown(node.context), shown(", ".join(node.keywords)), str(node.degree),
                      str(len(node.entry_ids)), str(node.step), clock(node.created))
    if view.merge_events:
        table.caption = "M: made by a merge (see `--node ID` for its history)"
    return table


def _merge_table(view: BankView, events, title: str = "Merge events") -> Table:
    table = Table(title=title, expand=True)
    table.add_column("when", no_wrap=True)
    table.add_column("merged", overflow="fold")
    table.add_column("into", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=3)
    for event in events:
        gone = ", ".join(short(i) for i in event.merged_node_ids)
        into = short(event.new_node_id) + ("" if event.new_node_id in view.nodes else " (merged again later)")
        table.add_row(clock(event.timestamp), gone, into, shown(event.description))
    return table


def render_bank(view: BankView) -> Group:
    """The whole bank: Insight Doc, the nodes, the merge events and the totals."""
    parts = [shown(str(view.path), style="bold"), _insight_doc(view), _nodes_table(view)]
    if view.merge_events:
        parts.append(_merge_table(view, view.merge_events))
    parts.append(Text("totals: " + ", ".join(f"{k} {v}" for k, v in totals(view).items())))
    return Group(*parts)


def highlighted(entry: InteractionEntry, node: NodeView) -> Text:
    """An entry's raw text with the node's source spans in it highlighted (none until provenance exists), shown
    as :func:`shown` shows text: the text is cut at the spans' ends, so that an escaped character moves no span."""
    spans = [(max(0, span.start), min(span.end, len(entry.text))) for span in node.sources
             if span.entry_id == entry.entry_id]
    cuts = sorted({0, len(entry.text), *(end for span in spans for end in span)})
    text, at = Text(), {}
    for start, end in zip(cuts, cuts[1:]):
        at[start] = len(text)
        text.append(printable(entry.text[start:end], lines=True))
    at[cuts[-1]] = len(text)
    for start, end in spans:
        text.stylize(SPAN_STYLE, at[start], at[end])
    return text


def _entry_panel(entry: InteractionEntry, node: NodeView) -> Panel:
    metadata = dict(entry.model_dump(mode="json")["metadata"])
    source = metadata.pop("source", "entry")
    title = printable(f"{source} · {clock(entry.timestamp)} · {entry.entry_id[:SHORT_ID]}")
    parts = [highlighted(entry, node)]
    if metadata:
        parts.append(shown(json.dumps(metadata, ensure_ascii=False), style="dim"))
    if entry.attachments:
        parts.append(shown("attachments: " + ", ".join(f"{a.type.value} {a.content}" for a in entry.attachments),
                           style="dim"))
    return Panel(Group(*parts), title=Text(title), title_align="left")


def render_node(view: BankView, node_id: str) -> Group:
    """One node in full; ``node_id`` may be an unambiguous prefix. ViewError if there is no such node."""
    node = view.node(node_id)
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column(overflow="fold")
    head.add_row("id", shown(node.id))
    head.add_row("topic", shown(node.context))
    head.add_row("keywords", shown(", ".join(node.keywords)))
    head.add_row("created", f"{clock(node.created)} (step {node.step})")
    head.add_row("summary", shown(node.summary))
    parts: list = [Panel(head, title="node" + (" (made by a merge)" if node.is_merged else ""))]

    neighbours = Table(title=f"Neighbours ({node.degree})", expand=True)
    neighbours.add_column("id", no_wrap=True)
    neighbours.add_column("topic", overflow="fold")
    neighbours.add_column("keywords", overflow="fold")
    for other in view.neighbours(node.id):
        neighbours.add_row(short(other.id), shown(other.context), shown(", ".join(other.keywords)))
    parts.append(neighbours)

    entries = view.node_entries(node.id)
    parts.append(Text(f"Entries ({len(entries)})" + ("; source spans highlighted" if node.sources else ""), style="bold"))
    parts.extend(_entry_panel(entry, node) for entry in entries)
    history = view.merge_history(node.id)
    if history:
        parts.append(_merge_table(view, history, title="Merge history"))
    return Group(*parts)
