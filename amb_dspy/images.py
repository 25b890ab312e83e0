"""Images given with a task: checked up front, staged in temporary storage keyed by doc_id until
planning schedules their recognition, then moved into the bank's storage directory as attachments.

Only files move here; the recognition task's wording and the prompt are the adapter's.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from amb_dspy.errors import InputError
from amb_dspy.storage import Attachment, AttachmentType

_IMAGE_SIGNATURES = {
    b"\x89PNG\r\n\x1a\n": "png",
    b"\xff\xd8\xff": "jpeg",
    b"GIF87a": "gif",
    b"GIF89a": "gif",
    b"BM": "bmp",
}


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


class ImageStager:
    """The images of the tasks being run, from the user's files to stored attachments."""

    def __init__(self, temp_dir: Path = Path("data/temp"), storage_dir: Path = Path("data/storage")):
        self.temp_dir, self.storage_dir = Path(temp_dir), Path(storage_dir)
        self._staged: dict[str, list[StagedImage]] = {}

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
