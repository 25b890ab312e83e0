"""What ``AMB_EMBEDDER`` (``AmbConfig(embedder=...)``, ``--embedder``) may name, read without loading anything.

Three kinds, one string each:

* ``local``: the bundled all-MiniLM-L6-v2 through today's backends (``AMB_EMBEDDING_BACKEND``,
  ``AMB_EMBEDDING_PRECISION``), the default;
* a folder holding a sentence-transformers model (``/models/bge-small``, ``./my-model``, ``~/m``, or ``st:PATH``),
  loaded offline with sentence-transformers;
* a model string ``dspy.Embedder`` passes to LiteLLM, ``provider/model`` (``openai/text-embedding-3-small``), or
  ``dspy:MODEL`` for one without a provider.

:func:`parse_embedder` checks the form and the folder at configuration time (one line, ``ValueError``, which the
settings turn into ``bad setting embedder=...``); the model itself loads on first use
(:mod:`amb_dspy.retrieval.chosen_embedding`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

LOCAL = "local"
FOLDER_PREFIX = "st:"
DSPY_PREFIX = "dspy:"
# The files that make a folder a model sentence-transformers loads (its own modules, or a plain transformers one).
MODEL_FILES = ("modules.json", "config.json")
_MODEL_STRING = re.compile(r"[A-Za-z0-9_.-]+/\S+")
_PATH_START = ("/", "./", "../", "~", ".\\", "..\\")


@dataclass(frozen=True)
class EmbedderSpec:
    """A checked embedder setting: its kind and what it names (a resolved folder, or a LiteLLM model string)."""

    kind: Literal["local", "folder", "dspy"]
    target: str = ""

    def __str__(self) -> str:
        return {"local": LOCAL, "folder": f"{FOLDER_PREFIX}{self.target}", "dspy": f"{DSPY_PREFIX}{self.target}"}[self.kind]


def parse_embedder(value: str) -> EmbedderSpec:
    """The embedder a setting names, or ``ValueError`` with one line saying what it takes."""
    text = str(value).strip()
    if text.lower() in ("", LOCAL):
        return EmbedderSpec("local")
    if text.startswith(FOLDER_PREFIX):
        return EmbedderSpec("folder", str(_model_folder(text[len(FOLDER_PREFIX):])))
    if text.startswith(DSPY_PREFIX):
        model = text[len(DSPY_PREFIX):].strip()
        if not model or any(c.isspace() for c in model):
            raise ValueError(f"{DSPY_PREFIX} needs a LiteLLM embedding model, e.g. dspy:openai/text-embedding-3-small")
        return EmbedderSpec("dspy", model)
    if text.startswith(_PATH_START) or Path(text).expanduser().exists():
        return EmbedderSpec("folder", str(_model_folder(text)))
    if _MODEL_STRING.fullmatch(text):
        return EmbedderSpec("dspy", text)
    raise ValueError("not an embedder: use 'local', a folder with a sentence-transformers model, or a LiteLLM "
                     "embedding model string provider/model (e.g. openai/text-embedding-3-small)")


def _model_folder(text: str) -> Path:
    """The resolved folder ``text`` names, checked to hold a model (``ValueError``: one line, if not)."""
    folder = Path(text.strip()).expanduser()
    if not folder.exists():
        raise ValueError(f"no such folder {str(folder)!r} (an embedder folder holds a sentence-transformers model)")
    if not folder.is_dir():
        raise ValueError(f"{str(folder)!r} is a file, not a folder holding a sentence-transformers model")
    if not any((folder / name).is_file() for name in MODEL_FILES):
        raise ValueError(f"{str(folder)!r} holds no sentence-transformers model (no {' or '.join(MODEL_FILES)})")
    return folder.resolve()
