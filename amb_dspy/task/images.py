"""Images given with a task: checked up front (:func:`read_image`: a regular file, size-capped, decoded by
Pillow), staged in temporary storage keyed by doc_id until
planning schedules their recognition, then moved into the bank's storage directory as attachments.

Only files move here; the recognition task's wording and the prompt are the adapter's.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from amb_dspy.errors import InputError
from amb_dspy.files import write_atomically
from amb_dspy.storage import Attachment, AttachmentType

# Pillow's names of the formats accepted as images, and the file suffix each is stored with.
IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpeg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
MAX_IMAGE_BYTES = 20_000_000
OWNER_FILE = ".owner"  # the id of the process that staged a task's images


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


class ImageStager:
    """The images of the tasks being run, from the user's files to stored attachments."""

    def __init__(self, temp_dir: Path = Path("data/temp"), storage_dir: Path = Path("data/storage")):
        self.temp_dir, self.storage_dir = Path(temp_dir), Path(storage_dir)
        self._staged: dict[str, list[StagedImage]] = {}
        self._remove_stale()

    def _remove_stale(self) -> None:
        """Remove what a killed process left staged (its staging is in that process's memory, gone with it):
        every task folder whose ``OWNER_FILE`` names a process that no longer runs."""
        for owner in self.temp_dir.glob(f"*/{OWNER_FILE}"):
            try:
                os.kill(int(owner.read_text(encoding="utf-8")), 0)
            except ProcessLookupError:
                shutil.rmtree(owner.parent, ignore_errors=True)
            except (OSError, ValueError):  # alive under another user, or not a file of ours
                continue

    def stage_images(self, doc_id: str, paths: list[Path]) -> list[StagedImage]:
        """Check every image first (nothing is copied if one is bad), then copy them to temp storage."""
        checked = [(Path(p), *read_image(Path(p))) for p in paths]
        folder = self.temp_dir / doc_id
        staged = []
        for i, (path, fmt, data) in enumerate(checked):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")
            target = folder / f"{i:03d}-{path.name}"
            write_atomically(target, data)  # the bytes that were checked
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
