"""Reading a corpus's files: a folder of documents or a JSONL file of passages becomes documents, and
documents become the passages that are indexed (the formats are described in :mod:`amb_dspy.tools.corpus`).

The corpus index (:mod:`amb_dspy.tools.corpus`) and its cache (:mod:`amb_dspy.tools.corpus_cache`) both
read through this module, which imports neither.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from amb_dspy.errors import UserError
from amb_dspy.notices import Notify, notice
from amb_dspy.text import is_binary
from amb_dspy.tools.text import html_to_text, split_passages

CORPUS_SCHEME = "corpus://"
TEXT_SUFFIXES = {".txt", ".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm"}
_TEXT_FIELDS = ("text", "contents", "content", "passage", "body")
MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


class CorpusError(UserError, ValueError):
    """A corpus cannot be loaded; the message is one line."""


class Document(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    title: str
    url: str
    text: str


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _title_from_name(path: Path) -> str:
    return re.sub(r"[-_]+", " ", path.stem).strip().capitalize() or path.name


def _markdown_title(text: str) -> str | None:
    for line in text.splitlines():
        if line.strip():
            match = MD_HEADING.match(line)
            return match.group(1).strip() if match else None
    return None


def folder_files(root: Path, notify: Notify = notice, *,
                 suffixes: Collection[str] = TEXT_SUFFIXES | HTML_SUFFIXES) -> list[tuple[str, Path]]:
    """A folder corpus's files as ``(id, path)``, sorted: .txt/.md/.html (``suffixes``), hidden ones left out.

    A link that leads outside the folder (to ``/etc/passwd``, say) is skipped with a notice: a
    corpus holds what is inside its folder and nothing else.
    """
    inside = root.resolve()
    files = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.suffix.lower() not in suffixes or not path.is_file():
            continue
        if not path.resolve().is_relative_to(inside):
            notify(f"skipped corpus file {relative.as_posix()}: a link to a file outside the corpus folder")
            continue
        files.append((relative.as_posix(), path))
    return files


def read_document(doc_id: str, path: Path) -> tuple[Document | None, str]:
    """One file of a folder corpus as a document, or ``(None, why)``: ``why`` is empty for an empty file."""
    data = path.read_bytes()
    if is_binary(data):
        return None, f"skipped corpus file {doc_id}: binary data, not text"
    if path.suffix.lower() in HTML_SUFFIXES:
        title, text = html_to_text(data)
    else:
        text = _decode(data).strip()
        title = _markdown_title(text) if path.suffix.lower() != ".txt" else None
    if not text.strip():
        return None, ""
    return Document(id=doc_id, title=title or _title_from_name(path), url=CORPUS_SCHEME + doc_id, text=text), ""


def _slug(text: str) -> str:
    return re.sub(r"[^\w]+", "-", text.lower()).strip("-")


def load_jsonl(path: Path) -> list[Document]:
    """The documents of a JSONL file of passages (see the module docstring); CorpusError if malformed."""
    data = path.read_bytes()
    if is_binary(data):
        raise CorpusError(f"{path}: binary data, not a JSONL file of passages")
    parts: dict[str, list[str]] = {}
    meta: dict[str, tuple[str, str, str, int]] = {}  # document key -> (title, url, id, first line)
    for lineno, line in enumerate(_decode(data).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        text = next((record[f] for f in _TEXT_FIELDS if record.get(f)), None)
        if isinstance(text, list):
            text = " ".join(str(t).strip() for t in text)
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f"{path}:{lineno}: no passage text (expected one of the fields {', '.join(_TEXT_FIELDS)})")
        title = str(record.get("title") or "").strip()
        url = str(record.get("url") or "").strip()
        given_id = str(record.get("id") or record.get("doc_id") or "").strip()
        key = url or given_id or (_slug(title) if title else f"line-{lineno}")
        meta.setdefault(key, (title, url, given_id, lineno))
        parts.setdefault(key, []).append(text.strip())
    if not parts:
        raise CorpusError(f"{path} holds no passages")
    documents = []
    used_ids: set[str] = set()
    for key, texts in parts.items():
        title, url, given_id, lineno = meta[key]
        doc_id = given_id or _slug(title) or f"line-{lineno}"
        base, n = doc_id, 1
        while doc_id in used_ids:
            n += 1
            doc_id = f"{base}-{n}"
        used_ids.add(doc_id)
        documents.append(Document(id=doc_id, title=title or doc_id, url=url or CORPUS_SCHEME + doc_id,
                                  text="\n\n".join(texts)))
    return documents


def split_documents(documents: list[Document], passage_words: int = 100) -> list[tuple[int, str]]:
    """Every document's passages as ``(document index, passage text)``, in document order."""
    return [(d, passage) for d, doc in enumerate(documents) for passage in split_passages(doc.text, max_words=passage_words)]


def passage_texts(documents: list[Document], passages: list[tuple[int, str]]) -> list[str]:
    """What is indexed (embedded and BM25-tokenised) for each passage: its document's title, then the passage."""
    return [f"{documents[d].title}\n{passage}" for d, passage in passages]
