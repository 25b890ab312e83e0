"""``amb show bank.json --html view.html``: one self-contained HTML file that shows a bank offline.

The page inlines everything it needs: the vendored cytoscape.js with its fCoSE layout
(``static/vendor``, see the README there), its own script and style, and the bank as JSON inside a
``<script type="application/json">`` element. Its Content-Security-Policy allows no network access
at all and runs only the page's own scripts (by hash), so neither the page nor anything smuggled into
a bank can fetch or execute anything. Bank text is escaped twice over: ``<``, ``>`` and ``&`` are
written as JSON ``\\u`` escapes (no ``</script>`` can end the data early), and the script puts text
into the page with ``textContent`` only.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from amb_dspy.files import write_atomically
from amb_dspy.view.model import BankView, ViewError

# Load order matters: fCoSE's UMD bundles find their dependencies as globals.
VENDOR_SCRIPTS = ("cytoscape.min.js", "layout-base.js", "cose-base.js", "cytoscape-fcose.js")
_PLACEHOLDER = re.compile(r"@@([A-Z]+)@@")


def _static(name: str) -> str:
    return resources.files("amb_dspy.view").joinpath("static", name).read_text(encoding="utf-8")


def _script_safe(code: str) -> str:
    """Script text that cannot close its <script> element early (``<\\/`` means ``</`` in JS strings and regexes)."""
    return re.sub(r"</(script)", r"<\\/\1", code, flags=re.IGNORECASE)


def json_for_html(data: Any) -> str:
    """JSON that is safe inside any HTML element: no ``<``, ``>`` or ``&`` appear as themselves."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page_data(view: BankView) -> dict[str, Any]:
    """Everything the page shows, as plain JSON data."""
    doc = view.insight_doc
    entries = {}
    for entry_id, entry in view.entries.items():
        metadata = dict(entry.model_dump(mode="json")["metadata"])
        entries[entry_id] = {
            "text": entry.text, "time": entry.timestamp, "source": str(metadata.pop("source", "entry")),
            "metadata": metadata, "attachments": [f"{a.type.value} {a.content}" for a in entry.attachments],
        }
    return {
        "name": view.path.name,
        "insight_doc": doc.model_dump(mode="json") if doc else None,
        "steps": view.steps,
        "nodes": [{
            "id": n.id, "summary": n.summary, "context": n.context, "keywords": list(n.keywords),
            "entries": list(n.entry_ids), "step": n.step, "created": n.created, "merged_from": list(n.merged_from),
            "sources": [{"entry_id": s.entry_id, "start": s.start, "end": s.end} for s in n.sources],
        } for n in view.nodes.values()],
        "edges": [list(edge) for edge in view.edges],
        "entries": entries,
        "merges": [{"time": m.timestamp, "merged": list(m.merged_node_ids), "into": m.new_node_id,
                    "description": m.description} for m in view.merge_events],
    }


def render_html(view: BankView) -> str:
    """The page for a bank, as one string."""
    scripts = [_script_safe(_static(f"vendor/{name}")) for name in VENDOR_SCRIPTS] + [_script_safe(_static("view.js"))]
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in scripts)
    csp = f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:"
    parts = {
        "CSP": csp,
        "TITLE": html.escape(f"{view.path.name}: amb-dspy memory"),
        "STYLE": _static("view.css"),
        "DATA": json_for_html(page_data(view)),
        "SCRIPTS": "\n".join(f"<script>{s}</script>" for s in scripts),
    }
    # One pass over the template: text inserted for one placeholder is never searched for another.
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _static("view.html"))


def write_html(view: BankView, path: str | Path) -> Path:
    """Write the page for ``view`` to ``path`` atomically (its folder must exist); ViewError if it cannot."""
    path = Path(path)
    if path.is_dir():
        raise ViewError(f"{path}: is a folder; give a file name for the page")
    if not path.parent.is_dir():
        raise ViewError(f"{path}: folder {path.parent} does not exist")
    return write_atomically(path, render_html(view))
