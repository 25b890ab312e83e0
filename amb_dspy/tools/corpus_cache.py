"""A local corpus indexed once: passages and their vectors kept on disk and reused across runs.

A cache entry lives in ``<cache dir>/corpora/<key>/``, the key hashing the corpus's resolved path,
the embedding model (``embedder.model_id``: model files and backend) and the passage size. It holds

* ``manifest.json``: format name and version, source, model, dimension, passage size, and the names
  and SHA-256 of the two data files; it is replaced last, atomically, so a reader sees the old entry
  or the new one, never half of each;
* ``data-<token>.json``: every corpus file with its size and mtime (and how many documents it gave,
  or why it was skipped), the documents, and the passages (document index, text). BM25 needs the
  passage texts only: tokenising them again takes less time than reading stored tokens would;
* ``vectors-<token>.npy``: one float32 row per passage (numpy's format; never a pickle).

On load, files whose size and mtime are unchanged take their documents, passages and vectors from
the entry; changed and new files are read again, and only passages whose text the entry does not
hold are embedded. An entry that fails any check (JSON, hashes, format version, model, shapes,
dtypes, finite unit vectors) is rebuilt with a one-line notice, never trusted. A cache that cannot
be written costs speed, not the corpus: the load goes on with a notice.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from amb_dspy.errors import AmbError
from amb_dspy.files import write_atomically
from amb_dspy.notices import Notify
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.tools.corpus_files import (
    CorpusError,
    Document,
    folder_files,
    load_jsonl,
    passage_texts,
    read_document,
    split_documents,
)

FORMAT = "amb-dspy-corpus-cache"
VERSION = 1
EMBED_CHUNK = 256  # passages per embed call while a progress bar is shown
PLAIN_PROGRESS_FROM = 300  # off a terminal, progress lines only for more passages than this


class CacheUnusable(AmbError):
    """Why a cache entry cannot be trusted (one line)."""


class CachedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    size: int
    mtime_ns: int
    documents: int = 0  # documents this file gave, in corpus order
    skipped: str = ""  # the notice given when the file was skipped


class CacheData(BaseModel):
    model_config = ConfigDict(extra="forbid")

    files: list[CachedFile]
    documents: list[Document]
    passages: list[tuple[int, str]]


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["amb-dspy-corpus-cache"]
    version: int
    source: str
    model: str
    dim: int
    passage_words: int
    passages: int
    data: str
    data_sha256: str
    vectors: str
    vectors_sha256: str


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class CorpusCache:
    """One corpus's cache entry: read (validated) and written (atomically)."""

    def __init__(self, cache_dir: str | Path, source: Path, model_id: str, dim: int, passage_words: int):
        self.source, self.model_id, self.dim, self.passage_words = str(source), model_id, dim, passage_words
        key = _sha256(f"{self.source}\0{model_id}\0{passage_words}".encode())[:24]
        self.dir = Path(cache_dir).expanduser() / "corpora" / key

    def read(self) -> tuple[CacheData, np.ndarray] | None:
        """The entry's data and vectors; None if there is none; :class:`CacheUnusable` if it fails a check."""
        manifest_path = self.dir / "manifest.json"
        if not manifest_path.exists():
            return None
        try:
            manifest = Manifest.model_validate_json(manifest_path.read_bytes())
        except (OSError, ValidationError, ValueError) as exc:
            raise CacheUnusable(f"unreadable manifest: {str(exc).splitlines()[0]}") from None
        expected = {"version": VERSION, "source": self.source, "model": self.model_id, "dim": self.dim,
                    "passage_words": self.passage_words}
        for name, value in expected.items():
            if getattr(manifest, name) != value:
                raise CacheUnusable(f"written for {name} {getattr(manifest, name)!r}, not {value!r}")
        raw_data, raw_vectors = self._file(manifest.data), self._file(manifest.vectors)
        if _sha256(raw_data) != manifest.data_sha256 or _sha256(raw_vectors) != manifest.vectors_sha256:
            raise CacheUnusable("a data file does not match its checksum")
        try:
            data = CacheData.model_validate_json(raw_data)
            vectors = np.load(io.BytesIO(raw_vectors), allow_pickle=False)
        except (ValidationError, ValueError, OSError) as exc:
            raise CacheUnusable(f"malformed data: {str(exc).splitlines()[0]}") from None
        self._check(data, vectors, manifest.passages)
        return data, vectors

    def _file(self, name: str) -> bytes:
        if Path(name).name != name:
            raise CacheUnusable(f"the manifest names a file outside the entry: {name!r}")
        try:
            return (self.dir / name).read_bytes()
        except OSError as exc:
            raise CacheUnusable(f"cannot read {name}: {exc.strerror or type(exc).__name__}") from None

    def _check(self, data: CacheData, vectors: np.ndarray, count: int) -> None:
        if vectors.dtype != np.float32 or vectors.shape != (count, self.dim) or len(data.passages) != count:
            raise CacheUnusable(f"vectors of dtype {vectors.dtype} and shape {vectors.shape} for {len(data.passages)} "
                                f"passages of dimension {self.dim}")
        if count and (not np.isfinite(vectors).all() or not np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)):
            raise CacheUnusable("vectors are not finite unit vectors")
        if sum(f.documents for f in data.files) != len(data.documents):
            raise CacheUnusable("the files do not account for the documents")
        owners = np.fromiter((d for d, _ in data.passages), dtype=np.int64, count=count)
        if count and (owners.min() < 0 or owners.max() >= len(data.documents) or (np.diff(owners) < 0).any()):
            raise CacheUnusable("passages point to documents out of range or out of order")

    def write(self, data: CacheData, vectors: np.ndarray) -> None:
        """Replace the entry (raises OSError if it cannot be written); old data files are removed after."""
        self.dir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(6)
        raw_data = data.model_dump_json().encode()
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
        raw_vectors = buffer.getvalue()
        names = {"data": f"data-{token}.json", "vectors": f"vectors-{token}.npy"}
        manifest = Manifest(format=FORMAT, version=VERSION, source=self.source, model=self.model_id, dim=self.dim,
                            passage_words=self.passage_words, passages=len(data.passages), data=names["data"],
                            data_sha256=_sha256(raw_data), vectors=names["vectors"], vectors_sha256=_sha256(raw_vectors))
        for name, raw in ((names["data"], raw_data), (names["vectors"], raw_vectors),
                          ("manifest.json", manifest.model_dump_json(indent=1).encode())):
            write_atomically(self.dir / name, raw)
        # Remove earlier versions' data files, keeping whatever the manifest names now: another
        # process may have replaced it after us, and its files must stay.
        try:
            current = json.loads((self.dir / "manifest.json").read_bytes())
            keep = {current.get("data"), current.get("vectors"), "manifest.json"}
        except (OSError, ValueError):
            return
        stale = time.time() - 3600  # a partial file this old was left by a writer that crashed
        for old in self.dir.iterdir():
            if old.name not in keep and (not old.name.endswith(".partial") or old.stat().st_mtime < stale):
                old.unlink(missing_ok=True)


@dataclass
class _Parts:
    """The corpus being assembled: documents, passages, and each passage's row in the old vectors (-1: new)."""

    files: list[CachedFile] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    passages: list[tuple[int, str]] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)

    def add_new(self, documents: list[Document], passage_words: int, known: dict[str, int]) -> None:
        offset = len(self.documents)
        self.documents.extend(documents)
        new = [(offset + d, text) for d, text in split_documents(documents, passage_words)]
        self.passages.extend(new)
        self.rows.extend(known.get(text, -1) for text in passage_texts(self.documents, new))

    def add_cached(self, old: CacheData, first_doc: int, first_passage: int, entry: CachedFile) -> tuple[int, int]:
        """Take one unchanged file's documents and passages from the old entry; returns where the next file starts."""
        offset = len(self.documents) - first_doc
        self.documents.extend(old.documents[first_doc : first_doc + entry.documents])
        end = first_passage
        while end < len(old.passages) and old.passages[end][0] < first_doc + entry.documents:
            end += 1
        self.passages.extend((d + offset, text) for d, text in old.passages[first_passage:end])
        self.rows.extend(range(first_passage, end))
        return first_doc + entry.documents, end


def _sources(path: Path, notify: Notify) -> list[tuple[str, Path, os.stat_result]]:
    files = folder_files(path, notify) if path.is_dir() else [(path.name, path)]
    return [(name, file, file.stat()) for name, file in files]


def build_parts(path: Path, embedder: Embedder, *, cache_dir: str | Path | None, passage_words: int,
                notify: Notify, progress: bool | None) -> tuple[list[Document], list[tuple[int, str]], np.ndarray]:
    """The documents, passages and passage vectors of the corpus at ``path``, through the cache when given."""
    model_id = getattr(embedder, "model_id", "")
    cache = CorpusCache(cache_dir, path.resolve(), model_id, embedder.dim, passage_words) if cache_dir and model_id else None
    old, old_vectors = _cached(cache, embedder, notify)
    previous = _old_places(old)
    known: dict[str, int] | None = None  # old passages by indexed text, built once something changed

    parts = _Parts()
    for name, file, stat in _sources(path, notify):
        entry, first_doc, first_passage = previous.get(name, (None, 0, 0))
        if entry is not None and (entry.size, entry.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
            if entry.skipped:
                notify(entry.skipped)
            parts.add_cached(old, first_doc, first_passage, entry)
            parts.files.append(entry)
            continue
        if known is None:
            known = {text: row for row, text in enumerate(passage_texts(old.documents, old.passages))} if old else {}
        documents, skipped = _read_file(path, name, file, notify)
        parts.files.append(CachedFile(path=name, size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                                      documents=len(documents), skipped=skipped))
        parts.add_new(documents, passage_words, known)
    if not parts.documents:
        raise CorpusError(f"no .txt, .md or .html documents under {path}")

    vectors = _vectors(parts, old_vectors, embedder, progress)
    if cache is not None and not (old is not None and parts.files == old.files):
        _write_cache(cache, parts, vectors, notify)
    return parts.documents, parts.passages, vectors


def _cached(cache: CorpusCache | None, embedder: Embedder, notify: Notify) -> tuple[CacheData | None, np.ndarray]:
    """The cache's data and vectors (None and no vectors without a cache, or with one that is unusable, said)."""
    old, old_vectors = None, np.zeros((0, embedder.dim), dtype=np.float32)
    if cache is not None:
        try:
            old, old_vectors = cache.read() or (None, old_vectors)
        except CacheUnusable as exc:
            notify(f"the corpus cache in {cache.dir} is unusable ({exc}); rebuilding it")
    return old, old_vectors


def _old_places(old: CacheData | None) -> dict[str, tuple[CachedFile, int, int]]:
    """Each cached file's entry, its first document and its first passage in the old data."""
    previous = {}
    if old is not None:
        first_doc = first_passage = 0
        for entry in old.files:
            previous[entry.path] = (entry, first_doc, first_passage)
            first_doc += entry.documents
            while first_passage < len(old.passages) and old.passages[first_passage][0] < first_doc:
                first_passage += 1
    return previous


def _read_file(path: Path, name: str, file: Path, notify: Notify) -> tuple[list[Document], str]:
    """A changed or new file's documents (a folder's file is one document, a JSONL file its passages) and the line
    saying why it was skipped ("" when it was not)."""
    if not path.is_dir():
        return load_jsonl(file), ""
    document, skipped = read_document(name, file)
    if skipped:
        notify(skipped)
    return ([document] if document else []), skipped


def _write_cache(cache: CorpusCache, parts: _Parts, vectors: np.ndarray, notify: Notify) -> None:
    try:
        cache.write(CacheData(files=parts.files, documents=parts.documents, passages=parts.passages), vectors)
    except OSError as exc:
        notify(f"cannot write the corpus cache in {cache.dir} ({exc.strerror or type(exc).__name__}); "
               "the next load will embed the corpus again")


def _vectors(parts: _Parts, old_vectors: np.ndarray, embedder: Embedder, progress: bool | None) -> np.ndarray:
    rows = np.asarray(parts.rows, dtype=np.int64)
    vectors = np.empty((len(rows), embedder.dim), dtype=np.float32)
    reused = rows >= 0
    vectors[reused] = old_vectors[rows[reused]]
    missing = np.flatnonzero(~reused)
    if not len(missing):
        return vectors
    texts = passage_texts(parts.documents, [parts.passages[i] for i in missing])
    bar = _EmbedProgress(len(texts), progress)
    step = EMBED_CHUNK if bar.shown else len(texts)
    try:
        for start in range(0, len(texts), step):
            chunk = texts[start : start + step]
            got = np.asarray(embedder.embed(chunk), dtype=np.float32)
            if got.shape != (len(chunk), embedder.dim):
                raise ValueError(f"embedder returned shape {got.shape}, expected {(len(chunk), embedder.dim)}")
            vectors[missing[start : start + len(chunk)]] = got
            bar.advance(len(chunk))
    finally:
        bar.close()
    return vectors


class _EmbedProgress:
    """A rich bar on stderr in a terminal; off a terminal, a plain line every 10% for large corpora."""

    def __init__(self, total: int, show: bool | None):
        self.total, self.done = total, 0
        terminal = sys.stderr.isatty()
        self.shown = show if show is not None else (terminal or total > PLAIN_PROGRESS_FROM)
        self._bar = None
        self._next_line = 0.1
        if self.shown and terminal:
            from rich.console import Console
            from rich.progress import Progress

            self._bar = Progress(console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("embedding corpus passages", total=self.total)
        elif self.shown:
            print(f"embedding {self.total} corpus passages...", file=sys.stderr, flush=True)

    def advance(self, count: int) -> None:
        self.done += count
        if self._bar is not None:
            self._bar.advance(self._task, count)
        elif self.shown and self.done >= self._next_line * self.total:
            print(f"embedded {self.done}/{self.total} corpus passages", file=sys.stderr, flush=True)
            self._next_line = self.done / self.total + 0.1

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
