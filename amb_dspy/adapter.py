"""The adapter between the memory bank and the executor (design §3.3.1).

* ``enhance_prompt`` writes ``<task>`` (the Insight Doc) and ``<memory>`` (nodes retrieved by hybrid
  search for the pending task) into the executor's prompt, spec §6.3.
* ``intercept_context`` tells what the executed task was: NORMAL, CROSS_VALIDATE or IMAGE.
* Images given with the task wait in temporary storage keyed by doc_id until planning schedules
  their recognition; then they move into the bank's storage directory as attachments.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from amb_dspy.graph_ops import MemoryStore
from amb_dspy.storage import Attachment, AttachmentType, InsightDoc, QueryGraphNode

IMAGE_TASK_PREFIX = "Recognise the attached image"
NO_MEMORY = "No related memory yet."

_IMAGE_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "png",
    b"\xff\xd8\xff": "jpeg",
    b"GIF87a": "gif",
    b"GIF89a": "gif",
    b"BM": "bmp",
}


class InputError(ValueError):
    """User input that cannot be used; the message is one line saying why."""


class TaskKind(str, Enum):
    NORMAL = "NORMAL"
    CROSS_VALIDATE = "CROSS_VALIDATE"
    IMAGE = "IMAGE"


def image_format(path: Path) -> str:
    """The image format from the file's magic bytes; InputError if it is not a readable image."""
    try:
        with path.open("rb") as handle:
            head = handle.read(16)
    except FileNotFoundError:
        raise InputError(f"image {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"image {path}: is a directory, not an image file") from None
    except OSError as exc:
        raise InputError(f"image {path}: cannot be read ({exc.strerror or exc})") from None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    for magic, name in _IMAGE_SIGNATURES.items():
        if head.startswith(magic):
            return name
    raise InputError(f"image {path}: not a PNG, JPEG, GIF, WEBP or BMP image")


@dataclass(frozen=True)
class StagedImage:
    original_name: str
    temp_path: Path
    format: str


def format_memory(nodes: list[QueryGraphNode]) -> str:
    if not nodes:
        return NO_MEMORY
    blocks = []
    for i, node in enumerate(nodes, 1):
        blocks.append(
            f"Memory {i} (node {node.id}):\n"
            f"Topic: {node.context}\n"
            f"Keywords: {', '.join(node.keywords)}\n"
            f"Summary: {node.summary}"
        )
    return "\n\n".join(blocks)


def format_task(doc: InsightDoc) -> str:
    lines = [f"Task goal: {doc.task_goal}", "", "Completed subtasks:"]
    if not doc.completed_tasks:
        lines.append("(none yet)")
    for i, task in enumerate(doc.completed_tasks, 1):
        lines.append(f"{i}. [{task.type.value}] {task.description} - {task.status.value}")
        if task.context:
            lines.append(f"   Knowledge context: {task.context}")
    lines += ["", "Pending task:"]
    lines.append(f"1. {doc.pending_tasks[0]}" if doc.pending_tasks else "(none: answer the task goal)")
    return "\n".join(lines)


class MemoryAdapter:
    def __init__(self, store: MemoryStore, *, k: int = 5, alpha: float = 0.5,
                 temp_dir: Path = Path("data/temp"), storage_dir: Path = Path("data/storage")):
        self.store = store
        self.k, self.alpha = k, alpha
        self.temp_dir, self.storage_dir = Path(temp_dir), Path(storage_dir)
        self._staged: dict[str, list[StagedImage]] = {}

    # --- prompt enhancement ------------------------------------------------------------------
    def memory_for(self, doc: InsightDoc) -> list[QueryGraphNode]:
        query = doc.current_task or doc.task_goal
        if not query or len(self.store.graph) == 0:
            return []
        return self.store.retrieve_for_text(query, k=self.k, alpha=self.alpha)

    def enhance_prompt(self, doc: InsightDoc) -> str:
        memory = format_memory(self.memory_for(doc))
        return (
            f"<task>\n{format_task(doc)}\n</task>\n\n<memory>\n{memory}\n</memory>\n\n"
            "Carry out the next step based on the task and memory above."
        )

    # --- interception ------------------------------------------------------------------------
    def intercept_context(self, doc: InsightDoc, *, cross_validation: bool) -> TaskKind:
        """What kind of task was just executed; ``cross_validation`` says a conflict was being checked."""
        task = doc.current_task or ""
        if cross_validation:
            return TaskKind.CROSS_VALIDATE
        if task.startswith(IMAGE_TASK_PREFIX) and self._staged.get(doc.doc_id):
            return TaskKind.IMAGE
        return TaskKind.NORMAL

    # --- images ------------------------------------------------------------------------------
    def stage_images(self, doc_id: str, paths: list[Path]) -> list[StagedImage]:
        """Check every image first (nothing is copied if one is bad), then copy them to temp storage."""
        checked = [(Path(p), image_format(Path(p))) for p in paths]
        folder = self.temp_dir / doc_id
        staged = []
        for i, (path, fmt) in enumerate(checked):
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{i:03d}-{path.name}"
            shutil.copyfile(path, target)
            staged.append(StagedImage(original_name=path.name, temp_path=target, format=fmt))
        if staged:
            self._staged.setdefault(doc_id, []).extend(staged)
        return staged

    def pending_images(self, doc_id: str) -> list[StagedImage]:
        return list(self._staged.get(doc_id, []))

    def image_task(self, doc_id: str) -> str | None:
        images = self._staged.get(doc_id)
        if not images:
            return None
        names = ", ".join(i.original_name for i in images)
        return f"{IMAGE_TASK_PREFIX}s ({names}) and describe what they show that bears on the goal"

    def store_images(self, doc_id: str) -> list[Attachment]:
        """Move the staged images into the bank's storage directory and return them as attachments."""
        images = self._staged.pop(doc_id, [])
        folder = self.storage_dir / doc_id / "attachments"
        attachments = []
        for image in images:
            folder.mkdir(parents=True, exist_ok=True)
            attachment = Attachment(type=AttachmentType.IMAGE, content="")
            target = folder / f"{attachment.id}.{image.format}"
            shutil.move(str(image.temp_path), target)
            attachments.append(attachment.model_copy(update={"content": str(target.resolve())}))
        return attachments

    def cleanup(self, doc_id: str) -> None:
        """Remove the task's temporary files (staged images that were never recognised)."""
        self._staged.pop(doc_id, None)
        shutil.rmtree(self.temp_dir / doc_id, ignore_errors=True)
