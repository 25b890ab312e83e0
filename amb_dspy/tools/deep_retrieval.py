"""The ``deep_retrieval`` tool (design §3.3.2): the raw record behind one Query Graph node.

For a node id it returns, as JSON, every Interaction Tree entry of the node (entries of nodes merged
into it included), oldest first, with each attachment's file content: images as base64, documents
and code as text (a document that is not text comes back as base64).

A file's size is checked before it is read, and a file is read only as far as the output needs.
Attachment paths are read only from inside the bank's storage directory: a relative path is taken
relative to it, and any path that resolves outside it (``..``, an absolute path elsewhere, a
symlink pointing out) is refused for that attachment. Output size is capped; long texts are cut
with a marker saying how much was left out.
"""

from __future__ import annotations

import base64
import codecs
import json
import mimetypes
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from amb_dspy.memory.graph_ops import MemoryStore
from amb_dspy.storage.interaction_tree import Attachment, AttachmentType, InteractionEntry
from amb_dspy.text import is_binary
from amb_dspy.tools.text import html_to_text, truncate

_PREVIEW_CHARS = 300


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class DeepRetrievalTool:
    """``deep_retrieval(node_id) -> str``: a node's entries and attachments as JSON, or one ``Error:`` line.

    Args:
        store: the bank's memory; only read.
        storage_dir: the bank's storage directory; attachments are read only from inside it.
        max_chars: soft cap on the whole output; once reached, later entries are shortened to a
            preview and their attachments left out.
        max_text_chars: cap on one entry's text.
        max_file_chars: cap on one attachment's content (a base64 image over it is left out whole,
            since half an image is no image).
    """

    def __init__(self, store: MemoryStore, storage_dir: str | Path, *, max_chars: int = 40_000,
                 max_text_chars: int = 8_000, max_file_chars: int = 16_000):
        self.store = store
        self.storage_dir = Path(storage_dir)
        self.max_chars = max_chars
        self.max_text_chars = max_text_chars
        self.max_file_chars = max_file_chars

    def __call__(self, node_id: str, sources_only: bool = False) -> str:
        try:
            return self._retrieve(node_id, sources_only)
        except Exception as exc:  # noqa: BLE001 - a tool reports, it never raises into the agent loop
            return f"Error: deep_retrieval failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"

    # --- node ids ------------------------------------------------------------------------------
    def _resolve(self, node_id: str) -> tuple[str | None, str | None]:
        """``(current node id, note)``: follows merges and accepts an unambiguous id prefix."""
        graph, tree = self.store.graph, self.store.tree
        if node_id in graph:
            return node_id, None
        current, hops = node_id, 0
        merged_into = {old: event.new_node_id for event in tree.merge_events for old in event.merged_node_ids}
        while current in merged_into and hops < 100:
            current, hops = merged_into[current], hops + 1
        if hops and current in graph:
            return current, f"node {node_id} was merged into node {current}; these are the entries of {current}"
        if len(node_id) >= 4:
            matches = [n for n in graph.nodes_dict if n.startswith(node_id)]
            if len(matches) == 1:
                return matches[0], None
        return None, None

    def _unknown(self, node_id: str) -> str:
        ids = list(self.store.graph.nodes_dict)
        if not ids:
            return f"Error: no memory node {node_id!r}: the memory is empty, so there is nothing to retrieve yet."
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        return (f"Error: no memory node {node_id!r}; use a node id shown in the <memory> section of the task "
                f"(known ids: {shown}).")

    # --- files ---------------------------------------------------------------------------------
    def _path_inside(self, content: str) -> Path | None:
        root = self.storage_dir.resolve()
        path = Path(content).expanduser()
        path = (path if path.is_absolute() else root / path).resolve()
        return path if path.is_relative_to(root) else None

    def _attachment(self, attachment: Attachment) -> dict[str, Any]:
        """One attachment with its content, read only as far as the per-file limit needs (size checked first)."""
        out: dict[str, Any] = {"id": attachment.id, "type": attachment.type.value, "content": attachment.content}
        path = self._path_inside(attachment.content)
        if path is None:
            out["error"] = "refused: the path is outside the bank's storage directory"
            return out
        if not path.is_file():
            out["error"] = "file not found in the bank's storage directory"
            return out
        size = path.stat().st_size
        if attachment.type is AttachmentType.IMAGE:
            out["mime_type"] = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            return self._base64(out, path, size, "image")
        # At most 4 bytes a character in UTF-8: this much holds the max_file_chars characters shown.
        with path.open("rb") as handle:
            head = handle.read(4 * self.max_file_chars + 4)
        text = None
        if not is_binary(head):
            try:  # a character cut at the end of the head is left out, not an error
                text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=len(head) == size)
            except UnicodeDecodeError:
                text = None
        if text is not None and attachment.type is AttachmentType.DOCUMENT and path.suffix.lower() in (".html", ".htm"):
            text = html_to_text(text)[1]
        if text is not None:
            out["encoding"], out["file_content"] = "text", truncate(text, self.max_file_chars)
            if len(head) < size:
                out["note"] = f"only the first {len(head)} of {size} bytes were read"
            return out
        return self._base64(out, path, size, "binary file")

    def _base64(self, out: dict[str, Any], path: Path, size: int, what: str) -> dict[str, Any]:
        """Attach the file base64-encoded, or say why it was left out (over the per-file limit, known from its size)."""
        if 4 * ((size + 2) // 3) > self.max_file_chars:
            out["error"] = f"{what} of {size} bytes left out: over the {self.max_file_chars}-character limit"
        else:
            with path.open("rb") as handle:  # no more than the size checked, should the file grow meanwhile
                out["encoding"], out["file_content"] = "base64", base64.b64encode(handle.read(size)).decode("ascii")
        return out

    # --- the answer ----------------------------------------------------------------------------
    def _entry(self, entry: InteractionEntry, budget: int) -> dict[str, Any]:
        full = budget > 0
        item = {
            "entry_id": entry.entry_id,
            "text": truncate(entry.text, self.max_text_chars if full else _PREVIEW_CHARS),
            "timestamp": _iso(entry.timestamp),
            "metadata": entry.model_dump(mode="json")["metadata"],
            "attachments": [],
        }
        for attachment in entry.attachments:
            if full:
                try:
                    item["attachments"].append(self._attachment(attachment))
                except (OSError, ValueError) as exc:
                    item["attachments"].append({"id": attachment.id, "type": attachment.type.value,
                                                "content": attachment.content,
                                                "error": f"cannot read the file: {' '.join(str(exc).split())[:150]}"})
            else:
                item["attachments"].append({"id": attachment.id, "type": attachment.type.value,
                                            "content": attachment.content,
                                            "error": "left out: the output size limit was reached"})
        if full:
            size = len(json.dumps(item, ensure_ascii=False))
            if size > budget:  # this entry alone would overflow: keep its text, drop file contents
                for att in item["attachments"]:
                    if "file_content" in att:
                        del att["file_content"], att["encoding"]
                        att["error"] = "left out: the output size limit was reached"
                spare = budget - len(json.dumps(item, ensure_ascii=False)) + len(item["text"])
                item["text"] = truncate(entry.text, max(_PREVIEW_CHARS, spare))
        return item

    def _retrieve(self, node_id: str, sources_only: bool = False) -> str:
        requested = " ".join(str(node_id).split()).strip("<>[]\"'`")
        if not requested:
            return self._unknown("")
        resolved, note = self._resolve(requested)
        if resolved is None:
            return self._unknown(requested)
        if sources_only:
            return self._sources(resolved, note)
        entries = self.store.tree.entries_for(resolved)
        out: dict[str, Any] = {"node_id": resolved}
        node = self.store.graph.node(resolved)
        out["summary"] = node.summary
        notes = [note] if note else []
        if not entries:
            notes.append("this node has no recorded interaction entries")
        items, used, shortened = [], 0, 0
        for entry in entries:
            item = self._entry(entry, self.max_chars - used)
            if used >= self.max_chars:
                shortened += 1
            used += len(json.dumps(item, ensure_ascii=False))
            items.append(item)
        if shortened:
            notes.append(f"output limited to about {self.max_chars} characters: the last {shortened} entries are "
                         f"shown as previews without attachments")
        if notes:
            out["note"] = "; ".join(notes)
        out["entries"] = items
        return json.dumps(out, ensure_ascii=False)

    def _sources(self, node_id: str, note: str | None) -> str:
        """Only the exact raw text the node was built from: each source span with its entry and offsets."""
        node = self.store.graph.node(node_id)
        out: dict[str, Any] = {"node_id": node_id, "summary": node.summary}
        spans, used = [], 0
        for entry_id, start, end, text in self.store.source_texts(node_id):
            shown = truncate(text, max(_PREVIEW_CHARS, self.max_chars - used))
            used += len(shown)
            spans.append({"entry_id": entry_id, "start": start, "end": end, "text": shown})
        notes = [note] if note else []
        if not spans:
            notes.append("this node records no source spans (a bank written before sources were kept)")
        if notes:
            out["note"] = "; ".join(notes)
        out["sources"] = spans
        return json.dumps(out, ensure_ascii=False)
