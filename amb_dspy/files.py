"""The one way amb-dspy replaces a file: write a temporary file beside it, fsync it, rename it into place.

A reader, or a process killed mid-write, sees the old file or the new one, never half of one; after a
crash only a hidden ``.NAME.*.partial`` file can be left behind. A file that must not replace one made meanwhile
(a new bank database) is linked into place instead (:func:`link_new`).

The new file's mode is ``mode`` less the umask, as for any newly created file (``open(path, "w")`` gives
0o666 less the umask, the default here); it does not copy the mode of the file it replaces. Bank files and
compiled agents pass 0o600, the mode they have always had.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

DEFAULT_MODE = 0o666  # what open(path, "w") asks for; the umask takes its share
PRIVATE_MODE = 0o600  # owner only: bank files and compiled agents


def write_atomically(path: str | Path, data: str | bytes, *, mode: int = DEFAULT_MODE) -> Path:
    """Replace ``path`` with ``data`` (text is written as UTF-8); its folder is created if missing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = new_temp_beside(path, mode=mode)
    try:
        with temp.open("wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        replace_with(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path


def new_temp_beside(path: Path, *, mode: int = DEFAULT_MODE, suffix: str = ".partial") -> Path:
    """A new empty file in ``path``'s folder (so the rename stays on one file system), created with ``mode``
    less the umask; for writers that need a path of their own (``torch.onnx.export``, ``Module.save``)."""
    while True:
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
            return temp
        except FileExistsError:
            continue


def replace_with(temp: Path, path: Path) -> None:
    """Flush ``temp`` to disk and rename it over ``path``, then flush the folder so the rename lasts."""
    _flush(temp)
    os.replace(temp, path)
    _flush_folder(path.parent)


def link_new(temp: Path, path: Path) -> bool:
    """Flush ``temp`` to disk and give it the name ``path`` too, unless a file is there already (False then: a
    file another writer made meanwhile is never replaced); the folder is flushed so the name lasts. The caller
    removes ``temp``."""
    _flush(temp)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: a rename, the file's absence checked just before
        if path.exists():
            return False
        os.replace(temp, path)
    _flush_folder(path.parent)
    return True


def _flush(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _flush_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened (some platforms): the rename is done all the same
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
