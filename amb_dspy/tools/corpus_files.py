"""Reading a corpus's files: a folder of documents or a JSONL file of passages becomes documents, and
documents become the passages that are indexed (the formats are described in :mod:`amb_dspy.tools.corpus`).

The corpus index (:mod:`amb_dspy.tools.corpus`) and its cache (:mod:`amb_dspy.tools.corpus_cache`) both
read through this module, which imports neither.
"""

from __future__ import annotations

import json
import os
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
    return list(JsonlPassages(path))


class JsonlPassages:
    """The documents of a JSONL file of passages, read as :func:`load_jsonl` reads them but a document at a time:
    the file is checked whole first (CorpusError for the first malformed line, before any document), keeping of
    each passage only where it is in the file, then each document's passages are read again when it is reached.
    A 50 MB file of passages is never in memory whole, only its passages' places and its documents' names.
    ``len()`` is the number of documents. A file changed between the check and the reading is a CorpusError."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with open(self.path, "rb") as file:
            if is_binary(file.read(8192)):
                raise CorpusError(f"{path}: binary data, not a JSONL file of passages")
        try:
            self._places, meta = self._scan("utf-8")
        except UnicodeDecodeError:
            self._places, meta = self._scan("latin-1")
        if not self._places:
            raise CorpusError(f"{path} holds no passages")
        self._documents = _document_names(meta)

    def __len__(self) -> int:
        return len(self._documents)

    def __iter__(self):
        with open(self.path, "rb", buffering=0) as file:
            for key, (doc_id, title, url) in self._documents.items():
                texts = [_passage_text(self._read_line(file, place), self.path, place[3]) for place in self._places[key]]
                yield Document(id=doc_id, title=title, url=url, text="\n\n".join(texts))

    def _lines(self, encoding: str):
        """``(byte offset and length of the physical line, index within it, line number, line)`` of each line,
        numbered and cut as ``str.splitlines`` cuts the whole decoded file."""
        with open(self.path, "rb") as file:
            lineno, offset = 0, 0
            for raw in file:
                decoded = raw.decode(encoding)
                if offset == 0 and decoded.startswith("\ufeff"):
                    decoded = decoded[1:]  # utf-8-sig: a byte-order mark opens the file, not a line
                for index, line in enumerate(decoded.splitlines()):
                    lineno += 1
                    yield (offset, len(raw), index, lineno), line
                offset += len(raw)

    def _scan(self, encoding: str) -> tuple[dict[str, list[tuple[int, ...]]], dict[str, tuple[str, str, str, int]]]:
        """Every line checked: each document key's passage places (as :meth:`_lines` gives them) and its
        ``(title, url, id, first line)``, keys in first-seen order."""
        self.encoding = encoding
        places: dict[str, list[tuple[int, ...]]] = {}
        meta: dict[str, tuple[str, str, str, int]] = {}
        for place, line in self._lines(encoding):
            lineno = place[3]
            if not line.strip():
                continue
            record = _passage_record(line, self.path, lineno)
            _passage_text(record, self.path, lineno)
            title = str(record.get("title") or "").strip()
            url = str(record.get("url") or "").strip()
            given_id = str(record.get("id") or record.get("doc_id") or "").strip()
            key = url or given_id or (_slug(title) if title else f"line-{lineno}")
            meta.setdefault(key, (title, url, given_id, lineno))
            places.setdefault(key, []).append(place)
        return places, meta

    def _read_line(self, file, place: tuple[int, ...]) -> dict:
        """The JSON object of the passage at ``place``, read from the file again (by its offset: no buffer)."""
        offset, length, index, lineno = place
        raw = os.pread(file.fileno(), length, offset).decode(self.encoding, errors="replace")
        if offset == 0 and raw.startswith("\ufeff"):
            raw = raw[1:]
        lines = raw.splitlines()
        if index >= len(lines):
            raise CorpusError(f"{self.path}: changed while it was read")
        try:
            return _passage_record(lines[index], self.path, lineno)
        except CorpusError:
            raise CorpusError(f"{self.path}: changed while it was read") from None


def _passage_record(line: str, path: Path, lineno: int) -> dict:
    """One line of a JSONL file of passages as its JSON object; CorpusError if it is none."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(record, dict):
        raise CorpusError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
    return record


def _passage_text(record: dict, path: Path, lineno: int) -> str:
    """A passage's text (its first text field; a list of strings joined); CorpusError when it has none."""
    text = next((record[f] for f in _TEXT_FIELDS if record.get(f)), None)
    if isinstance(text, list):
        text = " ".join(str(t).strip() for t in text)
    if not isinstance(text, str) or not text.strip():
        raise CorpusError(f"{path}:{lineno}: no passage text (expected one of the fields {', '.join(_TEXT_FIELDS)})")
    return text.strip()


def _document_names(meta: dict[str, tuple[str, str, str, int]]) -> dict[str, tuple[str, str, str]]:
    """Each document key's ``(id, title, url)``: its id given, else its title's slug, else ``line-N``, made
    unique by ``-2``, ``-3``... in order."""
    names: dict[str, tuple[str, str, str]] = {}
    used_ids: set[str] = set()
    for key, (title, url, given_id, lineno) in meta.items():
        doc_id = given_id or _slug(title) or f"line-{lineno}"
        base, n = doc_id, 1
        while doc_id in used_ids:
            n += 1
            doc_id = f"{base}-{n}"
        used_ids.add(doc_id)
        names[key] = (doc_id, title or doc_id, url or CORPUS_SCHEME + doc_id)
    return names


def split_documents(documents: list[Document], passage_words: int = 100) -> list[tuple[int, str]]:
    """Every document's passages as ``(document index, passage text)``, in document order."""
    return [(d, passage) for d, doc in enumerate(documents) for passage in split_passages(doc.text, max_words=passage_words)]


def passage_texts(documents: list[Document], passages: list[tuple[int, str]]) -> list[str]:
    """What is indexed (embedded and BM25-tokenised) for each passage: its document's title, then the passage."""
    return [f"{documents[d].title}\n{passage}" for d, passage in passages]
