"""See the memory: a bank in the terminal (``amb show``), as an offline HTML page (``--html``), and a
run's per-event trace (``amb run --trace``, read back with ``amb show --trace``).

Nothing here writes to a bank: views read a bank file through the bank-file loader and draw it.
"""

from amb_dspy.view.command import show
from amb_dspy.view.html import render_html, write_html
from amb_dspy.view.model import BankView, NodeView, ViewError, load_view
from amb_dspy.view.terminal import render_bank, render_node
from amb_dspy.view.trace import (
    TraceError,
    TraceWriter,
    fan_out,
    read_trace,
    trace_table,
)

__all__ = [
    "BankView", "NodeView", "TraceError", "TraceWriter", "ViewError", "fan_out", "load_view", "read_trace",
    "render_bank", "render_html", "render_node", "show", "trace_table", "write_html",
]
