"""The embedded search backend: a local corpus indexed with the project's own hybrid retrieval.

A corpus is either

* a folder: every ``.txt``, ``.md``/``.markdown`` and ``.html``/``.htm`` file under it (recursively,
  hidden files and folders skipped) is one document. Its id is its path relative to the folder
  (``city/harbour.md``), its URL ``corpus://<id>``, its title the first Markdown heading, the HTML
  ``<title>``/``<h1>``, or else the file name. A link to a file outside the folder, and a file of
  binary data, are skipped with a one-line notice; or
* a JSONL file of passages, one JSON object a line, with these fields:

  - ``text`` (required; ``contents``, ``content``, ``passage`` or ``body`` are accepted instead; a
    list of strings is joined with spaces),
  - ``title`` (optional),
  - ``url`` (optional; any URL, e.g. the page the passage came from),
  - ``id`` (optional; also ``doc_id``).

  A passage's document is named by its ``url``, else its ``id``, else its ``title``, else its line
  number; passages naming the same document are joined, in file order, into that document's text.
  A document's URL is its ``url`` field or ``corpus://<id>``.

Documents are split into paragraph-aligned passages of at most ~100 words (see
:func:`amb_dspy.tools.text.split_passages`) and each passage is indexed with its document's title in
front, so a search returns focused snippets; results are one per document (its best passage).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np

from amb_dspy.notices import Notify, notice
from amb_dspy.retrieval.embedding import Embedder
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.tools.corpus_cache import build_parts
from amb_dspy.tools.corpus_files import (
    CORPUS_SCHEME,
    MD_HEADING,
    CorpusError,
    Document,
    passage_texts,
    split_documents,
)
from amb_dspy.tools.types import DEFAULT_K, SearchResult

if TYPE_CHECKING:
    from amb_dspy.config import ToolSettings

# The corpus's error and document types are imported from here by its users.
__all__ = ["CORPUS_SCHEME", "CorpusError", "Document", "LocalCorpus"]


def _snippet(passage: str) -> str:
    """A passage as a search snippet: Markdown heading marks dropped (the title is shown anyway)."""
    return "\n".join(MD_HEADING.sub(r"\1", line) for line in passage.splitlines())


class LocalCorpus:
    """Documents split into passages, with BM25 + FAISS (``HybridIndex``) over the passages.

    ``LocalCorpus(documents, embedder)`` splits and embeds the documents; :meth:`load` reads a folder
    or a JSONL file and, given a ``cache_dir``, embeds each passage once across runs (see
    :mod:`amb_dspy.tools.corpus_cache`).
    """

    def __init__(self, documents: list[Document], embedder: Embedder, *, passage_words: int = 100,
                 alpha: float = 0.5, source: str = "", passages: list[tuple[int, str]] | None = None,
                 vectors: np.ndarray | None = None):
        if not documents:
            raise CorpusError("a corpus needs at least one document")
        self.documents = list(documents)
        self.embedder = embedder
        self.alpha = alpha
        self.source = source
        # passage key -> (document index, passage text); given by a cache, or split here
        self._passages = passages if passages is not None else split_documents(self.documents, passage_words)
        texts = passage_texts(self.documents, self._passages)
        vectors = embedder.embed(texts) if vectors is None else vectors
        self.index = HybridIndex(embedder.dim)
        self.index.add_many([str(key) for key in range(len(texts))], texts, vectors)
        self._lookup = self._build_lookup()

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder, *, cache_dir: str | Path | None = None,
             passage_words: int = 100, alpha: float = 0.5, notify: Notify = notice,
             progress: bool | None = None) -> LocalCorpus:
        """A corpus from a folder of documents or a JSONL file of passages (see the module docstring).

        With ``cache_dir``, passages and their vectors are kept there and reused while the corpus's
        files are unchanged; only new or changed files are read and embedded again. ``progress``
        shows a bar on stderr while embedding (None: in a terminal, or for more than a few hundred
        passages). Skipped files and an unusable cache are reported through ``notify``, one line each.
        """
        path = Path(path).expanduser()
        if path.is_file() and path.suffix.lower() not in {".jsonl", ".ndjson"}:
            raise CorpusError(f"{path} is neither a folder nor a .jsonl file of passages")
        if not path.exists():
            raise CorpusError(f"no corpus at {path}")
        documents, passages, vectors = build_parts(path, embedder, cache_dir=cache_dir, passage_words=passage_words,
                                                   notify=notify, progress=progress)
        return cls(documents, embedder, alpha=alpha, source=str(path), passages=passages, vectors=vectors)

    @classmethod
    def from_config(cls, settings: ToolSettings, embedder: Embedder, *, cache_dir: Path, **kwargs) -> LocalCorpus:
        """The corpus the tools' settings name (``settings.corpus``), cached under ``cache_dir`` (the paths
        section's) unless ``settings.corpus_cache`` is off."""
        return cls.load(settings.corpus, embedder, cache_dir=cache_dir if settings.corpus_cache else None, **kwargs)

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def passage_count(self) -> int:
        return len(self._passages)

    def _build_lookup(self) -> dict[str, int]:
        """Every name a document can be asked for by (url, id, corpus:// id, title, file stem), lower-cased."""
        lookup: dict[str, int] = {}
        ambiguous: set[str] = set()
        for d, doc in enumerate(self.documents):
            names = {doc.url, doc.id, CORPUS_SCHEME + doc.id, doc.title, doc.url.rstrip("/")}
            stem = doc.id.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            names |= {stem, CORPUS_SCHEME + stem}
            for name in names:
                name = name.lower()
                if name in lookup and lookup[name] != d:
                    ambiguous.add(name)
                lookup.setdefault(name, d)
        # Exact urls and ids always win; a title or stem shared by two documents names neither.
        for d, doc in enumerate(self.documents):
            for name in (doc.url, doc.id, CORPUS_SCHEME + doc.id):
                lookup[name.lower()] = d
                ambiguous.discard(name.lower())
        for name in ambiguous:
            lookup.pop(name, None)
        return lookup

    def document(self, url_or_id: str) -> Document | None:
        """The document named by a corpus:// URL, its own URL, its id, its title or its file name."""
        ref = str(url_or_id).strip().strip("<>\"'`").strip()
        while ref.endswith(")") and ref.count("(") < ref.count(")"):
            ref = ref[:-1]
        for candidate in (ref, unquote(ref), ref.rstrip("/")):
            d = self._lookup.get(candidate.lower())
            if d is not None:
                return self.documents[d]
        return None

    def search(self, query: str, k: int = DEFAULT_K) -> list[SearchResult]:
        """The ``k`` best documents for ``query``, each with its best-matching passage as the snippet."""
        if k <= 0 or not query.strip():
            return []
        vector = self.embedder.embed([query])[0]
        results: list[SearchResult] = []
        seen: set[int] = set()
        depth = 4 * k
        while True:
            ranked = self.index.rank(vector, query, k=depth, alpha=self.alpha)
            for key, _score in ranked:
                d, passage = self._passages[int(key)]
                if d in seen:
                    continue
                seen.add(d)
                doc = self.documents[d]
                results.append(SearchResult(title=doc.title, url=doc.url, snippet=_snippet(passage)))
                if len(results) == k:
                    return results
            if depth >= len(self.index):
                return results
            depth *= 4
            results.clear()
            seen.clear()
