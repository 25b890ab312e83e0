"""What ``amb show`` does with its arguments; the CLI only parses them and calls :func:`show`."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from amb_dspy.text import printable
from amb_dspy.view.html import write_html
from amb_dspy.view.model import ViewError, load_view
from amb_dspy.view.terminal import render_bank, render_node
from amb_dspy.view.trace import read_trace, trace_table


def show(console: Console, bank: Path | None = None, node: str | None = None, html: Path | None = None,
         trace: Path | None = None) -> None:
    """Print a bank (or one node of it), write its HTML page, and/or print a run's trace.

    Everything is read and checked before anything is printed or written, so a bad argument fails
    in one line (ViewError, BankFileError) and leaves no half-written page.
    """
    if bank is None and trace is None:
        raise ViewError("give a bank file to show (amb show bank.json) or a trace (amb show --trace run.jsonl)")
    if bank is None and (node is not None or html is not None):
        raise ViewError("--node and --html need a bank file: amb show bank.json ...")
    records = read_trace(trace) if trace is not None else None
    view = load_view(bank) if bank is not None else None
    node_view = render_node(view, node) if node is not None else None
    if html is not None:
        write_html(view, html)
        console.print(Text(f"wrote {printable(str(html))}: {len(view.nodes)} nodes, {len(view.edges)} edges; open it "
                           "in a browser (it works offline)"), highlight=False, soft_wrap=True)
    if records is not None:
        console.print(trace_table(records, title=str(trace)))
    if node_view is not None:
        console.print(node_view)
    elif view is not None and html is None:
        console.print(render_bank(view))
