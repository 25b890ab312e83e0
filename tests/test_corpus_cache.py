"""A local corpus indexed once: the on-disk cache, on the real embedder, FAISS and BM25.

The embedder is the real one behind :class:`CountingEmbedder`, which counts what the corpus asks it to
embed through the public ``embed`` call (the real embedder's own in-memory cache would hide repeats).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from amb_dspy.config import ToolSettings
from amb_dspy.retrieval.hybrid import HybridIndex
from amb_dspy.tools import CorpusError, LocalCorpus

ORCHARD = "# Pell Orchard\n\nPell Orchard grows heritage pears on the south slope above the village of Tansy.\n"
QUERIES = ["when was the lighthouse first lit", "market day in the hill village", "pear orchard slope"]


class CountingEmbedder:
    """The real embedder, counting the calls and texts that reach it."""

    def __init__(self, inner):
        self.inner, self.dim, self.model_id = inner, inner.dim, inner.model_id
        self.calls, self.texts = 0, []

    def embed(self, texts):
        self.calls += 1
        self.texts.extend(texts)
        return self.inner.embed(texts)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "places").mkdir(parents=True)
    (root / "orchard.md").write_text(ORCHARD)
    (root / "places" / "tansy.txt").write_text("Tansy is a hill village with a stone bridge and a market on Thursdays.")
    (root / "lighthouse.html").write_text("<title>Corran Lighthouse</title><p>The Corran lighthouse was first lit in 1844.</p>")
    return root


def load(folder: Path, embedder, cache: Path) -> tuple[LocalCorpus, CountingEmbedder, list[str]]:
    counting, notes = CountingEmbedder(embedder), []
    corpus = LocalCorpus.load(folder, counting, cache_dir=cache, notify=notes.append, progress=False)
    return corpus, counting, notes


def answers(corpus: LocalCorpus) -> list[list[tuple[str, str]]]:
    return [[(r.url, r.snippet) for r in corpus.search(q, k=3)] for q in QUERIES]


def entry_dir(cache: Path) -> Path:
    [entry] = (cache / "corpora").iterdir()
    return entry


def test_second_load_embeds_nothing_and_answers_the_same(folder, embedder, tmp_path):
    cache = tmp_path / "cache"
    uncached = LocalCorpus.load(folder, embedder, progress=False)
    first, counting, notes = load(folder, embedder, cache)
    assert counting.calls == 1 and len(counting.texts) == first.passage_count == 3
    second, counting, notes = load(folder, embedder, cache)
    assert counting.calls == 0 and notes == []
    assert second.documents == first.documents == uncached.documents
    assert answers(second) == answers(first) == answers(uncached)
    assert np.array_equal(second.index.vector_of("0"), first.index.vector_of("0"))


def test_a_changed_file_re_embeds_only_that_file(folder, embedder, tmp_path):
    cache = tmp_path / "cache"
    load(folder, embedder, cache)
    (folder / "orchard.md").write_text(ORCHARD + "\nThe pear harvest starts in the second week of August.\n")
    (folder / "places" / "mill.txt").write_text("Osier Mill grinds barley and oats on the Wend brook.")
    (folder / "lighthouse.html").unlink()
    corpus, counting, notes = load(folder, embedder, cache)
    assert counting.calls == 1 and notes == []
    assert {t.split("\n", 1)[0] for t in counting.texts} == {"Pell Orchard", "Mill"}  # titles of the two files
    assert sorted(d.id for d in corpus.documents) == ["orchard.md", "places/mill.txt", "places/tansy.txt"]
    assert "second week of August" in corpus.search("when does the pear harvest start", k=1)[0].snippet
    assert corpus.search("barley mill", k=1)[0].url == "corpus://places/mill.txt"
    again, counting, _ = load(folder, embedder, cache)
    assert counting.calls == 0 and answers(again) == answers(corpus)
    names = sorted(p.name.split("-")[0] for p in entry_dir(cache).iterdir())
    assert names == ["data", "manifest.json", "vectors"]  # the first version's data files are gone


def test_an_edited_jsonl_file_re_embeds_only_its_new_passages(tmp_path, embedder):
    path, cache = tmp_path / "passages.jsonl", tmp_path / "cache"
    rows = [{"title": "Brisk Cove", "text": "Brisk Cove is a fishing hamlet."},
            {"title": "Osier Mill", "text": "The mill grinds barley and oats."}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    load(path, embedder, cache)
    rows.append({"title": "Fenwick Moss", "text": "A raised bog with rare sundews."})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    corpus, counting, _ = load(path, embedder, cache)
    assert counting.texts == ["Fenwick Moss\nA raised bog with rare sundews."]
    assert corpus.search("bog plants sundew", k=1)[0].url == "corpus://fenwick-moss"


def _rewrite_vectors(entry: Path, vectors: np.ndarray, **save) -> None:
    """Replace the entry's vectors and fix the manifest's checksum, so that only the content check can object."""
    import hashlib

    manifest = json.loads((entry / "manifest.json").read_text())
    target = entry / manifest["vectors"]
    with open(target, "wb") as out:
        np.save(out, vectors, **save)
    manifest["vectors_sha256"] = hashlib.sha256(target.read_bytes()).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))


def _edit_manifest(entry: Path, **changes) -> None:
    manifest = json.loads((entry / "manifest.json").read_text())
    (entry / "manifest.json").write_text(json.dumps({**manifest, **changes}))


def _vectors(entry: Path) -> np.ndarray:
    return np.load(entry / json.loads((entry / "manifest.json").read_text())["vectors"])


CORRUPTIONS = {
    "garbage manifest": lambda e: (e / "manifest.json").write_bytes(b"\x00{not json"),
    "truncated vectors": lambda e: (e / json.loads((e / "manifest.json").read_text())["vectors"]).write_bytes(b"\x93NUMPY"),
    "missing data file": lambda e: (e / json.loads((e / "manifest.json").read_text())["data"]).unlink(),
    "another model": lambda e: _edit_manifest(e, model="some-other-model/onnx"),
    "another format version": lambda e: _edit_manifest(e, version=0),
    "float64 vectors": lambda e: _rewrite_vectors(e, _vectors(e).astype(np.float64)),
    "a row missing": lambda e: _rewrite_vectors(e, _vectors(e)[:-1]),
    "pickled objects": lambda e: _rewrite_vectors(e, np.array([object()] * len(_vectors(e))), allow_pickle=True),
    "not unit vectors": lambda e: _rewrite_vectors(e, _vectors(e) * 3),
}


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_a_corrupt_or_foreign_cache_is_rebuilt_with_a_notice(folder, embedder, tmp_path, corruption):
    cache = tmp_path / "cache"
    good, _, _ = load(folder, embedder, cache)
    CORRUPTIONS[corruption](entry_dir(cache))
    rebuilt, counting, notes = load(folder, embedder, cache)
    assert len(notes) == 1 and "rebuilding" in notes[0] and "\n" not in notes[0], notes
    assert len(counting.texts) == rebuilt.passage_count  # nothing taken from the bad entry
    assert answers(rebuilt) == answers(good)
    _, counting, notes = load(folder, embedder, cache)
    assert counting.calls == 0 and notes == []


def test_a_cache_that_cannot_be_written_costs_speed_not_the_corpus(folder, embedder, tmp_path):
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache dir should be")
    corpus, counting, notes = load(folder, embedder, blocked)
    assert len(corpus) == 3 and counting.calls == 1
    assert len(notes) == 1 and notes[0].startswith("cannot write the corpus cache")


def test_config_chooses_the_cache_dir_or_none(folder, embedder, tmp_path):
    settings = ToolSettings(corpus=folder, corpus_cache=True)  # conftest turns it off
    LocalCorpus.from_config(settings, embedder, cache_dir=tmp_path / "c1", notify=print, progress=False)
    assert (tmp_path / "c1" / "corpora").is_dir()
    LocalCorpus.from_config(settings.model_copy(update={"corpus_cache": False}), embedder, cache_dir=tmp_path / "c2")
    assert not (tmp_path / "c2").exists()


# --- what a corpus folder may hold (issue 15) ---------------------------------------------------


def test_links_leading_outside_the_folder_are_not_indexed(folder, embedder, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("root:x:0:0:SECRET-OUTSIDE-LINE:/root:/bin/bash")
    (folder / "passwd.txt").symlink_to(outside / "secret.txt")
    (folder / "linked-dir").symlink_to(outside, target_is_directory=True)
    if Path("/etc/passwd").is_file():
        (folder / "etc-passwd.txt").symlink_to("/etc/passwd")
    (folder / "orchard-again.md").symlink_to(folder / "orchard.md")  # a link inside the folder is fine
    notes: list[str] = []
    corpus = LocalCorpus.load(folder, embedder, notify=notes.append, progress=False)
    ids = {d.id for d in corpus.documents}
    assert ids == {"orchard.md", "orchard-again.md", "places/tansy.txt", "lighthouse.html"}
    assert not any("root:x:0:0" in d.text for d in corpus.documents)
    assert any("passwd.txt" in n and "outside the corpus folder" in n for n in notes)
    assert all("\n" not in n for n in notes)


def test_binary_files_are_skipped_with_a_notice(folder, embedder, tmp_path):
    (folder / "scan.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4)
    (folder / "page.html").write_bytes(b"<html>\x00\x01\x02 binary junk</html>")
    notes: list[str] = []
    corpus = LocalCorpus.load(folder, embedder, cache_dir=tmp_path / "cache", notify=notes.append, progress=False)
    assert {d.id for d in corpus.documents} == {"orchard.md", "places/tansy.txt", "lighthouse.html"}
    assert sorted(notes) == ["skipped corpus file page.html: binary data, not text",
                             "skipped corpus file scan.txt: binary data, not text"]
    notes.clear()  # a cached load still says why the files are not searchable
    LocalCorpus.load(folder, embedder, cache_dir=tmp_path / "cache", notify=notes.append, progress=False)
    assert len(notes) == 2
    jsonl = tmp_path / "passages.jsonl"
    jsonl.write_bytes(b'{"text": "\x00\x00"}\n')
    with pytest.raises(CorpusError, match="binary data"):
        LocalCorpus.load(jsonl, embedder)


# --- the bulk index path --------------------------------------------------------------------------


def test_add_many_ranks_exactly_like_one_by_one_adds_and_is_all_or_nothing():
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words, size=12)) for _ in range(300)]
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    one, bulk = HybridIndex(16), HybridIndex(16)
    for i, (text, vector) in enumerate(zip(texts, vectors)):
        one.add(str(i), text, vector)
    bulk.add_many([str(i) for i in range(300)], texts, vectors)
    for q in range(20):
        query = vectors[q] + 0.1 * rng.standard_normal(16).astype(np.float32)
        assert bulk.rank(query, texts[q], k=10) == one.rank(query, texts[q], k=10)
    with pytest.raises(KeyError):
        bulk.add_many(["new", "5"], ["a", "b"], vectors[:2])
    assert "new" not in bulk and len(bulk) == 300
    with pytest.raises(ValueError):
        bulk.add_many(["x"], ["a"], vectors[:2])
    bulk.remove("5")
    bulk.add_many(["x", "y"], ["w1 w2", "w3"], vectors[:2])
    assert len(bulk) == 301 and bulk.rank(vectors[0], "w1 w2", k=1)[0][0] in {"0", "x"}


def test_mtime_alone_marks_a_file_changed(folder, embedder, tmp_path):
    cache = tmp_path / "cache"
    load(folder, embedder, cache)
    stat = (folder / "orchard.md").stat()
    os.utime(folder / "orchard.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    corpus, counting, _ = load(folder, embedder, cache)
    assert counting.calls == 0  # re-read, but its passages' text is unchanged: their vectors are reused
    assert len(corpus) == 3
