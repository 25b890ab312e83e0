"""Documents to add to a bank: the files, folders and globs a user names, read as the local corpus reads them.

* ``.txt``, ``.md``, ``.html`` (and any other file named on its own, read as text): one document each
  (:func:`~amb_dspy.tools.corpus_files.read_document`);
* ``.jsonl``: passages, one document per title, URL or id (:class:`~amb_dspy.tools.corpus_files.JsonlPassages`: the file
  is checked whole, then read a document at a time, never held whole);
* ``.json``: a LoCoMo conversation (or the authors' list of them): one document per session, dated with the
  session's date and written one turn a line, as :func:`turn_line` writes it;
* a folder: the files of those kinds in it and under it, hidden ones left out; a glob: what it matches.

A text that is a dialogue of dated sessions (one turn a line, each starting with its date stamp, a blank line
between sessions: a LoCoMo conversation rendered as text) is added as the .json's sessions are, one document a
session (:func:`dated_sessions`, which ``MemoryBank.ingest`` applies to every text it is given).

A document is named by its path as given (a folder's files: the folder's path joined with theirs; a JSONL
passage or a LoCoMo session: ``PATH#id``), so adding the same path again finds the older version of each. A byte
of a file name that is not UTF-8 is written as its escape (``\\xff``: :func:`document_name`), and so is a lone
surrogate in a text (a JSON ``"\\udcff"``): what is stored is UTF-8.
What cannot be read (binary data, a bad JSON file, a document over ``max_bytes``) is one line handed to
``skip`` and the others are still read: :func:`read_documents` yields one document at a time, so a folder
of any size is read as it is added.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amb_dspy.errors import InputError, UserError, one_line
from amb_dspy.memory.dates import parse_date, stamp_of
from amb_dspy.text import BLANK_LINE, is_binary, valid_text
from amb_dspy.tools.corpus_files import HTML_SUFFIXES, TEXT_SUFFIXES, JsonlPassages, folder_files, read_document

DOCUMENT_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | {".json", ".jsonl"}
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class NamedDocument:
    """One document to add: its name (the entry's ``metadata["name"]``), text and date ("" when unknown)."""

    name: str
    text: str
    date: str = ""


@dataclass
class AddResult:
    """What :meth:`~amb_dspy.bank.MemoryBank.add_documents` did, by document name."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)  # added as a newer version: the old one's nodes superseded
    unchanged: list[str] = field(default_factory=list)  # the bank held the same text already
    skipped: list[str] = field(default_factory=list)  # one line each: what and why
    nodes: int = 0
    edges: int = 0
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    fallbacks: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    text_tokens: int = 0  # the estimated tokens of the documents handled (added, newer or unchanged)
    written: list[Path] = field(default_factory=list)  # the bank files written (a database: at each commit)
    store: Any = field(default=None, repr=False, compare=False)  # the MemoryStore added to (its memory now)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced)

    @property
    def done(self) -> int:
        """Documents handled so far: added, added as a newer version, or found unchanged."""
        return len(self.added) + len(self.replaced) + len(self.unchanged)

    def summary(self) -> str:
        """One line: what was added, what it took, where the bank went (the last line of ``amb ingest``)."""
        calls = sum(u["calls"] for u in self.usage.values())
        tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in self.usage.values())
        fallbacks = ", ".join(f"{agent} {n}" for agent, n in sorted(self.fallbacks.items())) or "none"
        written = ", ".join(map(str, self.written))
        return (f"documents added {len(self.added)}, newer versions {len(self.replaced)}, unchanged "
                f"{len(self.unchanged)}, skipped {len(self.skipped)}; nodes {self.nodes}, edges {self.edges}, "
                f"LM calls {calls}, tokens {tokens}, fallbacks {fallbacks}, {self.seconds:.1f} s{self._rate()}; "
                + (f"bank written to {written}" if written else "no bank written: nothing changed"))

    def _rate(self) -> str:
        """`` (5,473 document tokens/s)``: how fast the documents went in; nothing for an add of no text."""
        return f" ({self.text_tokens / self.seconds:,.0f} document tokens/s)" if self.text_tokens and self.seconds else ""

    def record(self, name: str, ingested, text_tokens: int = 0) -> None:
        """Count one document's :class:`~amb_dspy.task.state.IngestResult` in (its list, usage, fallbacks, errors)
        and its ``text_tokens``."""
        self.text_tokens += text_tokens
        (self.replaced if ingested.replaced else self.added if ingested.added else self.unchanged).append(name)
        self.errors.extend(ingested.errors)
        for agent, usage in ingested.usage.items():
            totals = self.usage.setdefault(agent, dict.fromkeys(usage, 0))
            for key, value in usage.items():
                totals[key] = totals.get(key, 0) + value
        for agent, count in ingested.fallbacks.items():
            self.fallbacks[agent] = self.fallbacks.get(agent, 0) + count


def turn_line(date: str, speaker: str, text: str, caption: str = "") -> str:
    """One turn of a dialogue as memory reads it: ``[date] Speaker: text [shares a photo: caption]``."""
    photo = f" [shares a photo: {caption}]" if caption else ""
    return f"[{date}] {speaker}: {text}{photo}"


@dataclass
class Expected:
    """How many documents :func:`read_documents` expects to yield in all, as far as it knows yet: a file counts
    one until it is read, then as many as it holds (a .jsonl's passages, a .json's sessions); skipped ones not."""

    total: int = 0


def read_documents(paths: Iterable[str | Path], max_bytes: int, skip: Callable[[str], None],
                   expected: Expected | None = None, bank: Path | None = None) -> Iterator[NamedDocument]:
    """The documents of ``paths`` (files, folders, globs), one at a time; what cannot be read goes to ``skip``.
    ``expected`` is kept up to date as they are read (a progress bar's total). ``bank``: the bank file the documents
    go into, which is not read, nor its SQLite log (``-wal``, ``-shm``): opening and closing a bank database outside
    SQLite lets go of the locks the add's connection holds on it (:mod:`amb_dspy.storage.bank_db_connections`)."""
    expected = expected if expected is not None else Expected()
    files = list(_files(paths, skip))
    expected.total += len(files)
    for path, name in files:
        try:
            if bank is not None and _is_bank(path, bank):
                raise InputError("the bank this add writes to")
            if path.suffix.lower() not in {".json", ".jsonl"} and path.stat().st_size > max_bytes:
                raise InputError(_too_large(path.stat().st_size, max_bytes))
            documents = _JsonlDocuments(path, name) if path.suffix.lower() == ".jsonl" else list(_read_file(path, name))
        except (UserError, OSError) as exc:
            skip(f"skipped {name}: {_why(exc)}")
            expected.total -= 1
            continue
        expected.total += len(documents) - 1
        read = 0
        try:
            for document in documents:
                read += 1
                document = NamedDocument(valid_text(document.name), valid_text(document.text), document.date)
                size = len(document.text.encode("utf-8"))
                if size > max_bytes:
                    skip(f"skipped {document.name}: {_too_large(size, max_bytes)}")
                    expected.total -= 1
                else:
                    yield document
        except (UserError, OSError) as exc:  # a .jsonl changed or gone while its documents were added
            skip(f"skipped the rest of {name} ({len(documents) - read} documents): {_why(exc)}")
            expected.total -= len(documents) - read


def _why(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(exc)


def document_name(path: Path) -> str:
    """The name a file's documents take: its path as given, a byte that is not UTF-8 written as its escape
    (``notes/\\xff.md``), so that the name can be stored and shown, and is the same at every add."""
    return valid_text(path.as_posix())


def _too_large(size: int, max_bytes: int) -> str:
    return f"{size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit per document (AMB_MAX_CONTEXT_BYTES)"


def _files(paths: Iterable[str | Path], skip: Callable[[str], None]) -> Iterator[tuple[Path, str]]:
    """Each file to read and the name its documents take: the files named, those in the folders named (of the
    kinds read), those a glob matches."""
    for given in map(str, paths):
        path = Path(given).expanduser()
        if path.exists():
            matches = [path]
        elif glob.has_magic(given):
            matches = [Path(p) for p in sorted(glob.glob(os.path.expanduser(given), recursive=True))]
            if not matches:
                skip(f"skipped {valid_text(given)}: no file matches")
        else:
            matches = []
            skip(f"skipped {valid_text(given)}: no such file or folder")
        for match in matches:
            if match.is_dir():
                for relative, file in folder_files(match, skip, suffixes=DOCUMENT_SUFFIXES):
                    yield file, document_name(match / relative)
            elif match.is_file():
                yield match, document_name(match)
            else:
                skip(f"skipped {document_name(match)}: not a regular file")


class _JsonlDocuments:
    """The passages' documents of a .jsonl file as documents to add, read one at a time
    (:class:`~amb_dspy.tools.corpus_files.JsonlPassages`: the file is checked whole first, never held whole)."""

    def __init__(self, path: Path, name: str):
        self.passages, self.name = JsonlPassages(path), name

    def __len__(self) -> int:
        return len(self.passages)

    def __iter__(self) -> Iterator[NamedDocument]:
        for doc in self.passages:
            title = f"{doc.title}\n" if doc.title != doc.id else ""
            yield NamedDocument(f"{self.name}#{doc.id}", title + doc.text)


def _is_bank(path: Path, bank: Path) -> bool:
    """Whether ``path`` is the file ``bank`` or its SQLite log (the same file, whatever the path says)."""
    for file in (bank, bank.with_name(f"{bank.name}-wal"), bank.with_name(f"{bank.name}-shm")):
        try:
            if os.path.samefile(path, file):
                return True
        except OSError:  # one of them is not there
            continue
    return False


def _read_file(path: Path, name: str) -> Iterator[NamedDocument]:
    if path.suffix.lower() == ".json":
        yield from _locomo_sessions(path, name)
        return
    if is_binary(path.read_bytes()):
        raise InputError("binary data, not text")
    document, _ = read_document(name, path)
    if document is None:
        raise InputError("empty: no text")
    yield NamedDocument(name, document.text)


def _locomo_sessions(path: Path, name: str) -> Iterator[NamedDocument]:
    """Each session of a LoCoMo conversation file (one conversation, or a list of them named by
    ``sample_id``) as a document of its turns, dated with the session's date."""
    data = path.read_bytes()
    if is_binary(data):
        raise InputError("binary data, not a JSON file")
    try:
        raw = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not valid JSON ({type(exc).__name__}: {one_line(exc, 120)})") from None
    many = isinstance(raw, list)
    for i, item in enumerate(raw if many else [raw]):
        conversation = item.get("conversation", item) if isinstance(item, dict) else None
        if not isinstance(conversation, dict) or "speaker_a" not in conversation:
            raise InputError("not a LoCoMo conversation (speaker_a and session_N lists of turns)")
        prefix = f"{name}#{item.get('sample_id', i)}/" if many else f"{name}#"
        yield from _sessions(conversation, prefix)


def _sessions(conversation: dict, prefix: str) -> Iterator[NamedDocument]:
    numbers = sorted(int(m.group(1)) for key in conversation if (m := _SESSION.match(key)))
    for number in numbers:
        date = str(conversation.get(f"session_{number}_date_time", ""))
        try:
            lines = [turn_line(date, turn["speaker"], turn["text"], turn.get("blip_caption") or "")
                     for turn in conversation[f"session_{number}"]]
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"session_{number}: not a list of turns with speaker and text ({exc!r})") from None
        if lines:
            yield NamedDocument(f"{prefix}session_{number}", "\n".join(lines), date)


def dated_sessions(document: NamedDocument) -> list[NamedDocument]:
    """``document`` cut where its sessions are, when it is a dialogue of dated sessions; else ``[document]``.

    A dialogue of dated sessions: every line starts with a date stamp (``[1:56 pm on 8 May, 2023] Caroline:
    ...``, as :func:`turn_line` writes a turn) and its sessions are set apart by blank lines, the stamp changing
    across each one (a blank line within a session, the stamp unchanged, does not cut it). Each session is a
    document of its own, ``NAME#session_N`` (N from 1), dated with its first line's stamp: the documents that
    a LoCoMo .json gives (:func:`_locomo_sessions`), so a conversation added in one go and one added session by
    session build the same memory (each session classified, its nodes added and related to the sessions before
    it, as they came), and a session the bank already holds is not added again."""
    parts, start = [], 0
    for blank in [*BLANK_LINE.finditer(document.text), None]:
        end = len(document.text) if blank is None else blank.start()
        lines = [line for line in document.text[start:end].splitlines() if line.strip()]
        if lines:
            stamps = [stamp_of(line) for line in lines]
            if not all(stamps) or parse_date(stamps[0]) is None:
                return [document]  # a line without a date: not a dialogue of dated sessions
            if parts and parts[-1][2] == stamps[0]:  # the same session goes on after a blank line
                parts[-1] = (parts[-1][0], end, stamps[-1])
            else:
                parts.append((start, end, stamps[-1]))
        start = end if blank is None else blank.end()
    if len(parts) < 2:
        return [document]
    texts = [document.text[a:b].strip() for a, b, _ in parts]
    return [NamedDocument(f"{document.name}#session_{n}", text, stamp_of(text))
            for n, text in enumerate(texts, 1)]
