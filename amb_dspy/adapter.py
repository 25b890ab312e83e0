"""The adapter between the memory bank and the executor (design §3.3.1).

* ``enhance_prompt`` writes ``<task>`` (the Insight Doc) and ``<memory>`` (nodes retrieved by hybrid
  search for the pending task) into the executor's prompt, spec §6.3.
* ``intercept_context`` tells what the executed task was: NORMAL, CROSS_VALIDATE or IMAGE.
* Images given with the task are checked (:func:`read_image`: a regular file, size-capped, decoded by
  Pillow), then wait in temporary storage keyed by doc_id until planning schedules their
  recognition; then they move into the bank's storage directory as attachments.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from amb_dspy.graph_ops import MemoryStore
from amb_dspy.storage import Attachment, AttachmentType, InsightDoc, QueryGraphNode

IMAGE_TASK_PREFIX = "Recognise the attached image"
NO_MEMORY = "No related memory yet."

# Pillow's names of the formats accepted as images, and the file suffix each is stored with.
IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpeg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
MAX_IMAGE_BYTES = 20_000_000


class InputError(ValueError):
    """User input that cannot be used; the message is one line saying why."""


class TaskKind(str, Enum):
    NORMAL = "NORMAL"
    CROSS_VALIDATE = "CROSS_VALIDATE"
    IMAGE = "IMAGE"


def read_image(path: Path, max_bytes: int = MAX_IMAGE_BYTES) -> tuple[str, bytes]:
    """``(format, bytes)`` of an image file, or InputError (one line) if it is not a readable image.

    The file is opened without blocking and checked to be a regular file before anything is read
    (a FIFO or a device is refused, never waited on), its size is capped, and Pillow decodes its
    header and verifies its structure: a file is an image because it decodes as one, not because
    of its first bytes. The bytes returned are the ones checked.
    """
    from PIL import Image, UnidentifiedImageError  # here, not at the top: `amb --help` stays light

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"image {path}: no such file") from None
    except OSError as exc:
        raise InputError(f"image {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"image {path}: is a directory, not an image file")
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"image {path}: not a regular file (a FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise InputError(f"image {path}: {info.st_size / 1e6:.1f} MB is over the {max_bytes / 1e6:g} MB limit")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"image {path}: cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # it grew after the size check
        raise InputError(f"image {path}: over the {max_bytes / 1e6:g} MB limit")
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = image.format
            image.verify()
    except Exception as exc:  # noqa: BLE001 - Pillow's decoders fail on bad data with many exception types
        reason = "not a PNG, JPEG, GIF, WEBP or BMP image" if isinstance(exc, UnidentifiedImageError) else \
            f"not a valid image ({' '.join(str(exc).split())[:150] or type(exc).__name__})"
        raise InputError(f"image {path}: {reason}") from None
    if kind not in IMAGE_FORMATS:
        raise InputError(f"image {path}: a {kind} image; only PNG, JPEG, GIF, WEBP and BMP are accepted")
    return IMAGE_FORMATS[kind], data


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
        checked = [(Path(p), *read_image(Path(p))) for p in paths]
        folder = self.temp_dir / doc_id
        staged = []
        for i, (path, fmt, data) in enumerate(checked):
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{i:03d}-{path.name}"
            target.write_bytes(data)
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
