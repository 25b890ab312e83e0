"""A .jsonl of passages is added a document at a time: checked whole first, then read again document by document
(never held whole), and a file that changes meanwhile loses only its rest, with one line."""

from __future__ import annotations

import json

import pytest

from amb_dspy.memory.documents import Expected, read_documents
from amb_dspy.tools.corpus_files import CorpusError, JsonlPassages


def _write(path, records, *, prefix=b"", newline=b"\n", encoding="utf-8"):
    path.write_bytes(prefix + newline.join(json.dumps(r, ensure_ascii=False).encode(encoding) for r in records) + newline)
    return path


def test_passages_of_one_document_are_joined_wherever_they_are_in_the_file(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"title": "Paris", "text": "Paris is in France."},
                                          {"title": "Seine", "text": "The Seine flows."},
                                          {"title": "Paris", "text": "It is the capital."}],
                  prefix=b"\xef\xbb\xbf", newline=b"\r\n")
    passages = JsonlPassages(path)
    assert len(passages) == 2  # known before any document is read
    assert [(d.id, d.text) for d in passages] == [("paris", "Paris is in France.\n\nIt is the capital."),
                                                   ("seine", "The Seine flows.")]


def test_a_latin_1_file_is_read_as_latin_1_line_by_line(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"id": "a", "text": "café"}, {"id": "b", "text": "crème"}], encoding="latin-1")
    assert [d.text for d in JsonlPassages(path)] == ["café", "crème"]


def test_a_malformed_line_anywhere_refuses_the_file_before_any_document(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "a", "text": "fine"}) + "\n{not json\n")
    with pytest.raises(CorpusError, match=r"p.jsonl:2: not valid JSON"):
        JsonlPassages(path)


def test_a_jsonl_changed_while_it_is_added_skips_its_rest_with_one_line(tmp_path):
    path = _write(tmp_path / "p.jsonl", [{"id": f"d{i}", "text": f"passage {i}"} for i in range(3)])
    skipped, expected = [], Expected()
    reading = read_documents([path], 10**6, skipped.append, expected)
    first = next(reading)
    assert expected.total == 3
    path.write_bytes(b"")  # truncated after the check: the other two passages are gone
    assert list(reading) == []
    assert first.name.endswith("p.jsonl#d0") and first.text == "passage 0"
    assert skipped == [f"skipped the rest of {path.as_posix()} (2 documents): {path}: changed while it was read"]
    assert expected.total == 1
